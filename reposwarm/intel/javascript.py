"""A JavaScript or TypeScript project's checks as the repository is, with no node_modules (every clone, every
checked tree): its package manager, the setup step that installs its dependencies, and its tests' runner.

- The package manager: `packageManager` in package.json where it names one (pnpm@10.28.0), else the lock file
  (pnpm-lock.yaml: pnpm; yarn.lock: yarn, berry or classic by `.yarnrc.yml`, the declared version or the lock's
  own format; package-lock.json or npm-shrinkwrap.json: npm; bun.lock or bun.lockb: bun), else npm.
- The setup step, from it: `pnpm install --frozen-lockfile`, `yarn install --frozen-lockfile` (classic) or
  `--immutable` (berry), `npm ci`, `bun install --frozen-lockfile`: run once per lock file on the worker, its
  node_modules cached and bound read-only into every checked tree with the same lock (reposwarm/checks/setup.py).
  The manager installed on the worker is used as it is: corepack would download the declared version at run time
  (and a pnpm told to manage its own version downloads one too: npm_config_manage_package_manager_versions=false
  stops it), and checks download no binary. A manager only corepack provides is missing: the run is refused before
  it starts, naming what to install (toolchain_needs.py).
- The tests: the test script read step by step (jsscripts.py); the runner's own command (vitest run, jest,
  mocha, node --test) run through the manager (`pnpm exec vitest run`, `npx jest`, `yarn mocha`, `bunx vitest
  run`) so its results are read per test; a build the script runs before the tests is kept before it (the tests
  may import what it makes); lint and typechecks are offered in the notes, not run: a lint failure on the base
  commit would otherwise fail every run's checks as not judged. A script with no runner reposwarm can read runs
  whole (`pnpm test`), judged by its exit code, and says why.
- Workspaces (package.json `workspaces`, pnpm-workspace.yaml): one install at the root; the root's runner runs
  the members' tests when its script has one; a root script that runs each member's (`pnpm -r test`, turbo,
  lerna, nx) gives way to each member's own command (structure.py's nested checks).
"""

from __future__ import annotations

import json
import posixpath
import re
import weakref
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field
from typing import Any

import yaml

from reposwarm.intel import jsscripts, toolchain_needs
from reposwarm.intel.jsscripts import BUILD, LINT, OTHER, RUNNER, TYPECHECK, WORKSPACES, Step

Read = Callable[[str], "str | None"]

# lock files by the manager that writes them; the first found wins when several are there
LOCK_FILES = (("pnpm-lock.yaml", "pnpm"), ("bun.lock", "bun"), ("bun.lockb", "bun"), ("yarn.lock", "yarn"),
              ("package-lock.json", "npm"), ("npm-shrinkwrap.json", "npm"))
MANAGERS = ("npm", "pnpm", "yarn", "bun")
PNPM_ENV = {"npm_config_manage_package_manager_versions": "false"}  # pnpm never swaps itself for a download
BERRY_ENV = {"YARN_NODE_LINKER": "node-modules"}  # Plug'n'Play's .pnp.cjs is a file no cache entry keeps
MAX_SAID = 120  # of a script, in a note


@dataclass(frozen=True)
class Manager:
    """The package manager of a package.json's folder, and why it is that one."""

    name: str  # npm, pnpm, yarn, bun
    why: str  # "pnpm-lock.yaml", "packageManager pnpm@10.28.0 and pnpm-lock.yaml", "no lock file"
    lock: str | None = None  # the lock file it installs from (a path in the tree)
    version: str | None = None  # the version packageManager names
    berry: bool = False  # yarn 2 or later
    yarn_path: str | None = None  # .yarnrc.yml's yarnPath: the yarn release committed in the tree
    pnp: bool = False  # yarn berry with Plug'n'Play (no node_modules unless told)
    others: tuple[str, ...] = ()  # lock files of other managers, found too

    @property
    def tool(self) -> str:
        return self.name

    @property
    def install_hint(self) -> str:
        if self.name == "yarn" and self.berry:
            major = (self.version or "4").split(".")[0]
            return (f"npm i -g @yarnpkg/cli-dist@{self.version or major} (yarn {major}), or commit it: "
                    f"`yarn set version {self.version or major}` writes .yarn/releases and yarnPath, which yarn 1 runs")
        pinned = self.version or {"pnpm": "9", "yarn": "1", "bun": "1"}.get(self.name)
        if self.name == "npm":
            return "apt-get install npm"
        return f"npm i -g {self.name}@{pinned}"

    def install(self) -> list[str]:
        """The setup command that installs exactly what the lock file says."""
        if self.name == "pnpm":
            return ["pnpm", "install", "--frozen-lockfile"] if self.lock else ["pnpm", "install", "--no-lockfile"]
        if self.name == "yarn":
            if self.berry:
                return ["yarn", "install", "--immutable"] if self.lock else ["yarn", "install"]
            return ["yarn", "install", "--non-interactive", "--frozen-lockfile" if self.lock else "--no-lockfile"]
        if self.name == "bun":
            return ["bun", "install", "--frozen-lockfile"] if self.lock else ["bun", "install", "--no-save"]
        return ["npm", "ci", "--no-audit", "--no-fund"] if self.lock else \
            ["npm", "install", "--no-audit", "--no-fund", "--no-package-lock"]

    def exec(self, words: list[str]) -> list[str]:
        """A program of the package (node_modules/.bin) run through the manager."""
        if not words or "/" in words[0] or words[0] in ("node", "nodejs"):
            return list(words)
        head = {"pnpm": ["pnpm", "exec"], "yarn": ["yarn"], "bun": ["bunx"]}.get(self.name, ["npx"])
        return [*head, *words]

    def run_script(self, script: tuple[str, ...]) -> list[str]:
        name, passed = script[0], list(script[1:])
        head = {"yarn": ["yarn", "run", name], "bun": ["bun", "run", name]}.get(self.name, [self.name, "run", name])
        return [*head, *(["--", *passed] if passed else [])]

    def test(self) -> list[str]:
        return ["bun", "run", "test"] if self.name == "bun" else [self.name, "test"]

    def env(self, installed: str | None) -> dict[str, str]:
        """What the setup and the checks run with: a pnpm other than the one packageManager names is told not to
        download that one (pnpm 10 would, and `pnpm exec` too, offline); yarn berry makes node_modules."""
        swaps = self.name == "pnpm" and self.version is not None and (installed or "").lstrip("v") != self.version
        return {**(PNPM_ENV if swaps else {}), **(BERRY_ENV if self.pnp else {})}


def _json(text: str | None) -> dict[str, Any]:
    try:
        data = json.loads(text or "")
    except ValueError:
        return {}
    return data if isinstance(data, dict) else {}


def declared(package: Mapping[str, Any]) -> tuple[str, str | None] | None:
    """packageManager's manager and version: "pnpm@10.28.0+sha512.abc" -> ("pnpm", "10.28.0")."""
    value = package.get("packageManager")
    found = re.fullmatch(r"\s*(npm|pnpm|yarn|bun)(?:@([0-9][0-9A-Za-z.+-]*))?\s*", value) \
        if isinstance(value, str) else None
    if found is None:
        return None
    return found.group(1), (found.group(2).split("+")[0] if found.group(2) else None)


_PRESENT: weakref.WeakKeyDictionary[Any, dict[str, bool]] = weakref.WeakKeyDictionary()


def _exists(path: str, read: Read, names: Collection[str] | None) -> bool:
    """Whether the tree has `path`: from its file list, else by reading it once per reader."""
    if names is not None:
        return path in names
    try:
        seen = _PRESENT.setdefault(read, {})
    except TypeError:  # (a reader that takes no weak reference: asked each time)
        return read(path) is not None
    if path not in seen:
        seen[path] = read(path) is not None
    return seen[path]


def manager_of(folder: str, read: Read, names: Collection[str] | None = None,
               inherit: Manager | None = None) -> Manager:
    """The package manager of the package.json in `folder` ("" at the root): packageManager, then its lock file,
    then `inherit` (the root's, for a workspace member with no lock of its own), then npm."""
    at = (lambda name: posixpath.join(folder, name)) if folder else (lambda name: name)
    package = _json(read(at("package.json")))
    locks = [(at(lock), manager) for lock, manager in LOCK_FILES if _exists(at(lock), read, names)]
    said = declared(package)
    if said is not None:
        name, version = said
        lock = next((path for path, manager in locks if manager == name), None)
        why = f"packageManager {package['packageManager'].split('+')[0]}" + (f" and {lock}" if lock else "")
    elif locks:
        (lock, name), version = locks[0], None
        why = lock
    elif inherit is not None:
        return inherit
    else:
        name, version, lock, why = "npm", None, None, "no lock file"
    others = tuple(path for path, manager in locks if path != lock)
    if name != "yarn":
        return Manager(name, why, lock, version, others=others)
    rc = yaml_of(read(at(".yarnrc.yml")) or (read(".yarnrc.yml") if folder else None))
    berry = bool(rc) or (version is not None and not version.startswith("1.")) or \
        (lock is not None and "__metadata:" in (read(lock) or "")[:4000])
    yarn_path = rc.get("yarnPath") if isinstance(rc.get("yarnPath"), str) else None
    if yarn_path is not None and not _exists(at(yarn_path) if folder else yarn_path, read, names):
        yarn_path = None
    pnp = berry and rc.get("nodeLinker", "pnp") == "pnp"
    return Manager("yarn", why, lock, version, berry, yarn_path, pnp, others)


def yaml_of(text: str | None) -> dict[str, Any]:
    try:
        data = yaml.safe_load(text or "")
    except yaml.YAMLError:
        return {}
    return data if isinstance(data, dict) else {}


def usable(manager: Manager, path: str | None = None) -> str | None:
    """Why the manager installed here cannot serve this project (yarn 1 where the project is yarn berry and commits
    no release of it), or None."""
    if manager.name != "yarn" or not manager.berry or manager.yarn_path:
        return None
    found = toolchain_needs.find("yarn", path)
    shown = toolchain_needs.version(found) if found else None
    if found and shown and shown.startswith("1."):
        return (f"yarn {manager.version or '2+'} (the project is yarn berry: {manager.why}) while yarn {shown} is "
                f"installed ({found}), and the project commits no yarn release (yarnPath): {manager.install_hint}")
    return None


def _installed(manager: Manager) -> list[str]:
    """What the worker has of the manager, against what the project declares: a different major is said (it is
    used as it is), an unusable one too (toolchain_needs refuses the run over it)."""
    if (problem := usable(manager)) is not None:
        return [f"toolchain: {problem}"]
    found = toolchain_needs.find(manager.tool)
    shown = toolchain_needs.version(found) if found else None
    if found is None or not shown or not manager.version:
        return []
    if shown.lstrip("v").split(".")[0] != manager.version.split(".")[0]:
        return [f"toolchain: {manager.tool} {shown} is installed ({found}) and packageManager names "
                f"{manager.tool}@{manager.version}: used as installed (nothing downloads another at run time); if "
                f"the install fails over the lock file's format, {manager.install_hint}"]
    return []


@dataclass
class JsChecks:
    """The JavaScript part of a detected check profile."""

    commands: list[list[str]] = field(default_factory=list)
    setup: list[list[str]] = field(default_factory=list)
    cache_key: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    members_run_here: bool = False  # the root's command runs the workspace members' tests: none of their own


def workspace_root(names: Collection[str], read: Read) -> bool:
    return "pnpm-workspace.yaml" in names or bool(_json(read("package.json")).get("workspaces"))


def _has_dependencies(package: Mapping[str, Any]) -> bool:
    return any(package.get(key) for key in ("dependencies", "devDependencies", "optionalDependencies"))


def root_checks(names: Collection[str], read: Read, nested: Collection[str] = ()) -> JsChecks | None:
    """The root package.json's checks, its setup and why (None: no package.json at the root). `nested`: the
    folders of the packages below it that have checks of their own: the root's install serves those that are its
    workspace's members, so it is kept for them even where the root has no tests of its own."""
    if "package.json" not in names:
        return None
    package = _json(read("package.json"))
    manager = manager_of("", read, names)
    found = toolchain_needs.find(manager.tool)
    out = JsChecks(env=manager.env(toolchain_needs.version(found) if found else None))
    workspace = workspace_root(names, read)
    what = "a workspace root (" + ("pnpm-workspace.yaml" if "pnpm-workspace.yaml" in names else
                                   "package.json workspaces") + ")" if workspace else "package.json"
    out.notes.append(f"JavaScript ({what}): package manager {manager.name}{' (berry)' if manager.berry else ''}, "
                     f"from {manager.why}" + (f"; also found {', '.join(manager.others)} (not used)"
                                              if manager.others else ""))
    out.notes += _installed(manager)
    script = jsscripts.test_script(package)
    tests: list[str] = []
    if script is None:
        tests.append("no test script in package.json" + (": the members' own tests are checked" if workspace
                                                         else ": no JavaScript check at the root"))
    else:
        steps = jsscripts.read_script(package.get("scripts") or {})
        out.commands, tests, runs_all = commands_of(steps, manager, script, package.get("scripts"))
        out.members_run_here = runs_all and workspace
    if (manager.lock or _has_dependencies(package)) and (out.commands or (workspace and nested)):
        install = manager.install()
        out.setup.append(install)
        out.cache_key = [k for k in (manager.lock, ".npmrc", "pnpm-workspace.yaml",
                                     ".yarnrc.yml" if manager.berry else None) if k and k in names] or ["package.json"]
        out.notes.append(f"setup: {' '.join(install)}, with network, once per {', '.join(out.cache_key)} on the "
                         "worker (node_modules cached and bound read-only into every checked tree with the same "
                         "key files)" + ("" if manager.lock else ": no lock file, so it resolves the versions "
                                         "anew each time; commit one"))
    if not out.commands and not out.setup:
        out.env = {}  # (nothing of the root's runs: its settings would only key the other installs anew)
    if out.env:
        out.notes.append("setup and checks with " + ", ".join(f"{k}={v}" for k, v in out.env.items()) + (
            " (pnpm runs as installed, never a download of the version packageManager names)"
            if manager.name == "pnpm" else "") + (" (node_modules instead of Plug'n'Play's .pnp.cjs, a file the "
                                                  "setup cache does not keep)" if manager.pnp else ""))
    out.notes += tests
    return out


def commands_of(steps: list[Step], manager: Manager, script: str, scripts: Mapping[str, Any] | None = None,
                where: list[str] | None = None) -> tuple[list[list[str]], list[str], bool]:
    """The profile's commands for a test script's steps, the notes saying why, and whether the script's runner
    runs everything (no step of it hands the tests to the workspace's members). `scripts`: the package's scripts
    (to say what a script named in a note runs); `where`: the words that run a command in the package's folder
    (`env -C web/app`)."""
    lead = list(where or [])
    runners = [i for i, s in enumerate(steps) if s.kind == RUNNER]
    recursive = any(s.kind == WORKSPACES for s in steps)
    said = _said(script)
    if not runners:
        why = next((s.said for s in steps if s.said), "") or ("it runs each workspace member's tests" if recursive
                                                               else "no test runner reposwarm reads in it")
        if recursive:
            return [], [f"tests: the test script `{said}` runs the members' own ({why}): each member's command is "
                        "checked instead"], False
        command = [*lead, *manager.test()]
        return [command], [f"tests: the test script `{said}`: {' '.join(command)}, judged by its exit code only "
                           f"({why}); give the runner's command in a lanes file to have it judged per test"], False
    commands: list[list[str]] = []
    tests: list[str] = []
    kept: list[str] = []
    offered: list[str] = []
    for i, step in enumerate(steps):
        if not step.words and not step.script:  # a part no command can run alone (`a || b`, a pipe)
            offered.append(f"`{_said(step.text)}`" + (f" ({step.said})" if step.said else ""))
            continue
        argv = _argv(step, manager, lead)
        if argv in commands or step.kind == WORKSPACES:
            continue
        body = scripts.get(step.script[0]) if step.script and isinstance(scripts, Mapping) else None
        shown = f"`{' '.join(argv)}`" + (f" ({_said(body)})" if isinstance(body, str) else "")
        if step.kind == RUNNER:
            commands.append(argv)
            tests.append(" ".join(argv))
        elif step.kind in (BUILD, OTHER) and i < runners[-1]:
            commands.append(argv)
            kept.append(shown)
        elif shown not in offered:
            offered.append(shown)
    changed = "; ".join(dict.fromkeys(s.said for s in steps if s.kind == RUNNER and s.said))
    notes = [f"tests: the test script `{said}`: {', then '.join(tests)}, judged per test (the runner's own "
             f"command{', ' + changed if changed else ''})"]
    if kept:
        notes.append(f"kept before the tests, which may need what they make: {', '.join(kept)} (judged by exit code)")
    if offered:
        notes.append(f"not run by the checks: {', '.join(offered)}; add them to the profile's commands to gate on "
                     "them too (a failure of one on the base commit then fails every run's checks as not judged)")
    return commands, notes, not recursive


def _argv(step: Step, manager: Manager, lead: list[str]) -> list[str]:
    """The command that runs a step alone: its script through the manager when it came from one and holds no
    test runner (`pnpm run lint`), else its program through the manager (`pnpm exec vitest run`)."""
    if step.script and step.kind != RUNNER:
        body = manager.run_script(step.script)
    elif step.runner == "bun" and step.words[1:2] == ("test",):
        body = [*step.words, "--reporter=junit", "--reporter-outfile={junit}"]
    else:
        body = manager.exec(list(step.words))
    settings = list(step.settings)
    if lead and lead[0] == "env":
        return [*lead, *settings, *body]
    return [*lead, *(["env", *settings] if settings else []), *body]


def _said(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= MAX_SAID else text[:MAX_SAID - 3] + "..."


# --- a package below the root (structure.package_check) -----------------------------------------------------------


def package_command(path: str, read: Read, workspace: bool) -> list[str]:
    """The command that runs one package's tests alone, from the repository's root (empty: it has no tests): its
    runner's own command, in its folder, through its manager; else its test script through the manager."""
    package = _json(read(posixpath.join(path, "package.json") if path else "package.json"))
    script = jsscripts.test_script(package)
    if script is None:
        return []
    root = manager_of("", read) if path else None
    manager = manager_of(path, read, inherit=root) if path else manager_of("", read)
    steps = jsscripts.read_script(package.get("scripts") or {})
    runner = next((s for s in steps if s.kind == RUNNER), None)
    here = path or "."
    if runner is not None and runner.runner == "node" and not runner.settings and runner.words[1:2] == ("--test",):
        # node needs no manager: its test files, from the root
        targets = [a for a in runner.words[2:] if not a.startswith("-")]
        return ["node", "--test", *([posixpath.join(path, t) for t in targets] if targets else [f"{here}/"])]
    if manager.name == "npm" and (workspace or not path):
        # npm hoists a workspace's binaries to the root: the runner runs from there, pointed at the package
        if runner is not None and runner.runner in ("vitest", "jest") and not runner.settings:
            flag = ["--root", here] if runner.runner == "vitest" else ["--rootDir", here]
            return ["npx", *runner.words, *flag]
        if not path:
            return ["npm", "test"]
        return ["npm", "test", "--workspace", path]
    where = ["env", "-C", path] if path else []
    if runner is not None:
        return _argv(runner, manager, where)
    return [*where, *manager.test()]


def package_setup(path: str, read: Read, names: Collection[str]) -> tuple[list[str], str] | None:
    """The install of a package below the root that is no workspace member, from its own lock file, in its folder,
    and that lock file (None: it has no lock of its own, or no dependencies)."""
    package = _json(read(posixpath.join(path, "package.json")))
    manager = manager_of(path, read, names)
    if manager.lock is None or not _has_dependencies(package):
        return None
    return ["env", "-C", path, *manager.install()], manager.lock


__all__ = ["BUILD", "LINT", "LOCK_FILES", "MANAGERS", "OTHER", "RUNNER", "TYPECHECK", "WORKSPACES", "JsChecks",
           "Manager", "commands_of", "declared", "manager_of", "package_command", "package_setup", "root_checks",
           "usable", "workspace_root"]


def toolchain_hints(files: Collection[str] | None,
                       read: Callable[[str], str | None] | None) -> tuple[dict[str, str], dict[str, str]]:
    """What the repository itself says about its toolchains: its JavaScript package manager's install line (the
    version its packageManager names), and, by tool, why the one installed cannot serve it (yarn 1 for a yarn 4
    project that commits no release of it)."""
    if files is None or read is None or "package.json" not in set(files):
        return {}, {}
    manager = manager_of("", read, set(files))
    problem = usable(manager)
    return {manager.tool: manager.install_hint}, ({manager.tool: problem} if problem else {})
