"""What the loader says of a lanes file beyond its schema: the checks a lanes file and a proposal of lanes share.

`check_lanes` reads a lanes file whose keys are valid: the lane graph (names, unknown `depends_on` lanes,
cycles), two lanes that may write the same path (decided exactly by reposwarm/slices/narrowing.py, with the witness
path, and the tracked files both may write), an allowed path the lane's read-only paths cover whole, and, with
the repository's files at hand, slices that match no tracked file and check commands not installed here. The
first kinds are errors: a run with them would merge two lanes' edits of one file, or give a lane nothing to
write; the last two are warnings, as the file may mean a folder the run creates, or a worker with the tool.

The guardrails a planner model's proposal must pass besides (reposwarm/lanes/guardrails.py) build on this module
and its public helpers (is_lane_name, pattern_problem, too_many_patterns, TrackedFiles); nothing here imports
them back.

Pure and deterministic (no clock, no randomness): it may run in an activity or, on a file list, anywhere.
"""

from __future__ import annotations

import bisect
import difflib
import functools
import os
import posixpath
import re
import shutil
from collections.abc import Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from reposwarm.contracts.config import CheckProfile, HelperRole, LanesFile
from reposwarm.slices import narrowing as slices
from reposwarm.slices.policy import slice_spec

LANE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,63}")
LANE_NAME_CHARS = "letters, digits, '_' and '-', starting with a letter or digit, at most 64 characters"
_GLOB = "*?[\\"


@dataclass
class LaneFindings:
    """What check_lanes found: errors refuse the file, warnings and notes are said and the run goes on."""

    errors: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def shown(text: object, limit: int = 60) -> str:
    """A name or pattern as a message quotes it: repr, cut (a hostile reply may send a megabyte of it)."""
    quoted = repr(text)
    return quoted if len(quoted) <= limit else f"{quoted[:limit - 10]}...' ({len(str(text))} characters)"


def is_lane_name(name: object) -> bool:
    return isinstance(name, str) and LANE_NAME.fullmatch(name) is not None


def _deps(role: Any) -> list[Any] | None:
    deps = role.get("depends_on", []) if isinstance(role, Mapping) else getattr(role, "depends_on", [])
    return list(deps) if isinstance(deps, list) else None


def lane_graph_problems(lanes: Any) -> list[str]:
    """Every problem of the lanes' names and `depends_on` graph, one line each, on raw data (a file whose other
    keys are wrong is read as far as it goes, so an unknown lane is said with them)."""
    if not isinstance(lanes, Mapping):
        return []
    out: list[str] = []
    for name, role in lanes.items():
        if not is_lane_name(name):
            # a lane's name becomes a branch (swarm/<run>/<lane>) and a folder of the worker's
            out.append(f"swarm.lanes: {shown(name)} is not a lane name ({LANE_NAME_CHARS})")
            continue
        for dep in _deps(role) or []:
            if not isinstance(dep, str) or not dep:
                continue  # (the schema says so)
            if dep == name:
                out.append(f"swarm.lanes.{name}.depends_on: a lane cannot depend on itself")
            elif dep not in lanes:
                close = difflib.get_close_matches(dep, [str(n) for n in lanes], n=1)
                hint = f" (did you mean {close[0]!r}?)" if close else ""
                out.append(f"swarm.lanes.{name}.depends_on: unknown lane {shown(dep)}{hint}")
    graph = {name: [d for d in (_deps(role) or []) if isinstance(d, str) and d in lanes and d != name]
             for name, role in lanes.items()}
    out += [f"swarm.lanes: depends_on cycle: {' -> '.join(cycle)}" for cycle in _cycles(graph)]
    return out


def _cycles(graph: Mapping[Any, list[Any]]) -> list[list[str]]:
    """One cycle per strongly connected group of lanes that depend on each other (iterative: 200 lanes deep)."""
    state: dict[Any, int] = {}
    found: list[list[str]] = []
    seen: set[frozenset[Any]] = set()
    for start in graph:
        if state.get(start):
            continue
        stack: list[tuple[Any, int]] = [(start, 0)]
        chain: list[Any] = [start]
        state[start] = 1
        while stack:
            node, i = stack[-1]
            deps = graph[node]
            if i == len(deps):
                stack.pop()
                chain.pop()
                state[node] = 2
                continue
            stack[-1] = (node, i + 1)
            dep = deps[i]
            if state.get(dep) == 1:
                cycle = chain[chain.index(dep):] + [dep]
                if (key := frozenset(cycle)) not in seen:
                    seen.add(key)
                    found.append([str(n)[:64] for n in cycle])
            elif not state.get(dep):
                state[dep] = 1
                chain.append(dep)
                stack.append((dep, 0))
    return found


def dependency_order(lanes: Mapping[str, HelperRole]) -> list[str]:
    """The lanes, each after those it depends on (the graph is known to be sound)."""
    order: list[str] = []
    done: set[str] = set()
    for start in lanes:
        stack = [(start, iter(lanes[start].depends_on))]
        while stack:
            node, deps = stack[-1]
            dep = next((d for d in deps if d not in done and d in lanes), None)
            if dep is None:
                stack.pop()
                if node not in done:
                    done.add(node)
                    order.append(node)
            elif dep not in {n for n, _ in stack}:
                stack.append((dep, iter(lanes[dep].depends_on)))
    return order


@functools.lru_cache(maxsize=4096)
def _cached_problem(pattern: str) -> str | None:
    return slices.pattern_problem(pattern)


def pattern_problem(pattern: object) -> str | None:
    """slices.pattern_problem, asked once per pattern (each is an automaton's search)."""
    return _cached_problem(pattern) if isinstance(pattern, str) else slices.pattern_problem(pattern)  # type: ignore[arg-type]


def _prefix(pattern: str) -> str | None:
    """The fixed text every path an include pattern matches starts with ("" for any); None for a negation.
    (PathPolicy anchors every pattern at the root but those starting with `**`: reposwarm/slices/policy.py slice_spec.)"""
    p = pattern.strip().removeprefix("./")
    if p.startswith("!"):
        return None
    if p.startswith("**"):
        return ""
    p = p.lstrip("/")
    cut = min((i for i in (p.find(c) for c in _GLOB) if i >= 0), default=len(p))
    return p[:cut]


def _compatible(first: list[str], second: list[str]) -> bool:
    """Whether two lanes' allowed paths could meet at all, by their fixed prefixes (a cheap, sound first look:
    the exact search runs only where this says they could)."""
    a = [p for p in map(_prefix, first) if p is not None]
    b = [p for p in map(_prefix, second) if p is not None]
    return any(x.startswith(y) or y.startswith(x) for x in a for y in b)


def _matcher(patterns: Sequence[str]) -> Any:
    """PathSpec's match_file as PathPolicy compiles the patterns (the last pattern that matches decides), without
    its per-call normalising: the tracked files are clean paths already, and there may be a million of them."""
    parts = [(bool(p.include), p.regex) for p in slice_spec(list(patterns)).patterns
             if p.include is not None and getattr(p, "regex", None) is not None]
    if all(include for include, _ in parts):
        searches = [regex.search for _, regex in parts]
        return lambda path: any(search(path) for search in searches)

    def match(path: str) -> bool:
        result = False
        for include, regex in parts:
            if regex.search(path):
                result = include
        return result
    return match


class TrackedFiles(Collection[str]):
    """The tracked files, sorted, with what each lane may write among them (asked once per slice)."""

    def __init__(self, files: Collection[str]) -> None:
        self.files = sorted(set(files))
        self._writable: dict[tuple[tuple[str, ...], tuple[str, ...]], list[str]] = {}
        self._set = frozenset(self.files)

    def __contains__(self, item: object) -> bool:
        return item in self._set

    def __iter__(self) -> Iterator[str]:
        return iter(self.files)

    def __len__(self) -> int:
        return len(self.files)

    def _range(self, prefix: str) -> list[str]:
        lo = bisect.bisect_left(self.files, prefix)
        hi = bisect.bisect_left(self.files, prefix + "\U0010ffff") if prefix else len(self.files)
        return self.files[lo:hi]

    def candidates(self, patterns: Sequence[str]) -> list[str]:
        prefixes = {p for p in map(_prefix, patterns) if p is not None}
        if "" in prefixes:
            return self.files
        return sorted({f for prefix in prefixes for f in self._range(prefix)})

    def matches_any(self, pattern: str) -> bool:
        prefix = _prefix(pattern)
        match = _matcher([pattern])
        return any(match(f) for f in self._range(prefix or ""))

    def writable(self, allowed: Sequence[str], read_only: Sequence[str]) -> list[str]:
        key = (tuple(allowed), tuple(read_only))
        if key not in self._writable:
            yes, no = _matcher(allowed), _matcher(read_only)
            self._writable[key] = [f for f in self.candidates(allowed) if yes(f) and not no(f)]
        return self._writable[key]


def _listed(paths: Sequence[str], limit: int = 3) -> str:
    more = f" and {len(paths) - limit} more" if len(paths) > limit else ""
    return ", ".join(paths[:limit]) + more


def too_many_patterns(role: HelperRole) -> bool:
    """More patterns, or longer ones, than are read past _pattern_lines (which says so): pathspec's translation
    of one pattern takes time quadratic in its length, a minute for a megabyte."""
    lists = (role.allowed_paths, role.read_only_paths)
    return any(len(patterns) > slices.MAX_PATTERNS or any(len(p) > 4 * slices.MAX_PATTERN_CHARS for p in patterns)
               for patterns in lists)


def _pattern_lines(where: str, patterns: Sequence[str], strict: bool) -> tuple[list[str], list[str]]:
    """Errors and warnings of one list of patterns: what PathPolicy can never match, what cannot be checked."""
    errors: list[str] = []
    warnings: list[str] = []
    if len(patterns) > slices.MAX_PATTERNS:
        (errors if strict else warnings).append(f"{where}: more than {slices.MAX_PATTERNS} patterns cannot be "
                                                "checked")
        return errors, warnings
    for pattern in patterns:
        why = pattern_problem(pattern)
        if why is None:
            continue
        undecided = isinstance(pattern, str) and why.startswith(repr(pattern) + ": ")  # (slices.Undecided's form)
        if undecided and not strict:
            warnings.append(f"{where}: {shown(pattern)} cannot be checked for overlaps ({why.split(': ', 1)[1]})")
        else:
            errors.append(f"{where}: {why if len(why) < 200 else shown(pattern) + ' is not a slice pattern'}")
    return errors, warnings


def _overlaps(lanes: Mapping[str, HelperRole], declared: list[str], tree: TrackedFiles | None, strict: bool,
              findings: LaneFindings) -> None:
    """Two lanes that may write one path: refused, unless every such path lies in a declared overlap."""
    names = list(lanes)
    ok_declared = declared if all(pattern_problem(p) is None for p in declared) else []
    covered = _matcher(ok_declared)
    for i, a in enumerate(names):
        for b in names[i + 1:]:
            ra, rb = lanes[a], lanes[b]
            both_tracked: list[str] = []
            if tree is not None:
                theirs = set(tree.writable(rb.allowed_paths, rb.read_only_paths))
                both_tracked = [f for f in tree.writable(ra.allowed_paths, ra.read_only_paths) if f in theirs]
            undeclared = [f for f in both_tracked if not covered(f)]
            if not _compatible(ra.allowed_paths, rb.allowed_paths) and not both_tracked:
                continue
            first, second = (ra.allowed_paths, ra.read_only_paths), (rb.allowed_paths, rb.read_only_paths)
            try:
                witness = slices.shared(first, second, ok_declared)
                anywhere = witness is not None or (bool(ok_declared) and slices.shared(first, second) is not None)
            except slices.Undecided as why:
                if undeclared:
                    witness, anywhere = undeclared[0], True
                else:
                    line = f"swarm.lanes: cannot tell whether lanes {a!r} and {b!r} may write the same path ({why})"
                    (findings.errors if strict else findings.warnings).append(line)
                    continue
            if witness is None and undeclared:
                witness = undeclared[0]
            if witness is not None:
                tracked = f" (tracked files both may write: {_listed(undeclared)})" if undeclared else \
                    (" (no tracked file yet)" if tree is not None else "")
                findings.errors.append(
                    f"swarm.lanes: lanes {a!r} and {b!r} may both write {witness!r}{tracked}: make their "
                    "allowed_paths disjoint (a read_only_paths entry or a '!' pattern takes a path out of one), "
                    "or declare the shared paths in swarm.overlaps")
            elif anywhere:
                shared = [f for f in both_tracked if covered(f)]
                said = f" ({_listed(shared)})" if shared else ""
                findings.notes.append(f"lanes {a!r} and {b!r} may both write inside swarm.overlaps{said}: their "
                                      "merges there go to the converger")


def _read_only_lines(name: str, role: HelperRole, strict: bool, findings: LaneFindings) -> None:
    """An allowed path all of which the lane's read-only paths cover: listed writable, it gives nothing."""
    if not role.read_only_paths:
        return
    for pattern in role.allowed_paths:
        if _prefix(pattern) is None or pattern_problem(pattern) is not None \
                or not _compatible([pattern], role.read_only_paths):
            continue  # (no read-only path could cover it: none starts where it does)
        try:
            witness = slices.unwritable(pattern, role.allowed_paths, role.read_only_paths)
        except slices.Undecided as why:
            if strict:
                findings.errors.append(f"swarm.lanes.{name}: cannot tell what of {shown(pattern)} it may write "
                                       f"({why})")
            continue
        if witness is not None:
            culprit = next((p for p in role.read_only_paths if slice_spec([p]).match_file(witness)), "")
            findings.errors.append(
                f"swarm.lanes.{name}: {pattern!r} is both writable and read-only: read_only_paths {culprit!r} "
                f"covers all of it ({witness!r}, say), and read-only wins, so the lane may write none of it; take "
                "it out of one of the two lists")


def _unmatched(name: str, role: HelperRole, tree: TrackedFiles, findings: LaneFindings, at: str) -> None:
    for key, patterns in (("allowed_paths", role.allowed_paths), ("read_only_paths", role.read_only_paths)):
        for pattern in patterns:
            if _prefix(pattern) is not None and pattern_problem(pattern) is None \
                    and not tree.matches_any(pattern):
                findings.warnings.append(f"swarm.lanes.{name}.{key}: {pattern!r} matches no tracked file{at}")


def _program_problem(argv: list[str], profile: CheckProfile, tree: TrackedFiles | None, root: Path | None) -> str | None:
    """Why a command's program is not here: not on PATH, nor a file in the repository. `env X=1 prog` is prog;
    `python -m X`, `npx X`, `uv run X` and the like are their first word (the tool finds the rest)."""
    from reposwarm.checks.runners.prefixes import env_step

    program = argv[0]
    if posixpath.basename(program) == "env":
        step = env_step(argv)
        if isinstance(step, str) or step is None:
            return None
        program = argv[step.taken]
    if "/" not in program:
        return None if shutil.which(program) else f"{program!r} is not on PATH here"
    if program.startswith("/"):
        return None if os.access(program, os.X_OK) else f"{program!r} is not a program here"
    rel = posixpath.normpath(program)
    if (tree is not None and rel in tree) or (root is not None and (root / rel).exists()) or profile.setup:
        return None  # (a setup step may make it: node_modules/.bin/jest)
    if any(rel == d or rel.startswith(d.rstrip("/") + "/") for d in profile.deps_from_checkout):
        return None
    return f"{program!r} is not a file in the repository" + ("" if tree is not None else " here")


def _command_lines(config: LanesFile, tree: TrackedFiles | None, root: Path | None, findings: LaneFindings) -> None:
    said: set[str] = set()
    for pname, profile in config.validation.profiles.items():
        for key, commands in (("setup", profile.setup), ("commands", profile.commands)):
            for i, argv in enumerate(commands):
                why = _program_problem(argv, profile, tree, root) if argv else None
                if why is not None and why not in said:
                    said.add(why)
                    findings.warnings.append(f"validation.profiles.{pname}.{key}.{i}: {why} (the check fails on a "
                                             "worker without it)")


def check_lanes(config: LanesFile, files: Collection[str] | None = None, *, max_lanes: int | None = None,
                which: str = "lanes file", tools_on_path: bool = True, root: Path | None = None,
                at: str = "", strict: bool = False, graph: bool = True) -> LaneFindings:
    """Every problem of a lanes file whose keys are valid. `files`: the tracked files of the commit the run
    starts from (without them, no tracked-file warnings); `root`: the repository's folder, where a check's
    program may be; `at`: how the warnings name that commit (" at HEAD"); `strict`: what cannot be checked is
    an error, not a warning (a model's proposal: when in doubt, no); `graph`: check the lane graph too (the
    loader checks it on the raw file when other keys are wrong)."""
    findings = LaneFindings()
    if graph:
        findings.errors += lane_graph_problems(config.swarm.lanes)
    # (a lane whose name is refused is not read further: its name would be in every line; nor is one with more
    # patterns than can be checked, said once by _pattern_lines)
    lanes = {name: role for name, role in config.swarm.lanes.items() if is_lane_name(name)}
    if max_lanes is not None and len(config.swarm.lanes) > max_lanes:
        findings.errors.append(f"swarm.lanes: the {which} has {len(config.swarm.lanes)} lanes, at most {max_lanes}")
        if len(lanes) > 4 * max_lanes:
            return findings  # (the pairs of 200 lanes are no one's to read)
    tree = files if isinstance(files, TrackedFiles) else (TrackedFiles(files) if files is not None else None)
    for name, role in lanes.items():
        for key in ("allowed_paths", "read_only_paths"):
            errors, warnings = _pattern_lines(f"swarm.lanes.{name}.{key}", getattr(role, key), strict)
            findings.errors += errors
            findings.warnings += warnings
        if too_many_patterns(role):
            continue
        _read_only_lines(name, role, strict, findings)
        if tree is not None:
            _unmatched(name, role, tree, findings, at)
    errors, warnings = _pattern_lines("swarm.overlaps", config.swarm.overlaps, True)
    findings.errors += errors
    _overlaps({n: r for n, r in lanes.items() if not too_many_patterns(r)}, config.swarm.overlaps, tree, strict,
              findings)
    if tools_on_path:
        _command_lines(config, tree, root, findings)
    return findings

