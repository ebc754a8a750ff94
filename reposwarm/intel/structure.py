"""What a repository's layout says about running a swarm on it: lanes from the folders a change touches, and a
check profile from the files that say how the project is tested.

`reposwarm try` proposes a lanes file from these when the user has none: a lane per top-level folder the commit
touched, one for the files at the root, and the tests the repository's own files name. Each guess is said in
`notes`, so the user sees why the file says what it says and can edit it. Everything here reads a file list and
a reader of file contents (a tree of a commit, or a folder), never the network; only `python_with_pytest` runs
anything (the interpreters a project's environments hold, asked whether they import pytest, and the tools that
keep those environments, asked where they are: python_env.py).
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable, Collection, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any

from reposwarm.intel import javascript, toolchain_needs

if TYPE_CHECKING:
    from reposwarm.contracts.proposal import PackageInfo

MAX_LANES = 4  # lanes for folders; the files at the root get one more
ROOT_LANE = "root"
ROOT_FILES = ["*", "!*/"]  # the files at the repository's root, no folder below it
FOLDED_LANE = "others"  # the last lane, when more folders were touched than MAX_LANES
PYTHON_MARKERS = ("pyproject.toml", "setup.py", "setup.cfg", "pytest.ini", "tox.ini")
TEST_FOLDERS = ("tests", "test")
MAX_NESTED_CHECKS = 12  # packages' own commands added to a whole-repository profile; more are said in a note
BUILD_TOOLS = {"bazel": ["bazel", "test", "//..."], "buck": ["buck2", "test", "//..."], "pants": ["pants", "test", "::"]}
LANE_NAME_CHARS = re.compile(r"[^A-Za-z0-9_-]+")


@dataclass
class LanePlan:
    """A proposed lane: its name and the top-level folders it writes (none: the files at the root)."""

    name: str
    folders: list[str]

    @property
    def allowed_paths(self) -> list[str]:
        return [f"{folder}/**" for folder in self.folders] if self.folders else list(ROOT_FILES)


@dataclass
class Proposal:
    """A lanes file's content (as YAML would hold it) and why it says what it says."""

    lanes: list[LanePlan]
    profile: dict[str, Any] | None
    notes: list[str] = field(default_factory=list)

    def lanes_file(self) -> dict[str, Any]:
        others = {lane.name: [p for o in self.lanes if o is not lane for p in o.allowed_paths if o.folders]
                  for lane in self.lanes}
        lanes: dict[str, Any] = {}
        for lane in self.lanes:
            role: dict[str, Any] = {"allowed_paths": lane.allowed_paths}
            if others[lane.name]:
                role["read_only_paths"] = others[lane.name]  # the change's other folders: what it must fit
            lanes[lane.name] = role
        data: dict[str, Any] = {"swarm": {"max_parallel": min(len(lanes), MAX_LANES), "lanes": lanes}}
        if self.profile is not None:
            data["validation"] = {"profile": "default", "profiles": {"default": self.profile}}
        return data


def lane_name(folder: str, taken: Collection[str]) -> str:
    """A lane name (letters, digits, '_' and '-', starting with a letter or digit) for a folder, unused so far."""
    base = LANE_NAME_CHARS.sub("-", folder).strip("-_")[:56] or "folder"
    name, n = base, 2
    while name in taken:
        name, n = f"{base}-{n}", n + 1
    return name


def propose_lanes(paths: Iterable[str], max_lanes: int = MAX_LANES) -> list[LanePlan]:
    """A lane per top-level folder the paths are in (the folders with the most paths first, then by name; past
    `max_lanes`, the rest folded into the last), and one for the paths at the root."""
    counts: Counter[str] = Counter()
    at_root = False
    for path in paths:
        top, sep, _ = path.partition("/")
        if sep:
            counts[top] += 1
        else:
            at_root = True
    folders = sorted(counts, key=lambda f: (-counts[f], f))
    lanes: list[LanePlan] = []
    taken: set[str] = {ROOT_LANE} if at_root else set()
    own = folders if len(folders) <= max_lanes else folders[:max_lanes - 1]
    for folder in own:
        lanes.append(LanePlan(lane_name(folder, taken), [folder]))
        taken.add(lanes[-1].name)
    if len(folders) > len(own):
        lanes.append(LanePlan(lane_name(FOLDED_LANE, taken), folders[len(own):]))
    if at_root:
        lanes.append(LanePlan(ROOT_LANE, []))
    return lanes


def python_with_pytest(checkout: Path | None = None, files: Collection[str] = (),
                       read: Callable[[str], str | None] | None = None) -> tuple[str, bool]:
    """The interpreter a Python project's checks should run, and whether it imports pytest: found where the
    project's developers keep its dependencies (a .venv of the user's `checkout`, the active virtual environment,
    uv, poetry, pdm, hatch, pipenv, tox and nox environments, then `python3` on PATH: python_env.py). The pair
    carries the notes saying why, and the setup step it needs (python_env.Interpreter)."""
    from reposwarm.intel import python_env

    return python_env.find(checkout, files, read)


def detect_profile(files: Collection[str], read: Callable[[str], str | None],
                   python: Callable[[], tuple[str, bool]] = python_with_pytest,
                   packages: Sequence[PackageInfo] = ()) -> tuple[dict[str, Any] | None, list[str]]:
    """A check profile for the project whose tracked `files` these are (`read` gives a file's text, or None),
    and a note per guess. Each ecosystem found adds its command; none found: no profile (no checks). With the
    tree's `packages` (reposwarm/intel/packages.py, each with its own `check`), the packages no command at the
    root reaches (a Go module, a crate or an npm package in a folder, a Bazel/Buck/Pants tree) add theirs."""
    commands: list[list[str]] = []
    notes: list[str] = []
    names = set(files)
    has_python = any(p.endswith(".py") for p in names)
    markers = [m for m in PYTHON_MARKERS if m in names]
    test_folder = next((t for t in TEST_FOLDERS if any(p.startswith(f"{t}/") for p in names)), None)
    python_setup: list[list[str]] = []
    if has_python and (markers or test_folder or any(_is_python_test(p) for p in names)):
        chosen = python()
        exe, has_pytest = chosen
        why = ", ".join(markers) or (f"{test_folder}/" if test_folder else "test_*.py files")
        if has_pytest:
            commands.append([exe, "-m", "pytest", "-q"])
            notes.append(f"Python ({why}): pytest, judged per test (its JUnit report), the tree's own packages "
                         "first on PYTHONPATH")
        else:
            commands.append([exe, "-m", "unittest", "discover", "-t", "."])
            notes.append(f"Python ({why}): unittest, since {exe} cannot import pytest (install pytest into the "
                         "project's environment, then use [python, -m, pytest, -q])")
        notes += getattr(chosen, "notes", ())  # (python_env.Interpreter: which interpreter, and why)
        python_setup = [list(step) for step in getattr(chosen, "setup", ())]
    if "go.mod" in names:
        commands.append(["go", "test", "./..."])
        notes.append("Go (go.mod): go test ./..., judged per test")
    if "Cargo.toml" in names:
        commands.append(["cargo", "test", "--offline"])
        notes.append("Rust (Cargo.toml): cargo test --offline, with the crates you fetched")
    js = javascript.root_checks(names, read, [p.path for p in packages if p.kind == "npm" and p.path and p.check])
    if js is not None:  # (the manager from the lock file, its install as the setup step, the runner's command)
        commands += js.commands
        notes += js.notes
    js = js if js is not None else javascript.JsChecks()
    commands += _nested_checks(names, read, packages, notes, js)
    if not commands:
        notes.append("no tests found (no pyproject.toml, setup.py, tests/, go.mod, Cargo.toml or package.json "
                     "test script): no checks; add validation.profiles (docs/checks.md)")
        return None, notes
    profile: dict[str, Any] = {"timeout_s": 600, "commands": commands}
    if python_setup:  # (uv sync: the environment made in each checked tree, cached by uv.lock)
        profile["setup"] = python_setup
    _with_js(profile, js)
    notes += toolchain_needs.found_lines([*profile.get("setup", []), *commands])
    return profile, notes


def _with_js(profile: dict[str, Any], js: javascript.JsChecks) -> None:
    """The JavaScript setup (the install, the nested packages' installs), its key files and its env, beside the
    rest of the profile's: the default key files stay (a Python lock file keys its setup too)."""
    from reposwarm.contracts.config import LOCK_FILES

    if js.setup:
        profile["setup"] = [*js.setup, *profile.get("setup", [])]
        profile["cache_key"] = list(dict.fromkeys([*LOCK_FILES, *js.cache_key]))
    if js.env:
        profile["env"] = {**profile.get("env", {}), **js.env}


def _is_python_test(path: str) -> bool:
    name = PurePosixPath(path).name
    return name.endswith(".py") and (name.startswith("test_") or name.endswith("_test.py"))


def propose(changed: Iterable[str], files: Collection[str], read: Callable[[str], str | None],
            python: Callable[[], tuple[str, bool]] = python_with_pytest) -> Proposal:
    """A lanes file for a change: lanes from the paths it `changed`, checks from the project's `files`."""
    changed = list(changed)
    lanes = propose_lanes(changed)
    profile, notes = detect_profile(files, read, python)
    said = [f"{lane.name}: writes {', '.join(lane.allowed_paths)}" for lane in lanes]
    return Proposal(lanes=lanes, profile=profile, notes=[*said, *notes])


def _nested_checks(names: set[str], read: Callable[[str], str | None], packages: Sequence[PackageInfo],
                   notes: list[str], js: javascript.JsChecks) -> list[list[str]]:
    """The commands of the packages no command at the root runs: a Go module below the root (`go test ./...` at
    the root stays in its own module), a crate outside the root's workspace, an npm package that is no workspace
    member, or a member when the root's test script does not run the members' tests itself (`pnpm -r test`, or
    none: javascript.py); a Bazel, Buck or Pants tree runs its whole test target once. A package with a lock file
    of its own (no workspace member) adds its install to `js`'s setup."""
    out: list[list[str]] = []
    root_cargo = _workspace_toml(read("Cargo.toml")) if "Cargo.toml" in names else False
    for kind, argv in BUILD_TOOLS.items():
        if any(p.kind == kind for p in packages):
            out.append(argv)
            notes.append(f"{kind} ({sum(p.kind == kind for p in packages)} packages): {' '.join(argv)}")
    members = _npm_members(names, read) if any(p.kind == "npm" and p.path for p in packages) else set()
    nested = [p for p in packages if p.path and p.check and (
        (p.kind == "go-module") or (p.kind == "cargo" and not root_cargo)
        or (p.kind == "npm" and not (p.path in members and js.members_run_here)))]
    for pkg in nested[:MAX_NESTED_CHECKS]:
        out.append(pkg.check)
        notes.append(f"{pkg.kind} package {pkg.path}/ ({pkg.name}): {' '.join(pkg.check)}")
        if pkg.kind == "npm" and pkg.path not in members and (own := javascript.package_setup(pkg.path, read, names)):
            js.setup.append(own[0])
            js.cache_key.append(own[1])
            notes.append(f"npm package {pkg.path}/: its own install, {' '.join(own[0])} (from {own[1]})")
    if len(nested) > MAX_NESTED_CHECKS:
        notes.append(f"{len(nested) - MAX_NESTED_CHECKS} more packages have checks of their own, left out of the "
                     "whole-repository profile (each package's check is in `reposwarm lanes`' notes)")
    return out


def _npm_members(names: set[str], read: Callable[[str], str | None]) -> set[str]:
    """The folders of the root's npm/pnpm/yarn workspace members."""
    from reposwarm.intel.packages import npm_packages  # (packages.py imports this module)

    return {found.path for found in npm_packages(sorted(names), read) if found.workspace}


def _workspace_toml(text: str | None) -> bool:
    import tomllib

    try:
        return isinstance(tomllib.loads(text or "").get("workspace"), dict)
    except (tomllib.TOMLDecodeError, ValueError):
        return False


def package_check(kind: str, path: str, name: str, tests: Sequence[str], read: Callable[[str], str | None],
                  python: tuple[str, bool], module: str | None = None, workspace: bool = False) -> list[str]:
    """The command that runs one package's tests alone, from the repository's root, as an argv (empty: none, or
    none the tool allows per package). `tests`: where its tests are (none: no command, except for the build
    tools, an npm test script and a crate, whose unit tests are in its sources); `module`: a Go package's module folder; `workspace`: a member of the root's workspace."""
    here = path or "."
    if kind in BUILD_TOOLS:
        target = {"bazel": f"//{path}/..." if path else "//...", "buck": f"//{path}/..." if path else "//...",
                  "pants": f"{path}::" if path else "::"}[kind]
        return [*BUILD_TOOLS[kind][:2], target]
    if kind == "npm":  # its test script says whether it has tests (jest and vitest find them anywhere)
        return javascript.package_command(path, read, workspace)
    if kind == "cargo":  # (unit tests live inside the sources: a crate's tests cannot be told by name)
        if workspace or not path:
            return ["cargo", "test", "--offline", "-p", name]
        return ["cargo", "test", "--offline", "--manifest-path", f"{path}/Cargo.toml"]
    if not tests:
        return []
    if kind == "go-module":
        return ["go", "test", "./..."] if not path else ["go", "-C", path, "test", "./..."]
    if kind == "go-package":
        if module is None:
            return []
        rel = path[len(module):].lstrip("/") if module else path
        pattern = f"./{rel}/..." if rel else "./..."
        return ["go", "test", pattern] if not module else ["go", "-C", module, "test", pattern]
    if any(t.endswith(".py") or t.endswith("/") for t in tests):
        exe, has_pytest = python
        if has_pytest:
            return [exe, "-m", "pytest", "-q", here]
        folder = next((t.rstrip("/") for t in tests if t.endswith("/")), here)
        return [exe, "-m", "unittest", "discover", "-s", folder, "-t", "."]
    return []
