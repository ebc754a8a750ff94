"""Benchmark what proposing lanes costs reposwarm itself (the model's time apart) on the generated 4M-line monorepo.

Why: a run started with only a task surveys the repository (packages, CODEOWNERS, the package import graph from
the symbol index, the checks), ranks the repository map toward the task, writes the structure's brief for the
planner, and checks the lanes the planner proposes; `reposwarm lanes` makes a lanes file from the structure alone.
On an 800-service monorepo that must take seconds, not minutes, with the index warm (a worker keeps it between
runs). Measures, with the index warm: the whole proposal as the propose_lanes activity runs it (activities/
proposing.py, in temporalio's ActivityEnvironment: the survey and the map from one read of the index, the brief,
the prompt, the reply read and checked by check_proposal, the estimates), its model being the replay model
answering with the starting lanes as a submit_lanes call, and the model call's own time (the ledger's latency)
taken off; then each step alone: the survey, the survey with the map (survey_with_map), the brief, the starting
lanes (and their YAML), the lanes' check as the loader makes it (check_lanes), the proposal's check
(check_proposal), the repo map alone (repo_map); the median of --repeat runs each. Targets: the whole proposal
<= 10 s, and survey + brief + starting lanes <= 10 s. Prints a table and writes bench/results_propose.json.

    python bench/bench_propose.py [--services 800] [--repeat 3] [--out bench/results_propose.json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.bench_index import with_targets  # noqa: E402
from bench.gen_monorepo import generate  # noqa: E402
from reposwarm.checks.selection import resolve  # noqa: E402
from reposwarm.contracts import LanePlan, LanesFile, Plan  # noqa: E402
from reposwarm.contracts.proposal import LaneProposal  # noqa: E402
from reposwarm.intel import lanesplit, layout  # noqa: E402
from reposwarm.intel.repomap import repo_map  # noqa: E402
from reposwarm.lanes.checking import check_lanes  # noqa: E402
from reposwarm.lanes.guardrails import check_proposal  # noqa: E402
from reposwarm.symbols.index import SymbolIndex, default_db_path  # noqa: E402

TARGET_S = 10.0
TASK = "Add a retry budget to every service's payment client and log when it runs out"
MAP_TOKENS = 4_000  # activities/model.py REPO_MAP_TOKENS


CPU: dict[str, float] = {}  # step -> this process's CPU seconds, median (the wall time also holds other load)


def timed(fn, repeat: int, name: str = "") -> tuple[float, list[float], object]:
    times, cpu, result = [], [], None
    for _ in range(repeat):
        started, started_cpu = time.perf_counter(), time.process_time()
        result = fn()
        times.append(round(time.perf_counter() - started, 3))
        cpu.append(time.process_time() - started_cpu)
    if name:
        CPU[name] = round(statistics.median(cpu), 3)
    return statistics.median(times), times, result


def replay_script(config: LanesFile, path: Path) -> str:
    """A replay model whose proposer answers with these lanes as a submit_lanes call (a goal per lane)."""
    import yaml

    lanes = [{"name": name, "goal": f"the task's part in {', '.join(role.allowed_paths[:2])}",
              "allowed_paths": role.allowed_paths, "read_only_paths": role.read_only_paths,
              "depends_on": role.depends_on} for name, role in config.swarm.lanes.items()]
    call = {"id": "p1", "name": "submit_lanes", "arguments": {
        "interface_contract": "Each service keeps its public API; the retry budget is a field of the client.",
        "summary": "the starting lanes", "overlaps": list(config.swarm.overlaps), "lanes": lanes}}
    path.write_text(yaml.safe_dump({"version": 1, "proposer": [{"tool_calls": [call]}]}, sort_keys=False))
    return f"replay:{path}"


def propose(repo: Path, db: Path, config: LanesFile, repeat: int) -> dict:
    """The propose_lanes activity as a worker runs it, `repeat` times: wall and CPU seconds, less the model call's
    latency (the ledger's); REPOSWARM_HOME is a fresh folder whose index of `repo` is the warm one at `db`."""
    home = Path(tempfile.mkdtemp(prefix="bench-propose-"))
    before = os.environ.get("REPOSWARM_HOME")
    os.environ["REPOSWARM_HOME"] = str(home)
    try:
        return _propose(repo, db, config, repeat, home)
    finally:  # the folder holds a link to the index, the ledger and the kept replies: nothing to keep
        shutil.rmtree(home, ignore_errors=True)
        if before is None:
            os.environ.pop("REPOSWARM_HOME", None)
        else:
            os.environ["REPOSWARM_HOME"] = before


def _propose(repo: Path, db: Path, config: LanesFile, repeat: int, home: Path) -> dict:
    from temporalio.testing import ActivityEnvironment

    from activities.proposing import propose_lanes
    from reposwarm.contracts import ProposeInput
    from reposwarm.runs import ledger

    link = default_db_path(repo)
    link.parent.mkdir(parents=True, exist_ok=True)
    link.symlink_to(db.resolve())
    model = replay_script(config, home / "proposer.yaml")
    base = subprocess.run(["git", "-C", str(repo), "rev-parse", "HEAD"], capture_output=True, text=True,
                          check=True).stdout.strip()
    runs, cpu, model_s, loads, outcome = [], [], [], [], None
    for i in range(repeat):
        loads.append(round(os.getloadavg()[0], 2))
        req = ProposeInput(run_id=f"bench-propose-{i}", repo_path=str(repo), base_sha=base, task=TASK, model=model)
        started, started_cpu = time.perf_counter(), time.process_time()
        outcome = asyncio.run(ActivityEnvironment().run(propose_lanes, req))
        wall, used = time.perf_counter() - started, time.process_time() - started_cpu
        calls = [line for line in ledger.read(req.run_id) if line.get("event") == "model_call"]
        latency = sum(float(line.get("latency_s") or 0) for line in calls)
        runs.append(round(wall - latency, 3))
        cpu.append(used)
        model_s.append(round(latency, 3))
    assert outcome is not None
    proposal = outcome.proposal
    assert not proposal.problems, proposal.problems  # accepted as proposed: one model call, one check
    return {"median": statistics.median(runs), "runs": runs, "cpu_median": round(statistics.median(cpu), 3),
            "model_call_s": model_s, "load_avg_1m": loads, "attempts": proposal.attempts, "lanes": len(proposal.lanes),
            "predicted_overlaps": len(proposal.predicted_overlaps)}


def run(args: argparse.Namespace) -> dict:
    results: dict = {"machine": {"cpus": os.cpu_count(), "python": platform.python_version(),
                                 "platform": platform.platform(), "load_avg_1m": round(os.getloadavg()[0], 2)}}
    lines = args.services * 25 * 200
    repo = Path(args.cache_dir) / f"mono-{lines}-s{args.seed}"  # the folder bench_index.py and bench_swarm.py use
    if not (repo / ".git").exists():
        started = time.perf_counter()
        generate(repo, args.services, 25, 200, args.seed)
        results["generate_s"] = round(time.perf_counter() - started, 1)
        print(f"generated {repo} in {results['generate_s']} s", flush=True)
    files = subprocess.run(["git", "-C", str(repo), "ls-files"], capture_output=True, text=True,
                           check=True).stdout.splitlines()
    results["repo"] = {"path": str(repo), "files": len(files), "lines": lines}
    db = Path(args.cache_dir) / f"index-mono-{lines}-s{args.seed}.sqlite"
    with SymbolIndex(repo, db) as index:
        started = time.perf_counter()
        stats = index.update("HEAD")  # warm: a worker's index of the repository, kept between runs
        results["index_warm_up_s"] = round(time.perf_counter() - started, 2)
        results["index_files_parsed"] = stats.parsed
        survey_s, survey_all, found = timed(lambda: layout.survey(repo, index=index), args.repeat, "survey")
    assert isinstance(found, layout.RepoLayout)
    focus = [f for f in files if f.startswith("services/")][:5]
    brief_s, brief_all, text = timed(lambda: layout.brief(found, focus), args.repeat, "brief")
    lanes_s, lanes_all, made = timed(lambda: (lambda plan: layout.lanes_yaml(found, *plan))(
        lanesplit.plan(found, args.max_lanes)), args.repeat, "starting_lanes")
    config, _ = lanesplit.plan(found, args.max_lanes)
    check_s, check_all, findings = timed(lambda: check_lanes(config, files, max_lanes=args.max_lanes,
                                                              tools_on_path=False), args.repeat, "check_lanes")
    assert not findings.errors, findings.errors  # type: ignore[attr-defined]
    proposal = LaneProposal(lanes=config.swarm.lanes, overlaps=list(config.swarm.overlaps), profile=found.profile,
                            plan=Plan(interface_contract="-", lanes=[LanePlan(lane=n, goal="-")
                                                                     for n in config.swarm.lanes]))
    graph = resolve.load(repo, "HEAD")  # (the activity reads it once per proposal, beside the survey)
    guard_s, guard_all, problems = timed(lambda: check_proposal(proposal, files, graph,
                                                                max_lanes=args.max_lanes).errors,
                                         args.repeat, "check_proposal")
    assert not problems, problems
    map_s, map_all, _ = timed(lambda: repo_map(repo, "HEAD", budget_tokens=MAP_TOKENS, focus_text=TASK, db_path=db),
                              args.repeat, "repo_map_4000_tokens")
    with SymbolIndex(repo, db) as index:
        both_s, both_all, _ = timed(lambda: layout.survey_with_map(repo, "HEAD", TASK, budget_tokens=MAP_TOKENS,
                                                                   index=index), args.repeat, "survey_with_map")
    results["machine"]["load_avg_1m_before_propose"] = round(os.getloadavg()[0], 2)
    whole = propose(repo, db, config, args.repeat)
    total = round(survey_s + brief_s + lanes_s, 3)
    results["layout"] = {"packages": len(found.packages), "kinds": sorted({p.kind for p in found.packages}),
                         "imports": sum(len(p.imports) for p in found.packages), "lanes": len(config.swarm.lanes),
                         "brief_chars": len(str(text)), "lanes_yaml_bytes": len(str(made))}
    results["seconds"] = {"propose_lanes": whole,
                          "survey": {"median": survey_s, "runs": survey_all},
                          "survey_with_map": {"median": both_s, "runs": both_all},
                          "brief": {"median": brief_s, "runs": brief_all},
                          "starting_lanes": {"median": lanes_s, "runs": lanes_all},
                          "check_lanes": {"median": check_s, "runs": check_all},
                          "check_proposal": {"median": guard_s, "runs": guard_all},
                          "repo_map_4000_tokens": {"median": map_s, "runs": map_all}}
    for step, cpu in CPU.items():
        results["seconds"][step]["cpu_median"] = cpu
    results["machine"]["load_avg_1m_after"] = round(os.getloadavg()[0], 2)
    results["targets"] = {
        "propose_lanes_s": {"target": TARGET_S, "measured": whole["median"], "met": whole["median"] <= TARGET_S},
        "survey_brief_lanes_s": {"target": TARGET_S, "measured": total, "met": total <= TARGET_S}}
    return results


def table(r: dict) -> str:
    s = r["seconds"]
    p = s["propose_lanes"]
    rows = [("repository", f"{r['repo']['lines']:,} lines, {r['repo']['files']:,} files; "
                           f"{r['layout']['packages']} packages, {r['layout']['imports']} package imports"),
            ("load (1 min) before / before propose / after", f"{r['machine']['load_avg_1m']} / "
             f"{r['machine']['load_avg_1m_before_propose']} / {r['machine']['load_avg_1m_after']}"),
            ("propose_lanes, the model apart (index warm)", f"{p['median']} s ({p['cpu_median']} s of CPU; the model "
             f"call {max(p['model_call_s'])} s at most; {p['lanes']} lanes, {p['attempts']} attempt)"),
            ("survey + map, one read of the index", f"{s['survey_with_map']['median']} s "
             f"({s['survey_with_map']['cpu_median']} s of CPU)"),
            ("survey (index warm)", f"{s['survey']['median']} s ({s['survey']['cpu_median']} s of CPU)"),
            ("brief", f"{s['brief']['median']} s ({r['layout']['brief_chars']:,} characters)"),
            ("starting lanes + YAML", f"{s['starting_lanes']['median']} s ({r['layout']['lanes']} lanes)"),
            ("check_lanes (the loader's checks)", f"{s['check_lanes']['median']} s"),
            ("check_proposal (the guardrails too)", f"{s['check_proposal']['median']} s"),
            ("repo map toward a task, 4,000 tokens", f"{s['repo_map_4000_tokens']['median']} s")]
    return with_targets(rows, r["targets"])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--services", type=int, default=800, help="services of the generated monorepo (800: ~4M lines)")
    parser.add_argument("--seed", type=int, default=7, help="the generator's seed")
    parser.add_argument("--cache-dir", default=os.path.join(tempfile.gettempdir(), "reposwarm-bench"),
                        help="where the generated repository and its index are kept between runs")
    parser.add_argument("--max-lanes", type=int, default=8, help="lanes the starting lanes may have")
    parser.add_argument("--repeat", type=int, default=3, help="runs of each step (the median is reported)")
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results_propose.json", help="the results file")
    args = parser.parse_args(argv)
    results = run(args)
    print(table(results))
    args.out.write_text(json.dumps(results, indent=2) + "\n")
    print(f"wrote {args.out}")
    return 0 if all(t["met"] for t in results["targets"].values()) else 1


if __name__ == "__main__":
    sys.exit(main())
