"""Benchmark what proposing lanes costs reposwarm itself (the model's time apart) on the generated 4M-line monorepo.

Why: a run started with only a task surveys the repository (packages, CODEOWNERS, the package import graph from
the symbol index, the checks), writes the structure's brief for the planner, and `reposwarm lanes` makes a lanes
file from it; on an 800-service monorepo that must take seconds, not minutes, with the index warm (a worker keeps
it between runs). Measures, with the index warm, each of: the survey (reposwarm/intel/layout.py survey), the
brief, the starting lanes (starting_lanes and their YAML), and the check of those lanes as the loader checks a
lanes file (reposwarm/lanes_check.py check_lanes); the median of --repeat runs each; and, beside them, the repo map
ranked toward a task, which a proposal's prompt also carries. Target: survey + brief + starting lanes <= 10 s.
Prints a table and writes bench/results_propose.json.

    python bench/bench_propose.py [--services 800] [--repeat 3] [--out bench/results_propose.json]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.gen_monorepo import generate  # noqa: E402
from reposwarm.intel import lanesplit, layout  # noqa: E402
from reposwarm.intel.repomap import repo_map  # noqa: E402
from reposwarm.intel.symbols import SymbolIndex  # noqa: E402
from reposwarm.lanes_check import check_lanes  # noqa: E402

TARGET_S = 10.0
TASK = "Add a retry budget to every service's payment client and log when it runs out"


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
    map_s, map_all, _ = timed(lambda: repo_map(repo, "HEAD", budget_tokens=4000, focus_text=TASK, db_path=db),
                              args.repeat, "repo_map_4000_tokens")
    total = round(survey_s + brief_s + lanes_s, 3)
    results["layout"] = {"packages": len(found.packages), "kinds": sorted({p.kind for p in found.packages}),
                         "imports": sum(len(p.imports) for p in found.packages), "lanes": len(config.swarm.lanes),
                         "brief_chars": len(str(text)), "lanes_yaml_bytes": len(str(made))}
    results["seconds"] = {"survey": {"median": survey_s, "runs": survey_all},
                          "brief": {"median": brief_s, "runs": brief_all},
                          "starting_lanes": {"median": lanes_s, "runs": lanes_all},
                          "check_lanes": {"median": check_s, "runs": check_all},
                          "repo_map_4000_tokens": {"median": map_s, "runs": map_all}}
    for step, cpu in CPU.items():
        results["seconds"][step]["cpu_median"] = cpu
    results["machine"]["load_avg_1m_after"] = round(os.getloadavg()[0], 2)
    results["targets"] = {"survey_brief_lanes_s": {"target": TARGET_S, "measured": total, "met": total <= TARGET_S}}
    return results


def table(r: dict) -> str:
    s = r["seconds"]
    rows = [("repository", f"{r['repo']['lines']:,} lines, {r['repo']['files']:,} files; "
                           f"{r['layout']['packages']} packages, {r['layout']['imports']} package imports"),
            ("survey (index warm)", f"{s['survey']['median']} s ({s['survey']['cpu_median']} s of CPU)"),
            ("brief", f"{s['brief']['median']} s ({r['layout']['brief_chars']:,} characters)"),
            ("starting lanes + YAML", f"{s['starting_lanes']['median']} s ({r['layout']['lanes']} lanes)"),
            ("check_lanes (the loader's checks)", f"{s['check_lanes']['median']} s"),
            ("repo map toward a task, 4,000 tokens", f"{s['repo_map_4000_tokens']['median']} s")]
    for name, t in r["targets"].items():
        rows.append((f"target {name}", f"<= {t['target']}: {'met' if t['met'] else 'MISSED'} ({t['measured']})"))
    width = max(len(a) for a, _ in rows)
    return "\n".join(f"| {a.ljust(width)} | {b} |" for a, b in rows)


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
    return 0 if results["targets"]["survey_brief_lanes_s"]["met"] else 1


if __name__ == "__main__":
    sys.exit(main())
