"""The test runners people use, known by their command line: one result per test, with no configuration.

For each runner, `prepare` adds what makes it report per test (a JUnit path for pytest, `-v` for unittest,
the JUnit reporter for `node --test`, `-json` for `go test`, the JSON reporter for jest and vitest; cargo's
libtest already prints one line per test), and `parse` turns what it wrote into `Case`s. `{junit}` in a
command works for any other runner that writes JUnit XML. A command no runner knows gives no per-test
results: then only its exit code speaks.

Each runner also sorts its exit codes into a class: tests ran and some failed, or the suite did not run
properly (a usage, collection or internal error), which the gate treats as worse than failing tests.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from pathlib import Path
from xml.etree import ElementTree

from reposwarm.contracts.states import ExitClass

JUNIT = "{junit}"  # in a configured command, the path where its runner should write JUnit XML
MESSAGE_CHARS = 2000

# Exit classes, from best to worst.
PASSED, TESTS_FAILED, NO_TESTS, ERROR, TIMED_OUT = (ExitClass.passed, ExitClass.tests_failed, ExitClass.no_tests,
                                                   ExitClass.error, ExitClass.timed_out)


@dataclass(frozen=True)
class Case:
    name: str
    outcome: str  # passed | failed | skipped | error (a test file or package that did not even load)
    file: str | None = None
    message: str = ""


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


def prepare(argv: list[str], scratch: Path, name: str) -> Prepared:
    """The command as it will run: per-test reporting added where the user did not ask for it already."""
    runner = detect(argv)
    report = scratch / f"{name}.report"
    if runner == "junit":
        return Prepared(runner, [a.replace(JUNIT, str(report)) for a in argv], report)
    if runner == "pytest":
        if any(a.startswith("--junitxml") or a.startswith("--junit-xml") for a in argv):
            return Prepared("", argv, None)  # the user's own report path: leave the command as it is
        # xunit1 names each case's file; without a cache the run leaves nothing in the tree; a module that fails
        # to import is one failed case, and the other modules' tests still run and count
        return Prepared(runner, [*argv, f"--junitxml={report}", "-o", "junit_family=xunit1",
                                 "-p", "no:cacheprovider", "--continue-on-collection-errors"], report)
    if runner == "unittest":
        return Prepared(runner, argv if "-v" in argv else [*argv, "-v"], None)
    if runner == "node":
        if any(a.startswith("--test-reporter") for a in argv):
            return Prepared("", argv, None)
        i = argv.index("--test") + 1
        extra = ["--test-reporter=junit", f"--test-reporter-destination={report}",
                 "--test-reporter=spec", "--test-reporter-destination=stdout"]
        return Prepared(runner, [*argv[:i], *extra, *argv[i:]], report)
    if runner == "go":
        return Prepared(runner, argv if "-json" in argv else [argv[0], "test", "-json", *argv[2:]], None)
    if runner == "cargo":
        return Prepared(runner, argv, None)
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


def parse(runner: str, output: str, report: Path | None, cwd: Path) -> list[Case] | None:
    """Per-test results, or None when the run gave none (no runner known, or no report written)."""
    cases = _parse(runner, output, report, cwd)
    if cases is None:
        return None
    # A test is known by the same name on every checkout (the base commit and the merged tree are checked out in
    # different folders): node names a file that fails to load by its absolute path.
    root = str(cwd.resolve()) + "/"
    cases = [Case(c.name.replace(root, ""), c.outcome, c.file.replace(root, "") if c.file else c.file, c.message)
             for c in cases]
    if runner == "node":  # node names a test file that failed to load by its path, as if it were a test
        cases = [Case(c.name, "error", c.name, c.message) if c.outcome == "failed" and (cwd / c.name).is_file()
                 else c for c in cases]
    # A failure with no file of its own (node, cargo and go name none) takes the first file of the tree its
    # message names (the stack or panic location): repairs go to the lanes that changed it.
    return [Case(c.name, c.outcome, _named_file(c.message, cwd), c.message)
            if not c.file and c.outcome in ("failed", "error") else c for c in cases]


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
    """The tests that ran: not skipped, and not a file that failed to load (which hides the tests it holds)."""
    return [c for c in cases if c.outcome in ("passed", "failed")]


def failing(cases: list[Case]) -> list[Case]:
    return [c for c in cases if c.outcome in ("failed", "error")]


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
    except (ValueError, OSError, ElementTree.ParseError):
        return None  # a report cut short (the run was killed): as good as none
    return None


def exit_class(runner: str, exit_code: int | None, timed_out: bool, cases: list[Case] | None) -> ExitClass:
    if timed_out:
        return TIMED_OUT
    if exit_code == 0:
        return PASSED
    tried = [c for c in cases or [] if c.outcome != "skipped"]
    if runner == "pytest":
        return {1: TESTS_FAILED, 5: NO_TESTS}.get(exit_code or 0, ERROR)  # 2 interrupted, 3 internal, 4 usage
    if runner == "unittest" and exit_code == 5:
        return NO_TESTS
    if cases is not None and any(c.outcome in ("failed", "error") for c in tried):
        return TESTS_FAILED
    return ERROR


# --- parsers ------------------------------------------------------------------------------------------------------

def _cut(text: str) -> str:
    return text.strip()[:MESSAGE_CHARS]


def guess_file(dotted: str, cwd: Path) -> str | None:
    """pytest and unittest name cases by dotted module path: tests.test_x.TestY -> tests/test_x.py."""
    parts = dotted.split(".")
    for end in range(len(parts), 0, -1):
        candidate = "/".join(parts[:end]) + ".py"
        if (cwd / candidate).is_file():
            return candidate
    return None


def parse_junit(path: Path, cwd: Path) -> list[Case]:
    """JUnit XML (pytest, node's junit reporter, jest-junit, gotestsum, Maven Surefire...)."""
    root = ElementTree.parse(path).getroot()
    cases = []
    for case in root.iter("testcase"):
        classname, name = case.get("classname", ""), case.get("name", "?")
        problem = case.find("failure")
        if problem is None:
            problem = case.find("error")
        skipped = case.find("skipped") is not None
        outcome = "failed" if problem is not None else ("skipped" if skipped else "passed")
        if problem is not None and problem.get("message") == "collection failure":  # pytest: a module did not load
            outcome = "error"
        message = "" if problem is None else _cut((problem.get("message") or "") + "\n" + (problem.text or ""))
        # node's reporter names every case's class "test": no module to take a file from
        full = f"{classname}.{name}" if classname and classname != "test" else name
        cases.append(Case(full, outcome, case.get("file") or guess_file(classname, cwd), message))
    return cases


# "test_x (pkg.tests.T.test_x) ... ok", or with a docstring, its first line between name and verdict
_UNITTEST_LINE = re.compile(r"^(\S+) \(([\w.]+)\)(?:\n.*?)? \.\.\. (ok|FAIL|ERROR|skipped.*|expected failure|"
                            r"unexpected success)$", re.M)
_UNITTEST_BLOCK = re.compile(r"^(?:FAIL|ERROR): (\S+) \(([\w.]+)\)\n-{20,}\n(.*?)(?=^={20,}|^-{20,}\nRan )",
                             re.M | re.S)


def parse_unittest(output: str, cwd: Path) -> list[Case] | None:
    """`python -m unittest -v`: "test_x (pkg.tests.T.test_x) ... ok" per test; tracebacks after."""
    details = {f"{m.group(2)}|{m.group(1)}": m.group(3) for m in _UNITTEST_BLOCK.finditer(output)}
    cases = []
    for m in _UNITTEST_LINE.finditer(output):
        method, where, verdict = m.groups()
        outcome = {"ok": "passed", "FAIL": "failed", "ERROR": "failed", "unexpected success": "failed"}.get(
            verdict, "skipped" if verdict.startswith("skipped") else "passed")
        # 3.11 prints module.Class.method; older Pythons module.Class
        name = where if where.endswith("." + method) else f"{where}.{method}"
        if where.startswith("unittest.loader._FailedTest."):  # a module that failed to import
            name, outcome = where.removeprefix("unittest.loader._FailedTest."), "error"
        cases.append(Case(name, outcome, guess_file(name, cwd), _cut(details.get(f"{where}|{method}", ""))))
    return cases if cases or re.search(r"^Ran \d+ tests? in ", output, re.M) else None


def parse_go(output: str) -> list[Case] | None:
    """`go test -json`: one JSON event per line; a test's verdict is its pass/fail/skip event."""
    cases: dict[str, Case] = {}
    logs: dict[str, list[str]] = {}
    seen = False
    for line in output.splitlines():
        if not line.startswith("{"):
            continue
        try:
            event = json.loads(line)
        except ValueError:
            continue
        seen = True
        package, test, action = event.get("Package", ""), event.get("Test"), event.get("Action")
        key = f"{package}.{test}" if test else package
        if action == "output":
            logs.setdefault(key, []).append(event.get("Output", ""))
        elif action in ("pass", "fail", "skip") and test:
            outcome = {"pass": "passed", "fail": "failed", "skip": "skipped"}[action]
            cases[key] = Case(key, outcome, None, _cut("".join(logs.get(key, []))) if action == "fail" else "")
        elif action == "fail" and not test and not any(k.startswith(package + ".") for k in cases):
            cases[key] = Case(key, "error", None, _cut("".join(logs.get(key, []))))  # a build failure
    return list(cases.values()) if seen else None


_CARGO_LINE = re.compile(r"^test (\S+) \.\.\. (ok|FAILED|ignored)", re.M)


def parse_cargo(output: str) -> list[Case] | None:
    """libtest: "test module::name ... ok|FAILED|ignored", then each failure's stdout."""
    failures = dict(re.findall(r"^---- (\S+) stdout ----\n(.*?)(?=^---- |\n\nfailures:\n)", output, re.M | re.S))
    cases = [Case(name, {"ok": "passed", "FAILED": "failed", "ignored": "skipped"}[verdict], None,
                  _cut(failures.get(name, "")))
             for name, verdict in _CARGO_LINE.findall(output)]
    return cases if cases or re.search(r"^test result: ", output, re.M) else None


def parse_jest(text: str, cwd: Path) -> list[Case]:
    """jest's --json (vitest's json reporter writes the same shape)."""
    data = json.loads(text)
    cases = []
    for suite in data.get("testResults", []):
        file = suite.get("name") or suite.get("testFilePath") or ""
        rel = os.path.relpath(file, cwd) if os.path.isabs(file) else file
        results = suite.get("assertionResults", [])
        for case in results:
            status = case.get("status")
            outcome = "passed" if status == "passed" else ("failed" if status == "failed" else "skipped")
            cases.append(Case(case.get("fullName") or case.get("title", "?"), outcome, rel,
                              _cut("\n".join(case.get("failureMessages") or []))))
        if not results and suite.get("status") == "failed":  # the file did not even load
            cases.append(Case(rel, "error", rel, _cut(suite.get("message", ""))))
    return cases
