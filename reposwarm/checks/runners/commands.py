"""Which runner a command is, known by its command line, and the command as it will run: `prepare` adds what
makes each runner report per test where the user did not ask for it already."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

JUNIT = "{junit}"  # in a configured command, the path where its runner should write JUnit XML


@dataclass(frozen=True)
class Prepared:
    runner: str  # the runner's name, or "" when none is known
    argv: list[str]  # what really runs
    report: Path | None  # where the runner writes its report, if it writes one


def _base(arg: str) -> str:
    return os.path.basename(arg)


def _python_module(argv: list[str], module: str) -> bool:
    return _base(argv[0]).startswith("python") and "-m" in argv and argv[argv.index("-m") + 1:][:1] == [module]


def _npx(argv: list[str], tool: str) -> bool:
    """`jest ...`, `npx jest ...`, `node_modules/.bin/jest ...`, `yarn jest`, `pnpm exec jest`."""
    for i, arg in enumerate(argv[:3]):
        if _base(arg) == tool:
            return all(_base(a) in ("npx", "yarn", "pnpm", "exec", "bunx") for a in argv[:i])
    return False


def detect(argv: list[str]) -> str:
    if any(JUNIT in a for a in argv):
        return "junit"
    if _base(argv[0]) in ("pytest", "py.test") or _python_module(argv, "pytest"):
        return "pytest"
    if _python_module(argv, "unittest"):
        return "unittest"
    if _base(argv[0]) in ("node", "nodejs") and "--test" in argv:
        return "node"
    if _base(argv[0]) == "go" and argv[1:2] == ["test"]:
        return "go"
    if _base(argv[0]) == "cargo" and "test" in argv[1:3]:
        return "cargo"
    if _npx(argv, "jest"):
        return "jest"
    if _npx(argv, "vitest"):
        return "vitest"
    return ""


def _pytest(argv: list[str], report: Path) -> list[str]:
    # xunit1 names each case's file; without a cache the run leaves nothing in the tree; a module that fails to
    # import is one failed case, and the other modules' tests still run and count
    extra = [f"--junitxml={report}", "-o", "junit_family=xunit1", "-p", "no:cacheprovider",
             "--continue-on-collection-errors"]
    # The JUnit report shows an xpassed test as a plain pass: the short summary's XPASS lines tell it apart.
    # (pytest keeps only the last -r, so a user's own -r is left as it is.)
    if not any(a.startswith("-r") and not a.startswith("--") for a in argv[1:]):
        extra.append("-rfExX")  # (fE is pytest's default)
    return [*argv, *extra]


def _cargo(argv: list[str]) -> list[str]:
    """Without --no-fail-fast cargo stops at the first failing test binary: the doc tests and the later
    integration tests of a base with one failing test would never run, on either tree, and a lane breaking
    them would pass. (Cargo's own options go before `--`, libtest's after.)"""
    if "--no-fail-fast" in argv:
        return argv
    end = argv.index("--") if "--" in argv else len(argv)
    return [*argv[:end], "--no-fail-fast", *argv[end:]]


def prepare(argv: list[str], scratch: Path, name: str) -> Prepared:
    """The command as it will run: per-test reporting added where the user did not ask for it already."""
    runner = detect(argv)
    report = scratch / f"{name}.report"
    if runner == "junit":
        return Prepared(runner, [a.replace(JUNIT, str(report)) for a in argv], report)
    if runner == "pytest":
        if any(a.startswith("--junitxml") or a.startswith("--junit-xml") for a in argv):
            return Prepared("", argv, None)  # the user's own report path: leave the command as it is
        return Prepared(runner, _pytest(argv, report), report)
    if runner == "unittest":
        return Prepared(runner, argv if "-v" in argv else [*argv, "-v"], None)
    if runner == "node":
        if any(a.startswith("--test-reporter") for a in argv):
            return Prepared("", argv, None)
        i = argv.index("--test") + 1
        # the spec reporter's closing counts (tests, suites) are checked against the JUnit report's cases
        extra = ["--test-reporter=junit", f"--test-reporter-destination={report}",
                 "--test-reporter=spec", "--test-reporter-destination=stdout"]
        return Prepared(runner, [*argv[:i], *extra, *argv[i:]], report)
    if runner == "go":
        return Prepared(runner, argv if "-json" in argv else [argv[0], "test", "-json", *argv[2:]], None)
    if runner == "cargo":
        return Prepared(runner, _cargo(argv), None)
    if runner == "jest":
        if "--json" in argv:
            return Prepared("", argv, None)
        return Prepared(runner, [*argv, "--json", f"--outputFile={report}"], report)
    if runner == "vitest":
        if any(a.startswith("--reporter") for a in argv):
            return Prepared("", argv, None)
        return Prepared(runner, [*argv, "--reporter=default", "--reporter=json", f"--outputFile.json={report}"],
                        report)
    return Prepared("", argv, None)
