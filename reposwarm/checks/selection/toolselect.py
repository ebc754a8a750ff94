"""Selection by the repository's own build tool (issue 37, `selector: bazel|nx|turbo|pants|go`): which tests of one
check command a change affects, in the tool's own terms, asked of the tool itself in the check's sandbox.

`select` answers the command that runs only the affected tests, None where none is, or the command unchanged
(`whole`) where the tool cannot tell: not installed, its query failed or printed what cannot be read, a change it
cannot place (its own configuration), a changed path that is no safe datum. Per tool:

- bazel: `kind(".*_test rule", rdeps(<the command's patterns>, <the changed files' targets>))` (a file by a regex
  over its package's targets: a file no rule declares is in none), then `bazel test <flags> -- <those labels>`;
- go: `go list -deps -test` over the command's packages: those whose test binary holds a package with a changed
  file, as `go test <flags> <their import paths>`;
- nx: `nx show projects --affected --files=<changed>`, then `nx affected -t X --files=...` (with `--projects`:
  `nx run-many` of the affected among them);
- turbo: `turbo run X --filter=...[<since>] --dry=json`, then the command with that filter (with filters of its
  own: the affected packages among them, by name). Turbo reads git for it;
- pants: `pants --changed-since=<since> --changed-dependents=transitive list`, then the goals with those options
  in place of `::` (narrower specs: whole). Pants reads git for it.
"""

from __future__ import annotations

import json
import os
import posixpath
import re
from dataclasses import dataclass
from pathlib import Path

from reposwarm.checks import sandbox
from reposwarm.checks.runner import run_command
from reposwarm.checks.runners import prefixes, selectors
from reposwarm.contracts import CheckProfile
from reposwarm.runs.store import Store

_REF = re.compile(r"[A-Za-z0-9][A-Za-z0-9._/-]*")  # a commit or branch a tool may read git for


@dataclass(frozen=True)
class Chosen:
    argv: list[str] | None  # what runs instead of the command: only the affected tests; None: nothing is affected
    note: str  # in words, for the verdict line
    whole: bool = False  # the tool could not tell: argv is the command unchanged, and the note says why


class _Whole(Exception):
    """Why the tool cannot tell which tests are affected: the command runs whole."""


@dataclass(frozen=True)
class _Ask:
    """Runs a tool's query as a check command: in the sandbox, with the profile's limits, its log in the store."""

    tree: sandbox.Tree
    profile: CheckProfile
    store: Store | None

    async def __call__(self, argv: list[str]) -> str:
        what = " ".join([os.path.basename(argv[0]), *[a for a in argv[1:] if not a.startswith("-")][:1]])
        try:
            result, output = await run_command(argv, self.tree, self.profile, self.profile.timeout_s, self.store)
        except (OSError, RuntimeError, ValueError) as err:  # (the sandbox refused it: a toolchain it may not show)
            raise _Whole(f"`{what} ...` could not run: {err}") from err
        if result.exit_code != 0:
            said = [line.strip() for line in output.splitlines() if line.strip()]
            how = "timed out" if result.timed_out else \
                f"exited {result.exit_code}" if result.exit_code is not None else "was ended at a limit"
            raise _Whole(f"`{what} ...` {how}" + (f": {said[-1][:300]}" if said else ""))
        return output


async def select(selector: str, argv: list[str], changed: list[str], since: str, tree: sandbox.Tree,
                 profile: CheckProfile, store: Store | None) -> Chosen:
    """The command `argv` narrowed by `selector` to the tests the `changed` paths (repo-relative, of the tree's
    changes since the commit `since`) affect; never raises for the tool's failure."""
    try:
        choose = _CHOOSERS.get(selector)
        if choose is None:
            raise _Whole(f"reposwarm has no selector {selector!r}")
        paths = _safe_paths(changed)
        if not paths:
            return Chosen(None, f"{selector}: no file changed")
        return await choose(list(argv), paths, since, _Ask(tree, profile, store))
    except _Whole as why:
        return Chosen(list(argv), f"{selector}: the whole command runs: {why}", whole=True)


def _safe_paths(changed: list[str]) -> list[str]:
    """The changed paths; one that reads as an option, leaves the tree or holds a control character: whole."""
    out: set[str] = set()
    for path in changed:
        norm = posixpath.normpath(path) if path else ""
        if not norm or norm == "." or path.startswith(("-", "/")) or ".." in path.split("/") \
                or any(ord(c) < 32 or ord(c) == 127 for c in path):
            raise _Whole(f"the changed path {path!r} is no path inside the tree")
        out.add(norm)
    return sorted(out)


def _program(argv: list[str], names: tuple[str, ...], tool: str) -> int:
    """Where the tool's own program is in argv (after what runs it: `npx`, `pnpm exec`, `env X=1`)."""
    for i, arg in enumerate(argv):
        if re.sub(r"\.(?:c|m)?js$", "", os.path.basename(arg)) in names:
            return i
    raise _Whole(f"the command does not run {tool}")


def _ref(since: str, tool: str) -> str:
    if not _REF.fullmatch(since) or ".." in since:
        raise _Whole(f"{since!r} is no commit {tool} can be given")
    return since


def _quoted(word: str) -> str:
    """A word of a Bazel query, double-quoted (the query language has no escapes inside quotes)."""
    if '"' in word or any(c.isspace() for c in word):
        raise _Whole(f"{word!r} cannot be written in a Bazel query")
    return f'"{word}"'


def _json(output: str, kind: type, tool: str) -> object:
    """The first JSON value of `kind` that opens a line of the output (a tool's messages share its output)."""
    decoder = json.JSONDecoder()
    for opens in re.finditer(r"^[ \t]*[\[{]", output, re.M):
        try:
            value, _ = decoder.raw_decode(output, opens.end() - 1)
        except ValueError:
            continue
        if isinstance(value, kind):
            return value
    raise _Whole(f"{tool} printed no JSON reposwarm can read")


def _name(value: object, tool: str) -> str:
    """A project, package or address a tool listed, as reposwarm passes it back: never an option."""
    if not isinstance(value, str) or not value or value.startswith("-") or "," in value \
            or any(ord(c) < 32 or c.isspace() for c in value):
        raise _Whole(f"{tool} listed {value!r}, which reposwarm does not pass on")
    return value


# --- bazel --------------------------------------------------------------------------------------------------------
_BAZEL_CONFIG = {"WORKSPACE", "WORKSPACE.bazel", "WORKSPACE.bzlmod", "MODULE.bazel", "MODULE.bazel.lock",
                 ".bazelrc", ".bazelversion", ".bazelignore"}
_BUILD = ("BUILD", "BUILD.bazel")
_LABEL_PATH = re.compile(r"[A-Za-z0-9_./+=,@~-]+")  # (what a label names without quoting)
_PATTERN = re.compile(r"^-?(?:@@?[\w.~+-]*)?//|\.\.\.|:")  # a word that reads as a target pattern
_TEST_LINE = re.compile(r"^\S+_test rule ((?:@@?[\w.~+-]*)?//\S*)$")  # --output=label_kind: `py_test rule //a:b`
_MANUAL = r'"[\[ ]manual[,\]]"'  # (`bazel test //...` leaves tests tagged manual out; named, they would run)


def _bazel_args(args: list[str]) -> tuple[list[str], list[str]]:
    """A `bazel test` command's flags (with their values) and its target patterns."""
    flags: list[str] = []
    patterns: list[str] = []
    i = 0
    while i < len(args):
        arg = args[i]
        if arg == "--":
            patterns += args[i + 1:]
            break
        if arg.startswith("-"):
            if arg.partition("=")[0] in ("--target_pattern_file", "--query_file"):
                raise _Whole(f"its targets are in a file ({arg})")
            flags.append(arg)
            # (`--config ci`: a word no pattern could be, after a flag without `=`, is its value)
            if "=" not in arg and i + 1 < len(args) and not args[i + 1].startswith("-") \
                    and not _PATTERN.search(args[i + 1]):
                flags.append(args[i + 1])
                i += 1
        else:
            patterns.append(arg)
        i += 1
    return flags, patterns


def _package(root: Path, folder: str) -> str | None:
    """The Bazel package holding `folder` (repo-relative; "" is the root): its nearest folder with a BUILD file."""
    while True:
        if any((root / folder / name).is_file() for name in _BUILD):
            return folder
        if not folder:
            return None
        folder = posixpath.dirname(folder)


def _bazel_seeds(root: Path, paths: list[str]) -> tuple[list[str], int]:
    """The query terms for the changed files (their targets, or their packages'), and how many are in no package."""
    files: dict[str, list[str]] = {}
    packages: set[str] = set()
    loose = 0
    for path in paths:
        name, folder = posixpath.basename(path), posixpath.dirname(path)
        if name in _BAZEL_CONFIG or name.endswith(".bzl"):
            raise _Whole(f"{path} is Bazel's own configuration, which any target may read")
        if not _LABEL_PATH.fullmatch(path):
            raise _Whole(f"the changed path {path!r} is one reposwarm does not name in a Bazel query")
        if name in _BUILD:
            if not (root / path).is_file():
                raise _Whole(f"{path} is gone: the packages are not what they were")
            packages.add(folder)
            # (a new BUILD file takes its folder's files out of the package above it, and out of its globs)
            above = _package(root, posixpath.dirname(folder)) if folder else None
            if above is not None:
                packages.add(above)
            continue
        package = _package(root, folder)
        if package is None:
            loose += 1
        elif os.path.lexists(root / path):
            files.setdefault(package, []).append(path[len(package) + 1:] if package else path)
        else:  # gone: the target that named it changed, whichever it is
            packages.add(package)
    terms = [_quoted(f"//{p}:*") for p in sorted(packages)]
    for package, names in sorted(files.items()):
        if package not in packages:
            regex = f"^(@@?)?//{re.escape(package)}:({'|'.join(re.escape(n) for n in sorted(names))})$"
            terms.append(f"filter({_quoted(regex)}, {_quoted(f'//{package}:*')})")
    return terms, loose


async def _bazel(argv: list[str], paths: list[str], since: str, ask: _Ask) -> Chosen:
    i = _program(argv, ("bazel", "bazelisk"), "bazel") + 1
    while i < len(argv) and argv[i].startswith("-"):  # startup options
        i += 1
    if argv[i:i + 1] not in (["test"], ["coverage"]):
        raise _Whole("it is no `bazel test` command")
    flags, patterns = _bazel_args(argv[i + 1:])
    keep = [_quoted(p) for p in patterns if not p.startswith("-")]
    drop = [_quoted(p[1:]) for p in patterns if p.startswith("-")]
    if not keep:
        raise _Whole("it names no target pattern")
    terms, loose = _bazel_seeds(ask.tree.root, paths)
    counted = f"{len(paths)} changed files" + (f", {loose} of them in no package" if loose else "")
    if not terms:
        return Chosen(None, f"bazel: no test target affected ({counted})")
    universe = " + ".join(keep) + (f" except ({' + '.join(drop)})" if drop else "")
    expr = (f'kind(".*_test rule", rdeps({universe}, {" + ".join(terms)})) '
            f'except attr("tags", {_MANUAL}, {universe})')
    output = await ask([*argv[:i], "query", "--output=label_kind", expr])
    labels = sorted({m.group(1) for m in map(_TEST_LINE.match, output.splitlines()) if m})
    if not labels:
        return Chosen(None, f"bazel: no test target affected (rdeps of {counted})")
    return Chosen([*argv[:i + 1], *flags, "--", *labels],
                  f"bazel: {len(labels)} test targets affected (rdeps of {counted})")


# --- go -----------------------------------------------------------------------------------------------------------
_GO_CONFIG = {"go.mod", "go.sum", "go.work", "go.work.sum"}
_GO_BUILD = {"tags", "mod", "modfile", "overlay"}  # the build flags that change which files and modules a build takes
_MARK = "reposwarm-go-list"  # opens each line of ours (go's own messages share the output)
_GO_FORMAT = "{{if not .Standard}}" + _MARK + '\t{{.ImportPath}}\t{{.DepOnly}}\t{{join .Deps ","}}\t{{.Dir}}{{end}}'


def _go_entries(output: str) -> list[tuple[str, bool, list[str], str]]:
    """go list's lines of ours: (import path, only a dependency, its dependencies, its folder)."""
    lines = [line.split("\t", 4) for line in output.splitlines() if line.startswith(_MARK + "\t")]
    if any(len(parts) != 5 or parts[2] not in ("true", "false") for parts in lines):
        raise _Whole("go list printed a line reposwarm cannot read")
    entries = [(p[1], p[2] == "true", [d for d in p[3].split(",") if d], os.path.realpath(p[4])) for p in lines]
    if not entries:
        raise _Whole("go list listed no package")
    return entries


def _go_hit(root: Path, paths: list[str], folders: dict[str, set[str]]) -> tuple[set[str], int]:
    """The packages holding a changed file (a .go file: its folder's; another: the nearest package above it, for
    embedded files and testdata), and how many changed files no listed package holds."""
    hit: set[str] = set()
    unplaced = 0
    for path in paths:
        name = posixpath.basename(path)
        if name in _GO_CONFIG or path.endswith("vendor/modules.txt"):
            raise _Whole(f"{path} changes how every package builds")
        folder = posixpath.dirname(path)
        while True:
            at = os.path.realpath(root / folder)
            if at in folders:
                hit |= folders[at]
                break
            if not folder or name.endswith(".go"):
                unplaced += 1
                break
            folder = posixpath.dirname(folder)
    return hit, unplaced


async def _go(argv: list[str], paths: list[str], since: str, ask: _Ask) -> Chosen:
    view = prefixes.look(argv, ask.tree.root)
    if view.runner != "go" or view.workdir is None:
        raise _Whole("it is no `go test` command")
    args = view.args
    cut = next((i for i, a in enumerate(args) if a in ("-args", "--args")), len(args))
    head, tail = args[:cut], args[cut:]
    at = selectors._positionals(head, selectors._GO_VALUED)
    kept = selectors._without(head, set(at))
    flag = [a.lstrip("-").partition("=")[0] if a.startswith("-") else "" for a in kept]
    build = [a for i, a in enumerate(kept)
             if flag[i] in _GO_BUILD or (i and "=" not in kept[i - 1] and flag[i - 1] in _GO_BUILD)]
    patterns = [head[i] for i in at] or ["."]
    output = await ask([*view.lead[:-1], "list", "-deps", "-test", "-f", _GO_FORMAT, *build, *patterns])
    entries = _go_entries(output)
    folders: dict[str, set[str]] = {}
    for path, _, _, folder in entries:
        folders.setdefault(folder, set()).add(path.split(" ")[0])  # (`p [p.test]`: p built with its tests)
    named = {path for path, dep_only, _, _ in entries if not dep_only and " " not in path}
    binaries = {p for p in named if p.endswith(".test") and p[:-5] in named}
    reach = {p: {p} for p in named - binaries}
    for path, _, deps, _ in entries:  # each package with what its test binary (or itself) holds
        owner = path if path in reach else path[:-5] if path in binaries else None
        if owner is not None:
            reach[owner] |= {d.split(" ")[0] for d in deps}
    hit, unplaced = _go_hit(ask.tree.root, paths, folders)
    chosen = sorted(p for p, held in reach.items() if held & hit)
    counted = f"{len(paths)} changed files" + (f", {unplaced} of them in no package listed" if unplaced else "")
    if not chosen:
        return Chosen(None, f"go: no package of {len(reach)} depends on a changed one ({counted})")
    return Chosen([*view.lead, *kept, *chosen, *tail],
                  f"go: {len(chosen)} of {len(reach)} packages affected (go list -deps -test; {counted})")


# --- nx -----------------------------------------------------------------------------------------------------------
_NX_DROPPED = {"--all", "--uncommitted", "--untracked", "--affected"}  # (its own notions of what to run)
_NX_VALUED_DROPPED = {"--files", "--base", "--head"}
_NX_COMMANDS = {"show", "graph", "format", "report", "reset", "migrate", "generate", "g", "list", "release", "exec"}


def _nx_args(args: list[str]) -> tuple[list[str], str | None, list[str], list[str]]:
    """`nx run-many`/`nx affected` arguments: its targets, its --projects, its --exclude and the rest (in order)."""
    targets: list[str] = []
    projects: str | None = None
    excludes: list[str] = []
    kept: list[str] = []
    listing = False  # (`-t test lint`: the words after -t are targets)
    i = 0
    while i < len(args):
        arg = args[i]
        key, eq, value = arg.partition("=")
        taken = value if eq else (args[i + 1] if i + 1 < len(args) else "")
        step = 1 if eq or key not in (*_NX_VALUED_DROPPED, "-p", "--projects", "--exclude") else 2
        if arg == "--":
            kept += args[i:]
            break
        if key in ("-t", "--targets", "--target"):
            listing = not eq
            targets += [t for t in value.split(",") if t]
        elif key in ("-p", "--projects"):
            projects = ",".join(filter(None, [projects, taken]))
        elif key == "--exclude":
            excludes.append(f"--exclude={taken}")
        elif key in _NX_DROPPED or key in _NX_VALUED_DROPPED:
            pass
        elif arg.startswith("-"):
            listing = False
            kept.append(arg)
        elif listing:
            targets += [t for t in arg.split(",") if t]
        else:
            kept.append(arg)
        i += step
    return targets, projects, excludes, kept


async def _nx(argv: list[str], paths: list[str], since: str, ask: _Ask) -> Chosen:
    at = _program(argv, ("nx",), "nx")
    head, sub, rest = argv[:at + 1], argv[at + 1:at + 2], argv[at + 2:]
    if any("," in p or " " in p for p in paths):
        raise _Whole("a changed path holds a comma or a space, which nx's --files cannot take")
    files = ",".join(paths)  # (too long for one argument: the query cannot start, and the command runs whole)
    single: str | None = None
    if sub in (["run-many"], ["affected"]):
        targets, projects, excludes, kept = _nx_args(rest)
    elif sub == ["run"] and rest and ":" in rest[0]:  # `nx run proj:test[:config]`
        single, targets, projects, excludes, kept = rest[0], rest[0].split(":")[1:2], rest[0].split(":")[0], [], []
    elif sub and sub[0] not in _NX_COMMANDS and sub[0][:1] != "-" and rest[:1] and rest[0][:1] != "-":  # `nx T P`
        single, targets, projects, excludes, kept = rest[0], sub, rest[0], [], []
    else:
        raise _Whole("it is no `nx run-many`, `nx affected`, `nx run P:T` or `nx T P` command")
    if not targets:
        raise _Whole("it names no target (-t)")
    query = [*head, "show", "projects", "--affected", f"--files={files}", f"--with-target={','.join(targets)}",
             *([f"--projects={projects}"] if projects else []), *excludes, "--json"]
    value = _json(await ask(query), list, "nx show projects")
    names = [_name(v, "nx") for v in value] if isinstance(value, list) else []
    counted = f"nx show projects --affected, {len(paths)} changed files"
    if not names:
        return Chosen(None, f"nx: no project affected ({counted})")
    if single is not None:
        return Chosen(list(argv), f"nx: {single} affected ({counted})")
    if projects is None:
        run = [*head, "affected", f"--targets={','.join(targets)}", f"--files={files}", *excludes, *kept]
    else:
        run = [*head, "run-many", f"--targets={','.join(targets)}", f"--projects={','.join(names)}", *kept]
    return Chosen(run, f"nx: {len(names)} projects affected ({counted})")


# --- turbo --------------------------------------------------------------------------------------------------------
_TURBO_VALUED = {"--concurrency", "--cache-dir", "--log-prefix", "--output-logs", "--profile", "--env-mode", "--cwd",
                 "--global-deps", "--log-order", "--cache", "--ui", "--team", "--token", "--api", "--heap"}
_TURBO_COMMANDS = {"login", "link", "prune", "ls", "query", "gen", "generate", "daemon", "info", "watch", "scan"}
_TURBO_QUERY_DROPPED = ("--dry", "--dry-run", "--graph", "--summarize")


def _turbo_args(args: list[str]) -> tuple[list[str], list[str], list[str], list[str]]:
    """`turbo run` arguments: its tasks, its filters, its other flags (with their values), and what follows `--`."""
    tasks: list[str] = []
    filters: list[str] = []
    kept: list[str] = []
    i = 0
    while i < len(args):
        arg = args[i]
        key, eq, value = arg.partition("=")
        if arg == "--":
            return tasks, filters, kept, args[i:]
        if key in ("--filter", "-F"):
            filters.append(value if eq else args[i + 1] if i + 1 < len(args) else "")
            i += 0 if eq else 1
        elif key in ("--affected", "--since", "--scope"):
            raise _Whole(f"it selects by its own notion of changes ({key})")
        elif arg.startswith("-"):
            kept.append(arg)
            if not eq and key in _TURBO_VALUED and i + 1 < len(args):
                kept.append(args[i + 1])
                i += 1
        else:
            tasks.append(arg)
        i += 1
    return tasks, filters, kept, []


def _turbo_packages(output: str, tasks: list[str]) -> set[str]:
    """The packages whose task (one of `tasks`) a `--dry=json` run would run."""
    value = _json(output, dict, "turbo --dry=json")
    listed = value.get("tasks") if isinstance(value, dict) else None
    if not isinstance(listed, list) or not all(isinstance(t, dict) and "package" in t for t in listed):
        raise _Whole("turbo's dry run names no package for its tasks (a single-package repository?)")
    return {_name(t["package"], "turbo") for t in listed if t.get("task") in tasks or t.get("taskId") in tasks}


async def _turbo(argv: list[str], paths: list[str], since: str, ask: _Ask) -> Chosen:
    at = _program(argv, ("turbo",), "turbo")
    rest = argv[at + 1:]
    if rest[:1] == ["run"]:
        rest = rest[1:]
    elif not rest or rest[0].startswith("-") or rest[0] in _TURBO_COMMANDS:
        raise _Whole("it is no `turbo run` command")
    tasks, filters, kept, tail = _turbo_args(rest)
    if not tasks:
        raise _Whole("it names no task")
    changes = f"--filter=...[{_ref(since, 'turbo')}]"
    asked = [a for a in kept if not a.startswith(_TURBO_QUERY_DROPPED)]
    head = [*argv[:at + 1], "run", *tasks]
    affected = _turbo_packages(await ask([*head, *asked, changes, "--dry=json"]), tasks)
    if filters:  # (filters are a union: the affected ones among the command's own are named)
        own = [f"--filter={f}" for f in filters]
        affected &= _turbo_packages(await ask([*head, *asked, *own, "--dry=json"]), tasks)
    note = f"since {since[:12]}; turbo reads git for it"
    if not affected:
        return Chosen(None, f"turbo: no package affected ({note})")
    chosen = [f"--filter={p}" for p in sorted(affected)] if filters else [changes]
    return Chosen([*head, *kept, *chosen, *tail], f"turbo: {len(affected)} packages affected ({note})")


# --- pants --------------------------------------------------------------------------------------------------------
_GOAL = re.compile(r"[a-z][a-z0-9-]*")


async def _pants(argv: list[str], paths: list[str], since: str, ask: _Ask) -> Chosen:
    at = _program(argv, ("pants",), "pants")
    rest = argv[at + 1:]
    cut = rest.index("--") if "--" in rest else len(rest)
    rest, tail = rest[:cut], rest[cut:]
    options: list[str] = []
    goals: list[str] = []  # the goals with their own flags, in order
    specs: list[str] = []
    for arg in rest:
        if arg.startswith("--changed-"):
            raise _Whole(f"it selects by changes itself ({arg})")
        if arg.startswith("--") or (arg.startswith("-") and not {":", "/"} & set(arg)):  # (`-dir::`: a spec)
            (goals if goals else options).append(arg)
        elif _GOAL.fullmatch(arg) and not (ask.tree.root / arg).is_dir():
            goals.append(arg)
        else:
            specs.append(arg)
    if not any(_GOAL.fullmatch(g) for g in goals) or not specs:
        raise _Whole("it is no `pants <goal> <specs>` command")
    if any(s != "::" for s in specs):  # (pants takes --changed-since for the whole repository, not within specs)
        raise _Whole(f"its specs ({' '.join(specs)}) are narrower than `::`, which --changed-since replaces")
    changes = [f"--changed-since={_ref(since, 'pants')}", "--changed-dependents=transitive"]
    output = await ask([*argv[:at + 1], *options, *changes, "list"])
    addresses = {_name(line.strip(), "pants") for line in output.splitlines()
                 if line.strip() and not any(c.isspace() for c in line.strip())}
    note = f"changed since {since[:12]} and their dependents; pants reads git for it"
    if not addresses:
        return Chosen(None, f"pants: no target affected ({note})")
    return Chosen([*argv[:at + 1], *options, *changes, *goals, *tail],
                  f"pants: {len(addresses)} targets affected ({note})")


_CHOOSERS = {"bazel": _bazel, "go": _go, "nx": _nx, "turbo": _turbo, "pants": _pants}
