"""The repository's structure, from its code: `survey` reads a commit's tree into a RepoLayout (packages, owners,
the package import graph, per-package and whole-repository checks; `survey_with_map` adds the repository map
ranked toward a task, from the same read of the symbol index), `brief` says it compactly for the planner's prompt,
and `starting_lanes` makes a lanes file from it alone (`reposwarm lanes`).

Why: a swarm's lanes conflict least when they follow the code's structure (a package per lane, inside one owner
area, the packages others import first), and that structure is in the files, not in a model's guess. Everything
here reads the object store (`git ls-tree`, `git cat-file`) at a revision, never the working tree, and is
deterministic: the same tree gives the same layout, the same brief and byte-identical lanes YAML.
"""

from __future__ import annotations

import functools
import posixpath
import sqlite3
from collections import defaultdict
from collections.abc import Callable, Collection, Iterable
from pathlib import Path
from typing import TYPE_CHECKING

import yaml

from reposwarm.contracts.config import CheckProfile, LanesFile
from reposwarm.contracts.proposal import DEFAULT_MAX_LANES, PackageInfo, RepoLayout
from reposwarm.intel import lanesplit, owners, packages, structure
from reposwarm.vcs import gitcmd

if TYPE_CHECKING:
    from reposwarm.intel.ranking import Table
    from reposwarm.symbols.index import SymbolIndex, SymbolRows

Progress = Callable[[str], None]
BRIEF_CHARS = 6_000
MAX_DEFINER_PACKAGES = 3  # a name more packages define says nothing about which one a reference means
MIN_EDGE = 1.0  # the weight of references that makes "A imports B" (one plain name, used once)
# Names so common across languages that a reference to one says nothing about where it is defined.
COMMON_NAMES = frozenset("main init setup run start stop close open get set put new New String Error Close Run "
                         "Init Start Stop Get Set Put Read Write read write len str Len Less Swap test Test "
                         "__init__ __str__ __repr__ __eq__ __hash__ toString constructor default Default from into "
                         "clone fmt drop next iter value Value name Name id ID data Data config Config handle "
                         "Handle update Update create Create delete Delete apply Apply render load save".split())
ROOT_NAME = "root"
HEADER = "Lanes from the repository's structure (`reposwarm lanes`; no model, no task): edit them as you like."


class LayoutError(Exception):
    """The tree cannot be read (not a git repository, an unknown revision)."""


# --- reading the tree ---------------------------------------------------------------------------------------------


def tree_entries(root: Path, rev: str) -> list[tuple[str, str, int]]:
    """(path, blob id, size) of every file of the revision's tree (submodules left out)."""
    done = gitcmd.run(["-C", str(root), "rev-parse", "--verify", "--quiet", "--end-of-options", f"{rev}^{{tree}}"],
                      capture_output=True, text=True)
    if done.returncode != 0:
        raise LayoutError(f"{rev!r} is not a revision of {root}")
    tree = done.stdout.strip()
    out = gitcmd.run(["-C", str(root), "ls-tree", "-r", "-z", "-l", "--full-tree", tree], capture_output=True)
    if out.returncode != 0:
        raise LayoutError(f"git ls-tree {tree}: {out.stderr.decode(errors='replace').strip()[:300]}")
    entries = []
    for record in out.stdout.decode("utf-8", "surrogateescape").split("\0"):
        meta, _, path = record.partition("\t")
        parts = meta.split()
        if len(parts) == 4 and parts[1] == "blob":
            entries.append((path, parts[2], int(parts[3]) if parts[3].isdigit() else 0))
    return sorted(entries)


def read_blobs(root: Path, shas: dict[str, str], limit: int = 1_000_000) -> dict[str, str]:
    """Texts of blobs by path, from one `git cat-file --batch` (a blob over `limit` bytes reads as empty)."""
    if not shas:
        return {}
    order = sorted(set(shas.values()))
    done = gitcmd.run(["-C", str(root), "cat-file", "--batch"], input="".join(f"{s}\n" for s in order).encode(),
                      capture_output=True)
    data, pos, texts = done.stdout, 0, {}
    for _ in order:
        end = data.find(b"\n", pos)
        if end < 0:
            break
        header = data[pos:end].split()
        pos = end + 1
        if len(header) != 3:
            continue
        size = int(header[2])
        texts[header[0].decode()] = data[pos:pos + size].decode("utf-8", "replace") if size <= limit else ""
        pos += size + 1
    return {path: texts.get(sha, "") for path, sha in shas.items()}


def owner_index(paths: Iterable[str]) -> Callable[[str], str]:
    """The package (its folder) a file belongs to: the deepest package folder above it."""
    known = set(paths)
    cache: dict[str, str] = {}

    def of(path: str) -> str:
        folder = path.rpartition("/")[0]
        found = cache.get(folder)
        if found is None:
            found = cache[folder] = next((a for a in packages.ancestors(folder) if a in known), "")
        return found

    return of


# --- the import graph ---------------------------------------------------------------------------------------------


def package_imports(table: Table, package_of: Callable[[str], str]) -> dict[str, dict[str, float]]:
    """Weighted edges "package A imports package B" from the index's rows as the ranking's table (ranking.
    table_of_rows: files, names, definitions and (file, name, uses) references as integers): a file of A
    references a name defined in B alone, or in B and at most two more packages (then shared), and not in A itself;
    names many packages define, common names (`main`, `String`) and fields (too fine to say what a package offers)
    say nothing and are left out. References are weighed as the repository map weighs them (long compound names
    count more, `_private` ones less), by the square root of their count; a blob at two paths of one package is
    one reference. A Python reference never means a Go definition (language families)."""
    import numpy as np

    from reposwarm.intel.ranking import Focus, distinct, language_family, ragged

    package_ids: dict[str, int] = {}
    family_ids: dict[str, int] = {}
    pkg = np.array([package_ids.setdefault(package_of(p), len(package_ids)) for p in table.paths] or [0], np.int64)
    fam = np.array([family_ids.setdefault(language_family(p), len(family_ids)) for p in table.paths] or [0], np.int64)
    size, pkgs, fams = max(1, len(table.names)), max(1, len(package_ids)), max(1, len(family_ids))
    plain = np.array([n not in COMMON_NAMES and len(n) >= 3 for n in table.names] or [False], bool)
    said = np.flatnonzero(~table.hidden & plain[table.def_name])
    # (family, name, package) of every definition once: `definer` holds a run of packages per (family, name)
    defined = distinct((fam[table.def_path[said]] * size + table.def_name[said]) * pkgs + pkg[table.def_path[said]])
    groups, starts, counts = np.unique(defined // pkgs, return_index=True, return_counts=True)
    definer = defined % pkgs
    # each reference once per (row of the index, package, family)
    ref_pkg, ref_fam = pkg[table.ref_path], fam[table.ref_path]
    once = np.sort(np.unique((table.ref_row * pkgs + ref_pkg) * fams + ref_fam, return_index=True)[1])
    mine, name, uses = ref_pkg[once], table.ref_name[once], table.ref_uses[once]
    group = ref_fam[once] * size + name
    if not len(groups) or not len(group):
        return {}
    at = np.minimum(np.searchsorted(groups, group), len(groups) - 1)
    many = np.where(groups[at] == group, counts[at], 0)
    own = group * pkgs + mine
    theirs = defined[np.minimum(np.searchsorted(defined, own), len(defined) - 1)] != own
    # unknown, said by too many, or its own package's (most likely that one): left out
    ok = np.flatnonzero((many > 0) & (many <= MAX_DEFINER_PACKAGES) & theirs)
    weigh = Focus("", set()).weight
    weighed = distinct(name[ok])
    weights = np.zeros(size)
    weights[weighed] = [weigh(table.names[i]) for i in weighed.tolist()]
    share = weights[name[ok]] * np.sqrt(uses[ok]) / many[ok]
    part, k = ragged(many[ok])
    pairs, which = np.unique(mine[ok][part] * pkgs + definer[starts[at[ok]][part] + k], return_inverse=True)
    sums = np.bincount(which.reshape(-1), weights=share[part], minlength=len(pairs))
    names = list(package_ids)
    edges: dict[str, dict[str, float]] = {names[a]: {} for a in distinct(pairs // pkgs).tolist()}
    for pair, weight in zip(pairs.tolist(), sums.tolist(), strict=True):
        # (rounded: sums in another order, from another index of the same tree, must not cross the line)
        if round(weight, 6) >= MIN_EDGE:
            edges[names[pair // pkgs]][names[pair % pkgs]] = weight
    return {a: dict(sorted(out.items())) for a, out in sorted(edges.items())}


# --- survey -------------------------------------------------------------------------------------------------------


def survey(root: Path, rev: str = "HEAD", *, index: SymbolIndex | None = None,
           progress: Progress | None = None) -> RepoLayout:
    """The structure of the repository at `root` as of `rev` (its committed tree, never the working tree): its
    packages, their owners (CODEOWNERS), what imports what (the symbol index: `index`, or the repository's own
    under REPOSWARM_HOME), the checks per package and for the whole repository, and a note per guess."""
    return _survey(root, rev, index, progress)[0]


def survey_with_map(root: Path, rev: str = "HEAD", task: str = "", *, budget_tokens: int,
                    index: SymbolIndex | None = None, progress: Progress | None = None) -> tuple[RepoLayout, str]:
    """survey, and the repository map ranked toward `task` within budget_tokens (repomap.repo_map), from one
    read of the symbol index: both need all of a revision's definitions and references, which take seconds to
    read on a 4M-line repository. Without an index (it could not read `rev`) the map is empty and the layout's
    notes say why."""
    from reposwarm.intel.repomap import map_of_table

    found, table = _survey(root, rev, index, progress)
    text = map_of_table(table, budget_tokens=budget_tokens, focus_text=task, progress=progress) if table else ""
    return found, text


def _survey(root: Path, rev: str, index: SymbolIndex | None, progress: Progress | None
            ) -> tuple[RepoLayout, Table | None]:
    root = Path(root).resolve()
    if not root.is_dir():
        raise LayoutError(f"{root}: no such folder")
    entries = tree_entries(root, rev)
    files = [path for path, _, _ in entries]
    blobs = {path: sha for path, sha, _ in entries}
    wanted = packages.manifest_paths(files) + [p for p in owners.LOCATIONS if p in blobs]
    texts = read_blobs(root, {p: blobs[p] for p in wanted})

    def read(path: str) -> str | None:
        if path in texts:
            return texts[path]
        return read_blobs(root, {path: blobs[path]}).get(path) if path in blobs else None

    if progress:
        progress(f"reading the structure of {len(files):,} files")
    # asked once, for the packages and the whole repository; where the checkout at `root` keeps its environments
    python = functools.cache(functools.partial(structure.python_with_pytest, root, files, read))
    found, notes = packages.find_packages(files, read, python, sizes={path: size for path, _, size in entries})
    package_of = owner_index(p.path for p in found)
    own: dict[str, list[str]] = defaultdict(list)
    for path in files:
        own[package_of(path)].append(path)
    codeowners = owners.find(files, read)
    if codeowners is not None:
        by_folder = owners.package_owners(codeowners, {p.path: own.get(p.path, []) for p in found})
        for pkg in found:
            pkg.owners = by_folder[pkg.path]
        areas = len({tuple(p.owners) for p in found})
        notes.append(f"owners from {codeowners.where} ({len(codeowners.rules)} rules): {areas} owner area(s)")
        notes += codeowners.problems[:5]
    rows = _rows(root, rev, index, progress)
    table = None
    if isinstance(rows, str):
        notes.append(f"no import graph: the symbol index could not read {rev!r} ({rows})")
    else:
        from reposwarm.intel.ranking import table_of_rows

        table = table_of_rows(rows, None)  # the index's rows as integers: the import graph's and the map's
        notes.append(_imports(table, found, package_of, len(rows.refs)))
    profile, said = structure.detect_profile(files, read, python, packages=found)
    return RepoLayout(packages=found, profile=CheckProfile.model_validate(profile) if profile else None,
                      notes=[*notes, *said], files=len(files)), table


def _rows(root: Path, rev: str, index: SymbolIndex | None, progress: Progress | None) -> SymbolRows | str:
    """The symbol index's rows of `rev` (read from `index`, or the repository's own), or why there are none."""
    from reposwarm.symbols.index import SymbolIndex, SymbolIndexError

    try:
        if index is not None:
            return index.rows(rev, progress)
        with SymbolIndex(root) as own_index:
            return own_index.rows(rev, progress)
    except (SymbolIndexError, sqlite3.Error, ImportError, OSError) as err:  # what the map's callers met
        return str(err)


def _imports(table: Table, found: list[PackageInfo], package_of: Callable[[str], str], referenced: int) -> str:
    """Fill each package's `imports` from the symbol index's rows; a note saying how many edges."""
    edges = package_imports(table, package_of)
    by_path = {p.path: p for p in found}
    count = 0
    for source, targets in edges.items():
        if source in by_path:
            by_path[source].imports = sorted(t for t in targets if t in by_path)
            count += len(by_path[source].imports)
    return (f"imports from the symbol index ({int((~table.hidden).sum()):,} definitions, {referenced:,} names referenced "
            f"per file): {count} package import(s)")


# --- brief --------------------------------------------------------------------------------------------------------


def _line(pkg: PackageInfo) -> str:
    bits = [f"{pkg.path or '.'}/ [{pkg.kind} {pkg.name}] {pkg.files} files"]
    if pkg.owners:
        bits.append("owners " + " ".join(pkg.owners))
    if pkg.imports:
        shown = ", ".join(i or "." for i in pkg.imports[:6])
        bits.append(f"imports {shown}" + (f" +{len(pkg.imports) - 6}" if len(pkg.imports) > 6 else ""))
    if pkg.tests:
        bits.append("tests " + ", ".join(pkg.tests[:3]) + (" ..." if len(pkg.tests) > 3 else ""))
    if pkg.check:
        bits.append("check: " + " ".join(pkg.check))
    return "- " + "; ".join(bits)


def brief(layout: RepoLayout, focus: Collection[str] = ()) -> str:
    """The structure in a few kilobytes (at most ~6 KB) for the planner's prompt: the whole-repository checks,
    then a line per package (kind, name, files, owners, imports, tests, check), the packages holding the `focus`
    files first, then the packages most imported, then the largest; what does not fit is counted by folder."""
    package_of = owner_index(p.path for p in layout.packages)
    wanted = {package_of(f) for f in focus}
    importers: dict[str, int] = defaultdict(int)
    for pkg in layout.packages:
        for target in pkg.imports:
            importers[target] += 1
    ordered = sorted(layout.packages, key=lambda p: (p.path not in wanted, -importers[p.path], -p.files, p.path))
    head = [f"Repository structure (read from its files): {len(layout.packages)} packages, {layout.files:,} files."]
    if layout.profile is not None:
        head.append("Checks for the whole repository: " + " | ".join(" ".join(c) for c in layout.profile.commands))
    head.append("Packages (folder [kind name] files; owners; imports: the packages its files use; tests; check):")
    out, size, left = list(head), sum(len(h) + 1 for h in head), []
    for i, pkg in enumerate(ordered):
        line = _line(pkg)
        if size + len(line) + 1 > BRIEF_CHARS - 300:
            left = ordered[i:]
            break
        out.append(line)
        size += len(line) + 1
    if left:
        folders: dict[str, int] = defaultdict(int)
        for pkg in left:
            folders[posixpath.dirname(pkg.path) or "."] += 1
        top = sorted(folders.items(), key=lambda kv: (-kv[1], kv[0]))
        said = ", ".join(f"{f}/ {n}" for f, n in top[:8]) + (", ..." if len(top) > 8 else "")
        out.append(f"... and {len(left)} more packages (by folder: {said})"[:290])
    return "\n".join(out)


# --- starting lanes -----------------------------------------------------------------------------------------------


def starting_lanes(layout: RepoLayout, max_lanes: int = DEFAULT_MAX_LANES) -> LanesFile:
    """A lanes file from the structure alone: a lane per package or owner area (small ones of one owner and area
    merged, large areas split, at most `max_lanes`), a test lane where tests live apart, `depends_on` leaf-first
    from the import graph (cycles broken, strongest imports kept), budgets from the files involved, and the
    detected checks. Deterministic."""
    return lanesplit.plan(layout, max(1, max_lanes))[0]


def lanes_yaml(layout: RepoLayout, config: LanesFile, notes: Iterable[str] = ()) -> str:
    """The lanes file as YAML, under a comment header saying how it was derived."""
    data = config.model_dump(mode="json", exclude_defaults=True)
    data.setdefault("swarm", {})["lanes"] = {name: {**role} for name, role in data["swarm"]["lanes"].items()}
    lines = [f"# {HEADER}"]
    for note in [*layout.notes, *notes]:
        lines.append("#   " + " ".join(note.split()))
    return "\n".join(lines) + "\n" + yaml.safe_dump(data, sort_keys=False, width=120)
