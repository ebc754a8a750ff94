"""Benchmark the symbol index on a generated monorepo (default one million lines).

Why: symbol_lookup runs on every helper's tool call and the repo map on every
planning round, so both must stay fast on large repositories. Measures the full
index build (time, database size), symbol lookups (p50/p99 over random known
symbols, through the index and through the symbol_lookup tool), the re-index
after a commit changing 50 files, `git grep` for a symbol, and the repo map.
Prints a table and writes bench/results_index.json.

    python bench/bench_index.py [--lines 1000000] [--repo PATH] [--out bench/results_index.json]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.gen_monorepo import GIT_ENV, generate  # noqa: E402
from reposwarm.agent.tools import SymbolLookupArgs, Toolbox  # noqa: E402
from reposwarm.intel.repomap import repo_map  # noqa: E402
from reposwarm.slices.policy import PathPolicy  # noqa: E402
from reposwarm.symbols.index import SymbolIndex  # noqa: E402

TARGETS = {"lookup_p50_ms": 20.0, "reindex_50_files_s": 1.0}


def _git(repo: Path, *args: str, stdin: str | None = None, env: dict[str, str] | None = None) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], input=stdin, check=True, capture_output=True, text=True,
                          env={**os.environ, **GIT_ENV, **(env or {})}).stdout.strip()


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


def commit_changes(repo: Path, paths: list[str], tag: str) -> str:
    """A commit on top of HEAD changing `paths` (a function appended to each), made with plumbing:
    no checkout, no branch moves, so the generated repository stays as it was for the next run."""
    with tempfile.TemporaryDirectory() as tmp:
        index_env = {"GIT_INDEX_FILE": str(Path(tmp) / "index")}
        _git(repo, "read-tree", "HEAD", env=index_env)
        infos = []
        for i, path in enumerate(paths):
            text = _git(repo, "show", f"HEAD:{path}") + "\n"
            if path.endswith(".py"):
                text += f"\n\ndef bench_added_{tag}_{i}(x: int) -> int:\n    return x + {i}\n"
            elif path.endswith(".go"):
                text += f"\nfunc BenchAdded{tag}{i}(x int) int {{\n\treturn x + {i}\n}}\n"
            else:
                text += f"\nexport function benchAdded{tag}{i}(x: number): number {{\n  return x + {i};\n}}\n"
            blob = _git(repo, "hash-object", "-w", "--stdin", stdin=text)
            infos.append(f"100644 {blob}\t{path}")
        _git(repo, "update-index", "--index-info", stdin="\n".join(infos) + "\n", env=index_env)
        tree = _git(repo, "write-tree", env=index_env)
    return _git(repo, "commit-tree", tree, "-p", "HEAD", "-m", f"bench: change {len(paths)} files")


def run(args: argparse.Namespace) -> dict:
    results: dict = {"machine": {"cpus": os.cpu_count(), "python": platform.python_version(),
                                 "platform": platform.platform()}}
    repo = args.repo
    if repo is None:
        repo = Path(args.cache_dir) / f"mono-{args.lines}-s{args.seed}"
        if not (repo / ".git").exists():
            started = time.perf_counter()
            services = max(1, -(-args.lines // (25 * 200)))
            lines = generate(repo, services, 25, 200, args.seed)
            results["generate"] = {"seconds": round(time.perf_counter() - started, 2), "lines": lines}
            print(f"generated {repo}: {lines} lines in {results['generate']['seconds']}s", flush=True)
    files = _git(repo, "ls-tree", "-r", "--name-only", "HEAD").splitlines()
    lines = sum(int(line.rsplit(":", 1)[1]) for line in _git(repo, "grep", "-c", "", "HEAD").splitlines())
    results["repo"] = {"path": str(repo), "files": len(files), "lines": lines}
    rng = random.Random(args.seed)
    with tempfile.TemporaryDirectory() as tmp:
        os.environ["REPOSWARM_HOME"] = tmp  # a fresh cache, where the symbol_lookup tool finds it too
        index = SymbolIndex(repo)
        started = time.perf_counter()
        stats = index.update("HEAD")
        build = time.perf_counter() - started
        index.db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        counts = {t: index.db.execute(f"SELECT COUNT(*) FROM {t}").fetchone()[0] for t in ("defs", "refs")}
        results["build"] = {"seconds": round(build, 2), "files_parsed": stats.parsed,
                            "db_mb": round(index.db_path.stat().st_size / 1e6, 1), **counts}
        print(f"built the index in {build:.1f}s", flush=True)

        names = sorted({r[0] for r in index.db.execute("SELECT name FROM defs")})
        sample = rng.sample(names, min(args.lookups, len(names)))
        index.lookup(sample[0])  # warm the page cache like a running worker would have it
        times = []
        for name in sample:
            started = time.perf_counter()
            found = index.lookup(name)
            times.append((time.perf_counter() - started) * 1000)
            assert found.definitions, name
        results["lookup"] = {"n": len(times), "p50_ms": round(_pct(times, 0.5), 2),
                             "p99_ms": round(_pct(times, 0.99), 2), "max_ms": round(max(times), 2)}

        # the tool as a lane calls it: a new index object per call, the readable filter, grep for other files; in a
        # worker, whose process has the Temporal SDK loaded (the tool imports it on its first call: ~100 ms here,
        # which a lane never pays, and which was this figure's p99 before)
        import temporalio.activity  # noqa: F401

        tools = Toolbox(PathPolicy(repo, ["services/", "libs/"], ["*"]))
        tool_times = []
        for name in sample[:args.tool_lookups]:
            started = time.perf_counter()
            tools.symbol_lookup(SymbolLookupArgs(symbol=name))
            tool_times.append((time.perf_counter() - started) * 1000)
        results["tool_lookup"] = {"n": len(tool_times), "p50_ms": round(_pct(tool_times, 0.5), 2),
                                  "p99_ms": round(_pct(tool_times, 0.99), 2)}

        code = [f for f in files if f.startswith("services/")]
        changed = rng.sample(code, args.changed)
        commit = commit_changes(repo, changed, tag=str(rng.randrange(10**6)))
        started = time.perf_counter()
        stats = index.update(commit)
        reindex = time.perf_counter() - started
        assert index.lookup(sample[1], rev=commit).definitions
        results["reindex"] = {"changed_files": args.changed, "files_parsed": stats.parsed, "seconds": round(reindex, 3)}

        grep_times = []
        for name in sample[:args.greps]:
            started = time.perf_counter()
            subprocess.run(["git", "-C", str(repo), "grep", "-n", "-w", "-e", name, "HEAD"], capture_output=True)
            grep_times.append((time.perf_counter() - started) * 1000)
        results["git_grep"] = {"n": len(grep_times), "p50_ms": round(_pct(grep_times, 0.5), 1),
                               "p99_ms": round(_pct(grep_times, 0.99), 1)}

        started = time.perf_counter()
        text = repo_map(repo, commit, budget_tokens=4000, focus_text=f"Change {sample[0]} and its callers")
        results["repo_map"] = {"seconds": round(time.perf_counter() - started, 2), "tokens": len(text) // 4}
        index.close()
    results["targets"] = {
        "lookup_p50_ms": {"target": TARGETS["lookup_p50_ms"], "measured": results["lookup"]["p50_ms"],
                          "met": results["lookup"]["p50_ms"] <= TARGETS["lookup_p50_ms"]},
        "reindex_50_files_s": {"target": TARGETS["reindex_50_files_s"], "measured": results["reindex"]["seconds"],
                               "met": results["reindex"]["seconds"] <= TARGETS["reindex_50_files_s"]},
    }
    return results


def table(r: dict) -> str:
    rows = [
        ("repository", f"{r['repo']['lines']:,} lines, {r['repo']['files']:,} files"),
        ("full index build", f"{r['build']['seconds']} s ({r['build']['files_parsed']:,} files parsed, "
                             f"{r['build']['defs']:,} definitions, {r['build']['refs']:,} references)"),
        ("index size", f"{r['build']['db_mb']} MB"),
        ("lookup (SymbolIndex)", f"p50 {r['lookup']['p50_ms']} ms, p99 {r['lookup']['p99_ms']} ms, "
                                 f"max {r['lookup']['max_ms']} ms (n={r['lookup']['n']})"),
        ("symbol_lookup tool", f"p50 {r['tool_lookup']['p50_ms']} ms, p99 {r['tool_lookup']['p99_ms']} ms "
                               f"(n={r['tool_lookup']['n']}; new index object, filter, grep of other files)"),
        ("re-index, 50 files changed", f"{r['reindex']['seconds']} s ({r['reindex']['files_parsed']} files parsed)"),
        ("git grep -w (whole tree)", f"p50 {r['git_grep']['p50_ms']} ms, p99 {r['git_grep']['p99_ms']} ms"),
        ("repo map, 4,000 tokens", f"{r['repo_map']['seconds']} s"),
    ]
    if "generate" in r:
        rows.insert(1, ("generate the repository", f"{r['generate']['seconds']} s"))
    return with_targets(rows, r["targets"])


def with_targets(rows: list[tuple[str, str]], targets: dict) -> str:
    """A results table as Markdown rows, each target met or MISSED at the end (bench_propose.py shares it)."""
    rows = rows + [(f"target {name}", f"<= {t['target']}: {'met' if t['met'] else 'MISSED'} ({t['measured']})")
                   for name, t in targets.items()]
    width = max(len(a) for a, _ in rows)
    return "\n".join(f"| {a.ljust(width)} | {b} |" for a, b in rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repo", type=Path, help="an existing repository (default: generate one)")
    parser.add_argument("--lines", type=int, default=1_000_000)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--cache-dir", default=os.path.join(tempfile.gettempdir(), "reposwarm-bench"))
    parser.add_argument("--lookups", type=int, default=200)
    parser.add_argument("--tool-lookups", type=int, default=200)
    parser.add_argument("--greps", type=int, default=20)
    parser.add_argument("--changed", type=int, default=50)
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results_index.json")
    args = parser.parse_args(argv)
    results = run(args)
    print(table(results))
    args.out.write_text(json.dumps(results, indent=2) + "\n")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
