"""Benchmark what the checks' evidence costs (issue 44): a real suite, attrs (about 1,400 tests), run through the
product's own run_profile in the sandbox with the evidence taken (an import tracer in every interpreter, V8
coverage for node) and without it (REPOSWARM_EVIDENCE=off), alternating in one process.

    python bench/bench_evidence.py /path/to/attrs [--python python3] [--pairs 8] [--node-repo DIR]

The repository is not in this project (nor fetched by it): clone it first, e.g.

    git clone https://github.com/python-attrs/attrs /work/realrepos/attrs-bench

Its tests need pytest and hypothesis in the interpreter `--python` names (cloudpickle and pympler are used where
installed; attrs itself need not be: the check puts the tree's `src/` first). The checks run on a throwaway git
worktree of the repository's HEAD, so the clone is only read.

1. **The suite, whole**: each pair runs the profile `[python, -m, pytest, -q, -p, no:cacheprovider,
   --hypothesis-seed=0]` (hypothesis seeded: the same examples every run) twice, with
   evidence and without, in alternating order (ABBA), after one uncounted warm-up run; the evidence's runs are held
   against a change of src/attr/_make.py and src/attr/validators.py, as a validation would be. Per run: the wall
   time of run_profile, and the CPU time of this process and everything it starts (a cpuacct cgroup this process
   moves into, bench/bench_hosts.py CpuCgroup: the sandbox's processes are never reaped into this process's
   children times). The checks run at the worker's priority (REPOSWARM_CHECK_NICE=0), not below it, so that other
   work on a shared machine moves them less. Ratios: summed times with evidence against without, and per pair.
2. **The evidence's own work**, which the suite's times hide in their noise on a shared machine: what the worker
   spends on it per run (listing the tree, starting and reading the evidence: timed around those calls), how many
   interpreters wrote a record, and what the tracer adds to one interpreter that imports what the suite imports
   (`-X importtime` of the sitecustomize, and the record written at exit, timed in the process), medians of many.
   From these, the cost it adds to the suite: (records x per-interpreter cost + the worker's work) / the suite's CPU
   time without evidence.
3. **Node** (optional, `--node-repo DIR`): a JavaScript project whose node_modules hold vitest (unjs/ufo with its
   dependencies installed, or its node_modules linked to tests/fixtures/node/node_modules), its
   `node node_modules/vitest/vitest.mjs run` alternated the same way (`--node-pairs`, default 3): V8's block
   coverage (NODE_V8_COVERAGE), which the Python goal does not cover.

Goal: at most 1.05 (5% added) on attrs. Writes bench/results_evidence.json and prints a Markdown table.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import json
import os
import platform
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.bench_hosts import CpuCgroup  # noqa: E402
from reposwarm.checks import evidence  # noqa: E402
from reposwarm.checks.evidence import python as evidence_python  # noqa: E402
from reposwarm.checks.runner import run_profile  # noqa: E402
from reposwarm.contracts import CheckProfile  # noqa: E402

WATCHED = ("src/attr/_make.py", "src/attr/validators.py")
GOAL = 1.05
IMPORTS = "import pytest, hypothesis, _pytest.python, _pytest.main, attr"  # what the suite's interpreter imports
SAMPLES = 25


class Spent:
    """The worker's time in the evidence's calls during one run (they run in threads: summed per call)."""

    def __init__(self) -> None:
        self.seconds = 0.0
        self.records = 0

    def around(self, name: str, module: Any) -> None:
        real = getattr(module, name)

        @functools.wraps(real)
        def timed(*args: Any, **kwargs: Any) -> Any:
            started = time.perf_counter()
            try:
                return real(*args, **kwargs)
            finally:
                self.seconds += time.perf_counter() - started

        setattr(module, name, timed)

    def counting(self) -> None:
        real: Callable[..., list[Any]] = evidence_python.read

        @functools.wraps(real)
        def counted(*args: Any, **kwargs: Any) -> list[Any]:
            found = real(*args, **kwargs)
            self.records += len(found)
            return found

        evidence_python.read = counted


async def one_run(tree: Path, profile: CheckProfile, with_evidence: bool, group: CpuCgroup | None,
                  spent: Spent, watched: tuple[str, ...] = WATCHED) -> dict:
    if with_evidence:
        os.environ.pop(evidence.SWITCH, None)
    else:
        os.environ[evidence.SWITCH] = "off"
    spent.seconds, spent.records = 0.0, 0
    before, started = group.usage_s() if group is not None else None, time.monotonic()
    report = await run_profile(profile, tree, None, rerun=False, watched=evidence.Watched(watched))
    wall, after = time.monotonic() - started, group.usage_s() if group is not None else None
    cpu = after - before if after is not None and before is not None else float("nan")
    command = report.commands[0]
    loaded = command.loaded
    return {"evidence": with_evidence, "wall_s": round(wall, 2), "cpu_s": round(cpu, 2),
            "command_s": command.duration_s, "tests_run": command.tests_run, "exit_code": command.exit_code,
            "load": round(os.getloadavg()[0], 2), "worker_evidence_s": round(spent.seconds, 4),
            "records": spent.records,
            "loaded": None if loaded is None else {"languages": loaded.languages, "inside": loaded.inside,
                                                   "outside": len(loaded.outside), "note": loaded.note},
            "exercise": None if report.exercise is None else report.exercise.model_dump()}


async def alternated(tree: Path, profile: CheckProfile, count: int, group: CpuCgroup | None, spent: Spent,
                     watched: tuple[str, ...]) -> list[dict]:
    """`count` pairs of runs, with evidence and without, in ABBA order."""
    runs = []
    for pair in range(count):
        order = (True, False) if pair % 2 == 0 else (False, True)
        for with_evidence in order:
            run = await one_run(tree, profile, with_evidence, group, spent, watched)
            run["pair"] = pair
            runs.append(run)
            print(f"  pair {pair + 1}: evidence {'on ' if with_evidence else 'off'} {run['wall_s']:7.2f} s wall, "
                  f"{run['cpu_s']:7.2f} s CPU, {run['tests_run']} tests, {run['records']} records, worker "
                  f"{run['worker_evidence_s']:.3f} s, load {run['load']}", flush=True)
    return runs


async def node_suite(repo: Path, count: int, group: CpuCgroup | None, spent: Spent) -> list[dict]:
    """The JavaScript project's vitest suite, alternated; its node_modules (wherever they link to) readable."""
    modules = (repo / "node_modules").resolve()
    if not (modules / "vitest").is_dir():
        raise SystemExit(f"{repo}/node_modules has no vitest: install the project's dependencies first")
    profile = CheckProfile(commands=[["node", "node_modules/vitest/vitest.mjs", "run"]], timeout_s=1800,
                           read_only_paths=[str(modules)])
    sources = tuple(sorted(str(p.relative_to(repo)) for p in (repo / "src").glob("*.ts")))[:5]
    print(f"node: {repo} (vitest), warm-up...", flush=True)
    await one_run(repo, profile, True, group, spent, sources)
    return await alternated(repo, profile, count, group, spent, sources)


def ratios(runs: list[dict]) -> dict:
    """Summed times with evidence against without, and per pair."""
    def total(key: str, on: bool) -> float:
        return sum(r[key] for r in runs if r["evidence"] == on)

    pairs = []
    for pair in sorted({r["pair"] for r in runs}):
        on = next(r for r in runs if r["pair"] == pair and r["evidence"])
        off = next(r for r in runs if r["pair"] == pair and not r["evidence"])
        pairs.append({"wall": round(on["wall_s"] / off["wall_s"], 4), "cpu": round(on["cpu_s"] / off["cpu_s"], 4)})
    return {"wall_ratio": round(total("wall_s", True) / total("wall_s", False), 4),
            "cpu_ratio": round(total("cpu_s", True) / total("cpu_s", False), 4), "pair_ratios": pairs,
            "wall_s": {"with": round(total("wall_s", True), 2), "without": round(total("wall_s", False), 2)},
            "cpu_s": {"with": round(total("cpu_s", True), 2), "without": round(total("cpu_s", False), 2)}}


def tracer_cost(python: str, tree: Path) -> dict:
    """What the tracer adds to one interpreter importing the suite's modules: its sitecustomize's import (-X
    importtime, cumulative) and its record at exit (timed in the process). Medians of SAMPLES."""
    with tempfile.TemporaryDirectory(prefix="tracer-") as scratch:
        reports = Path(scratch)
        _, env = evidence_python.start(reports, str(tree / "src"), {})
        env = {"PATH": os.environ.get("PATH", ""), **env}
        probe = (f"import time, atexit\n{IMPORTS}\nstarted = time.perf_counter()\natexit._run_exitfuncs()\n"
                 "print('exit_s', time.perf_counter() - started)\n")
        imports, exits = [], []
        for _ in range(SAMPLES):
            done = subprocess.run([python, "-X", "importtime", "-c", probe], env=env, capture_output=True,
                                  text=True, cwd=tree, check=True)
            found = re.search(r"import time:\s+\d+ \|\s+(\d+) \|\s+sitecustomize$", done.stderr, re.M)
            imports.append(int(found.group(1)) / 1e6 if found else float("nan"))
            exits.append(float(done.stdout.split()[-1]))
        records = list((reports / evidence_python.RECORDS).glob("*.json"))
        size = statistics.median(p.stat().st_size for p in records) if records else 0
    return {"sitecustomize_import_s": round(statistics.median(imports), 5),
            "record_at_exit_s": round(statistics.median(exits), 5), "record_bytes": int(size),
            "per_interpreter_s": round(statistics.median(imports) + statistics.median(exits), 5),
            "samples": SAMPLES}


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("repo", type=Path, help="a clone of python-attrs/attrs (see the module's docstring)")
    parser.add_argument("--python", default="python3", help="the interpreter with pytest and hypothesis")
    parser.add_argument("--pairs", type=int, default=8)
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results_evidence.json")
    parser.add_argument("--node-repo", type=Path, help="a JavaScript project with vitest in its node_modules")
    parser.add_argument("--node-pairs", type=int, default=3)
    args = parser.parse_args()
    repo = args.repo.resolve()
    if not (repo / "src/attr/_make.py").is_file():
        raise SystemExit(f"{repo} is not a clone of attrs (no src/attr/_make.py): git clone "
                         "https://github.com/python-attrs/attrs <path>, then give <path>")
    head = subprocess.run(["git", "-C", str(repo), "rev-parse", "HEAD"], capture_output=True, text=True,
                          check=True).stdout.strip()
    # (the interpreter itself, not a pyenv shim: a shim adds processes of its own to every run)
    python = subprocess.run([args.python, "-c", "import sys; print(sys.executable)"], capture_output=True, text=True,
                            check=True).stdout.strip()
    # (hypothesis seeded: the same examples every run, so that the runs differ only by the evidence)
    profile = CheckProfile(commands=[[python, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--hypothesis-seed=0"]],
                           timeout_s=3600)
    os.environ.setdefault("REPOSWARM_HOME", tempfile.mkdtemp(prefix="bench-evidence-home-"))
    os.environ["REPOSWARM_CHECK_NICE"] = "0"
    spent = Spent()
    for name in ("context", "start", "collect"):
        spent.around(name, evidence)
    spent.counting()
    tree = Path(tempfile.mkdtemp(prefix="attrs-")) / "tree"
    subprocess.run(["git", "-C", str(repo), "worktree", "add", "-q", "--detach", str(tree), head], check=True)
    runs: list[dict] = []
    node_runs: list[dict] = []
    group = CpuCgroup.make(f"reposwarm-bench-evidence-{os.getpid()}")
    if group is None:
        print("no cpuacct cgroup could be made here: CPU times are not measured (wall times only)", flush=True)
    else:
        group.add(os.getpid())
    try:
        print("the tracer in one interpreter...", flush=True)
        tracer = tracer_cost(python, tree)
        print(f"  {tracer}", flush=True)
        print("warm-up run (not counted)...", flush=True)
        warm = await one_run(tree, profile, True, group, spent)
        print(f"  {warm['wall_s']} s, {warm['tests_run']} tests ran; evidence: {warm['loaded']}", flush=True)
        runs += await alternated(tree, profile, args.pairs, group, spent, WATCHED)
        if args.node_repo is not None:
            node_runs = await node_suite(args.node_repo.resolve(), args.node_pairs, group, spent)
    finally:
        os.environ.pop(evidence.SWITCH, None)
        if group is not None:
            with contextlib.suppress(OSError):
                (group.path.parent / "cgroup.procs").write_text(str(os.getpid()))
            group.remove()
        subprocess.run(["git", "-C", str(repo), "worktree", "remove", "--force", str(tree)], capture_output=True)
        shutil.rmtree(tree.parent, ignore_errors=True)

    suite = ratios(runs)
    pairs = suite["pair_ratios"]
    with_runs = [r for r in runs if r["evidence"]]
    records = statistics.median(r["records"] for r in with_runs)
    worker_s = statistics.median(r["worker_evidence_s"] for r in with_runs)
    suite_cpu = min(r["cpu_s"] for r in runs if not r["evidence"])  # (the least disturbed run: the largest share)
    added_s = records * tracer["per_interpreter_s"] + worker_s
    result = {
        "repository": "python-attrs/attrs", "commit": head, "python": python,
        "python_version": subprocess.run([python, "--version"], capture_output=True, text=True).stdout.strip(),
        "host": {"cpus": os.cpu_count(), "machine": platform.machine(), "system": platform.system()},
        "profile": profile.commands, "watched": list(WATCHED), "pairs": args.pairs,
        "tests_run": runs[0]["tests_run"] if runs else None,
        **suite,
        "cpu_ratio_median_pair": round(statistics.median(p["cpu"] for p in pairs), 4),
        "wall_ratio_median_pair": round(statistics.median(p["wall"] for p in pairs), 4),
        "tracer": tracer, "records_per_run": records, "worker_evidence_s": worker_s,
        "added_s": round(added_s, 4), "suite_cpu_s": suite_cpu,
        "added_ratio": round(1 + added_s / suite_cpu, 5) if suite_cpu else None,
        "goal": GOAL, "met": bool(suite_cpu) and 1 + added_s / suite_cpu <= GOAL,
        "load": [r["load"] for r in runs], "warm_up": warm, "runs": runs,
    }
    if node_runs:
        result["node"] = {"repository": str(args.node_repo), **ratios(node_runs), "runs": node_runs}
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print()
    print("| | with evidence | without | ratio |")
    print("|---|---|---|---|")
    for key, what in (("wall", f"wall time, {args.pairs} runs each"), ("cpu", "CPU time of the check")):
        print(f"| {what} | {suite[key + '_s']['with']} s | {suite[key + '_s']['without']} s | "
              f"{suite[key + '_ratio']:.3f} (pairs {', '.join(str(p[key]) for p in pairs)}) |")
    print(f"| the evidence's own work | {records:.0f} records x {tracer['per_interpreter_s'] * 1000:.1f} ms + the "
          f"worker's {worker_s:.3f} s | suite {suite_cpu:.1f} s CPU | {result['added_ratio']} |")
    if node_runs:
        node = result["node"]
        print(f"| node (vitest), wall / CPU, {args.node_pairs} runs each | {node['wall_s']['with']} s / "
              f"{node['cpu_s']['with']} s | {node['wall_s']['without']} s / {node['cpu_s']['without']} s | "
              f"{node['wall_ratio']} / {node['cpu_ratio']} |")
    print(f"\ngoal: at most {GOAL} ({'met' if result['met'] else 'NOT met'}); written to {args.out}")


if __name__ == "__main__":
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # (its worktree and cgroup are removed on the way out)
    asyncio.run(main())
