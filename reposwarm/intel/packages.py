"""The packages of a tree, from its file list and its manifests: what a person would call the units of the code.

Why: lanes that follow the code's structure conflict less (a package is what one person or team changes at a
time), so the swarm's starting lanes and the planner's view of a repository start from here. Read per ecosystem:

- Go: a module per go.mod (named by its `module` line), a package per folder holding .go files;
- Python: a folder with pyproject.toml, setup.py or setup.cfg (named by its manifest); else the outermost folders
  holding an __init__.py;
- npm, pnpm and yarn: a folder with a package.json (named by its "name"); the root's `workspaces` and
  pnpm-workspace.yaml globs are expanded against the file list to say which are its workspaces;
- Cargo: a crate per Cargo.toml with a [package], and the root's [workspace] members (globs expanded);
- Bazel (BUILD, BUILD.bazel), Buck (BUCK) and Pants (BUILD with a pants.toml at the root): a package per folder;
- else, and for what no manifest claims in a repository of several packages: the top-level folders, and below a
  folder of services (services/, apps/, packages/... or any folder that holds packages) a package per service.

Pure: a file list and a reader of file contents (a commit's tree, or a folder), no git, no network.
"""

from __future__ import annotations

import fnmatch
import json
import posixpath
import re
import tomllib
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

import yaml

from reposwarm.checks.testpaths import TEST_DIRS, is_test_path
from reposwarm.contracts.proposal import PackageInfo
from reposwarm.intel import structure

Read = Callable[[str], "str | None"]
# What a manifest in one of these folders says is not the repository's own structure (vendored, generated, or
# a test's fixture); Bazel's BUILD files are taken everywhere (Bazel itself does).
SKIPPED_DIRS = frozenset({"node_modules", "vendor", "third_party", ".git", "fixtures", "__fixtures__", *TEST_DIRS})
# Folders whose sub-folders are services, each a package of its own when no manifest says otherwise.
CONTAINERS = frozenset({"services", "apps", "packages", "libs", "lib", "modules", "components", "plugins",
                        "crates", "cmd", "internal", "pkg", "projects", "tools", "extensions"})
# The kind that names a folder claimed by several ecosystems: the build system first, then the language's manifest.
KIND_ORDER = ("bazel", "buck", "pants", "cargo", "go-module", "npm", "python", "go-package", "folder")
MANIFESTS = frozenset({"go.mod", "package.json", "pyproject.toml", "setup.py", "setup.cfg", "Cargo.toml",
                       "pnpm-workspace.yaml", "pants.toml"})
PYTHON_MANIFESTS = ("pyproject.toml", "setup.cfg", "setup.py")
_SETUP_NAME = re.compile(r"""\bname\s*=\s*["']([^"']+)["']""")
_GO_MODULE = re.compile(r"^\s*module\s+(\S+)", re.MULTILINE)


@dataclass
class Found:
    """A package as the manifests say it: the folder, its kind, its name, and what was read to say so."""

    path: str
    kind: str
    name: str
    why: str
    workspace: bool = False  # an npm/pnpm/yarn or Cargo workspace member of the root
    extra: dict[str, str] = field(default_factory=dict)


def dirname(path: str) -> str:
    return posixpath.dirname(path)


def parts_skipped(path: str) -> bool:
    return any(part in SKIPPED_DIRS for part in path.split("/")[:-1])


def ancestors(folder: str) -> Iterable[str]:
    """The folder itself, then each folder above it, then "" (the root)."""
    while folder:
        yield folder
        folder = dirname(folder)
    yield ""


def _toml(text: str | None) -> dict:
    try:
        data = tomllib.loads(text or "")
    except (tomllib.TOMLDecodeError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _json(text: str | None) -> dict:
    try:
        data = json.loads(text or "")
    except ValueError:
        return {}
    return data if isinstance(data, dict) else {}


def _str(value: object) -> str:
    return value.strip() if isinstance(value, str) else ""


def expand_globs(globs: Iterable[str], folders: Iterable[str], base: str = "") -> list[str]:
    """The folders (with a manifest) that workspace globs name, against the file list: `packages/*`,
    `crates/**`, `apps/web`; a `!glob` leaves out what it matches."""
    wanted: list[str] = []
    unwanted: list[str] = []
    for glob in globs:
        if not isinstance(glob, str) or not glob.strip():
            continue
        glob = glob.strip().removeprefix("./").rstrip("/")
        (unwanted if glob.startswith("!") else wanted).append(posixpath.join(base, glob.lstrip("!")))

    def hit(folder: str, pattern: str) -> bool:
        if "**" in pattern:  # any depth: fnmatch's * crosses "/" already, so ** is * and may match nothing
            head = pattern.split("**", 1)[0].rstrip("/")
            return folder == head or fnmatch.fnmatchcase(folder, pattern.replace("**", "*"))
        return fnmatch.fnmatchcase(folder, pattern) and folder.count("/") == pattern.count("/")

    return sorted(f for f in folders if any(hit(f, w) for w in wanted) and not any(hit(f, u) for u in unwanted))


# --- one ecosystem each -------------------------------------------------------------------------------------------


def go_packages(files: Sequence[str], read: Read) -> list[Found]:
    found = []
    modules: dict[str, str] = {}
    for path in files:
        if posixpath.basename(path) == "go.mod" and not parts_skipped(path):
            folder = dirname(path)
            match = _GO_MODULE.search(read(path) or "")
            modules[folder] = match.group(1) if match else posixpath.basename(folder) or "module"
            found.append(Found(folder, "go-module", modules[folder], f"{path}"))
    go_folders = sorted({dirname(p) for p in files if p.endswith(".go") and not parts_skipped(p)})
    for folder in go_folders:
        if folder in modules:
            continue
        module = next((m for m in ancestors(folder) if m in modules), None)
        if module is None:
            name = posixpath.basename(folder) or "main"
        else:
            rel = folder[len(module):].lstrip("/")
            name = f"{modules[module]}/{rel}" if rel else modules[module]
        found.append(Found(folder, "go-package", name, f"{folder or '.'}/*.go"))
    return found


def _python_name(path: str, text: str | None) -> str:
    base = posixpath.basename(path)
    if base == "pyproject.toml":
        data = _toml(text)
        project, tool = data.get("project"), data.get("tool")
        poetry = tool.get("poetry") if isinstance(tool, dict) else None
        return (_str(project.get("name")) if isinstance(project, dict) else "") or \
            (_str(poetry.get("name")) if isinstance(poetry, dict) else "")
    if base == "setup.cfg":
        match = re.search(r"^\[metadata\][^\[]*?^name\s*=\s*(\S+)", text or "", re.MULTILINE | re.DOTALL)
        return match.group(1) if match else ""
    match = _SETUP_NAME.search(text or "")
    return match.group(1) if match else ""


def python_packages(files: Sequence[str], read: Read) -> list[Found]:
    found: dict[str, Found] = {}
    for path in files:
        if posixpath.basename(path) in PYTHON_MANIFESTS and not parts_skipped(path):
            folder = dirname(path)
            name = _python_name(path, read(path))
            if folder not in found or (name and not found[folder].extra.get("named")):
                found[folder] = Found(folder, "python", name or posixpath.basename(folder), path,
                                      extra={"named": "1"} if name else {})
    # Outside every project a manifest makes: the outermost folders with an __init__.py (a top-level package).
    inits = {dirname(p) for p in files if posixpath.basename(p) == "__init__.py" and not parts_skipped(p)}
    for folder in sorted(inits):
        if not folder or dirname(folder) in inits:
            continue
        if any(a in found for a in ancestors(folder)):
            continue
        found[folder] = Found(folder, "python", posixpath.basename(folder), f"{folder}/__init__.py")
    return sorted(found.values(), key=lambda f: f.path)


def npm_packages(files: Sequence[str], read: Read) -> list[Found]:
    folders = sorted({dirname(p) for p in files if posixpath.basename(p) == "package.json" and not parts_skipped(p)})
    globs: list[str] = []
    root = _json(read("package.json")) if "" in folders else {}
    workspaces = root.get("workspaces")
    if isinstance(workspaces, dict):  # yarn's {packages: [...], nohoist: [...]}
        workspaces = workspaces.get("packages")
    if isinstance(workspaces, list):
        globs += [g for g in workspaces if isinstance(g, str)]
    if "pnpm-workspace.yaml" in set(files):
        try:
            pnpm = yaml.safe_load(read("pnpm-workspace.yaml") or "") or {}
        except yaml.YAMLError:
            pnpm = {}
        if isinstance(pnpm, dict) and isinstance(pnpm.get("packages"), list):
            globs += [g for g in pnpm["packages"] if isinstance(g, str)]
    members = set(expand_globs(globs, folders)) if globs else set()
    found = []
    for folder in folders:
        data = _json(read(posixpath.join(folder, "package.json")))
        name = _str(data.get("name")) or posixpath.basename(folder) or "root"
        why = "workspace in " + ("pnpm-workspace.yaml" if "pnpm-workspace.yaml" in set(files) else "package.json") \
            if folder in members else posixpath.join(folder, "package.json")
        scripts = data.get("scripts") if isinstance(data.get("scripts"), dict) else {}
        test = scripts.get("test") if isinstance(scripts, dict) else None
        found.append(Found(folder, "npm", name, why, workspace=folder in members,
                           extra={"test": test} if isinstance(test, str) else {}))
    return found


def cargo_packages(files: Sequence[str], read: Read) -> list[Found]:
    manifests = sorted(p for p in files if posixpath.basename(p) == "Cargo.toml" and not parts_skipped(p))
    folders = [dirname(p) for p in manifests]
    data = {dirname(p): _toml(read(p)) for p in manifests}
    members: set[str] = set()
    for folder, manifest in data.items():
        workspace = manifest.get("workspace")
        if isinstance(workspace, dict) and isinstance(workspace.get("members"), list):
            excluded = [f"!{g}" for g in workspace.get("exclude", []) if isinstance(g, str)]
            members |= set(expand_globs([*workspace["members"], *excluded], folders, folder))
    found = []
    for folder in folders:
        package = data[folder].get("package")
        name = _str(package.get("name")) if isinstance(package, dict) else ""
        if not name and "workspace" not in data[folder]:
            continue  # neither a crate nor a workspace (a fragment some tool reads)
        found.append(Found(folder, "cargo", name or posixpath.basename(folder) or "workspace",
                           "workspace member" if folder in members else posixpath.join(folder, "Cargo.toml"),
                           workspace=folder in members, extra={"crate": "1"} if name else {}))
    return found


def build_packages(files: Sequence[str]) -> list[Found]:
    """Bazel, Buck and Pants: a package per folder with a BUILD file (Pants when the root has pants.toml)."""
    names = set(files)
    pants = "pants.toml" in names
    found = []
    for path in files:
        base = posixpath.basename(path)
        if base in ("BUILD", "BUILD.bazel", "BUCK", "BUILD.pants") and "node_modules" not in path.split("/"):
            folder = dirname(path)
            kind = "buck" if base == "BUCK" else "pants" if pants or base == "BUILD.pants" else "bazel"
            found.append(Found(folder, kind, f"{folder}::" if kind == "pants" else f"//{folder}", path))
    return found


# --- all of them --------------------------------------------------------------------------------------------------


def _merge(found: Iterable[Found]) -> dict[str, Found]:
    """One package per folder: the kind first in KIND_ORDER names it, with the name its manifest gives."""
    by_path: dict[str, Found] = {}
    for item in found:
        old = by_path.get(item.path)
        if old is None or KIND_ORDER.index(item.kind) < KIND_ORDER.index(old.kind):
            if old is not None:
                item.extra = {**old.extra, **item.extra, "also": ",".join(filter(None, [old.extra.get("also"),
                                                                                      old.kind]))}
            by_path[item.path] = item
        else:
            old.extra["also"] = ",".join(filter(None, [old.extra.get("also"), item.kind]))
    return by_path


def _owner_of(folder: str, known: dict[str, Found]) -> str | None:
    return next((a for a in ancestors(folder) if a in known), None)


def _fallback(files: Sequence[str], known: dict[str, Found]) -> dict[str, Found]:
    """Folder packages for the files no package holds (or only the root's, when the root is one of several):
    a top-level folder, or a service below a folder of services."""
    nested = any(p for p in known)  # packages below the root: the root's manifest is not all there is
    holders = {p.split("/")[0] for p in known if p}  # top-level folders that hold packages
    made: dict[str, Found] = {}
    for path in files:
        folder = dirname(path)
        holder = _owner_of(folder, known)
        if holder is not None and (holder or not nested):
            continue
        if not folder:
            if "" not in known:
                made.setdefault("", Found("", "folder", "root", "the files at the root"))
            continue
        parts = folder.split("/")
        top = parts[0]
        if (top in CONTAINERS or top in holders) and len(parts) >= 2:
            target = f"{top}/{parts[1]}"
            why = f"a service of {top}/"
        else:
            target, why = top, "a top-level folder"
        if target in known or target in made:
            continue
        made[target] = Found(target, "folder", posixpath.basename(target) or "root", why)
    return made


def find_packages(files: Sequence[str], read: Read, python: Callable[[], tuple[str, bool]] | None = None,
                  sizes: dict[str, int] | None = None) -> tuple[list[PackageInfo], list[str]]:
    """The packages of a tree whose tracked `files` these are (`read`: a file's text, or None), in path order, with
    their own files (not a nested package's), where their tests live and the command that runs them alone; and a
    note per ecosystem found. `python`: the interpreter for Python's checks and whether it has pytest (asked once,
    when a Python package has tests; default structure.python_with_pytest)."""
    files = sorted(files)
    found = [*build_packages(files), *cargo_packages(files, read), *go_packages(files, read),
             *npm_packages(files, read), *python_packages(files, read)]
    modules = sorted((f.path for f in found if f.kind == "go-module"), key=len, reverse=True)
    members = {(f.path, f.kind) for f in found if f.workspace}
    known = _merge(found)
    known.update(_fallback(files, known))
    own: dict[str, list[str]] = defaultdict(list)
    for path in files:
        holder = _owner_of(dirname(path), known)
        if holder is None:  # (the fallback gives every file a holder; a root file of a nested tree goes to "")
            known[""] = Found("", "folder", "root", "the files at the root")
            holder = ""
        own[holder].append(path)
    packages = []
    for path in sorted(known):
        item = known[path]
        mine = own.get(path, [])
        if not mine and item.kind == "folder":
            continue
        packages.append(PackageInfo(path=path, kind=item.kind, name=item.name, files=len(mine),
                                    tests=test_places(path, mine), size_bytes=sum((sizes or {}).get(f, 0) for f in mine)))
    lands = territories({p.path for p in packages}, {p.path: own.get(p.path, []) for p in packages})
    for pkg in packages:
        pkg.paths = lands[pkg.path]
    asked: list[tuple[str, bool]] = []

    def interpreter() -> tuple[str, bool]:
        if not asked:
            asked.append((python or structure.python_with_pytest)())
        return asked[0]

    for pkg in packages:
        module = next((m for m in modules if m == pkg.path or not m or pkg.path.startswith(m + "/")), None)
        needs_python = pkg.kind in ("python", "folder") and any(t.endswith((".py", "/")) for t in pkg.tests)
        tests = pkg.tests
        if pkg.kind == "go-module":  # `go test ./...` runs the whole module's tests, its packages' too
            tests = [f"{pkg.path}/"] if any(p.endswith("_test.go") for p in files if p.startswith(
                f"{pkg.path}/" if pkg.path else "")) else []
        pkg.check = structure.package_check(pkg.kind, pkg.path, pkg.name, tests, read,
                                            interpreter() if needs_python else ("python3", False), module,
                                            (pkg.path, pkg.kind) in members)
        if pkg.kind == "cargo" and not known[pkg.path].extra.get("crate"):  # a workspace's manifest, no crate
            pkg.check = ["cargo", "test", "--offline", *(["--manifest-path", f"{pkg.path}/Cargo.toml"]
                                                         if pkg.path else [])]
    return packages, notes_of(known)


def test_places(folder: str, files: Sequence[str]) -> list[str]:
    """Where a package's tests are: its outermost test folders ("db/tests/"), else its test files (at most 20);
    the package's own folder when all it holds is tests (tests that live apart)."""
    tests = [p for p in files if is_test_path(p[len(folder):].lstrip("/")) or is_test_path(p)]
    if files and len(tests) == len(files) and folder and (posixpath.basename(folder) in TEST_DIRS
                                                          or folder.split("/")[0] in TEST_DIRS):
        return [f"{folder}/"]
    places: set[str] = set()
    loose: list[str] = []
    for path in tests:
        rel = path[len(folder):].lstrip("/") if folder else path
        parts = rel.split("/")[:-1]
        cut = next((i for i, part in enumerate(parts) if part in TEST_DIRS), None)
        if cut is None:
            loose.append(path)
        else:
            places.add(posixpath.join(folder, *parts[:cut + 1]) + "/")
    return sorted(places) + sorted(loose)[:20]


def notes_of(known: dict[str, Found]) -> list[str]:
    """A line per kind found: how many, and from what."""
    by_kind: dict[str, list[Found]] = defaultdict(list)
    for item in known.values():
        by_kind[item.kind].append(item)
    said = {"go-module": "Go modules (go.mod)", "go-package": "Go packages (folders with .go files)",
            "python": "Python packages (pyproject.toml, setup.py, setup.cfg; else folders with __init__.py)",
            "npm": "npm packages (package.json)", "cargo": "Cargo crates (Cargo.toml)",
            "bazel": "Bazel packages (BUILD, BUILD.bazel)", "buck": "Buck packages (BUCK)",
            "pants": "Pants packages (BUILD, with pants.toml)",
            "folder": "folders no manifest claims (top-level folders, services below a folder of services)"}
    notes = []
    for kind in KIND_ORDER:
        items = sorted(by_kind.get(kind, []), key=lambda f: f.path)
        if not items:
            continue
        shown = ", ".join(f.path or "." for f in items[:4]) + (f" and {len(items) - 4} more" if len(items) > 4 else "")
        members = sum(f.workspace for f in items)
        ws = f"; {members} workspace member(s) of the root" if members else ""
        notes.append(f"{len(items)} {said[kind]}: {shown}{ws}")
    return notes


def manifest_paths(files: Iterable[str]) -> list[str]:
    """The files find_packages reads (so a caller can read them all in one go)."""
    return sorted(p for p in files if posixpath.basename(p) in MANIFESTS)


def direct_files(folder: str) -> list[str]:
    """The patterns of the files directly in a folder, none below it (the root's: "*", "!*/")."""
    return ["*", "!*/"] if not folder else [f"{escape(folder)}/*", f"!{escape(folder)}/*/"]


def escape(path: str) -> str:
    """A path as a gitignore-style pattern that matches it alone."""
    out = re.sub(r"([*?\[\]\\])", r"\\\1", path)
    return "\\" + out if out[:1] in ("!", "#") else out


def territories(paths: set[str], own: dict[str, list[str]]) -> dict[str, list[str]]:
    """Each package's own files as slice patterns: "pkg/" when no package is nested in it; else the files directly
    in it and in each folder on the way to a nested package ("pkg/*", "!pkg/*/"), and "pkg/sub/" for each of its
    sub-folders that holds no package. Disjoint between packages by construction (a file is its deepest
    package's), and covering every tracked file."""
    holding = {a for p in paths if p for a in ancestors(dirname(p))} | {p for p in paths}  # folders on the way
    out: dict[str, list[str]] = {}
    for pkg in sorted(paths):
        nested = any(p != pkg and (not pkg or p.startswith(pkg + "/")) for p in paths)
        if pkg and not nested:
            out[pkg] = [f"{escape(pkg)}/"]
            continue
        out[pkg] = _territory(pkg, {dirname(f) for f in own.get(pkg, [])}, paths, holding)
    return out


def _territory(pkg: str, dirs: set[str], paths: set[str], holding: set[str]) -> list[str]:
    """The patterns of a package with packages nested in it (see territories); `dirs`: the folders of its files."""
    patterns: list[str] = []

    def walk(folder: str) -> None:
        if folder == pkg or folder in dirs:
            patterns.extend(direct_files(folder))
        depth = folder.count("/") + 1 if folder else 0
        below = [d for d in dirs if d and (not folder or d.startswith(folder + "/"))]
        for child in sorted({d.split("/")[depth] for d in below if d.count("/") >= depth}):
            full = posixpath.join(folder, child)
            if full in paths:
                continue
            if full in holding:
                walk(full)
            else:
                patterns.append(f"{escape(full)}/")

    walk(pkg)
    return patterns
