"""Benchmark the gate's own time (issue 49): a validation of a real change on a real suite, attrs (about 1,400
tests), against its commands run directly on the same tree.

    python bench/bench_gate.py /path/to/attrs [--commit SHA ...] [--rounds 2] [--no-cli]
    make bench ATTRS_REPO=/path/to/attrs       (with the other benches)

The repository is not in this project (nor fetched by it): give a clone of python-attrs/attrs holding both commits
below (it is only read; the bench clones it into a scratch folder). Its tests need pytest and hypothesis in the
machine's `python3` (attrs itself need not be installed: the check puts the tree's `src/` first, and so does the
direct run). About 10 minutes on 2 cores.

Two real commits (`--commit`, repeatable, chooses others), each cut into lanes by folder (src/, tests/, the rest)
as `reposwarm try` replays it: 6851ab59 (seven files, one of them a test file, tests/test_import.py) and 862696af
(a test helper, tests/utils.py, and three test files, with tests the commit rewrote: the base's versions fail
against the new code, so the second run has real failures, and its re-run). The profile is the one a run with no
lanes file detects (`python3 -m pytest -q`). Per round, in alternating order:

- **direct**: the profile's command run directly on a checkout of the commit, as a developer runs it
  (`PYTHONPATH=src`, the same interpreter);
- **checks** (the first commit only; `--no-cli` leaves it out): `reposwarm checks --repo` on that checkout (the
  CLI, the sandbox, the evidence);
- **validation**: the validate activity as a run drives it (an ActivityEnvironment, the real activity, the real
  sandbox): the baseline on the parent (its results kept per commit and environment, so after the first round it
  is read, not run, as in every later run), then the merged tree judged against it, with the second run that the
  changed test paths ask for. Its parts (the tree, the sandbox, the setup step, the commands, the second run,
  reading and judging the results) as the report's `times` says them.

The checks run at the worker's priority (REPOSWARM_CHECK_NICE=0), so that other work on a shared machine moves
them and the direct run alike. Figures are ratios within one run: the validation's wall time against the direct
run's of the same round, and against what the gate must run, each run directly: the check's command and the
second run's (second_run.plan's commands, on a checkout with the base's test paths). Goal: at most 1.3 of that. Writes bench/results_gate.json and prints a Markdown table.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import platform
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
sys.path.insert(0, str(ROOT))

import git as gitpython  # noqa: E402
from temporalio.testing import ActivityEnvironment  # noqa: E402

from activities.validate import validate  # noqa: E402
from bench.bench_hosts import CpuCgroup  # noqa: E402
from reposwarm.checks import changed_tests_git  # noqa: E402
from reposwarm.checks.selection import second_run  # noqa: E402
from reposwarm.contracts import CheckProfile, TestReport, ValidateInput  # noqa: E402
from reposwarm.intel.detected import detect_at  # noqa: E402

COMMITS = (
    "6851ab593cd25f3c14393e9355d57d22bec2a074",  # seven files, one test file (tests/test_import.py)
    "862696afb52fb7c0d47d45e05ec4feb844c11001",  # a test helper and three test files, tests the commit rewrote
)
GOAL = 1.3
REPOSWARM = ROOT / ".venv" / "bin" / "reposwarm"
GROUP: CpuCgroup | None = None  # this process and all it starts, the sandbox's processes too: their CPU time


def cpu_now() -> float:
    usage = GROUP.usage_s() if GROUP is not None else None
    return usage if usage is not None else float("nan")


def run_git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, check=True).stdout.strip()


def lanes_of(files: list[str]) -> dict[str, list[str]]:
    """The commit's files cut into lanes by folder, as a careful planner would (src, tests, the rest)."""
    lanes: dict[str, list[str]] = {}
    for path in files:
        lane = "src" if path.startswith("src/") else "tests" if path.startswith("tests/") else "docs"
        lanes.setdefault(lane, []).append(path)
    return lanes


def direct(tree: Path, argv: list[str]) -> dict[str, Any]:
    """The profile's command as a developer runs it on the tree: the tree's src/ first, nothing else around it."""
    started, cpu = time.monotonic(), cpu_now()
    done = subprocess.run(argv, cwd=tree, env={**os.environ, "PYTHONPATH": "src"}, capture_output=True, text=True)
    wall, cpu = time.monotonic() - started, cpu_now() - cpu
    last = next((line for line in reversed(done.stdout.splitlines()) if line.strip()), "")
    return {"wall_s": round(wall, 2), "cpu_s": round(cpu, 2), "exit": done.returncode, "summary": last[-200:]}


def second_commands(repo: Path, base: str, head: str, profile: CheckProfile, tree: Path) -> list[list[str]]:
    """What the gate's second run runs (second_run.plan, as the activity plans it), in `tree`: a checkout of the
    commit with its changed test paths as the base has them. Its results on both trees are not needed to plan a
    pytest command (they only rule out names that repeat, which pytest's do not)."""
    run_git(repo, "worktree", "add", "-q", "--detach", str(tree), head)
    g = gitpython.Repo(repo).git
    paths, config = changed_tests_git.changed_paths(g, base, head)
    if not paths:
        return []
    changed_tests_git.base_tests_tree(g, tree, base, paths)
    planned = second_run.plan(profile, tree, base, paths, config, {tuple(a): [] for a in profile.commands})
    return planned.profile.commands


def direct_all(tree: Path, commands: list[list[str]]) -> dict[str, Any]:
    """Each command run directly, one after the other (none: nothing to run)."""
    subprocess.run(["git", "-C", str(tree), "clean", "-fdxq"], check=True)  # (no example database kept)
    runs = [direct(tree, argv) for argv in commands]
    return {"wall_s": round(sum(r["wall_s"] for r in runs), 2), "cpu_s": round(sum(r["cpu_s"] for r in runs), 2),
            "summary": "; ".join(r["summary"] for r in runs)}


def cli_checks(tree: Path) -> dict[str, Any]:
    started, cpu = time.monotonic(), cpu_now()
    done = subprocess.run([str(REPOSWARM), "checks", "--repo", str(tree)], capture_output=True, text=True,
                          env=os.environ.copy())
    wall, cpu = time.monotonic() - started, cpu_now() - cpu
    line = next((ln for ln in done.stdout.splitlines() if ln.startswith("- `")), "")
    return {"wall_s": round(wall, 2), "cpu_s": round(cpu, 2), "exit": done.returncode, "summary": line[:300]}


async def validation(repo: Path, base: str, head: str, profile: CheckProfile,
                     touched: dict[str, list[str]]) -> dict[str, Any]:
    """The baseline (kept, or read back) and the merged tree's validation, in a new run, as a run drives them."""
    run_id = f"bench-gate-{uuid.uuid4().hex[:8]}"
    env = ActivityEnvironment()

    async def check(ref: str, label: str, baseline: TestReport | None = None) -> tuple[TestReport, float]:
        started = time.monotonic()
        report = await env.run(validate, ValidateInput(
            run_id=run_id, repo_path=str(repo), ref=ref, profile_name="detected", profile=profile, label=label,
            baseline=baseline, touched=touched, statements={lane: [f"the {lane} part of the commit"]
                                                            for lane in touched}))
        return report, time.monotonic() - started

    baseline, base_wall = await check(base, "baseline")
    cpu = cpu_now()
    report, wall = await check(head, "round 1 check 1", baseline)
    cpu = cpu_now() - cpu
    times = report.times.model_dump() if report.times is not None else None
    return {"wall_s": round(wall, 2), "cpu_s": round(cpu, 2), "baseline_wall_s": round(base_wall, 2),
            "verdict": report.verdict_of.value,
            "tests_run": report.tests_run, "base_tests_s": report.base_tests_s,
            "second_run_tests": report.second_run_tests,
            "second_run": report.second_run, "times": times,
            "commands_s": round(sum(c.duration_s for c in report.commands), 2),
            "pre_existing": len(report.pre_existing), "flaky": len(report.flaky),
            "test_changes": [f"{c.kind}: {c.test}" for c in report.test_changes]}


async def one_commit(source: Path, sha: str, rounds: int, cli: bool, scratch: Path) -> dict[str, Any]:
    """The commit's validation against its command run directly (and `reposwarm checks`), `rounds` times."""
    repo = scratch / f"attrs-{sha[:8]}"
    subprocess.run(["git", "clone", "-q", "--no-checkout", str(source), str(repo)], check=True)
    head = run_git(repo, "rev-parse", f"{sha}^{{commit}}")
    base = run_git(repo, "rev-parse", f"{head}^")
    run_git(repo, "checkout", "-q", "-B", "main", base)
    tree = scratch / f"merged-{sha[:8]}"
    run_git(repo, "worktree", "add", "-q", "--detach", str(tree), head)
    files = run_git(repo, "diff", "--name-only", base, head).splitlines()
    found, _ = detect_at(repo, head)
    if found is None:
        raise SystemExit("no profile detected")
    profile = CheckProfile.model_validate(found)
    base_tests = scratch / f"base-tests-{sha[:8]}"
    second = second_commands(repo, base, head, profile, base_tests)
    print(f"attrs {head[:12]} ({len(files)} files), profile {profile.commands}; the second run: {second}", flush=True)
    runs: list[dict[str, Any]] = []
    for n in range(rounds):
        order = ["direct", "validation", "checks"] if n % 2 == 0 else ["checks", "validation", "direct"]
        row: dict[str, Any] = {"round": n + 1, "load": round(os.getloadavg()[0], 2)}
        for what in order:
            if what == "direct":
                subprocess.run(["git", "-C", str(tree), "clean", "-fdxq"], check=True)
                row["direct"] = direct(tree, profile.commands[0])
                row["direct_second"] = direct_all(base_tests, second)
            elif what == "checks" and cli:
                row["checks"] = cli_checks(tree)
            elif what == "validation":
                row["validation"] = await validation(repo, base, head, profile, lanes_of(files))
        row["ratio"] = round(row["validation"]["wall_s"] / row["direct"]["wall_s"], 3)
        # (what the gate must run: the check's command, and the second run's, each run directly)
        row["must_s"] = round(row["direct"]["wall_s"] + row["direct_second"]["wall_s"], 2)
        row["must_ratio"] = round(row["validation"]["wall_s"] / row["must_s"], 3)
        row["must_cpu_ratio"] = round(row["validation"]["cpu_s"] / (row["direct"]["cpu_s"] +
                                                                    row["direct_second"]["cpu_s"]), 3)
        if "checks" in row:
            row["checks_ratio"] = round(row["checks"]["wall_s"] / row["direct"]["wall_s"], 3)
        runs.append(row)
        print(json.dumps(row, indent=1), flush=True)
    return {"commit": head, "files": files, "profile": profile.commands, "second_run": second, "rounds": runs,
            "ratio_median": statistics.median(r["ratio"] for r in runs),
            "must_ratio_median": statistics.median(r["must_ratio"] for r in runs),
            "must_cpu_ratio_median": statistics.median(r["must_cpu_ratio"] for r in runs)}


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("repo", type=Path, help="a clone of python-attrs/attrs (only read)")
    parser.add_argument("--commit", action="append", help=f"a commit of it that changes test paths (repeatable; "
                        f"default {', '.join(c[:8] for c in COMMITS)})")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--no-cli", action="store_true", help="leave out `reposwarm checks`")
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results_gate.json")
    args = parser.parse_args()
    source = args.repo.resolve()
    if not (source / "src/attr/_make.py").is_file():
        raise SystemExit(f"{source} is not a clone of attrs (no src/attr/_make.py)")
    os.environ["REPOSWARM_HOME"] = tempfile.mkdtemp(prefix="bench-gate-home-")
    os.environ["REPOSWARM_CHECK_NICE"] = "0"
    global GROUP
    GROUP = CpuCgroup.make(f"reposwarm-bench-gate-{os.getpid()}")
    if GROUP is None:
        print("no cpuacct cgroup could be made here: CPU times are not measured (wall times only)", flush=True)
    else:
        GROUP.add(os.getpid())
    scratch = Path(tempfile.mkdtemp(prefix="bench-gate-"))
    commits = args.commit or list(COMMITS)
    try:
        # (`reposwarm checks` for the first commit only: it is the same suite on each)
        results = [await one_commit(source, sha, args.rounds, not args.no_cli and i == 0, scratch)
                   for i, sha in enumerate(commits)]
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
        shutil.rmtree(os.environ["REPOSWARM_HOME"], ignore_errors=True)
        if GROUP is not None:
            with contextlib.suppress(OSError):  # (back to the parent group, so that this one can go)
                (GROUP.path.parent / "cgroup.procs").write_text(str(os.getpid()))
            GROUP.remove()
    result = {"repository": "python-attrs/attrs", "commits": results, "goal": GOAL,
              "host": {"cpus": os.cpu_count(), "machine": platform.machine(), "system": platform.system()}}
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print("\n| commit | round | direct | checks | validation | its commands | second run (tests) | direct, second "
          "run's tests | ratio to direct | ratio to what it must run | by CPU |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for one in results:
        for r in one["rounds"]:
            v = r["validation"]
            times = v["times"] or {}
            second = f"{times.get('second_run_s', v['base_tests_s'] or 0):.1f} s ({v['second_run_tests']})" \
                if v["base_tests_s"] is not None else "-"
            checks = f"{r['checks']['wall_s']:.1f} s ({r['checks_ratio']:.2f}x)" if "checks" in r else "-"
            print(f"| {one['commit'][:8]} | {r['round']} | {r['direct']['wall_s']:.1f} s | {checks} | "
                  f"{v['wall_s']:.1f} s | {v['commands_s']:.1f} s | {second} | {r['direct_second']['wall_s']:.1f} s | "
                  f"{r['ratio']:.2f} | **{r['must_ratio']:.2f}** | {r['must_cpu_ratio']:.2f} |")
    for one in results:
        met = one["must_ratio_median"] <= GOAL
        print(f"{one['commit'][:8]}: median ratio {one['ratio_median']:.2f} to the direct run, "
              f"{one['must_ratio_median']:.2f} to what it must run (goal at most {GOAL}: {'met' if met else 'NOT met'}), "
              f"{one['must_cpu_ratio_median']:.2f} by CPU time")
    print(f"written to {args.out}")


if __name__ == "__main__":
    asyncio.run(main())
