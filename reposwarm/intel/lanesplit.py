"""Packages into lanes (reposwarm/intel/layout.py starting_lanes): which packages share a lane, what each lane may
write and read, which lanes go first, and what each may spend.

A lane holds whole packages, never a part of one: the lanes' slices are unions of the packages' own patterns
(PackageInfo.paths), so they are disjoint by construction. Packages go together by owner area first (CODEOWNERS:
a lane crosses an owner boundary only when there are more owner areas than lanes), then by top-level folder;
a folder of many services is split into runs of services (in path order, about equal in files), written as a few
globs (`services/[a-f]*/`) where they name no service of another lane. Tests that live apart (a top-level
`tests/`) get a lane of their own, after the lanes whose code they import. Deterministic: no hashing, no clock.
"""

from __future__ import annotations

import math
import posixpath
import re
from collections import defaultdict
from dataclasses import dataclass, field

from reposwarm.contracts.config import HelperRole, LanesFile, SwarmConfig, ValidationConfig
from reposwarm.contracts.proposal import PackageInfo, RepoLayout
from reposwarm.intel.packages import ancestors, direct_files
from reposwarm.intel.structure import lane_name

TEST_LANE = "tests"
ROOT_LANE = "root"
COMPRESS_FROM = 4  # siblings in one lane from which they are written as globs rather than one by one
MAX_READ_ONLY = 48  # read-only patterns per lane (slices.py reads at most 64 per list)
SAFE_NAME = re.compile(r"[A-Za-z0-9._-]+")
MIN_BUDGET, MAX_BUDGET = 32_000, 256_000
MIN_TURNS, MAX_TURNS = 20, 80
MAX_PARALLEL = 4
TINY_SHARE = 100  # a group with less than 1/100 of the files joins the other tiny ones of its owner area
LINK_SHARE = 0.1  # a lane goes after another when a tenth of its packages (at least one) import that one


@dataclass
class Group:
    key: tuple
    packages: list[PackageInfo] = field(default_factory=list)

    @property
    def files(self) -> int:
        return sum(p.files for p in self.packages)

    @property
    def size(self) -> int:
        return sum(p.size_bytes for p in self.packages)

    @property
    def first(self) -> str:
        return min(p.path for p in self.packages)


def test_only(pkg: PackageInfo) -> bool:
    """Tests that live apart: a package that is all tests (its `tests` is its own folder)."""
    return bool(pkg.path) and pkg.tests == [f"{pkg.path}/"]


def area(path: str) -> str:
    return path.split("/")[0] if path else ""


def group_packages(code: list[PackageInfo], slots: int, notes: list[str]) -> list[Group]:
    """At most `slots` groups: a package each when they fit; else by owner area and top-level folder (the tiny
    ones of an owner area together, the smallest of one owner area merged while too many), and the lanes left
    shared among the largest groups, each cut in path order into runs of about equal files."""
    if len(code) <= slots:
        return [Group((p.path,), [p]) for p in code]
    by_key: dict[tuple, Group] = {}
    for pkg in code:
        key = (tuple(pkg.owners), area(pkg.path))
        by_key.setdefault(key, Group(key)).packages.append(pkg)
    groups = [by_key[k] for k in sorted(by_key)]
    total = sum(g.files for g in groups)
    tiny: dict[tuple, Group] = {}
    for g in list(groups):
        if len(groups) > 1 and g.files * TINY_SHARE < total:  # a few files: not worth a lane of their own
            groups.remove(g)
            merged = tiny.setdefault(g.key[:1], Group((g.key[0], "")))
            merged.packages += g.packages
    groups = sorted([*groups, *tiny.values()], key=lambda g: g.first)
    crossed = 0
    while len(groups) > slots:
        pairs = [(a, b) for i, a in enumerate(groups) for b in groups[i + 1:] if a.key[0] == b.key[0]]
        if not pairs:  # more owner areas than lanes: a boundary must be crossed
            crossed += 1
            pairs = [(a, b) for i, a in enumerate(groups) for b in groups[i + 1:]]
        a, b = min(pairs, key=lambda ab: (ab[0].files + ab[1].files, ab[0].first, ab[1].first))
        a.packages += b.packages
        groups.remove(b)
    if crossed:
        notes.append(f"more owner areas than lanes: {crossed} lane(s) hold packages of two owner areas")
    pieces = {id(g): 1 for g in groups}
    for _ in range(slots - len(groups)):  # each spare lane to the group whose pieces are largest
        open_ = [g for g in groups if len(g.packages) > pieces[id(g)]]
        if not open_:
            break
        big = max(open_, key=lambda g: (g.files / pieces[id(g)], -len(g.first), g.first))
        pieces[id(big)] += 1
    out: list[Group] = []
    for g in groups:
        out += [Group(g.key + (run[0].path,), run) for run in _runs(sorted(g.packages, key=lambda p: p.path),
                                                                     pieces[id(g)])]
    return sorted(out, key=lambda g: g.first)


def _runs(ordered: list[PackageInfo], count: int) -> list[list[PackageInfo]]:
    """`ordered` cut into `count` consecutive runs of about equal files (none empty)."""
    total = sum(p.files for p in ordered)
    runs: list[list[PackageInfo]] = []
    run: list[PackageInfo] = []
    done = 0
    for i, pkg in enumerate(ordered):
        run.append(pkg)
        done += pkg.files
        left_runs = count - len(runs) - 1
        left_pkgs = len(ordered) - i - 1
        if left_runs and (done >= total * (len(runs) + 1) / count or left_pkgs == left_runs):
            runs.append(run)
            run = []
    return [*runs, run] if run else runs


# --- slices -------------------------------------------------------------------------------------------------------


def _char_class(chars: list[str]) -> str:
    if len(chars) == 1:
        return chars[0]
    body = "".join(c for c in chars if c != "-") + ("-" if "-" in chars else "")
    return f"[{body}]"


def compress(selected: set[str], forbidden: set[str]) -> list[str]:
    """Globs of folder names that match every selected name and no forbidden one (a trie walk: a prefix no
    forbidden name has is one glob, consecutive such next characters one class)."""
    out: list[str] = []

    def walk(prefix: str, sel: list[str], forb: list[str]) -> None:
        if not forb:
            out.append(prefix + "*")
            return
        if prefix in sel:
            out.append(prefix)
        depth = len(prefix)
        nexts = sorted({n[depth] for n in sel if len(n) > depth})
        blocked = {n[depth] for n in forb if len(n) > depth}
        pure = [c for c in nexts if c not in blocked]
        if pure:
            out.append(prefix + _char_class(pure) + "*")
        for c in nexts:
            if c in blocked:
                walk(prefix + c, [n for n in sel if n.startswith(prefix + c)],
                     [n for n in forb if n.startswith(prefix + c)])

    walk("", sorted(selected), sorted(forbidden))
    return out


def _depth_key(pattern: str) -> tuple:
    """Pairs of "folder/*", "!folder/*/" first, shallow before deep (a deeper one re-includes what a shallower
    negation left out), then whole folders."""
    if pattern in ("*", "!*/"):
        return (0, -1, "", pattern.startswith("!"))
    if pattern.endswith("/*") and not pattern.startswith("!"):
        return (0, pattern.count("/") - 1, pattern[:-2], False)
    if pattern.startswith("!") and pattern.endswith("/*/"):
        return (0, pattern.count("/") - 2, pattern[1:-3], True)
    return (1, 0, pattern, False)


def _whole(pattern: str) -> bool:
    """A whole folder (no package nested in it): "folder/" of a package's own patterns."""
    return pattern.endswith("/") and not pattern.startswith("!") and not pattern.endswith("*/")


def lane_patterns(pkgs: list[PackageInfo], everyone: list[PackageInfo]) -> list[str]:
    """The slice of a set of packages: their own patterns, with runs of sibling folders as globs where no other
    package's folder matches them."""
    mine = [pat for p in pkgs for pat in p.paths]
    siblings: dict[str, set[str]] = defaultdict(set)  # parent -> the names of its sub-folders holding files
    for p in everyone:
        for folder in [*(a for a in ancestors(p.path) if a), *(pat.rstrip("/") for pat in p.paths if _whole(pat))]:
            parent, name = posixpath.split(folder)
            siblings[parent].add(name)
    whole: dict[str, set[str]] = defaultdict(set)
    rest = []
    for pat in mine:
        parent, name = posixpath.split(pat.rstrip("/"))
        if _whole(pat) and SAFE_NAME.fullmatch(name):
            whole[parent].add(name)
        else:
            rest.append(pat)
    for parent, names in sorted(whole.items()):
        if len(names) < COMPRESS_FROM:
            rest += [f"{posixpath.join(parent, n)}/" for n in sorted(names)]
            continue
        rest += [f"{posixpath.join(parent, g)}/" for g in compress(names, siblings[parent] - names)]
    return sorted(dict.fromkeys(rest), key=_depth_key)


# --- lanes --------------------------------------------------------------------------------------------------------


def _edges(layout: RepoLayout, lane_of: dict[str, str], sizes: dict[str, int]) -> dict[tuple[str, str], int]:
    """Lane A imports lane B: how many of A's packages import one of B's; kept when at least LINK_SHARE of A's
    packages do (a stray name one package of a hundred shares with another lane orders nothing)."""
    importers: dict[tuple[str, str], set[str]] = defaultdict(set)
    for pkg in layout.packages:
        for target in pkg.imports:
            a, b = lane_of.get(pkg.path), lane_of.get(target)
            if a and b and a != b:
                importers[(a, b)].add(pkg.path)
    return {edge: len(who) for edge, who in sorted(importers.items())
            if len(who) >= max(1, LINK_SHARE * sizes[edge[0]])}


def _reaches(graph: dict[str, set[str]], start: str, goal: str) -> bool:
    seen, stack = set(), [start]
    while stack:
        node = stack.pop()
        if node == goal:
            return True
        if node not in seen:
            seen.add(node)
            stack += sorted(graph[node])
    return False


def depends(names: list[str], edges: dict[tuple[str, str], int], notes: list[str]) -> dict[str, list[str]]:
    """depends_on from "lane A imports lane B" (B first): the strongest imports kept, one that would close a
    cycle left out (said in a note), then the transitive ones dropped (A after B after C needs no A after C)."""
    graph: dict[str, set[str]] = {n: set() for n in names}
    dropped = []
    for (a, b), _weight in sorted(edges.items(), key=lambda e: (-e[1], e[0])):
        if _reaches(graph, b, a):
            dropped.append(f"{a} -> {b}")
            continue
        graph[a].add(b)
    if dropped:
        notes.append("import cycles between lanes: left out " + ", ".join(dropped[:6])
                     + (f" and {len(dropped) - 6} more" if len(dropped) > 6 else "") + " (the weaker imports)")
    reduced: dict[str, list[str]] = {}
    for a in names:
        direct = sorted(graph[a])
        reduced[a] = [b for b in direct if not any(c != b and _reaches(graph, c, b) for c in direct)]
    return reduced


def budget(files: int, size: int) -> tuple[int, int]:
    """token_budget and max_turns from a lane's files: more files and bytes, more to read and change."""
    tokens = MIN_BUDGET + int(math.sqrt(size / 4) * 100)
    tokens = min(MAX_BUDGET, max(MIN_BUDGET, -(-tokens // 1000) * 1000))
    turns = min(MAX_TURNS, max(MIN_TURNS, 20 + int(4 * math.log2(1 + files))))
    return tokens, turns


def _name(group: list[PackageInfo], taken: set[str]) -> str:
    paths = sorted(p.path for p in group)
    if paths == [""]:
        base = ROOT_LANE
    elif len(paths) == 1:
        base = paths[0]
    else:
        common = posixpath.commonpath(paths) if all(paths) else ""
        tails = [p[len(common):].lstrip("/").split("/")[0] for p in paths]
        base = f"{common}-{tails[0]}-{tails[-1]}" if common and tails[0] != tails[-1] else (common or ROOT_LANE)
    return lane_name(base.replace("/", "-").replace("@", ""), taken)


def plan(layout: RepoLayout, max_lanes: int) -> tuple[LanesFile, list[str]]:
    """The lanes file and a note per choice (what each lane writes, why it goes after another)."""
    notes: list[str] = []
    code = [p for p in layout.packages if not test_only(p)]
    tests = [p for p in layout.packages if test_only(p)]
    if not code:
        code, tests = tests, []
    slots = max_lanes - (1 if tests and max_lanes > 1 else 0)
    groups = [g.packages for g in group_packages(code, slots, notes)]
    if tests and max_lanes == 1:
        groups[0] += tests
        tests = []
    taken: set[str] = {TEST_LANE} if tests else set()
    named: dict[str, list[PackageInfo]] = {}
    for group in groups:
        name = _name(group, taken)
        taken.add(name)
        named[name] = group
    if tests:
        named[TEST_LANE] = tests
    lane_of = {p.path: name for name, group in named.items() for p in group}
    edges = _edges(layout, lane_of, {name: len(group) for name, group in named.items()})
    if tests:  # a test lane goes after what its tests import; knowing none, after every code lane
        tested = {b for (a, b) in edges if a == TEST_LANE}
        for b in (tested or {n for n in named if n != TEST_LANE}):
            edges[(TEST_LANE, b)] = max(edges.get((TEST_LANE, b), 0), 1)
    edges = {(a, b): w for (a, b), w in edges.items() if b != TEST_LANE}
    order = sorted(named)
    after = depends(order, edges, notes)
    lanes: dict[str, HelperRole] = {}
    for name in order:
        group = named[name]
        allowed = lane_patterns(group, layout.packages)
        read = _read_only(name, group, layout, named, lane_of, after)
        tokens, turns = budget(sum(p.files for p in group), sum(p.size_bytes for p in group))
        lanes[name] = HelperRole(allowed_paths=allowed, read_only_paths=read, token_budget=tokens,
                                 max_turns=turns, depends_on=after[name])
        kinds = sorted({p.kind for p in group})
        owners = sorted({o for p in group for o in p.owners})
        notes.append(f"lane {name}: {len(group)} package(s) ({', '.join(kinds)}), {sum(p.files for p in group)} "
                     f"files{'; owners ' + ' '.join(owners) if owners else ''}"
                     f"{'; after ' + ', '.join(after[name]) if after[name] else ''}")
    validation = ValidationConfig()
    if layout.profile is not None:
        validation = ValidationConfig(profile="default", profiles={"default": layout.profile})
    swarm = SwarmConfig(max_parallel=max(1, min(len(lanes), MAX_PARALLEL)), lanes=lanes)
    return LanesFile(swarm=swarm, validation=validation), notes


def _read_only(name: str, group: list[PackageInfo], layout: RepoLayout, named: dict[str, list[PackageInfo]],
               lane_of: dict[str, str], after: dict[str, list[str]]) -> list[str]:
    """What a lane reads besides its own slice: the files at the root (the manifests), and the packages it
    imports (a test lane: the lanes it goes after), the most imported first, at most MAX_READ_ONLY patterns."""
    own = {p.path for p in group}
    by_path = {p.path: p for p in layout.packages}
    counts: dict[str, int] = defaultdict(int)
    for pkg in group:
        for target in pkg.imports:
            if target not in own and target in by_path:
                counts[target] += 1
    if name == TEST_LANE:
        for lane in after[name]:
            for pkg in named[lane]:
                counts.setdefault(pkg.path, 0)
    wanted = sorted(counts, key=lambda t: (-counts[t], t))
    out: list[str] = [] if "" in own or "" not in by_path else direct_files("")
    if "" in own:
        wanted = [t for t in wanted if t]
    for target in wanted:
        pats = [p for p in by_path[target].paths if p not in out]
        if len(out) + len(pats) > MAX_READ_ONLY:
            break
        out += pats
    return sorted(dict.fromkeys(out), key=_depth_key)
