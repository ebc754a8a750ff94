"""The lanes a careful engineer would propose for one commit: the oracle's `plan=careful` answer to the proposer
(reposwarm/models/oracle.py), for measuring the guardrails and the proposal phase on real commits.

From the commit alone (its files and their imports at the commit), never from the repository's structure:
- vertical lanes: a source module with its own tests in one lane (a test goes with the module its name or its
  imports point at; a stub `.pyi` with its module); a module no test names joins the lane whose code imports
  it or is imported by it;
- a lane for the changelog and docs (Markdown, reStructuredText, docs/, changelog folders, dotfiles);
- a file two lanes must both change (an `__init__` or index re-exporting both lanes' modules) in both lanes and
  declared in `overlaps`;
- `depends_on` where one lane's code imports another's (from the commit's own imports); two lanes that import
  each other are one lane (no proposal may hold a cycle);
- the project's configuration (pyproject.toml, lock files, manifests) with the lane of the largest change;
- at most `max_lanes` lanes: the smallest lanes folded into the largest.

Pure: `read(path)` gives a file's text at the commit (None when it is gone or not text).
"""

from __future__ import annotations

import ast
import posixpath
import re
from collections.abc import Callable
from dataclasses import dataclass, field

DOC_SUFFIXES = (".md", ".rst", ".txt", ".adoc")
DOC_NAMES = ("readme", "changelog", "changes", "history", "news", "authors", "license", "licence", "contributing",
             "mkdocs.yml", "citation.cff", "security")
DOC_FOLDERS = ("docs", "doc", "changelog.d", "changelog", "changes", "website", "site", "_site")
TEST_FOLDERS = ("tests", "test", "testing", "__tests__", "spec", "specs")
CODE_SUFFIXES = (".py", ".pyi", ".js", ".mjs", ".cjs", ".jsx", ".ts", ".tsx", ".mts", ".cts", ".go", ".rs", ".java",
                 ".kt", ".rb", ".c", ".h", ".cc", ".cpp", ".hpp")
AGGREGATORS = ("__init__", "index", "mod", "lib")  # files that re-export a package's modules


@dataclass
class Lane:
    name: str
    files: list[str] = field(default_factory=list)
    depends_on: set[str] = field(default_factory=set)
    size: int = 0


def kind(path: str) -> str:
    """doc, test, code or config."""
    parts = path.lower().split("/")
    base = parts[-1]
    if parts[0] in DOC_FOLDERS or any(p.startswith(".") for p in parts) or base.startswith(DOC_NAMES) \
            or base.endswith(DOC_SUFFIXES):
        return "doc"
    stem = base.split(".")[0]
    if any(p in TEST_FOLDERS for p in parts[:-1]) or stem.startswith("test_") or stem.endswith("_test") \
            or re.search(r"\.(test|spec)\.[a-z]+$", base) or base == "conftest.py":
        return "test"
    return "code" if base.endswith(CODE_SUFFIXES) else "config"


def module_key(path: str) -> str:
    """A code file's module: its path without the extension (a stub joins its module)."""
    root, _ = posixpath.splitext(path)
    return root


def _stem(path: str) -> str:
    base = posixpath.basename(path)
    stem = base.split(".")[0]
    stem = re.sub(r"^test_|_test$", "", stem)
    if stem == "__init__":
        stem = posixpath.basename(posixpath.dirname(path)) or stem
    return stem.lstrip("_") or stem  # (a private module _cached.py is what test_cached.py tests)


def _dotted(key: str) -> set[str]:
    """The dotted names a Python module's path may be imported as (src/attr/_make -> attr._make, _make...)."""
    parts = key.split("/")
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return {".".join(parts[i:]) for i in range(len(parts)) if parts[i:]}


def _python_imports(path: str, text: str) -> set[str]:
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError):
        return set()
    package = posixpath.dirname(path).split("/")
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[:len(package) - node.level + 1] if node.level <= len(package) else []
                module = ".".join([*base, *(node.module.split(".") if node.module else [])])
            else:
                module = node.module or ""
            if module:
                found.add(module)
                found.update(f"{module}.{alias.name}" for alias in node.names)
    return found


JS_IMPORT = re.compile(r"""(?:\bfrom\s*|\bimport\s*\(?\s*|\brequire\s*\(\s*)['"](\.{1,2}/[^'"]+)['"]""")
RUST_USE = re.compile(r"\b(?:crate|super)::(\w+)|^\s*(?:pub\s+)?mod\s+(\w+)\s*;", re.M)


def imports_of(path: str, text: str, keys: set[str]) -> set[str]:
    """The modules among `keys` (module keys of the commit's code) that the file at `path` imports."""
    found: set[str] = set()
    if path.endswith((".py", ".pyi")):
        names = _python_imports(path, text)
        found = {key for key in keys if _dotted(key) & names}
    elif path.endswith((".js", ".mjs", ".cjs", ".jsx", ".ts", ".tsx", ".mts", ".cts")):
        for spec in JS_IMPORT.findall(text):
            target = posixpath.normpath(posixpath.join(posixpath.dirname(path), spec))
            root, ext = posixpath.splitext(target)
            for candidate in (target, root if ext in (".js", ".ts", ".mjs", ".cjs") else target, f"{target}/index"):
                if candidate in keys:
                    found.add(candidate)
    elif path.endswith(".rs"):
        folder = posixpath.dirname(path)
        for used, declared in RUST_USE.findall(text):
            name = used or declared
            found.update(k for k in (f"{folder}/{name}", f"{folder}/{name}/mod") if k in keys)
    return found - {module_key(path)}


def _lane_name(stem: str, taken: set[str]) -> str:
    name = re.sub(r"[^A-Za-z0-9_-]+", "-", stem).strip("-_") or "code"
    name = name[:40]
    candidate, n = name, 2
    while candidate in taken:
        candidate, n = f"{name}-{n}", n + 1
    taken.add(candidate)
    return candidate


def careful_lanes(changes: list[tuple[str, str]], read: Callable[[str], str | None], sizes: dict[str, int],
                  max_lanes: int) -> dict[str, object]:
    """The careful proposal for a commit: `changes` its (status, path) pairs, `sizes` the lines changed per path;
    the arguments of a submit_lanes call."""
    paths = [path for _, path in changes]
    kinds = {path: kind(path) for path in paths}
    texts = {path: read(path) or "" for path in paths}
    units: dict[str, list[str]] = {}  # module key -> its code files
    for path in paths:
        if kinds[path] == "code":
            units.setdefault(module_key(path), []).append(path)
    keys = set(units)
    unit_size = {key: sum(sizes.get(f, 1) for f in files) for key, files in units.items()}
    imports = {key: set().union(*(imports_of(f, texts[f], keys) for f in files)) for key, files in units.items()}

    # tests to the module they are about: by name, else by what they import, else left for later
    owner: dict[str, str] = {}
    by_stem: dict[str, list[str]] = {}
    for key in sorted(units, key=lambda k: -unit_size[k]):
        by_stem.setdefault(_stem(key), []).append(key)
    for path in paths:
        if kinds[path] != "test" or not path.endswith(CODE_SUFFIXES):
            continue
        named = by_stem.get(_stem(path)) or by_stem.get(_stem(path).removesuffix("s"))  # options -> option
        imported = sorted(imports_of(path, texts[path], keys), key=lambda k: -unit_size[k])
        imported = [k for k in imported if posixpath.basename(k) not in AGGREGATORS] or imported
        if named:
            owner[path] = named[0]
        elif imported:
            owner[path] = imported[0]

    # seeds: modules with their own tests (or, with no test files at all, every module: tests inside them)
    seeds = sorted({owner[t] for t in owner}) or sorted(units)
    group = {seed: seed for seed in seeds}
    shared: dict[str, set[str]] = {}
    for key in sorted(units, key=lambda k: -unit_size[k]):
        if key in group:
            continue
        linked = sorted({group[s] for s in seeds if s in imports[key] or key in imports[s]})
        if len(linked) > 1 and posixpath.basename(key) in AGGREGATORS:
            shared[key] = set(linked)  # (an __init__ re-exporting two lanes' modules: both change it)
        elif linked:
            group[key] = linked[0]
    main = max(seeds, key=lambda s: unit_size[s]) if seeds else None
    for key in units:
        if key not in group and key not in shared and main is not None:
            group[key] = main

    # two seeds whose code imports each other's are one lane (a cycle no proposal may hold)
    def lane_imports(seed: str) -> set[str]:
        found = set().union(*(imports[k] for k, g in group.items() if g == seed))
        return {group[k] for k in found if k in group and group[k] != seed}

    merged = True
    while merged:
        merged = False
        roots = sorted(set(group.values()), key=lambda s: -unit_size[s])
        for a in roots:
            for b in roots:
                if a < b and b in lane_imports(a) and a in lane_imports(b):
                    keep, gone = (a, b) if unit_size[a] >= unit_size[b] else (b, a)
                    group.update({k: keep for k, g in group.items() if g == gone})
                    for owners in shared.values():
                        if gone in owners:
                            owners.discard(gone)
                            owners.add(keep)
                    merged = True
                    break
            if merged:
                break

    taken: set[str] = set()
    lanes: dict[str, Lane] = {}
    for seed in sorted(set(group.values()), key=lambda s: (-unit_size[s], s)):
        lanes[seed] = Lane(name=_lane_name(_stem(seed), taken))
    for key, seed in group.items():
        lanes[seed].files += units[key]
    for key, owners in shared.items():
        live = sorted(owners & set(lanes))
        if len(live) == 1:
            lanes[live[0]].files += units[key]
            shared.pop(key)
            continue
        for seed in live:
            lanes[seed].files += units[key]
    for test, key in owner.items():
        lanes[group.get(key, main or key)].files.append(test)
    big = lanes[max(lanes, key=lambda s: unit_size[s])] if lanes else None
    docs: list[str] = []
    for path in paths:
        placed = any(path in lane.files for lane in lanes.values())
        if placed:
            continue
        if kinds[path] == "doc":
            docs.append(path)
        elif kinds[path] == "test" and lanes:
            # test support and data: with the lane holding most tests of its folder, else the largest
            folder = posixpath.dirname(path)
            near = [s for s, lane in lanes.items() if any(posixpath.dirname(f) == folder for f in lane.files)]
            (lanes[near[0]] if near else big or Lane("x")).files.append(path)
        elif big is not None:
            big.files.append(path)  # configuration, lock files: with the largest change
        else:
            docs.append(path)
    for seed, lane in lanes.items():
        lane.depends_on = {lanes[s].name for s in lane_imports(seed) if s in lanes}
        lane.size = sum(sizes.get(f, 1) for f in lane.files)
    ordered = sorted(lanes.values(), key=lambda lane: (-lane.size, lane.name))
    if docs:
        ordered.append(Lane(name=_lane_name("docs", {lane.name for lane in ordered}), files=docs))
    ordered = _folded(ordered, max(1, max_lanes))
    overlaps = sorted({f for key in shared for f in units[key]
                       if sum(f in lane.files for lane in ordered) > 1})
    files_of = {lane.name: lane.files for lane in ordered}
    proposed = []
    for lane in ordered:
        mine = sorted(dict.fromkeys(lane.files))
        deps = sorted(lane.depends_on & set(files_of))
        proposed.append({"name": lane.name, "allowed_paths": mine,
                         "read_only_paths": sorted({f for d in deps for f in files_of[d]} - set(mine)),
                         "depends_on": deps,
                         "goal": f"Make the commit's change to the files in {', '.join(mine)}."})
    return {"interface_contract": "As the commit has it.", "summary": "replay of a commit, split as a careful "
            "engineer would (vertical lanes, docs apart, shared files declared)", "lanes": proposed,
            "overlaps": overlaps}


def _folded(lanes: list[Lane], most: int) -> list[Lane]:
    """At most `most` lanes: the smallest code lanes folded into the largest (docs last of all)."""
    lanes = list(lanes)
    while len(lanes) > most:
        code = [lane for lane in lanes if lane.name != "docs"] or lanes
        target = code[0]
        victim = min((lane for lane in lanes if lane is not target and lane.name != "docs"), default=None,
                     key=lambda lane: lane.size) or lanes[-1]
        if victim is target:
            break
        target.files += victim.files
        target.depends_on = (target.depends_on | victim.depends_on) - {target.name, victim.name}
        target.size += victim.size
        lanes.remove(victim)
        for lane in lanes:
            if victim.name in lane.depends_on:
                lane.depends_on = (lane.depends_on - {victim.name}) | ({target.name} - {lane.name})
    return lanes
