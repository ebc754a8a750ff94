"""Which runner a command is, known by its command line as people write it (prefixes.py: `env X=1`, `uv run`,
`python -m`, `npx`, npm scripts, tox, nox), and the command as it will run: `prepare` adds what makes each runner
report per test, after the runner's own arguments, the prefix kept as it is. A command that already chose a
reporter keeps it: reposwarm's is added beside it where the runner takes several, or the user's own report is
read where it is one reposwarm reads. What reposwarm adds stays out of the tests' sight where a runner runs them
in its own process (`shown_argv_env`), and out of node_modules (vitest's results cache)."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from reposwarm.checks.runners import prefixes
from reposwarm.checks.runners.prefixes import View

JUNIT = "{junit}"  # in a configured command, the path where its runner should write JUnit XML


@dataclass(frozen=True)
class Prepared:
    runner: str  # the runner's name, or "" when none is known
    argv: list[str]  # what really runs
    report: Path | None  # where the runner writes its report, if it writes one
    why: str = ""  # no runner: why, where reposwarm can tell ("" otherwise)
    # A runner that runs tests in its own process (jest in band, mocha): the runner's arguments as it runs
    # (`ran`) and as its tests should see them in process.argv (`shown`: the command as the profile wrote it)
    ran: list[str] | None = None
    shown: list[str] | None = None


def detect(argv: list[str], cwd: Path | None = None) -> str:
    """The runner `argv` runs; `cwd`: the tree it runs in (npm scripts, tox and nox are read from there)."""
    if any(JUNIT in a for a in argv):
        return "junit"
    return prefixes.look(argv, cwd).runner if argv else ""


def prepare(argv: list[str], scratch: Path, name: str, cwd: Path | None = None) -> Prepared:
    """The command as it will run: per-test reporting added where the user did not ask for it already. (Where the
    command writes its own report in the tree, an earlier run's copy there is removed first: a run that dies
    before writing one must not be judged by the last run's.)"""
    report = scratch / f"{name}.report"
    if any(JUNIT in a for a in argv):
        return Prepared("junit", [a.replace(JUNIT, str(report)) for a in argv], report)
    view = prefixes.look(argv, cwd) if argv else View("")
    if not view.runner:
        return _unread(argv, view.why)
    return _ADD[view.runner](view, report, cwd)


def _unread(argv: list[str], why: str) -> Prepared:
    return Prepared("", argv, None, why)


def _made(runner: str, view: View, args: list[str], report: Path | None) -> Prepared:
    shown = IN_PROCESS[runner](view.args) if runner in IN_PROCESS else args
    if shown != args:
        return Prepared(runner, [*view.lead, *args], report, ran=args, shown=shown)
    return Prepared(runner, [*view.lead, *args], report)


# --- what the tests see of the command line -----------------------------------------------------------------------
#
# jest runs the tests in its own process when it runs in band (one test file, or one worker: a machine of two
# cores), and mocha always does: their tests see its process.argv. A test that parses process.argv (commander's
# `program.parse()`, yargs) then reads reposwarm's reporting flags and selection as options it does not know, and
# exits the runner before it writes its report. A preload (NODE_OPTIONS=--require) puts back, in that one process,
# the arguments as the profile wrote them, once the runner has read its own: after its main module ran (a
# CommonJS main: the runner parsed its arguments while loading; an ES module's main is left as it is).

SHOWN_VARIABLE = "REPOSWARM_SHOWN_ARGV"
ARGV_HOOK = """"use strict";
(function () {
  try {
    var spec = process.env.SHOWN_VARIABLE;
    if (!spec) return;
    var want = JSON.parse(spec);
    var args = process.argv.slice(2);
    if (!Array.isArray(want.ran) || !Array.isArray(want.shown) || args.length !== want.ran.length) return;
    for (var i = 0; i < args.length; i++) if (args[i] !== want.ran[i]) return;
    delete process.env.SHOWN_VARIABLE;
    setImmediate(function () {
      try {
        var main = require("fs").realpathSync(process.argv[1]);
        if (!require.cache[main]) return;
        process.argv.splice.apply(process.argv, [2, process.argv.length - 2].concat(want.shown));
      } catch (e) {}
    });
  } catch (e) {}
})();
""".replace("SHOWN_VARIABLE", SHOWN_VARIABLE)


def _jest_shown(args: list[str]) -> list[str]:
    """jest's arguments without a selection's (`--runTestsByPath`, its names and files come last)."""
    return args[:args.index("--runTestsByPath")] if "--runTestsByPath" in args else list(args)


IN_PROCESS: dict[str, Callable[[list[str]], list[str]]] = {"jest": _jest_shown, "mocha": list}


def shown_argv_env(prepared: Prepared, scratch: Path, env: dict[str, str]) -> dict[str, str]:
    """The variables that make the runner's tests see the command as the profile wrote it (the preload, written
    in `scratch`, which the sandbox shows; `env`: the command's environment, whose NODE_OPTIONS is kept first).
    Empty when the runner runs no test in its own process, or reposwarm added nothing to its arguments."""
    if prepared.ran is None or prepared.shown is None:
        return {}
    hook = scratch / "argv-hook.cjs"
    hook.write_text(ARGV_HOOK, encoding="utf-8")
    quoted = '"' + str(hook).replace("\\", "\\\\").replace('"', '\\"') + '"'
    own = env.get("NODE_OPTIONS", "")
    return {"NODE_OPTIONS": " ".join(o for o in (own, f"--require {quoted}") if o),
            SHOWN_VARIABLE: json.dumps({"ran": prepared.ran, "shown": prepared.shown})}


def _before_dashes(args: list[str], extra: list[str]) -> list[str]:
    """The runner's arguments with `extra` added where its options end (before a `--`, which ends them)."""
    cut = args.index("--") if "--" in args else len(args)
    return [*args[:cut], *extra, *args[cut:]]


def _value(args: list[str], names: tuple[str, ...]) -> str | None:
    return prefixes.option_value(args, names)


def _has(args: list[str], names: tuple[str, ...]) -> bool:
    return _value(args, names) is not None


def _own_report(path: str, view: View, cwd: Path | None) -> Path | str:
    """The user's own report path, as the worker reads it: inside the tree, or why not. Its copy from an earlier
    run is removed."""
    if cwd is None:
        return "reposwarm does not know the tree it runs in"
    root = cwd.resolve()
    if os.path.isabs(path):
        where = Path(path)
    elif view.workdir is None:
        return f"its own report path `{path}` is relative to a folder reposwarm does not know (tox, nox)"
    else:
        where = root / view.workdir / path
    where = Path(os.path.normpath(where))
    if root not in where.parents or (where.parent.exists() and root not in where.parent.resolve().parents
                                     and where.parent.resolve() != root):
        return f"its own report path `{path}` is outside the tree, where reposwarm cannot read it"
    if where.is_file() and not where.is_symlink():
        where.unlink()
    return where


# --- each runner --------------------------------------------------------------------------------------------------

def _pytest(view: View, report: Path, cwd: Path | None) -> Prepared:
    args = view.args
    # xunit1 names each case's file; without a cache the run leaves nothing in the tree; a module that fails to
    # import is one failed case, and the other modules' tests still run and count
    extra = ["-o", "junit_family=xunit1", "-p", "no:cacheprovider", "--continue-on-collection-errors"]
    own = _value(args, ("--junitxml", "--junit-xml"))
    if own is not None:  # pytest writes one JUnit report: the user's own, read where it is
        where = _own_report(own, view, cwd)
        if isinstance(where, str):
            return _unread([*view.lead, *args], f"pytest: {where}")
        report = where
    else:
        extra.insert(0, f"--junitxml={report}")
    # The JUnit report shows an xpassed test as a plain pass: the short summary's XPASS lines tell it apart.
    # (pytest keeps only the last -r, so a user's own -r is left as it is.)
    if not any(a.startswith("-r") and not a.startswith("--") for a in args):
        extra.append("-rfExX")  # (fE is pytest's default)
    return _made("pytest", view, _before_dashes(args, extra), report)


def _unittest(view: View, report: Path, cwd: Path | None) -> Prepared:
    return _made("unittest", view, view.args if "-v" in view.args else [*view.args, "-v"], None)


def _node(view: View, report: Path, cwd: Path | None) -> Prepared:
    """node pairs each --test-reporter with a --test-reporter-destination, in order: reposwarm's pair is added
    after the user's own reporters (theirs kept)."""
    args = view.args
    i = args.index("--test") + 1
    reporters = [a for a in args if a.partition("=")[0] == "--test-reporter"]
    places = [a for a in args if a.partition("=")[0] == "--test-reporter-destination"]
    for n, a in enumerate(args):  # (after the user's own reporters and destinations: node pairs them in order)
        if a.partition("=")[0] in ("--test-reporter", "--test-reporter-destination"):
            i = max(i, n + (1 if "=" in a else 2))
    extra = ["--test-reporter=junit", f"--test-reporter-destination={report}"]
    if not reporters:
        # the spec reporter's closing counts (tests, suites) are checked against the JUnit report's cases
        extra += ["--test-reporter=spec", "--test-reporter-destination=stdout"]
    elif len(reporters) == 1 and not places:
        extra.insert(0, "--test-reporter-destination=stdout")  # (theirs went to stdout, as node's default)
    elif len(places) != len(reporters):
        return _unread([*view.lead, *args], "node --test: its reporters and destinations do not pair up")
    return _made("node", view, [*args[:i], *extra, *args[i:]], report)


def _go(view: View, report: Path, cwd: Path | None) -> Prepared:
    return _made("go", view, view.args if "-json" in view.args else ["-json", *view.args], None)


def _cargo(view: View, report: Path, cwd: Path | None) -> Prepared:
    """Without --no-fail-fast cargo stops at the first failing test binary: the doc tests and the later
    integration tests of a base with one failing test would never run, on either tree, and a lane breaking
    them would pass. (Cargo's own options go before `--`, libtest's after.)"""
    args = view.args
    return _made("cargo", view, args if "--no-fail-fast" in args else _before_dashes(args, ["--no-fail-fast"]), None)


def _jest(view: View, report: Path, cwd: Path | None) -> Prepared:
    """jest's --json report is apart from its --reporters: theirs are kept. A --json of their own, to a file,
    is read there; to stdout it goes to reposwarm's file instead."""
    args = view.args
    own = _value(args, ("--outputFile",))
    if "--json" in args and own is not None:
        where = _own_report(own, view, cwd)
        if isinstance(where, str):
            return _unread([*view.lead, *args], f"jest: {where}")
        return _made("jest", view, args, where)
    if own is not None:
        return _unread([*view.lead, *args], "jest: its --outputFile without --json is not a report reposwarm reads")
    extra = [f"--outputFile={report}"] if "--json" in args else ["--json", f"--outputFile={report}"]
    return _made("jest", view, _before_dashes(args, extra), report)


def _vitest(view: View, report: Path, cwd: Path | None) -> Prepared:
    """vitest takes several reporters: its json one, to reposwarm's file, beside the user's own."""
    args = view.args
    reporters = [v for n, a in enumerate(args) if a.partition("=")[0] == "--reporter"
                 for v in [a.partition("=")[2] if "=" in a else (args[n + 1] if n + 1 < len(args) else "")]]
    own_json = _value(args, ("--outputFile.json",))
    own_plain = _value(args, ("--outputFile",))
    if "json" in reporters and (own_json or own_plain):
        where = _own_report(own_json or own_plain or "", view, cwd)
        if isinstance(where, str):
            return _unread([*view.lead, *args], f"vitest: {where}")
        return _made("vitest", view, args, where)
    if own_plain is not None:
        return _unread([*view.lead, *args], "vitest: its --outputFile leaves no place for the json report "
                                            "reposwarm reads: give it as --outputFile.<reporter>=<file>")
    extra = [] if "json" in reporters else ["--reporter=json"]
    if not reporters:
        extra.insert(0, "--reporter=default")  # (a reporter given replaces the default one: kept on the console)
    return _made("vitest", view, _before_dashes(args, [*extra, f"--outputFile.json={report}", *_no_cache(args)]),
                 report)


def _no_cache(args: list[str]) -> list[str]:
    """vitest keeps its results cache (test order by last durations) in node_modules/.vitest or .vite/vitest, which
    checks bind read-only: vitest 1 and 2 then end in an unhandled ENOENT and exit 1 with every test passed, on
    the base commit and the merged tree alike. Without the cache the run writes nothing there (a cache the
    command asks for itself is left as it is)."""
    asked = any(a.partition("=")[0] in ("--cache", "--no-cache") or a.startswith("--cache.") for a in args)
    return [] if asked else ["--no-cache"]


def _mocha_reporter(args: list[str]) -> tuple[str | None, str | None]:
    """mocha's reporter and its `output` option, as the command gives them."""
    reporter = _value(args, ("--reporter", "-R"))
    output = None
    for n, a in enumerate(args):
        key, eq, value = a.partition("=")
        if key in ("--reporter-option", "--reporter-options", "-O"):
            value = value if eq else (args[n + 1] if n + 1 < len(args) else "")
            for pair in value.split(","):
                k, _, v = pair.partition("=")
                output = v if k == "output" else output
    return reporter, output


def _mocha(view: View, report: Path, cwd: Path | None) -> Prepared:
    """mocha runs one reporter: its json one to reposwarm's file (mocha >= 9 takes `output`), unless the command
    chose its own, which is read when it is json or xunit written to a file, and is no runner otherwise."""
    args = view.args
    reporter, output = _mocha_reporter(args)
    if reporter is None:
        extra = ["--reporter", "json", "--reporter-option", f"output={report}"]
        return _made("mocha", view, _before_dashes(args, extra), report)
    if reporter in ("json", "xunit") and output:
        where = _own_report(output, view, cwd)
        if isinstance(where, str):
            return _unread([*view.lead, *args], f"mocha: {where}")
        return _made("mocha" if reporter == "json" else "junit", view, args, where)
    return _unread([*view.lead, *args],
                   f"mocha runs one reporter and this command chose `{reporter}`, which reposwarm does not read: give "
                   "it `--reporter json --reporter-option output=<file>`, or drop it")


_ADD: dict[str, Callable[[View, Path, Path | None], Prepared]] = {
    "pytest": _pytest, "unittest": _unittest, "node": _node, "go": _go, "cargo": _cargo, "jest": _jest,
    "vitest": _vitest, "mocha": _mocha}
