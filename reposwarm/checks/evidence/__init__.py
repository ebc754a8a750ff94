"""What a check's processes loaded, from the runtimes themselves, held against the tree and the changed files:
the proof that a check ran the change's own code (issue 44).

Per command (reposwarm/checks/runner.py `_run_once`): `start` makes the command's environment take evidence into
its reports folder (python.py: an import tracer as sitecustomize, first on PYTHONPATH; node.py: NODE_V8_COVERAGE);
`collect` reads it after the command, with what its output says (compiled.py: the packages `go test` built, the
crates cargo tested), into a bounded `Loaded` (the whole per-process evidence in the run's store, `Loaded.ref`).
At the end of the check, `exercise` (exercise.py) sorts each changed source file: loaded from the tree, from
outside it, not loaded, or unknown.

`REPOSWARM_EVIDENCE=off` in the worker's environment takes none (the benchmark's switch: bench/bench_evidence.py).
"""

from __future__ import annotations

import asyncio
import os
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from reposwarm.checks.evidence import compiled, node, python
from reposwarm.checks.evidence.files import Budget, TreeFiles, read_capped, tree_files
from reposwarm.checks.exercised import exercise, language, sources
from reposwarm.contracts import Loaded
from reposwarm.runs.store import Store
from reposwarm.vcs import gitcmd

__all__ = ["SWITCH", "Context", "Taking", "TreeFiles", "Watched", "changed_files", "changed_lines", "collect",
           "context", "enabled", "exercise", "language", "shadowing", "sources", "start", "tree_files", "watched_in"]

SWITCH = "REPOSWARM_EVIDENCE"
INSIDE_MAX = 200  # tree files named when no file was asked about
OUTSIDE_MAX = 200
WATCHED_MAX = 2000  # changed source files a check is asked about; a larger change's others are not spoken for
PYTHON_RUNNERS = ("pytest", "unittest")
NODE_RUNNERS = ("node", "jest", "vitest", "mocha")


def enabled() -> bool:
    """Whether checks take evidence: yes, unless REPOSWARM_EVIDENCE=off (read at each command)."""
    value = os.environ.get(SWITCH, "").strip().lower()
    if value not in ("", "on", "off"):
        raise ValueError(f"{SWITCH}={os.environ[SWITCH]!r}: it must be 'on' (the default) or 'off'")
    return value != "off"


@dataclass(frozen=True)
class Watched:
    """The files a check is asked about (the change's), tree-relative, and their changed lines where known."""

    files: tuple[str, ...] = ()
    lines: Mapping[str, tuple[int, ...]] = field(default_factory=dict)


@dataclass(frozen=True)
class Context:
    """What every command of one check shares: the tree's own files (listed once, before the commands ran) and
    the files asked about."""

    files: TreeFiles
    watched: Watched


def context(root: Path, watched: Watched | None) -> Context:
    """The check's shared evidence context: the tree's files listed now, and the asked files it holds."""
    files = tree_files(root)
    asked = watched or Watched()
    present = tuple(f for f in asked.files if files.own(f) or (files.root / f).is_file())
    return Context(files, Watched(present, {f: ls for f, ls in asked.lines.items() if f in present}))


@dataclass(frozen=True)
class Taking:
    """One command's evidence being taken: where its runtimes write, and what its environment gets."""

    context: Context
    python: Path
    node: Path | None
    env: dict[str, str]
    binds: dict[Path, Path]  # a folder bound into the tree (its place) -> its host folder
    notes: tuple[str, ...] = ()


def start(reports: Path, ctx: Context, env: Mapping[str, str], binds: Mapping[Path, Path]) -> Taking | None:
    """Make the command's runtimes write their evidence under `reports` (its own folder). `env`: the variables the
    command would get from the profile and the tree, which the evidence's are added to. None: it could not (the
    command runs as it would without evidence)."""
    try:
        return _start(reports, ctx, env, binds)
    except OSError:
        return None


def _start(reports: Path, ctx: Context, env: Mapping[str, str], binds: Mapping[Path, Path]) -> Taking:
    root = ctx.files.root
    asked = {str(root / f): ls for f, ls in ctx.watched.lines.items() if f.endswith(".py") and ls}
    out, additions = python.start(reports, env.get("PYTHONPATH"), asked)
    notes: list[str] = []
    v8: Path | None = None
    if node.VARIABLE in env:
        notes.append(f"node: the profile sets {node.VARIABLE} itself, so its coverage is not read here")
    else:
        v8, more = node.start(reports, env.get("NODE_OPTIONS"))
        additions |= more
    return Taking(ctx, out, v8, additions, dict(binds), tuple(notes))


@dataclass
class _Found:
    languages: list[str] = field(default_factory=list)
    inside: set[str] = field(default_factory=set)
    outside: dict[str, str] = field(default_factory=dict)
    lines: dict[str, set[int]] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    whole: dict[str, Any] = field(default_factory=dict)


def collect(taking: Taking, runner: str, output: str, store: Store | None) -> Loaded:
    """What the command's processes loaded, read after it ended (its evidence folders, its output). Never raises:
    evidence that cannot be read is no evidence (its files unknown), said."""
    try:
        return _collect(taking, runner, output, store)
    except Exception as err:  # (written by the check's own processes: whatever it holds, the check goes on)
        return Loaded(note=f"the evidence could not be read ({type(err).__name__}): no evidence")


def _collect(taking: Taking, runner: str, output: str, store: Store | None) -> Loaded:
    found = _Found(notes=list(taking.notes))
    ctx = taking.context
    watched = set(ctx.watched.files)
    _python(taking, runner, found, watched)
    if taking.node is not None:
        _node(taking, runner, found, watched)
    if runner == "go":
        _go(ctx.files, output, found, watched)
    if runner == "cargo":
        _cargo(ctx.files, output, found, watched)
    if not found.languages and not found.notes:
        found.notes.append("no runtime gave evidence: no traced Python or node process ran, and no go test or "
                           "cargo test output was read")
    inside = found.inside & watched if watched else set(sorted(found.inside)[:INSIDE_MAX])
    ordered = sorted(found.outside.items(), key=lambda item: (item[0] not in watched, item[0]))[:OUTSIDE_MAX]
    return Loaded(languages=found.languages, inside=sorted(inside), outside=dict(ordered),
                  lines={f: sorted(ls) for f, ls in sorted(found.lines.items())},
                  ref=store.put_json(found.whole) if store is not None and found.whole else None,
                  note="; ".join(found.notes))


def _python(taking: Taking, runner: str, found: _Found, watched: set[str]) -> None:
    budget = Budget()
    processes = python.read(taking.python, budget)
    if not processes:
        if runner in PYTHON_RUNNERS:
            found.notes.append("python: no interpreter of the command gave a record (started with -I or -E, or in "
                               "an environment without its PYTHONPATH, as tox and nox make)")
        return
    found.whole["python"] = [p.summary() for p in processes]
    sorted_ = python.sort(processes, taking.context.files, watched)
    found.inside |= sorted_.inside
    found.outside.update(sorted_.outside)
    found.lines.update(sorted_.lines)
    if budget.skipped:
        found.notes.append(f"python: {budget.skipped} process record(s) not read (over the caps): partial")
    elif not python.complete(processes, runner):
        found.notes.append(f"python: {len(processes)} process(es) gave a record, none of which ran {runner}: it did "
                           "not start, or its tests ran where the tracer was not (an environment without its "
                           "PYTHONPATH)")
    else:
        found.languages.append("python")


def _node(taking: Taking, runner: str, found: _Found, watched: set[str]) -> None:
    assert taking.node is not None
    files = taking.context.files
    budget = Budget()
    mine = {f for f in watched if language(f) == "node"}
    asked = {f for f in mine if taking.context.watched.lines.get(f)}
    read = node.read(taking.node, files, budget, mine, asked)
    if not read.processes:
        if runner in NODE_RUNNERS:
            found.notes.append(f"node: no process wrote V8 coverage ({node.VARIABLE} cleared or overridden)")
        return
    found.whole["node"] = [{"file": p.file, "scripts": p.scripts, "elsewhere": p.elsewhere} for p in read.processes]
    found.inside |= read.inside
    builds = node.Builds(files, read.builds, taking.binds)
    for source in sorted(mine - read.inside):
        judged = builds.judge(source) if read.builds else None
        if judged is None:
            continue
        kind, said = judged
        if kind == "outside":
            found.outside[source] = said
        else:
            found.inside.add(source)
    transformed = []
    for source, runs in read.functions.items():
        data = read_capped(files.root / source, 64 * 1024 * 1024)
        ran = node.executed_lines(data.decode("utf-8", "replace"), runs, taking.context.watched.lines[source]) \
            if data is not None else None
        if ran is None:
            transformed.append(source)
        else:
            found.lines[source] = ran
    if transformed:
        found.notes.append(f"node: changed lines not measured in {len(transformed)} transformed file(s) "
                           f"({transformed[0]}...)")
    if budget.skipped:
        found.notes.append(f"node: {budget.skipped} coverage file(s) not read (over the caps): partial")
    elif runner in NODE_RUNNERS and not node.ran_tests(read):
        found.notes.append(f"node: {len(read.processes)} process(es) wrote coverage, none of which ran a test file "
                           f"of the tree: {runner}'s test processes gave none (ended by a signal, or with "
                           f"{node.VARIABLE} cleared)")
    else:
        found.languages.append("node")


def _go(files: TreeFiles, output: str, found: _Found, watched: set[str]) -> None:
    packages = compiled.go_packages(output)
    if packages is None:
        found.notes.append("go: its output names no package tested (it did not build)")
        return
    tree = compiled.GoTree.of(files)
    built = tree.built(packages.tested)
    found.whole["go"] = {"tested": sorted(packages.tested), "no_test_files": sorted(packages.no_tests),
                         "built": sorted(built)}
    mine = [f for f in (watched or files.files) if f.endswith(".go")]
    found.inside |= {f for f in mine if (f.rsplit("/", 1)[0] if "/" in f else "") in built}
    found.languages.append("go")


def _cargo(files: TreeFiles, output: str, found: _Found, watched: set[str]) -> None:
    crates = compiled.cargo_crates(output)
    if crates is None:
        found.notes.append("rust: cargo ran no test binary")
        return
    found.whole["rust"] = {"tested": sorted(crates)}
    found.inside |= {f for f in watched if f.endswith(".rs") and compiled.crate_of(files, f) in crates}
    found.languages.append("rust")


def shadowing(loaded: Loaded | None) -> list[str]:
    """The tree's modules a command loaded from outside the tree, by folder: "`src/attr/` (12 files) from
    /usr/lib/python3/site-packages/attr/", for `reposwarm checks`."""
    if loaded is None or not loaded.outside:
        return []
    groups: dict[tuple[str, str], int] = {}
    for path, where in loaded.outside.items():
        key = (os.path.dirname(path) + "/", os.path.dirname(where.split(" (", 1)[0]) + "/")
        groups[key] = groups.get(key, 0) + 1
    return [f"`{tree}` ({count} file{'s' if count > 1 else ''}) was loaded from {place}"
            for (tree, place), count in sorted(groups.items(), key=lambda g: -g[1])]


def changed_lines(tree: Path, base: str, files: Sequence[str]) -> dict[str, tuple[int, ...]]:
    """The lines of `files` that differ from `base` in the checkout at `tree` (its HEAD), each file's executable
    lines only where that can be told cheaply (Python: compiled; JavaScript: not blank, not a // comment)."""
    if not base or not files:
        return {}
    done = gitcmd.run(["diff", "-U0", "--no-color", "--no-ext-diff", "--no-textconv", "--ignore-submodules=all",
                       "--no-renames", base, "HEAD", "--", *files], cwd=tree, capture_output=True)
    if done.returncode != 0:
        return {}
    found: dict[str, set[int]] = {}
    current = None
    for line in done.stdout.decode("utf-8", "replace").splitlines():
        if line.startswith("+++ "):
            current = line[6:] if line.startswith("+++ b/") else None
        elif line.startswith("@@") and current is not None:
            added = line.split("+", 1)[1].split(" ", 1)[0]
            start, _, count = added.partition(",")
            if start.isdigit():
                n = int(count) if count.isdigit() else 1
                found.setdefault(current, set()).update(range(int(start), int(start) + n))
    executable = {f: _executable(tree / f, ls) for f, ls in found.items()}
    return {f: tuple(sorted(ls)) for f, ls in executable.items() if ls}


def _executable(path: Path, lines: set[int]) -> set[int]:
    data = read_capped(path, 16 * 1024 * 1024)
    if data is None:
        return set()
    text = data.decode("utf-8", "replace")
    if path.suffix == ".py":
        try:
            code = compile(text, str(path), "exec", dont_inherit=True)
        except (SyntaxError, ValueError):
            return set()
        return lines & _code_lines(code)
    rows = text.splitlines()
    return {n for n in lines if 0 < n <= len(rows) and rows[n - 1].strip()
            and not rows[n - 1].strip().startswith(("//", "/*", "*"))}


def _code_lines(code: Any) -> set[int]:
    found = {line for _, _, line in code.co_lines() if line is not None}
    for const in code.co_consts:
        if hasattr(const, "co_lines"):
            found |= _code_lines(const)
    return found


async def watched_in(tree: Path, base: str, files: Sequence[str]) -> Watched:
    """The files asked about in the checkout at `tree`, with their changed lines against `base` ("" unknown)."""
    # (source files only, and a bounded number: the evidence travels in the check's report)
    present = tuple(sorted({f for f in files if language(f) is not None and (tree / f).is_file()})[:WATCHED_MAX])
    lines = await asyncio.to_thread(changed_lines, tree, base, present) if base else {}
    return Watched(present, lines)


def changed_files(tree: Path, base: str) -> list[str] | None:
    """The files that differ between `base` and the checkout's HEAD; None when git cannot say."""
    try:
        done = gitcmd.run(["diff", "--name-only", "--no-renames", "-z", "--ignore-submodules=all", base, "HEAD",
                           "--"], cwd=tree, capture_output=True)
    except (OSError, subprocess.SubprocessError):
        return None
    if done.returncode != 0:
        return None
    return [p for p in done.stdout.decode("utf-8", "surrogateescape").split("\0") if p]
