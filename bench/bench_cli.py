"""Benchmark how fast the command line answers: `reposwarm --help`, `reposwarm status --help`, and the read commands
(status, review, list, report, watch) on a run waiting for review, against `python -c pass`.

Why: every command, `--help` included, used to take about 3 s to start (issue 33), most of it imports: the command
modules pulled in Temporal's worker, every workflow and activity, rich, GitPython and OpenTelemetry before reading
an argument. Now `--help` imports none of them and a read command only Temporal's client and the contracts; this
says what that comes to. The floor row is what a read command cannot avoid: importing Temporal's client and the
pydantic contracts (the run's status is decoded into them).

Each command runs as a user runs it (the `reposwarm` console script, a fresh process each time) against a local dev
server with a worker in this process, whose run waits for review (so `status` asks the worker, `watch` returns at
once). Wall time of the whole process, the median of --runs runs each (every command once per round, in turn),
with the fastest and slowest beside it, in seconds and as a ratio to `python -c pass`.

    python bench/bench_cli.py [--runs 9] [--out bench/results_cli.json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from reposwarm.cli.worker import make_worker  # noqa: E402
from reposwarm.contracts import Phase  # noqa: E402
from tests.helpers import finish, make_repo, start_dev_server, start_run, turn, wait_for_phase, write_yaml  # noqa: E402

LIMIT_S = 1.0  # issue 33: --help and the read commands start in under a second


def command_line() -> list[str]:
    script = Path(sys.executable).with_name("reposwarm")
    return [str(script)] if script.exists() else [sys.executable, str(ROOT / "starter.py")]


def timed(argv: list[str], env: dict[str, str]) -> float:
    began = time.perf_counter()
    done = subprocess.run(argv, env=env, cwd=ROOT, capture_output=True, text=True, timeout=120)
    seconds = time.perf_counter() - began
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} exited {done.returncode}: {done.stderr[-2000:]}")
    return seconds


def a_run_at_review(tmp: Path) -> tuple[Path, Path, Path, Path]:
    """One lane, a plan and a replay script: a run that reaches review in a few seconds."""
    repo = make_repo(tmp / "repo", {"api/app.py": "VERSION = 1\n", "README.md": "bench\n"})
    lanes = write_yaml(tmp / "lanes.yaml", {
        "swarm": {"lanes": {"api": {"allowed_paths": ["api/"]}}},
        "validation": {"profiles": {"default": {"commands": [[sys.executable, "-c", "import api.app"]]}}}})
    plan = write_yaml(tmp / "plan.yaml", {"interface_contract": "api/app.py exports NAME.",
                                          "lanes": [{"lane": "api", "goal": "Add NAME to api/app.py."}]})
    script = write_yaml(tmp / "replay.yaml", {"version": 1, "lanes": {"api": {1: [
        turn(("a1", "edit_file", {"path": "api/app.py", "old": "VERSION = 1\n", "new": "VERSION = 1\nNAME = 'x'\n",
                                  "reason": "Add NAME"})), finish("a2", "added NAME")]}}})
    return repo, lanes, plan, script


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=9, help="runs of each command (default 9)")
    parser.add_argument("--out", default=str(ROOT / "bench" / "results_cli.json"))
    args = parser.parse_args()
    cli = command_line()
    with tempfile.TemporaryDirectory(prefix="bench-cli-") as tmp_name:
        tmp = Path(tmp_name)
        os.environ["REPOSWARM_HOME"] = str(tmp / "home")
        queue = f"bench-cli-{uuid.uuid4().hex[:6]}"
        os.environ["REPOSWARM_TASK_QUEUE"] = queue
        env = await start_dev_server()
        try:
            async with make_worker(env.client, queue):
                repo, lanes, plan, script = a_run_at_review(tmp)
                run_id = await start_run(env.client, repo, lanes, script, plan=plan, task="Add NAME")
                await wait_for_phase(env.client, run_id, Phase.review)
                child = {**{k: v for k, v in os.environ.items() if not k.startswith("TEMPORAL_")},
                         "TEMPORAL_ADDRESS": env.client.service_client.config.target_host,
                         "REPOSWARM_TASK_QUEUE": queue, "REPOSWARM_HOME": str(tmp / "home")}
                commands = {
                    "python -c pass (baseline)": [sys.executable, "-c", "pass"],
                    "floor: import temporalio.client and the contracts": [
                        sys.executable, "-c", "import temporalio.client, temporalio.contrib.pydantic, "
                                              "reposwarm.contracts"],
                    "reposwarm --help": [*cli, "--help"],
                    "reposwarm status --help": [*cli, "status", "--help"],
                    "reposwarm status RUN": [*cli, "status", run_id],
                    "reposwarm review RUN": [*cli, "review", run_id],
                    "reposwarm list": [*cli, "list"],
                    "reposwarm report RUN": [*cli, "report", run_id],
                    "reposwarm watch RUN": [*cli, "watch", run_id],
                }
                seconds: dict[str, list[float]] = {name: [] for name in commands}
                for argv in commands.values():  # once each first: the file cache warm, as a user's is
                    await asyncio.to_thread(timed, argv, child)
                for _ in range(args.runs):  # in turn, so a moment's load falls on every command alike
                    for name, argv in commands.items():
                        seconds[name].append(await asyncio.to_thread(timed, argv, child))
        finally:
            await env.shutdown()
    base = statistics.median(seconds["python -c pass (baseline)"])
    rows = {}
    for name, values in seconds.items():
        median = statistics.median(values)
        rows[name] = {"median_s": round(median, 3), "min_s": round(min(values), 3), "max_s": round(max(values), 3),
                      "ratio": round(median / base, 1),
                      **({"under_1s": median < LIMIT_S} if name.startswith("reposwarm") else {})}
    results = {"bench": "cli", "runs": args.runs, "command": " ".join(os.path.relpath(part, ROOT) for part in cli),
               "machine": {"cpus": os.cpu_count(), "python": platform.python_version(),
                           "platform": platform.platform(), "load_1m": round(os.getloadavg()[0], 2)},
               "rows": rows}
    Path(args.out).write_text(json.dumps(results, indent=2) + "\n")
    print("| command | median s | min-max s | x python -c pass |")
    print("| --- | --- | --- | --- |")
    for name, row in rows.items():
        print(f"| {name} | {row['median_s']} | {row['min_s']}-{row['max_s']} | {row['ratio']} |")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    asyncio.run(main())
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)  # skip interpreter finalization, which the Temporal client's native threads can abort
