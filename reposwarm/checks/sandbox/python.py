"""A checked tree's Python import roots, first on every command's PYTHONPATH: so a check imports the tree's own
package, never a copy installed in the interpreter it runs.

Why: `python -m pytest` puts only the working folder on sys.path, `--import-mode=importlib` puts nothing, and a src
layout's `src/` is never there; so a check importing `pkg` gets site-packages' `pkg` (an older release, or the
user's checkout through an editable install's `.pth` or finder) and passes or fails on code that is not the tree's.
PYTHONPATH entries come before site-packages, so the tree's package wins; an editable install's finder is appended
to sys.meta_path after the path finder, so it is asked only for what the tree does not have (`editable_masks`:
the sandbox hides those of the tree's own packages).

The roots come from the tree's own files, read as untrusted input (a path leading out of the tree, absolute or
through `..` or a symlink, is ignored): the folders pyproject.toml declares (setuptools' `package-dir` and
`packages.find.where`, hatch's wheel `packages` and `sources`, poetry's `packages` `from`, pdm's `package-dir`,
maturin's `python-source`), setup.cfg's `package_dir` and `where`, setup.py's `package_dir={"": ...}`, a src
layout's `src/`, pytest's `pythonpath` option (from the ini file pytest itself would read), and the tree's root for
a flat layout. Only for trees that are Python projects (a pyproject.toml, setup.py or setup.cfg, or .py files).
"""

from __future__ import annotations

import configparser
import contextlib
import os
import posixpath
import re
import subprocess
import tomllib
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path, PurePosixPath
from typing import Any

PROJECT_FILES = ("pyproject.toml", "setup.py", "setup.cfg")
SRC = "src"
MAX_CONFIG_BYTES = 1024 * 1024  # a project file bigger than this is not read (a planted one could be huge)
MAX_ROOTS = 32
NESTED_DEPTH = 3  # how far below the root a monorepo's own Python projects are looked for
MAX_NESTED = 32
MAX_WALKED = 3000  # folders walked looking for them (a huge tree is not walked whole at every check)
# (dependencies, builds, and tests' fixtures: a fixture project's src/requests first on PYTHONPATH would shadow the
# real requests of every check)
SKIPPED_FOLDERS = frozenset({"node_modules", "venv", "site-packages", "__pycache__", "build", "dist", "vendor",
                             "third_party", "target", "tests", "test", "testing", "fixtures", "__fixtures__",
                             "testdata", "examples", "docs"})
MAX_SCANNED = 400  # folder entries looked at to tell whether a tree without project files holds Python files
# pytest reads the first of these that configures it (its "inifile"); pyproject.toml, tox.ini and setup.cfg only
# when they have its section
PYTEST_FILES = ("pytest.ini", ".pytest.ini", "pyproject.toml", "tox.ini", "setup.cfg")
_SETUP_PY_DIR = re.compile(r"""package_dir\s*=\s*\{\s*(['"])\1\s*:\s*(['"])([^'"\n]+)\2""")
_SETUP_PY_WHERE = re.compile(r"""find_(?:namespace_)?packages\(\s*(?:where\s*=\s*)?(['"])([^'"\n]+)\1""")


# --- reading the tree's files, warily ---


def _text(root: Path, name: str) -> str | None:
    path = root / name
    try:
        if path.is_symlink() or not path.is_file() or path.stat().st_size > MAX_CONFIG_BYTES:
            return None
        return path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None


def _toml(root: Path, name: str) -> dict[str, Any]:
    text = _text(root, name)
    if text is None:
        return {}
    try:
        return tomllib.loads(text)
    except (tomllib.TOMLDecodeError, ValueError, RecursionError):
        return {}


def _ini(root: Path, name: str) -> configparser.ConfigParser | None:
    text = _text(root, name)
    if text is None:
        return None
    parser = configparser.ConfigParser(interpolation=None, strict=False)
    try:
        parser.read_string(text)
    except (configparser.Error, ValueError):
        return None
    return parser


def _get(data: Any, *keys: str) -> Any:
    for key in keys:
        if not isinstance(data, dict):
            return None
        data = data.get(key)
    return data


def _strings(value: Any) -> list[str]:
    """A TOML value that should be a string or a list of strings, as that list (anything else: nothing)."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, list):
        return [v for v in value if isinstance(v, str)]
    return []


def _inside(root: Path, rel: str) -> Path | None:
    """`root / rel` when it is a folder inside the tree, as named and where its symlinks lead; else None."""
    rel = rel.strip()
    if not rel or "\x00" in rel or rel.startswith(("/", "\\", "~")) or re.match(r"^[A-Za-z]:", rel):
        return None
    parts = PurePosixPath(rel.replace("\\", "/")).parts
    if ".." in parts:
        return None
    path = root.joinpath(*parts) if parts else root
    try:
        real, top = path.resolve(), root.resolve()
    except (OSError, RuntimeError):
        return None
    if not (real == top or top in real.parents) or not path.is_dir():
        return None
    return path


# --- what the project declares ---


def _parent_of(package_path: str, package: str = "") -> str | None:
    """The import root holding a package folder: `src/attr` -> `src`; with the package's dotted name, the folder
    must end with it (`lib/pkg` for `pkg`), else no root can make the folder importable under that name."""
    parts = [p for p in PurePosixPath(package_path.replace("\\", "/")).parts if p not in (".", "")]
    names = package.split(".") if package else parts[-1:]
    if not parts or parts[-len(names):] != names:
        return None
    return "/".join(parts[:-len(names)]) or "."


def _setuptools(data: dict[str, Any]) -> list[str]:
    tool = _get(data, "tool", "setuptools")
    out: list[str] = []
    mapping = _get(tool, "package-dir")
    if isinstance(mapping, dict):
        for package, folder in mapping.items():
            if not isinstance(folder, str):
                continue
            if package == "":
                out.append(folder)
            elif (parent := _parent_of(folder, str(package))) is not None:
                out.append(parent)
    out += _strings(_get(tool, "packages", "find", "where"))
    return out


def _hatch(data: dict[str, Any]) -> list[str]:
    out: list[str] = []
    for build in (_get(data, "tool", "hatch", "build", "targets", "wheel"), _get(data, "tool", "hatch", "build")):
        for package in _strings(_get(build, "packages")):
            if (parent := _parent_of(package)) is not None:
                out.append(parent)
        sources = _get(build, "sources")
        if isinstance(sources, list):
            out += [s for s in sources if isinstance(s, str)]
        elif isinstance(sources, dict):  # {"src" = ""}: src/x.py is installed as x.py
            for prefix, becomes in sources.items():
                if not isinstance(becomes, str):
                    continue
                if not becomes.strip("/"):
                    out.append(prefix)
                elif (parent := _parent_of(prefix, becomes.strip("/").replace("/", "."))) is not None:
                    out.append(parent)
    return out


def _poetry(data: dict[str, Any]) -> list[str]:
    out: list[str] = []
    packages = _get(data, "tool", "poetry", "packages")
    for item in packages if isinstance(packages, list) else []:
        if isinstance(item, dict) and isinstance(item.get("include"), str):
            where = item.get("from", ".")
            if isinstance(where, str):
                out.append(where)
    return out


def _others(data: dict[str, Any]) -> list[str]:
    """pdm's `package-dir` (build settings, and where older pdm kept it), maturin's `python-source`."""
    return [*_strings(_get(data, "tool", "pdm", "build", "package-dir")),
            *_strings(_get(data, "tool", "pdm", "package-dir")),
            *_strings(_get(data, "tool", "maturin", "python-source"))]


def _setup_cfg(root: Path) -> list[str]:
    parser = _ini(root, "setup.cfg")
    if parser is None:
        return []
    out: list[str] = []
    if parser.has_option("options", "package_dir"):
        for line in parser.get("options", "package_dir").splitlines():
            package, eq, folder = line.partition("=")
            if not eq or not folder.strip():
                continue
            if not package.strip():
                out.append(folder.strip())
            elif (parent := _parent_of(folder.strip(), package.strip())) is not None:
                out.append(parent)
    if parser.has_option("options.packages.find", "where"):
        out += parser.get("options.packages.find", "where").split()
    return out


def _setup_py(root: Path) -> list[str]:
    text = _text(root, "setup.py") or ""
    return [m.group(3) for m in _SETUP_PY_DIR.finditer(text)] + [m.group(2) for m in _SETUP_PY_WHERE.finditer(text)]


def _src_layout(root: Path) -> bool:
    """A `src/` folder holding a package or a module."""
    src = root / SRC
    try:
        if src.is_symlink() or not src.is_dir():
            return False
        for entry in list(os.scandir(src))[:MAX_SCANNED]:
            if entry.name.endswith(".py") and entry.is_file():
                return True
            if entry.is_dir(follow_symlinks=False) and not entry.name.startswith(".") and any(
                    name.endswith(".py") for name in os.listdir(entry.path)[:MAX_SCANNED]):
                return True
    except OSError:
        return False
    return False


def pytest_pythonpath(root: Path) -> list[str]:
    """pytest's `pythonpath` option, from the ini file pytest would read at the tree's root."""
    for name in PYTEST_FILES:
        if not (root / name).is_file():
            continue
        if name == "pyproject.toml":
            data = _toml(root, name)
            native, legacy = _get(data, "tool", "pytest"), _get(data, "tool", "pytest", "ini_options")
            if not isinstance(native, dict):
                continue
            if isinstance(legacy, dict) and "pythonpath" in legacy:
                value = legacy["pythonpath"]
            else:
                value = native.get("pythonpath")
            return [w for v in _strings(value) for w in v.split()]
        section = {"pytest.ini": "pytest", ".pytest.ini": "pytest", "tox.ini": "pytest", "setup.cfg": "tool:pytest"}[name]
        parser = _ini(root, name)
        if parser is None or not parser.has_section(section):
            if name in ("pytest.ini", ".pytest.ini"):
                return []  # (pytest takes pytest.ini whatever it holds)
            continue
        return parser.get(section, "pythonpath", fallback="").split()
    return []


def is_python_project(root: Path) -> bool:
    """A pyproject.toml, setup.py or setup.cfg, or .py files at the top or one folder down."""
    if any((root / name).is_file() for name in PROJECT_FILES):
        return True
    seen = 0
    try:
        for entry in os.scandir(root):
            seen += 1
            if seen > MAX_SCANNED:
                return False
            if entry.name.endswith(".py") and entry.is_file(follow_symlinks=False):
                return True
            if entry.is_dir(follow_symlinks=False) and not entry.name.startswith(".") and entry.name != "node_modules":
                for inner in os.scandir(entry.path):
                    seen += 1
                    if inner.name.endswith(".py") and inner.is_file(follow_symlinks=False):
                        return True
                    if seen > MAX_SCANNED:
                        return False
    except OSError:
        return False
    return False


def _declared(project: Path) -> list[str]:
    """The package folders a project's files declare, and its src layout's `src/`, relative to its folder."""
    data = _toml(project, "pyproject.toml")
    declared = [*_setuptools(data), *_hatch(data), *_poetry(data), *_others(data), *_setup_cfg(project),
                *_setup_py(project)]
    return [*declared, SRC] if _src_layout(project) else declared


def nested_projects(root: Path) -> list[str]:
    """The folders below the root holding a Python project of their own (a monorepo's packages), up to
    NESTED_DEPTH folders down, relative to the tree; bounded, and never in a dependency or build folder."""
    found: list[str] = []
    seen = 0
    for top, dirs, names in os.walk(root):
        seen += 1
        rel = os.path.relpath(top, root)
        depth = 0 if rel == "." else rel.count(os.sep) + 1
        dirs[:] = sorted(d for d in dirs if not d.startswith(".") and d not in SKIPPED_FOLDERS) \
            if depth < NESTED_DEPTH else []
        # (a package's own setup.py module is no project: reposwarm/checks/setup.py)
        if depth and ("pyproject.toml" in names or ("__init__.py" not in names and any(
                name in names for name in PROJECT_FILES))):
            found.append(rel.replace(os.sep, "/"))
        if seen >= MAX_WALKED or len(found) >= MAX_NESTED:
            break
    return found


def import_roots(root: Path) -> list[Path]:
    """The tree's import roots, absolute and inside it, in the order they go on PYTHONPATH (none: not a Python
    project): the root project's package folders (the root itself for a flat layout), pytest's `pythonpath`,
    then the package folders of the projects nested below (a monorepo's; not their own folders, whose flat
    layouts' names would clash: pytest puts those first itself)."""
    if not is_python_project(root):
        return []
    found = _folders(root, _declared(root))
    tested = _folders(root, pytest_pythonpath(root))
    if not found:  # a flat layout: the packages are at the root
        found = [root]
    nested = [p for project in nested_projects(root)
              for p in _folders(root, (posixpath.normpath(posixpath.join(project, rel))
                                       for rel in _declared(root / project) if not posixpath.isabs(rel)))]
    return list(dict.fromkeys([*found, *tested, *nested]))[:MAX_ROOTS]


def _folders(root: Path, rels: Iterable[str]) -> list[Path]:
    out = []
    for rel in rels:
        folder = _inside(root, rel)
        if folder is not None:
            out.append(Path(os.path.normpath(folder)))
    return out


def pythonpath(root: Path, profile_env: Mapping[str, str], first: Sequence[str] = ()) -> str:
    """The PYTHONPATH a check of the tree at `root` runs with: `first` (say, a tracer's folder), then the tree's
    import roots, then the entries of `profile_env`'s PYTHONPATH (relative ones made absolute against the tree,
    where commands run). Each entry once: `profile_env` may be an environment that already holds these roots. ""
    when there is nothing to put there."""
    root = Path(os.path.normpath(root))
    given = [str(root / e) if not os.path.isabs(e) else e
             for e in profile_env.get("PYTHONPATH", "").split(os.pathsep)] if profile_env.get("PYTHONPATH") else []
    entries = [*first, *(str(p) for p in import_roots(root)), *given]
    return os.pathsep.join(dict.fromkeys(os.path.normpath(e) for e in entries if e))


# --- what a build writes into the package, which a clean tree lacks ---

# setuptools-scm's own template (hatch-vcs and setuptools-scm write it at build and install time, and the project
# ignores it): a package that imports its _version.py cannot be imported from a clean tree without it.
VERSION_TEMPLATE = """# file generated by reposwarm for a check, as setuptools-scm writes it at install time
__all__ = ["__version__", "__version_tuple__", "version", "version_tuple"]
__version__ = version = {version!r}
__version_tuple__ = version_tuple = {parts!r}
"""
_TAG_VERSION = re.compile(r"^v?(\d+(?:\.\d+){0,3})$")


def version_files(root: Path) -> list[str]:
    """The version files the project's build writes into its package (hatch-vcs' `version-file`, setuptools-scm's
    `version_file`/`write_to`, pdm-backend's scm `write_to`), relative to the tree: .py files only."""
    data = _toml(root, "pyproject.toml")
    rels = [*_strings(_get(data, "tool", "hatch", "build", "hooks", "vcs", "version-file")),
            *_strings(_get(data, "tool", "setuptools_scm", "version_file")),
            *_strings(_get(data, "tool", "setuptools_scm", "write_to"))]
    pdm = _strings(_get(data, "tool", "pdm", "version", "write_to"))
    if pdm:  # (relative to the package folder)
        where = (_strings(_get(data, "tool", "pdm", "build", "package-dir")) or [SRC if _src_layout(root) else "."])[0]
        rels += [f"{where}/{rel}" for rel in pdm]
    return [rel for rel in dict.fromkeys(rels) if rel.endswith(".py")]


def _version(root: Path) -> str:
    """The version the tree's last tag names (`git describe`), else 0.0.0."""
    try:
        done = subprocess.run(["git", "describe", "--tags", "--abbrev=0"], cwd=root, capture_output=True, text=True,
                              timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return "0.0.0"
    found = _TAG_VERSION.match(done.stdout.strip()) if done.returncode == 0 else None
    return found.group(1) if found else "0.0.0"


def _ignored(root: Path, rel: str) -> bool:
    try:
        return subprocess.run(["git", "check-ignore", "-q", "--", rel], cwd=root, capture_output=True,
                              timeout=30).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def write_version_files(root: Path) -> tuple[list[Path], list[str]]:
    """The version files the project's build would have written (version_files), written into the tree for its
    checks where it has none and git ignores them (never one a lane could commit): the files written, to remove
    after the checks (remove_files), and what was written, said."""
    made: list[Path] = []
    said: list[str] = []
    for rel in version_files(root):
        folder = _inside(root, posixpath.dirname(rel) or ".")
        path = (folder / posixpath.basename(rel)) if folder is not None else None
        if path is None or os.path.lexists(path) or not _ignored(root, rel):
            continue
        version = _version(root)
        try:
            path.write_text(VERSION_TEMPLATE.format(version=version, parts=tuple(int(p) for p in version.split("."))))
        except OSError:
            continue
        made.append(path)
        said.append(f"python: wrote {rel} (version {version}), which the project's build makes at install time, so "
                    "the tree's package imports; removed after the checks")
    return made, said


def remove_files(paths: Iterable[Path]) -> None:
    for path in paths:
        with contextlib.suppress(OSError):
            path.unlink()


# --- an editable install of the tree's own packages, in an interpreter the sandbox shows ---

PTH_HEAD_BYTES = 64 * 1024  # of a .pth file and the module it imports: what names the installed paths and packages
MAX_PTH = 200  # .pth files looked at per site folder
# Where the system's interpreters keep their packages (the sandbox shows /usr whole).
SYSTEM_SITES = ("/usr/lib/python3*/site-packages", "/usr/lib/python3*/dist-packages",
                "/usr/local/lib/python3*/site-packages", "/usr/local/lib/python3*/dist-packages")
_IMPORTED = re.compile(r"^\s*import\s+([A-Za-z_][\w]*)", re.M)


def top_level_names(roots: Sequence[Path]) -> set[str]:
    """The packages and modules the import roots provide at their top."""
    names: set[str] = set()
    for folder in roots:
        try:
            entries = list(os.scandir(folder))[:MAX_SCANNED]
        except OSError:
            continue
        for entry in entries:
            if entry.name.endswith(".py") and entry.name[:-3].isidentifier() and entry.name != "setup.py":
                names.add(entry.name[:-3])
            elif entry.is_dir(follow_symlinks=False) and entry.name.isidentifier() and (
                    os.path.isfile(os.path.join(entry.path, "__init__.py"))):
                names.add(entry.name)
    return names


def site_folders(folder: Path) -> list[Path]:
    """The package folders of the interpreters a bound folder holds: a virtual environment's or a prefix's
    (lib/pythonX.Y/site-packages), each version of a version manager's root (pyenv's versions/*), or one itself."""
    if folder.name in ("site-packages", "dist-packages"):
        return [folder]
    patterns = ("lib/python3*/site-packages", "lib/python3*/dist-packages", "local/lib/python3*/dist-packages",
                "versions/*/lib/python3*/site-packages")
    try:
        return [p for pattern in patterns for p in sorted(folder.glob(pattern))[:16] if p.is_dir()]
    except OSError:
        return []


def _head(path: Path) -> str:
    try:
        with path.open("rb") as f:
            return f.read(PTH_HEAD_BYTES).decode("utf-8", "replace")
    except OSError:
        return ""


def _installs(site: Path, pth: Path, names: set[str], root: Path) -> bool:
    """Whether a .pth file installs one of the tree's top-level packages from elsewhere: a path line naming a
    folder that holds one (an editable install's src/), or a module it imports that maps one (setuptools'
    `__editable__` finder's MAPPING, the `editables` redirector's map_module)."""
    text = _head(pth)
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith(("import ", "import\t")):
            for module in _IMPORTED.findall(line):
                source = _head(site / f"{module}.py")
                if any(re.search(rf"""['"]{re.escape(n)}['"]\s*[:,]""", source) for n in names):
                    return True
            continue
        folder = Path(line) if os.path.isabs(line) else site / line
        if root == folder or root in folder.parents:
            continue  # (the tree's own, in a venv a setup step made from it)
        if any((folder / n / "__init__.py").is_file() or (folder / f"{n}.py").is_file() for n in names):
            return True
    return False


def editable_masks(folders: Iterable[Path], root: Path) -> list[Path]:
    """The .pth files, in the site folders of these bound folders and of the system's interpreters, that install
    one of the tree's own top-level packages from elsewhere (an editable install of the user's checkout): hidden
    from the check, which imports those packages from the tree's import roots. Where the checkout is visible in the
    sandbox (under /opt, or in read_only_paths), a setuptools finder would otherwise import a module the tree
    removed from the checkout."""
    names = top_level_names(import_roots(root))
    if not names:
        return []
    sites: list[Path] = []
    for folder in folders:
        sites += site_folders(folder)
    for pattern in SYSTEM_SITES:
        sites += sorted(Path("/").glob(pattern.lstrip("/")))[:16]
    masks: list[Path] = []
    for site in dict.fromkeys(sites):
        try:
            pths = sorted(site.glob("*.pth"))[:MAX_PTH]
        except OSError:
            continue
        masks += [pth for pth in pths if pth.is_file() and not pth.is_symlink() and _installs(site, pth, names, root)]
    return masks
