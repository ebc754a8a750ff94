"""Benchmark the language caches of checks (issue 32, part 2): a second check against the first, on a Go module and a
cargo workspace of a few zero-dependency packages.

    python bench/bench_caches.py [--packages 4] [--out bench/results_caches.json]

Every check goes through the product's own run_profile (reposwarm/checks/runner.py), in the bubblewrap sandbox,
with its real cache scopes (reposwarm/checks/sandbox/caches.py), in a fresh REPOSWARM_HOME. The checks, in order,
each on a git worktree of one repository (so one repository key), as a run makes them:

- first: the baseline, scope "base", in its own checkout, with empty caches (it fills the host's seed);
- no caches: a check of a fresh checkout with caches off (profile caches: false): what every check cost before;
- validation: a check of a fresh checkout at another path, scope "" (a throwaway copy of the seed);
- lane, first check: a lane's worktree, scope "lane:bench/api" (its folder copied from the seed);
- lane, second check: the same worktree and scope, nothing changed (the lane's own cache, and its tree);
- lane without caches, first and second check: the same on another worktree with caches off (before: Go's caches
  lived in the check's private HOME and were lost with it; cargo's target/ stays in a lane's tree anyway);
- lane, one package edited: the same, after an edit of the leaf package that the others do not import.

For each: the compile steps the tool ran (go: `compile` invocations of `go test -x`; cargo: the `rustc
--crate-name` units of `cargo test -v`) and the command's seconds, with ratios to the first check. One run each.
Writes bench/results_caches.json and prints a Markdown table.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from reposwarm.checks.runner import run_profile  # noqa: E402
from reposwarm.contracts import CheckProfile  # noqa: E402
from reposwarm.runs.store import Store  # noqa: E402
from tests.helpers import git, make_repo  # noqa: E402

GO_COMPILE = re.compile(r"/compile -o ")
CARGO_COMPILE = re.compile(r"Running `\S*rustc --crate-name ")
# besides compiling: go's links (test binaries) and vet runs, cargo's rustdoc runs (the doc-tests)
OTHER_STEPS = {"go": {"link": re.compile(r"/link -o "), "vet": re.compile(r"/vet(\s|\b)[^\n]*vet\.cfg")},
               "cargo": {"rustdoc": re.compile(r"Running `\S*rustdoc ")}}


NOTES = [
    "one run of each check: the seconds are of one machine at one moment (noisy at this size); the steps are not",
    "go: a package's compile action depends on its folder (without -trimpath, which would change the paths tests "
    "see), so a checkout at another path compiles the module's own packages again; what it reuses from the seed "
    "is the rest (vet's facts of the standard library here, go 1.19; from go 1.20 on the standard library's "
    "compiles too) and, in the same tree, everything (test results included: `(cached)`)",
    "cargo: a workspace member is fresh only if its sources are older than its last build (mtimes): a fresh "
    "checkout is newer, so it builds again; a lane's target/ stayed in its tree already, so the lane's second check "
    "is the same with or without the caches. What the cache keeps across checkouts is dependencies (registry "
    "crates, fingerprinted by version), which these zero-dependency packages have none of",
]


def go_module(n: int) -> dict[str, str]:
    files = {"go.mod": "module example.com/bench\n\ngo 1.19\n"}
    for i in range(n):
        name = f"p{i}"
        imports = "" if i == 0 else "import \"example.com/bench/p0\"\n\n"
        uses = "" if i == 0 else " + p0.Base()"
        funcs = "".join(f"func F{k}(x int) int {{ return x*{k} + {k}{uses} }}\n\n" for k in range(40))
        files[f"{name}/{name}.go"] = f"package {name}\n\n{imports}func Base() int {{ return {i} }}\n\n{funcs}"
        files[f"{name}/{name}_test.go"] = (
            f'package {name}\n\nimport "testing"\n\n'
            f"func TestF1(t *testing.T) {{\n\tif F1(1) < 1 {{\n\t\tt.Fatal(\"F1\")\n\t}}\n}}\n")
    return files


def cargo_workspace(n: int) -> dict[str, str]:
    members = ", ".join(f'"c{i}"' for i in range(n))
    files = {"Cargo.toml": f"[workspace]\nmembers = [{members}]\nresolver = \"2\"\n"}
    for i in range(n):
        dep = "" if i == 0 else 'c0 = { path = "../c0" }\n'
        uses = "" if i == 0 else " + c0::base()"
        funcs = "".join(f"pub fn f{k}(x: i64) -> i64 {{ x * {k} + {k}{uses} }}\n" for k in range(40))
        files[f"c{i}/Cargo.toml"] = (f'[package]\nname = "c{i}"\nversion = "0.1.0"\nedition = "2021"\n\n'
                                     f"[dependencies]\n{dep}")
        files[f"c{i}/src/lib.rs"] = (f"pub fn base() -> i64 {{ {i} }}\n{funcs}\n"
                                     "#[cfg(test)]\nmod tests {\n    #[test]\n    fn f1() { assert!(super::f1(1) >= 1); }\n}\n")
    return files


def version(argv: list[str]) -> str:
    try:
        return subprocess.run(argv, capture_output=True, text=True, timeout=60).stdout.strip()
    except OSError:
        return ""


async def check(profile: CheckProfile, tree: Path, scope: str, store: Store, pattern: re.Pattern[str],
                others: dict[str, re.Pattern[str]]) -> dict:
    started = time.monotonic()
    report = await run_profile(profile, tree, store, rerun=False, scope=scope)
    seconds = time.monotonic() - started
    result = report.commands[0]
    log = store.get(result.log_ref).decode("utf-8", errors="replace") if result.log_ref else result.output_tail
    return {"passed": report.passed, "tests_run": report.tests_run, "compile_steps": len(pattern.findall(log)),
            **{f"{k}_steps": len(v.findall(log)) for k, v in others.items()},
            "seconds": round(seconds, 2), "command_seconds": result.duration_s}


async def language(name: str, files: dict[str, str], argv: list[str], leaf: str, work: Path,
                   store: Store) -> dict:
    pattern = GO_COMPILE if name == "go" else CARGO_COMPILE
    repo = make_repo(work / name / "repo", files)

    def checkout(label: str) -> Path:
        path = work / name / label
        git(repo, "worktree", "add", "-q", "--detach", str(path), "HEAD")
        return path

    profile = CheckProfile(commands=[argv], timeout_s=1200, memory_mb=16384)
    others = OTHER_STEPS[name]

    async def run(label: str, tree: Path, scope: str, caches: bool = True) -> None:
        rows[label] = await check(profile.model_copy(update={"caches": caches}), tree, scope, store, pattern, others)

    rows: dict[str, dict] = {}
    await run("first (baseline, scope base, empty caches)", checkout("baseline"), "base")
    await run("no caches (fresh checkout, caches: false)", checkout("nocache"), "", caches=False)
    await run("validation (fresh checkout elsewhere, scope '')", checkout("validate"), "")
    lane, before = checkout("lane-api"), checkout("lane-nocache")
    await run("lane, first check (scope lane:bench/api)", lane, "lane:bench/api")
    await run("lane, second check (nothing changed)", lane, "lane:bench/api")
    await run("lane without caches, first check", before, "", caches=False)
    await run("lane without caches, second check (nothing changed)", before, "", caches=False)
    edited = lane / leaf
    edited.write_text(edited.read_text() + ("\nfunc Edited() int { return 1 }\n" if name == "go"
                                            else "\npub fn edited() -> i64 { 1 }\n"))
    await run("lane, one leaf package edited", lane, "lane:bench/api")
    first = next(iter(rows.values()))
    for row in rows.values():
        row["steps_ratio"] = round(row["compile_steps"] / first["compile_steps"], 3) if first["compile_steps"] else None
        row["seconds_ratio"] = round(row["seconds"] / first["seconds"], 3) if first["seconds"] else None
    return {"command": argv, "rows": rows}


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--packages", type=int, default=4)
    parser.add_argument("--out", default=str(ROOT / "bench" / "results_caches.json"))
    args = parser.parse_args()
    results: dict = {"bench": "caches", "packages": args.packages,
                     "machine": {"cpus": os.cpu_count(), "python": platform.python_version(),
                                 "platform": platform.platform(), "go": version(["go", "version"]),
                                 "cargo": version(["cargo", "--version"])},
                     "languages": {}, "skipped": [], "notes": NOTES}
    with tempfile.TemporaryDirectory(prefix="bench-caches-") as tmp:
        work = Path(tmp)
        os.environ["REPOSWARM_HOME"] = str(work / "rshome")
        store = Store("bench-caches")
        n = args.packages
        if shutil.which("go"):
            results["languages"]["go"] = await language(
                "go", go_module(n), ["go", "test", "-x", "./..."], f"p{n - 1}/p{n - 1}.go", work, store)
        else:
            results["skipped"].append("go: not installed")
        if shutil.which("cargo"):
            results["languages"]["cargo"] = await language(
                "cargo", cargo_workspace(n), ["cargo", "test", "-v", "--offline"], f"c{n - 1}/src/lib.rs", work,
                store)
        else:
            results["skipped"].append("cargo: not installed")
    Path(args.out).write_text(json.dumps(results, indent=2) + "\n")
    print("| language | check | compile steps | seconds | steps ratio | seconds ratio |")
    print("| --- | --- | --- | --- | --- | --- |")
    for lang, data in results["languages"].items():
        for label, row in data["rows"].items():
            print(f"| {lang} | {label} | {row['compile_steps']} | {row['seconds']} | {row['steps_ratio']} | "
                  f"{row['seconds_ratio']} |")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    asyncio.run(main())
