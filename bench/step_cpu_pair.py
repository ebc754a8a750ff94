"""Before and after, at the same time: the CPU per lane step of two revisions of reposwarm, measured side by side.

Why: on this 2-core machine, shared with other work, the CPU a step costs moves by half from one hour to the next
(other processes' load, the file system's state after many deletions: docs/benchmarks.md). Measured at the same
moment, two revisions share whatever the machine is doing, so their ratio holds where their absolute figures do not.

    python bench/step_cpu_pair.py [--before REV] [--after REV|worktree] [--lanes 8,32,64] [--repeats 2]
                                  [--out bench/results_step_cpu.json]

Each side is a tree of its own (`git archive REV`, or this working tree for `worktree`) with this checkout's
bench/cpu_probe.py and bench/step_cpu.py copied in (the same timers and probed worker on both), run as a process of
its own: a dev server (SQLite file, the side's tests.helpers.start_dev_server, plus the side's
reposwarm/devserver.py task reads where it has them: each side's server as its users ran it), the fake 1 s model of
bench_swarm's parallel section, one `worker.py` under the probe, and runs of N lanes of ten turns (a list_dir call
each, then finish) through the side's own bench/bench_swarm.py parallel_run. Both sides start together and run the
same lane counts in the same order. Prints a table (before, after, after/before) and writes the rows, each side's
split and the load averages. """

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
BEFORE = "863e41e"  # the commit before patch tools-in-turn (issue 49)


def export(rev: str, into: Path) -> Path:
    """The revision's tree (or this working tree for "worktree"), with this checkout's CPU probe (and its probed
    worker) in it."""
    if rev == "worktree":
        return ROOT
    into.mkdir(parents=True)
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", rev], check=True, capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)
    for name in ("cpu_probe.py", "step_cpu.py"):  # the same timers, and the worker that runs them, on both sides
        shutil.copy(ROOT / "bench" / name, into / "bench" / name)
    return into


async def side(lanes: list[int], turns: int) -> None:
    """One side's runs, in this process (its tree first on sys.path): one JSON line per lane count."""
    import bench.bench_swarm as swarm_bench
    import bench.cpu_probe as probe
    from bench.bench_swarm import FAKE_KEY, KNOBS, dev_server_pid, make_repo, parallel_run
    from bench.step_cpu import ProbedWorker
    from tests.fake_models import FakeModelServer
    from tests.faults_helpers import free_port
    from tests.helpers import finish, start_dev_server, turn

    if not hasattr(swarm_bench, "review_reached"):  # an older bench asked five times a second: as the newer, twice
        from workflows.swarm import SwarmWorkflow

        async def twice_a_second(client: Any, run_id: str, *phases: Any, timeout: float = 90) -> Any:
            deadline = time.monotonic() + timeout
            while time.monotonic() < deadline:
                await asyncio.sleep(0.5)
                try:
                    status = await client.get_workflow_handle_for(SwarmWorkflow.run, run_id).query(SwarmWorkflow.status)
                except Exception:  # noqa: BLE001 - not started yet
                    continue
                if status.phase in phases:
                    return status
            raise AssertionError(f"run {run_id} did not reach {phases} in {timeout}s")

        swarm_bench.wait_for_phase = twice_a_second  # type: ignore[assignment]
    for knob in KNOBS:
        os.environ.pop(knob, None)
    tmp = Path(tempfile.mkdtemp(prefix="reposwarm-step-cpu-"))
    os.environ["REPOSWARM_HOME"] = str(tmp / "home")
    repo = make_repo(tmp / "repo", {"README.md": "bench\n", **{f"l{i:02d}/mod.py": f"X = {i}\n" for i in range(64)},
                                    **{f"shared/m{j // 100:02d}/f{j}.py": f"Y = {j}\n" for j in range(2_000)}})
    try:
        from reposwarm import devserver
        reads = ["--dynamic-config-value", f"history.transferProcessorMaxPollRPS={devserver.TRANSFER_READS_PER_S}"]
    except AttributeError:
        reads = []  # (a revision from before the task reads were tuned: Temporal's default)
    env = await start_dev_server(["--db-filename", str(tmp / "temporal.db"), "--metrics-port", str(free_port()),
                                  *reads])
    script = {"lanes": {f"lane{i:02d}": {1: [turn((f"p{i}_{t}", "list_dir", {"path": f"l{i:02d}"}))
                                             for t in range(turns - 1)] + [finish(f"p{i}_end")]}
                        for i in range(max(lanes))}}
    address = env.client.service_client.config.target_host
    try:
        with FakeModelServer("openai", script, delay_s=1.0) as fake:
            worker = ProbedWorker(address, f"pair-{uuid.uuid4().hex[:6]}", tmp / "home" / "w",
                            {"OPENAI_BASE_URL": fake.base_url, "OPENAI_API_KEY": FAKE_KEY}).start()
            try:
                await worker.ready()
                for n in lanes:
                    before = await worker.snapshot()
                    row = await parallel_run(env.client, worker.env["REPOSWARM_TASK_QUEUE"], tmp / "home" / "w",
                                             repo, tmp, n, turns, worker.proc.pid, dev_server_pid(address))
                    after = await worker.snapshot()
                    print(json.dumps({"lanes": n, "elapsed_s": row["elapsed_s"],
                                      "worker_ms": row["worker_cpu_ms_per_turn"],
                                      "server_ms": row["dev_server_cpu_ms_per_turn"],
                                      "between_turns_ms": row["between_turns_mean_ms"],
                                      "load_average_1min": round(os.getloadavg()[0], 1),
                                      "worker_split": probe.split(before, after, n * turns)}), flush=True)
            finally:
                worker.stop()
    finally:
        await env.shutdown()
        shutil.rmtree(tmp, ignore_errors=True)


def run_pair(trees: dict[str, Path], lanes: list[int], turns: int) -> dict[str, list[dict[str, Any]]]:
    """Both sides at once; each side's rows."""
    procs = {label: subprocess.Popen([sys.executable, str(ROOT / "bench" / "step_cpu_pair.py"), "--side",
                                      "--lanes", ",".join(map(str, lanes)), "--turns", str(turns)],
                                     cwd=tree, env={**os.environ, "PYTHONPATH": str(tree)}, stdout=subprocess.PIPE,
                                     stderr=subprocess.DEVNULL, text=True)
             for label, tree in trees.items()}
    out: dict[str, list[dict[str, Any]]] = {}
    for label, proc in procs.items():
        stdout, _ = proc.communicate(timeout=1800)
        out[label] = [json.loads(line) for line in stdout.splitlines() if line.startswith("{")]
        if proc.returncode != 0 or len(out[label]) != len(lanes):
            raise SystemExit(f"{label}: its runs failed (exit {proc.returncode})")
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--before", default=BEFORE)
    parser.add_argument("--after", default="worktree")
    parser.add_argument("--lanes", type=lambda s: [int(x) for x in s.split(",")], default=[8, 32, 64])
    parser.add_argument("--turns", type=int, default=10)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--side", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results_step_cpu.json")
    args = parser.parse_args()
    if args.side:  # one side's process, started by run_pair in that side's tree
        sys.path.insert(0, os.getcwd())
        asyncio.run(side(args.lanes, args.turns))
        sys.stdout.flush()
        os._exit(0)
    with tempfile.TemporaryDirectory(prefix="reposwarm-pair-") as name:
        trees = {"before": export(args.before, Path(name) / "before"), "after": export(args.after, Path(name) / "after")}
        rows: dict[str, list[dict[str, Any]]] = {"before": [], "after": []}
        for _ in range(args.repeats):
            for label, got in run_pair(trees, args.lanes, args.turns).items():
                rows[label] += got
    table: dict[str, Any] = {}
    print(f"| lanes | before: worker + server ms/step | after | after/before (median of {args.repeats} pairs) |")
    for n in args.lanes:
        b = [r for r in rows["before"] if r["lanes"] == n]
        a = [r for r in rows["after"] if r["lanes"] == n]
        ratio = {k: round(statistics.median(x[k] / y[k] for x, y in zip(a, b, strict=True)), 2)
                 for k in ("worker_ms", "server_ms", "elapsed_s")}
        total = round(statistics.median((x["worker_ms"] + x["server_ms"]) / (y["worker_ms"] + y["server_ms"])
                                        for x, y in zip(a, b, strict=True)), 2)
        table[str(n)] = {"ratio": {**ratio, "total": total}}
        print(f"| {n} | " + ", ".join(f"{r['worker_ms']} + {r['server_ms']}" for r in b) + " | "
              + ", ".join(f"{r['worker_ms']} + {r['server_ms']}" for r in a) + f" | {total} (worker {ratio['worker_ms']}, "
              f"server {ratio['server_ms']}, elapsed {ratio['elapsed_s']}) |")
    args.out.write_text(json.dumps({"before": args.before, "after": args.after, "turns": args.turns,
                                    "ratios": table, "runs": rows}, indent=1) + "\n")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
