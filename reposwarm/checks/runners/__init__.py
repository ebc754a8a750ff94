"""The test runners people use, known by their command line: one result per test, with no configuration.

For each runner, `prepare` (commands.py) adds what makes it report per test (a JUnit path for pytest, `-v` for
unittest, the JUnit reporter for `node --test`, `-json` for `go test`, `--no-fail-fast` for cargo, whose libtest
already prints one line per test, the JSON reporter for jest, vitest and mocha), and `parse` turns what it wrote
into `Case`s (parsers.py). A runner is known through what people put before it (prefixes.py: `env X=1`, `uv run`,
`poetry run`, `python -m`, `npx`, `node node_modules/.bin/jest`), through the tree's npm scripts (scripts.py),
and through tox and nox when they plainly run pytest (tox_nox.py). `{junit}` in a command works for any other runner that writes JUnit XML. A command no
runner knows gives no per-test results: then only its exit code speaks. `unparsed` (counts.py) counts the
results a parser missed; `reason` (reasons.py) says why a command failed.

Each runner also sorts its exit codes into a class: tests ran and some failed, or the suite did not run
properly (a usage, collection or internal error), which the gate treats as worse than failing tests.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import replace
from pathlib import Path
from xml.etree import ElementTree

from reposwarm.checks.runners import parsers as outcome
from reposwarm.checks.runners.commands import JUNIT, Prepared, detect, prepare, shown_argv_env
from reposwarm.checks.runners.counts import unparsed
from reposwarm.checks.runners.parsers import (
    FAILING,
    MESSAGE_CHARS,
    OUTCOMES,
    RAN,
    Case,
    guess_file,
    mark_xpassed,
    parse_cargo,
    parse_go,
    parse_jest,
    parse_junit,
    parse_mocha,
    parse_unittest,
)
from reposwarm.checks.runners.reasons import NO_RESULTS, reason, stops_judging, unread
from reposwarm.contracts.states import ExitClass
from reposwarm.contracts.validation import CommandResult

__all__ = ["ERROR", "JUNIT", "MESSAGE_CHARS", "NO_RESULTS", "NO_TESTS", "OUTCOMES", "PASSED", "TESTS_FAILED",
           "TIMED_OUT", "Case", "Prepared", "detect", "distinct", "exit_class", "failing", "guess_file", "not_fully_judged", "parse",
           "parse_cargo", "parse_go", "outcome", "parse_jest", "parse_junit", "parse_mocha", "parse_unittest", "prepare",
           "ran", "reason", "renumbered", "shown_argv_env", "stops_judging", "unparsed", "unread"]

# Exit classes, from best to worst. (A test's outcomes are runners.outcome.PASSED, .XFAILED...)
PASSED, TESTS_FAILED, NO_TESTS, ERROR, TIMED_OUT = (ExitClass.passed, ExitClass.tests_failed, ExitClass.no_tests,
                                                   ExitClass.error, ExitClass.timed_out)


def parse(runner: str, output: str, report: Path | None, cwd: Path) -> list[Case] | None:
    """Per-test results, or None when the run gave none (no runner known, or no report written)."""
    cases = _parse(runner, output, report, cwd)
    if cases is None:
        return None
    if runner == "pytest":
        cases = mark_xpassed(cases, output)
    # A test is known by the same name on every checkout (the base commit and the merged tree are checked out in
    # different folders): node names a file that fails to load by its absolute path.
    root = str(cwd.resolve()) + "/"
    cases = [replace(c, name=c.name.replace(root, ""), file=c.file.replace(root, "") if c.file else c.file)
             for c in cases]
    if runner == "node":  # node names a test file that failed to load by its path, as if it were a test
        cases = [replace(c, outcome=outcome.ERROR, file=c.name)
                 if c.outcome == outcome.FAILED and (cwd / c.name).is_file() else c for c in cases]
    # A failure with no file of its own (node, cargo and go name none) takes the first file of the tree its
    # message names (the stack or panic location): repairs go to the lanes that changed it.
    cases = [replace(c, file=_named_file(c.message, cwd))
             if not c.file and c.outcome in FAILING else c for c in cases]
    return distinct(cases)


def distinct(cases: list[Case]) -> list[Case]:
    """Two tests of one name (jest tests in two files, cargo tests in two binaries) are two tests: the second is
    "name #2", so neither hides the other in a comparison by name. Numbered in the order of their files, then as
    the runner reported them within a file: the same test gets the same number whatever order the runner ran the
    files in (jest orders them by its last durations), and in any run of the files that hold the name. (Never a
    name another test has already: "a", "a", "a #2" are "a", "a #3", "a #2".)"""
    taken = {c.name for c in cases}
    seen: Counter[str] = Counter()
    names = [c.name for c in cases]
    for i in sorted(range(len(cases)), key=lambda i: (cases[i].name, cases[i].file or "", i)):
        name = cases[i].name
        seen[name] += 1
        if seen[name] == 1:
            continue
        while f"{name} #{seen[name]}" in taken:
            seen[name] += 1
        taken.add(f"{name} #{seen[name]}")
        names[i] = f"{name} #{seen[name]}"
    return [c if c.name == n else replace(c, name=n) for c, n in zip(cases, names, strict=True)]


_NUMBERED = re.compile(r"^(.*) #\d+$")


def renumbered(cases: list[Case], every: list[Case]) -> tuple[list[Case], dict[str, str]]:
    """`cases`, some of the tests of a run whose results are `every`, numbered as a run of only their files
    numbers them (distinct): a name "X #2" of a whole run is "X" in a run of the one file that holds it. With the
    names that changed (old -> new)."""
    names = {c.name for c in every}
    plain = []
    for c in cases:
        found = _NUMBERED.match(c.name)
        plain.append(replace(c, name=found.group(1)) if found and found.group(1) in names else c)
    out = distinct(plain)
    return out, {old.name: new.name for old, new in zip(cases, out, strict=True) if old.name != new.name}


_SOURCE_PATH = re.compile(r"(?:^|[\s(\"'])((?:/|\./)?[\w.@-]+(?:/[\w.@-]+)*\.(?:py|js|mjs|cjs|jsx|ts|tsx|go|rs|java|rb))"
                          r"(?::\d+)")


def _named_file(message: str, cwd: Path) -> str | None:
    root = cwd.resolve()
    for match in _SOURCE_PATH.finditer(message):
        path = Path(match.group(1))
        rel = path.relative_to(root) if path.is_absolute() and root in path.parents else path
        if not rel.is_absolute() and ".." not in rel.parts and (root / rel).is_file():
            return rel.as_posix().removeprefix("./")
    return None


def ran(cases: list[Case]) -> list[Case]:
    """The tests that ran: passed, failed or xpassed. Not skipped, xfailed or deselected, and not a file that
    failed to load (which hides the tests it holds). One per name: a command's "N tests ran" and the gate's
    comparison by name (verdicts.py) count the same tests, even in cases stored before names were made distinct."""
    first: dict[str, Case] = {}
    for c in cases:
        if c.outcome in RAN:
            first.setdefault(c.name, c)
    return list(first.values())


def failing(cases: list[Case]) -> list[Case]:
    return [c for c in cases if c.outcome in FAILING]


def _parse(runner: str, output: str, report: Path | None, cwd: Path) -> list[Case] | None:
    try:
        if runner in ("junit", "pytest", "node"):
            return parse_junit(report, cwd) if report is not None and report.exists() else None
        if runner == "unittest":
            return parse_unittest(output, cwd)
        if runner == "go":
            return parse_go(output)
        if runner == "cargo":
            return parse_cargo(output)
        if runner in ("jest", "vitest"):
            return parse_jest(report.read_text(encoding="utf-8"), cwd) if report and report.exists() else None
        if runner == "mocha":
            return parse_mocha(report.read_text(encoding="utf-8"), cwd) if report and report.exists() else None
    except (ValueError, OSError, ElementTree.ParseError):
        return None  # a report cut short (the run was killed): as good as none
    return None


def exit_class(runner: str, exit_code: int | None, timed_out: bool, cases: list[Case] | None) -> ExitClass:
    if timed_out:
        return TIMED_OUT
    bad = failing(cases or [])
    if exit_code == 0:
        # a runner made to exit 0 (a conftest setting the exit status) does not hide the failures it reported
        return TESTS_FAILED if bad else PASSED
    if runner == "pytest":
        return {1: TESTS_FAILED, 5: NO_TESTS}.get(exit_code or 0, ERROR)  # 2 interrupted, 3 internal, 4 usage
    if runner == "unittest" and exit_code == 5:
        return NO_TESTS
    if cases is not None and bad:
        return TESTS_FAILED
    return ERROR


def not_fully_judged(result: CommandResult) -> str | None:
    """The problem with a command whose output holds test results its parser did not read, or None. (Derived
    from the command's result, so the gate's judge can say it again on every judging, once.)"""
    if not result.unparsed_results:
        return None
    return (f"`{' '.join(result.argv)}`: not fully judged: its output holds {result.unparsed_results} test "
            f"result(s) more than its {result.runner} parser read")
