"""Each runner's own selector, for a targeted check (select.py): the runner's arguments that run only the tests a
lane named, and for each name which of the base commit's tests it selects (a `Pred` over the base's results).

A runner function takes the command as prefixes.look sees it (the runner's own arguments in `view.args`) and the
names, and answers the new arguments and the names they run (`Picks`: several invocations where one cannot run
exactly what was named), or why this command cannot select at all. A name it does not take is left out.
"""

from __future__ import annotations

import posixpath
import re
import tomllib
from collections.abc import Callable
from pathlib import Path

from reposwarm.checks.runners import jscollect, parsers, prefixes
from reposwarm.checks.runners.parsers import Case

Pred = Callable[[Case], "bool | None"]  # is this base test one the name selects? None: its result cannot tell
Picks = list[tuple[list[str], dict[str, Pred]]]  # (the runner's new arguments, the names they run)

TAKES = {  # what each runner selects by, said when a name belongs to no command
    "pytest": "files, folders and node ids of the tree (tests/test_x.py::test_a)",
    "unittest": "dotted ids (tests.test_x.T.test_a) or .py files of the tree",
    "node": "test files or folders of the tree",
    "jest": "test files of the tree, or FILE::TEST NAME", "vitest": "test files of the tree, or FILE::TEST NAME",
    "go": "packages (./pkg/...) and test names (TestName, pkg/path.TestName)",
    "cargo": "test name filters (tests::adds), crate names and CRATE::FILTER",
}


def inside(root: Path, path: Path) -> bool:
    try:
        path.resolve().relative_to(root.resolve())
        return True
    except (ValueError, OSError, RuntimeError):
        return False


def _local(root: Path, wd: str, path: str) -> str | None:
    """`path`, named from the tree's root, relative to the runner's folder `wd`: if it is there, inside the tree."""
    rel = posixpath.normpath(path) if path else "."
    if not (root / rel).exists() or not inside(root, root / rel):
        return None
    if wd == ".":
        return rel
    return "." if rel == wd else (rel[len(wd) + 1:] if rel.startswith(wd + "/") else None)


def _under(path: str, folder: str) -> bool:
    return folder == "." or path == folder or path.startswith(folder.rstrip("/") + "/")


def _positionals(args: list[str], valued: set[str]) -> list[int]:
    """Where `args`' positional arguments are: not options, nor their values; all of them after a `--`."""
    out, i, dashed = [], 0, False
    while i < len(args):
        a = args[i]
        if dashed or not a.startswith("-") or a == "-":
            out.append(i)
        elif a == "--":
            dashed = True
        elif "=" not in a and a in valued:
            i += 1
        i += 1
    return out


def _without(args: list[str], drop: set[int]) -> list[str]:
    return [a for i, a in enumerate(args) if i not in drop]


# --- each runner --------------------------------------------------------------------------------------------------

_PYTEST_VALUED = {"-k", "-m", "-p", "-o", "-c", "-W", "-r", "-n", "--rootdir", "--basetemp", "--confcutdir",
                  "--deselect", "--ignore", "--ignore-glob", "--junitxml", "--junit-xml", "--junit-prefix",
                  "--maxfail", "--tb", "--durations", "--durations-min", "--log-level", "--log-file", "--log-format",
                  "--log-cli-level", "--import-mode", "--cov", "--cov-report", "--cov-config", "--cov-fail-under",
                  "--dist", "--timeout", "--capture", "--color", "--override-ini", "--config-file", "--pythonwarnings",
                  "--log-file-level", "--log-date-format", "--log-cli-format", "--log-cli-date-format", "--tx"}


def _pytest(view: prefixes.View, names: list[str], root: Path, wd: str) -> Picks | str:
    args = view.args
    pos = _positionals(args, _PYTEST_VALUED)
    paths = {i for i in pos if (root / wd / args[i].partition("::")[0]).exists()}
    if "--" in args and any(i > args.index("--") and i not in paths for i in pos):
        return "its arguments after `--` are not all paths of the tree, which a targeted run would replace"
    scope = [posixpath.normpath(args[i].partition("::")[0]) for i in paths]
    chosen: dict[str, Pred] = {}
    local: list[str] = []
    for name in names:
        path, sep, rest = name.partition("::")
        here = _local(root, wd, path)
        if here is None or (scope and not any(_under(here, s) for s in scope)) or (sep and not here.endswith(".py")):
            continue
        local.append(here + sep + rest)
        chosen[name] = _pytest_pred(here, rest)
    dashes = {args.index("--")} if "--" in args else set()
    return [([*_without(args, paths | dashes), "--", *local], chosen)] if chosen else []


def _pytest_pred(path: str, rest: str) -> Pred:
    def pred(case: Case) -> bool | None:
        if case.file is None:
            return None
        file = posixpath.normpath(case.file)
        if not _under(file, path):
            return False
        if not rest:
            return True
        j = parsers.pytest_junit_name(f"{file}::{rest}")
        return case.name == j or case.name.startswith((j + ".", j + "[")) or \
            (case.outcome == parsers.ERROR and j.startswith(case.name + "."))  # the file did not load
    return pred


_UT_VALUED = {"-k", "-s", "-p", "-t", "--start-directory", "--pattern", "--top-level-directory", "--durations"}
_UT_KEPT = {"-f", "--failfast", "-c", "--catch", "-b", "--buffer", "--locals"}


def _unittest(view: prefixes.View, names: list[str], root: Path, wd: str) -> Picks | str:
    args = view.args
    rest = args[1:] if args[:1] == ["discover"] else args
    pos = [rest[i] for i in _positionals(rest, _UT_VALUED)]
    scope_ids: list[str] = []
    start = "."
    if args[:1] == ["discover"] or not pos:
        start = prefixes.option_value(rest, ("-s", "--start-directory")) or (pos[0] if pos else ".")
        top = prefixes.option_value(rest, ("-t", "--top-level-directory")) or (pos[2] if len(pos) > 2 else start)
        if posixpath.normpath(top) != ".":
            return (f"it discovers with `{top}` as its top-level folder: a targeted run names tests by dotted ids "
                    "from the command's own folder only")
    else:
        scope_ids = pos
    chosen: dict[str, Pred] = {}
    for name in names:
        dotted = name
        if name.endswith(".py"):
            here = _local(root, wd, name)
            dotted = here[:-3].replace("/", ".") if here else ""
        file = parsers.guess_file(dotted, root / wd) if re.fullmatch(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)*", dotted) else None
        if file is None or not _under(file, posixpath.normpath(start)) or not inside(root, root / wd / file):
            continue
        if scope_ids and not any(dotted == s or dotted.startswith(s + ".") for s in scope_ids):
            continue
        chosen[name] = _dotted_pred(dotted)
    kept = [a for a in rest if a in _UT_KEPT]
    return [([*kept, "-v", "--", *(_dotted(n) for n in chosen)], chosen)] if chosen else []


def _dotted(name: str) -> str:
    return name[:-3].replace("/", ".").removeprefix("./") if name.endswith(".py") else name


def _dotted_pred(dotted: str) -> Pred:
    return lambda case: case.name == dotted or case.name.startswith(dotted + ".") or \
        (case.outcome == parsers.ERROR and dotted.startswith(case.name + "."))


_JS_FILES = (".js", ".mjs", ".cjs", ".jsx", ".ts", ".mts", ".cts", ".tsx")


def _file_pred(path: str, wd: str, exact: bool) -> Pred:
    """A test of the file (or folder) `path`, relative to the runner's folder: by its file, where its result
    names one."""
    def pred(case: Case) -> bool | None:
        if case.file is None:
            return None
        file = posixpath.normpath(case.file)
        rel = file[len(wd) + 1:] if wd != "." and file.startswith(wd + "/") else file
        return _under(rel, path) if exact else (path in rel)
    return pred


def _node(view: prefixes.View, names: list[str], root: Path, wd: str) -> Picks | str:
    args = view.args
    pos = set(_positionals(args, prefixes._NODE_VALUED))
    scope = [posixpath.normpath(args[i]) for i in pos]
    chosen: dict[str, Pred] = {}
    collects = jscollect.collection(view, root).matches
    for name in names:
        here = _local(root, wd, name)
        if here is None or not ((root / wd / here).is_dir() or here.endswith(_JS_FILES)) or \
                (scope and not any(_under(here, s) for s in scope)):
            continue
        if collects is not None and not (root / wd / here).is_dir() and not collects(here):
            continue  # (a helper in a test folder: node would run it as a test file)
        chosen[name] = _file_pred(here, wd, True)
    dashes = {args.index("--")} if "--" in args else set()
    return [([*_without(args, pos | dashes), "--", *(_local(root, wd, n) or n for n in chosen)], chosen)] \
        if chosen else []


_JEST_VALUED = {"-c", "--config", "-t", "--testNamePattern", "--outputFile", "--reporters", "--testPathPattern",
                "--testPathPatterns", "--testPathIgnorePatterns", "--rootDir", "--roots", "--selectProjects",
                "--shard", "-w", "--maxWorkers", "--testTimeout", "--env", "--testEnvironment", "--seed",
                "--coverageDirectory", "--collectCoverageFrom", "--testRegex", "--testMatch", "--reporter", "-r",
                "--root", "--dir", "--project", "--environment", "--pool", "--mode", "--exclude", "--minWorkers"}
_JEST_OWN = {"-t", "--testNamePattern", "--testPathPattern", "--testPathPatterns"}
_VITEST_COMMANDS = ("run", "watch", "dev")


def _js_literal(text: str) -> str:
    return re.sub(r"[.*+?^${}()|\[\]\\/]", lambda m: "\\" + m.group(0), text)


def _jest(view: prefixes.View, names: list[str], root: Path, wd: str) -> Picks | str:
    """jest (`vitest` too: `view.runner`): a file and the test names asked of it; files asking the same names
    run together (jest's -t is one pattern for all its files)."""
    vitest = view.runner == "vitest"
    args = view.args
    pos = _positionals(args, _JEST_VALUED)
    if vitest and pos and args[pos[0]] not in _VITEST_COMMANDS:
        return f"`vitest {args[pos[0]]}` is not a run a targeted run can narrow"
    sub = [pos.pop(0)] if vitest and pos else []  # (`vitest run`: kept first)
    patterns = [args[i] for i in pos]
    drop = set(pos) | set(sub) | ({args.index("--")} if "--" in args else set())
    for i, a in enumerate(args):  # the command's own selection, which the named tests replace
        key, eq, value = a.partition("=")
        if key in _JEST_OWN:
            drop |= {i} if eq else {i, i + 1}
            if key not in ("-t", "--testNamePattern"):
                patterns.append(value if eq else (args[i + 1] if i + 1 < len(args) else ""))
    files: dict[str, set[str]] = {}  # each file, and the test names asked of it (none: the whole file)
    claimed: dict[str, str] = {}
    collects = jscollect.collection(view, root).matches  # (None: its rules unread, each name taken as named)
    for name in names:
        path, sep, test = name.partition("::")
        here = _local(root, wd, path)
        if here is None or not here.endswith(_JS_FILES) or (sep and not test) or \
                (patterns and not any(_searches(p, here) for p in patterns)) or \
                (collects is not None and not collects(here)):
            continue
        claimed[name] = here
        if not sep:
            files[here] = set()
        elif files.get(here) != set():
            files.setdefault(here, set()).add(test)
    groups: dict[frozenset[str], list[str]] = {}
    for here, tests in files.items():
        groups.setdefault(frozenset(tests), []).append(here)
    kept = _without(args, drop)
    picks: Picks = []
    for asked, group in groups.items():
        pattern = [f"--testNamePattern=(?:{'|'.join(_js_literal(t) for t in sorted(asked))})"] if asked else []
        chosen = {n: _js_pred(_file_pred(here, wd, not vitest), n.partition("::")[2] if asked else "")
                  for n, here in claimed.items() if here in group}
        how = [*(args[i] for i in sub), *kept, *pattern, *group] if vitest else \
            [*kept, "--runTestsByPath", *pattern, *group]  # (no `--`: yarn 1 takes what comes before one as its own)
        picks.append((how, chosen))
    return picks


def _searches(pattern: str, path: str) -> bool:
    try:
        return re.search(pattern, path) is not None
    except re.error:
        return True


def _js_pred(by_file: Pred, test: str) -> Pred:
    def pred(case: Case) -> bool | None:
        mine = by_file(case)
        if not mine or not test or (case.outcome == parsers.ERROR and case.name == case.file):
            return mine
        return test in case.name
    return pred


_GO_VALUED = {f"-{n}" for n in (
    "run", "bench", "count", "cpu", "timeout", "tags", "p", "parallel", "coverprofile", "covermode", "coverpkg", "o",
    "exec", "gcflags", "ldflags", "mod", "modfile", "vet", "benchtime", "blockprofile", "blockprofilerate",
    "cpuprofile", "memprofile", "memprofilerate", "mutexprofile", "mutexprofilefraction", "outputdir", "trace",
    "shuffle", "fuzz", "fuzztime", "fuzzminimizetime", "list", "skip", "asmflags", "buildmode", "compiler",
    "gccgoflags", "installsuffix", "pkgdir", "toolexec", "overlay", "pgo", "C")}
_GO_VALUED |= {"-" + flag for flag in _GO_VALUED}  # (go takes --run too)
_GO_TEST = re.compile(r"(?:Test|Example|Fuzz)\w*")
_GO_CASE = re.compile(r"^(.*?)\.((?:Test|Example|Fuzz)\w*)(?:/.*)?$")  # example.com/m/calc.TestAdd/sub


def _go_module(root: Path, wd: str) -> str | None:
    try:
        found = re.search(r"^module\s+\"?([^\s\"]+)", (root / wd / "go.mod").read_text(encoding="utf-8"), re.M)
    except (OSError, UnicodeDecodeError):
        return None
    return found.group(1) if found else None


def _go_package(name: str, root: Path, wd: str, module: str | None) -> str | None:
    """A package as the lane names it (`./calc`, `calc/...`, `example.com/m/calc`), as go test takes it (`./calc`)."""
    deep = name.endswith("/...") or name == "..."
    base = "." if name == "..." else name.removesuffix("/...")
    if module and (base == module or base.startswith(module + "/")):  # an import path: from the module's folder
        base = posixpath.normpath(posixpath.join(wd, "." + base[len(module):]))
    here = _local(root, wd, base)
    if here is None or not (root / wd / here).is_dir():
        return None
    return ("." if here == "." else "./" + here) + ("/..." if deep else "")


def _go_dir(pattern: str) -> tuple[str, bool]:
    deep = pattern.endswith("/...")
    return posixpath.normpath(pattern.removesuffix("/...")), deep


def _go_within(pattern: str, scope: list[str | None]) -> bool:
    folder, deep = _go_dir(pattern)
    for own in scope:
        if own is None:  # (a pattern reposwarm cannot place: `all`, another module's)
            return True
        at, own_deep = _go_dir(own)
        if (own_deep and _under(folder, at)) or (not deep and not own_deep and folder == at):
            return True
    return False


def _go_pred(patterns: list[str] | None, tests: set[str] | None, module: str | None) -> Pred:
    def pred(case: Case) -> bool | None:
        found = _GO_CASE.match(case.name)
        package, test = (found.group(1), found.group(2)) if found else (case.name, None)
        if tests is not None:
            if test is None:
                return None  # a package that did not build: which of its tests it hid, its result cannot tell
            if test not in tests:
                return False
        if patterns is None:
            return True
        if module is None:
            return None
        for pattern in patterns:
            folder, deep = _go_dir(pattern)
            path = module if folder == "." else f"{module}/{folder}"
            if package == path or (deep and package.startswith(path + "/")):
                return True
        return False
    return pred


def _go(view: prefixes.View, names: list[str], root: Path, wd: str) -> Picks | str:
    """Packages named: one invocation over them. Test names: one over the command's packages (-run of them all),
    and one per package named with its tests (`calc.TestAdd`), so each runs exactly what was named."""
    args = view.args
    cut = next((i for i, a in enumerate(args) if a in ("-args", "--args")), len(args))
    head, tail = args[:cut], args[cut:]
    pos = _positionals(head, _GO_VALUED)
    own = [head[i] for i in pos]
    module = _go_module(root, wd)
    scope = [_go_package(p, root, wd, module) for p in own] or ["."]
    own_run = any(a.lstrip("-").partition("=")[0] in ("run", "skip") for a in head if a.startswith("-"))
    packages: dict[str, str] = {}
    bare: dict[str, str] = {}
    qualified: dict[str, dict[str, str]] = {}  # package -> {name: test}
    for name in names:
        package = _go_package(name, root, wd, module)
        where, dot, test = name.rpartition(".")
        if package is not None:
            if _go_within(package, scope):
                packages[name] = package
        elif _GO_TEST.fullmatch(name) and not own_run:
            bare[name] = name
        elif dot and _GO_TEST.fullmatch(test) and not own_run:
            package = _go_package(where, root, wd, module)
            if package is not None and not package.endswith("/...") and _go_within(package, scope):
                qualified.setdefault(package, {})[name] = test
    kept = _without(head, set(pos))
    picks: Picks = []
    if packages:
        picks.append(([*kept, *sorted(set(packages.values())), *tail],
                      {n: _go_pred([p], None, module) for n, p in packages.items()}))
    if bare:
        picks.append(([*kept, _go_run(set(bare.values())), *own, *tail],
                      {n: _go_pred(None, {t}, module) for n, t in bare.items()}))
    for package, asked in sorted(qualified.items()):
        picks.append(([*kept, _go_run(set(asked.values())), package, *tail],
                      {n: _go_pred([package], {t}, module) for n, t in asked.items()}))
    return picks


def _go_run(tests: set[str]) -> str:
    return f"-run=^({'|'.join(sorted(tests))})$"


_CARGO_VALUED = {"-p", "--package", "--test", "--bin", "--example", "--bench", "--features", "-F", "--target",
                 "--target-dir", "--manifest-path", "-j", "--jobs", "--profile", "--color", "--config", "-Z",
                 "--exclude", "--message-format", "--lockfile-path"}
_LIBTEST_VALUED = {"--skip", "--test-threads", "--logfile", "--format", "--color", "-Z", "--shuffle-seed"}
_RUST_PATH = re.compile(r"[A-Za-z_]\w*(?:::[A-Za-z_]\w*)*")
MAX_MANIFESTS = 500


def _crates(root: Path, wd: str) -> set[str]:
    """The packages of the tree's Cargo.toml files (outside target/ and hidden folders), as -p names them."""
    found: set[str] = set()
    for n, manifest in enumerate((root / wd).rglob("Cargo.toml")):
        parts = manifest.relative_to(root).parts
        if n >= MAX_MANIFESTS:
            break
        if "target" in parts or any(p.startswith(".") for p in parts[:-1]):
            continue
        try:
            name = tomllib.loads(manifest.read_text(encoding="utf-8")).get("package", {}).get("name")
        except (OSError, ValueError):
            continue
        if isinstance(name, str) and re.fullmatch(r"[A-Za-z0-9_][A-Za-z0-9_-]*", name):  # (a name, never an option)
            found.add(name)
    return found


def _cargo(view: prefixes.View, names: list[str], root: Path, wd: str) -> Picks | str:
    """Filters alone: one invocation (libtest takes several, after `--`). Crates: one per set of filters."""
    args = view.args
    cut = args.index("--") if "--" in args else len(args)
    mine, libtest = args[:cut], args[cut + 1:]
    if _positionals(mine, _CARGO_VALUED) or _positionals(libtest, _LIBTEST_VALUED):
        return "it names its own test filter, which a targeted run's filters would widen"
    exact = "--exact" in libtest
    crates = _crates(root, wd)
    by_underscore = {c.replace("-", "_"): c for c in crates}
    listed = [prefixes.option_value(mine[i:], ("-p", "--package")) for i, a in enumerate(mine)
              if a.partition("=")[0] in ("-p", "--package")]
    excluded = {prefixes.option_value(mine[i:], ("--exclude",)) for i, a in enumerate(mine) if a.startswith("--exclude")}
    every = "--workspace" in mine or "--all" in mine
    bare: dict[str, str] = {}
    asked: dict[str, dict[str, str]] = {}  # crate -> {name: filter ("" for the whole crate)}
    for name in names:
        head, sep, rest = name.partition("::")
        crate = by_underscore.get(head.replace("-", "_"))
        if crate is not None and (rest or not sep) and (not listed or crate in listed) and \
                not (every and crate in excluded):
            asked.setdefault(crate, {})[name] = rest
        elif _RUST_PATH.fullmatch(name):
            bare[name] = name
    picks: Picks = []
    if bare:
        picks.append(([*mine, "--", *libtest, *sorted(set(bare.values()))],
                      {n: _cargo_pred({f}, exact, True) for n, f in bare.items()}))
    crate_groups: dict[frozenset[str], list[str]] = {}
    for crate, filters in asked.items():
        crate_groups.setdefault(frozenset(filters.values()) if "" not in filters.values() else frozenset(),
                                []).append(crate)
    package_args = {i for i, a in enumerate(mine) if a in ("--workspace", "--all")} | {
        j for i, a in enumerate(mine) if a.partition("=")[0] in ("-p", "--package", "--exclude")
        for j in ([i] if "=" in a else [i, i + 1])}
    rest_args = _without(mine, package_args)
    for wanted, group in sorted(crate_groups.items(), key=lambda g: sorted(g[1])):
        chosen = {n: _cargo_pred({f} if wanted else set(), exact, False) for c in group for n, f in asked[c].items()}
        tail = ["--", *libtest, *sorted(wanted)] if wanted or "--" in args else []
        picks.append(([*rest_args, *(f"--package={c}" for c in sorted(group)), *tail], chosen))
    return picks


def _cargo_pred(filters: set[str], exact: bool, sure: bool) -> Pred:
    """libtest's filter: a substring of the test's path (the whole path with --exact). `sure`: the run's crates
    are the command's own, so a base test the filter matches is one it ran; else (-p) its crate is not known."""
    def pred(case: Case) -> bool | None:
        name = re.sub(r" #\d+$", "", case.name)  # (two tests of one name, in two binaries)
        if filters and not any(name == f if exact else f in name for f in filters):
            return False
        return True if sure else None
    return pred


Select = Callable[[prefixes.View, list[str], Path, str], "Picks | str"]
SELECT: dict[str, Select] = {"pytest": _pytest, "unittest": _unittest, "node": _node, "jest": _jest, "vitest": _jest,
                             "go": _go, "cargo": _cargo}
