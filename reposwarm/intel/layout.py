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
import math
import posixpath
import sqlite3
from collections import defaultdict
from collections.abc import Callable, Collection, Iterable
from pathlib import Path
from typing import TYPE_CHECKING

import yaml

from reposwarm import gitcmd
from reposwarm.contracts.config import CheckProfile, LanesFile
from reposwarm.contracts.proposal import DEFAULT_MAX_LANES, PackageInfo, RepoLayout
from reposwarm.intel import lanesplit, owners, packages, structure

if TYPE_CHECKING:
    from reposwarm.intel.symbols import SymbolIndex, SymbolRows

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


def package_imports(rows: SymbolRows, package_of: Callable[[str], str]) -> dict[str, dict[str, float]]:
    """Weighted edges "package A imports package B" from the index's rows (SymbolIndex.rows: the paths of each
    blob, its definitions (fields left out: too fine to say what a package offers) and (blob, name, uses)
    references, straight from the tables): a file of A references a name defined in B alone,
    or in B and at most two more packages (then shared), and not in A itself; names many packages define and
    common names (`main`, `String`) say nothing and are left out. References are weighed as the repository map
    weighs them (long compound names count more, `_private` ones less), by the square root of their count."""
    from reposwarm.intel.repomap import Focus, _family

    paths, defs, refs = rows
    weigh = Focus("", set()).weight
    # each blob's (package, language family): a Python reference never means a Go definition
    places = {blob: sorted({(package_of(p), _family(p)) for p in where}) for blob, where in paths.items()}
    definers: dict[str, dict[str, set[str]]] = defaultdict(dict)  # family -> name -> packages
    last, here = -1, []
    for blob, _, name, kind, _ in defs:
        if blob != last:
            last, here = blob, places.get(blob, [])
        if name in COMMON_NAMES or len(name) < 3 or kind == "field":
            continue
        for pkg, fam in here:
            by_name = definers[fam]
            found = by_name.get(name)
            if found is None:
                by_name[name] = {pkg}
            else:
                found.add(pkg)
    edges: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    weights: dict[str, float] = {}
    last = -1
    for blob, name, uses in refs:
        if blob != last:
            last, here = blob, places.get(blob, [])
        for mine, fam in here:
            where = definers[fam].get(name)
            if not where or len(where) > MAX_DEFINER_PACKAGES or mine in where:
                continue  # unknown, said by too many, or its own package's (most likely that one)
            weight = weights.get(name)
            if weight is None:
                weight = weights[name] = weigh(name)
            share = weight * math.sqrt(uses) / len(where)
            out = edges[mine]
            for target in where:
                out[target] += share
    # (rounded: sums in another order, from another index of the same tree, must not cross the line)
    return {a: {b: w for b, w in sorted(out.items()) if round(w, 6) >= MIN_EDGE} for a, out in sorted(edges.items())}


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
    from reposwarm.intel.repomap import map_of_rows

    found, rows = _survey(root, rev, index, progress)
    text = map_of_rows(rows, budget_tokens=budget_tokens, focus_text=task, progress=progress) if rows else ""
    return found, text


def _survey(root: Path, rev: str, index: SymbolIndex | None, progress: Progress | None
            ) -> tuple[RepoLayout, SymbolRows | None]:
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
    python = functools.cache(structure.python_with_pytest)  # asked once, for the packages and the whole repository
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
    notes.append(_imports(rows, found, package_of) if not isinstance(rows, str) else
                 f"no import graph: the symbol index could not read {rev!r} ({rows})")
    profile, said = structure.detect_profile(files, read, python, packages=found)
    return RepoLayout(packages=found, profile=CheckProfile.model_validate(profile) if profile else None,
                      notes=[*notes, *said], files=len(files)), rows if not isinstance(rows, str) else None


def _rows(root: Path, rev: str, index: SymbolIndex | None, progress: Progress | None) -> SymbolRows | str:
    """The symbol index's rows of `rev` (read from `index`, or the repository's own), or why there are none."""
    from reposwarm.intel.symbols import SymbolIndex, SymbolIndexError

    try:
        if index is not None:
            return index.rows(rev, progress)
        with SymbolIndex(root) as own_index:
            return own_index.rows(rev, progress)
    except (SymbolIndexError, sqlite3.Error, ImportError, OSError) as err:  # what the map's callers met
        return str(err)


def _imports(rows: SymbolRows, found: list[PackageInfo], package_of: Callable[[str], str]) -> str:
    """Fill each package's `imports` from the symbol index's rows; a note saying how many edges."""
    edges = package_imports(rows, package_of)
    by_path = {p.path: p for p in found}
    count = 0
    for source, targets in edges.items():
        if source in by_path:
            by_path[source].imports = sorted(t for t in targets if t in by_path)
            count += len(by_path[source].imports)
    definitions = sum(kind != "field" for _, _, _, kind, _ in rows.defs)
    return (f"imports from the symbol index ({definitions:,} definitions, {len(rows.refs):,} names referenced "
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
