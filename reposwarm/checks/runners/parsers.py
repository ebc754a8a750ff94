"""Each runner's output (or report) turned into `Case`s: one result per test, with its outcome.

Outcomes: passed, failed, error (a test file or package that did not even load, or failed around its passing
tests), skipped, xfailed (expected to fail, and failed), xpassed (expected to fail, and passed: it ran and
passed), deselected. A strict xpass (pytest) and an unexpected success (unittest) make the run fail: they are
failed. Only passed, failed and xpassed tests ran.
"""

from __future__ import annotations

import json
import math
import os
import re
from dataclasses import dataclass, replace
from pathlib import Path
from xml.etree import ElementTree

MESSAGE_CHARS = 2000

PASSED, FAILED, ERROR, SKIPPED, XFAILED, XPASSED, DESELECTED = (
    "passed", "failed", "error", "skipped", "xfailed", "xpassed", "deselected")
OUTCOMES = (PASSED, FAILED, ERROR, SKIPPED, XFAILED, XPASSED, DESELECTED)
RAN = (PASSED, FAILED, XPASSED)
CRASHED = "crashed"  # (while parsing only: a test the run ended in, reported as failed)
FAILING = (FAILED, ERROR)


@dataclass(frozen=True)
class Case:
    """One test's result; stored as JSON (dataclasses.asdict) and reloaded with Case(**c), so its fields only
    grow, with defaults."""

    name: str
    outcome: str  # one of OUTCOMES
    file: str | None = None
    message: str = ""
    # seconds it took, as the runner's report says (JUnit `time`, go's Elapsed, jest's and mocha's duration);
    # None where the runner tells none (unittest, cargo): what shards are balanced by (reposwarm/checks/selection/shards.py)
    duration_s: float | None = None


def seconds(value: object, scale: float = 1.0) -> float | None:
    """A report's time as seconds (`scale` 0.001 for milliseconds), or None when it gives none that makes sense.
    (Maven Surefire writes "1,234.5".)"""
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        return None
    try:
        number = float(value.replace(",", "") if isinstance(value, str) else value)
    except ValueError:
        return None
    return round(number * scale, 6) if math.isfinite(number) and number >= 0 else None


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


# --- JUnit XML ----------------------------------------------------------------------------------------------------

def parse_junit(path: Path, cwd: Path) -> list[Case]:
    """JUnit XML (pytest, node's junit reporter, jest-junit, gotestsum, Maven Surefire...)."""
    root = ElementTree.parse(path).getroot()
    cases = []
    for case in root.iter("testcase"):
        classname, name = case.get("classname", ""), case.get("name", "?")
        problem = case.find("failure")
        if problem is None:
            problem = case.find("error")
        skipped = case.find("skipped")
        kind = skipped.get("type", "") if skipped is not None else ""
        if kind == "todo":  # node: a todo test's failure does not count, and it is not a pass either
            outcome, problem = SKIPPED, None
        elif problem is not None:
            # pytest: a module that did not load is a case of its own
            outcome = ERROR if problem.get("message") == "collection failure" else FAILED
        elif skipped is not None:
            outcome = XFAILED if kind == "pytest.xfail" else SKIPPED
        else:
            outcome = PASSED
        message = "" if problem is None else _cut((problem.get("message") or "") + "\n" + (problem.text or ""))
        if skipped is not None and problem is None:
            message = _cut(skipped.get("message") or "")
        # node's reporter names every case's class "test": no module to take a file from
        full = f"{classname}.{name}" if classname and classname != "test" else name
        cases.append(Case(full, outcome, case.get("file") or guess_file(classname, cwd), message,
                          seconds(case.get("time"))))
    return cases


_XPASS = re.compile(r"^XPASS (.+)$", re.M)


def pytest_junit_name(nodeid: str) -> str:
    """A pytest node id as its xunit1 JUnit case is named: tests/test_x.py::T::test_y -> tests.test_x.T.test_y."""
    parts = nodeid.split("::")
    parts[0] = re.sub(r"\.py$", "", parts[0].replace("/", "."))
    return ".".join(parts)


def mark_xpassed(cases: list[Case], output: str) -> list[Case]:
    """pytest's JUnit report shows a (non-strict) xpassed test as a plain pass; its short summary's XPASS lines
    ("XPASS tests/test_x.py::test_y - reason") name them."""
    names = {c.name for c in cases if c.outcome == PASSED}
    xpassed = set()
    for line in _XPASS.findall(output):
        # the reason follows " - ", which a parametrised id may hold too: try each place it could start
        cuts = [m.start() for m in re.finditer(" - ", line)]
        for nodeid in [line, *(line[:i] for i in cuts)]:
            if pytest_junit_name(nodeid) in names:
                xpassed.add(pytest_junit_name(nodeid))
                break
    return [replace(c, outcome=XPASSED) if c.name in xpassed and c.outcome == PASSED else c for c in cases]


# --- unittest -----------------------------------------------------------------------------------------------------

_VERDICT = r"(ok|FAIL|ERROR|skipped(?: .*)?|expected failure|unexpected success)"
# "test_x (pkg.tests.T.test_x)" (3.11+; older: "(pkg.tests.T)"), maybe " ... verdict" on the same line; a
# subtest's line is indented and adds its parameters: "  test_x (pkg.tests.T.test_x) (i=1) ... FAIL"
_UT_HEAD = re.compile(r"^([\w.]+) \(([\w.]+)\)(?: \.\.\. (.*))?$")
_UT_SUB = re.compile(r"^\s+([\w.]+) \(([\w.]+)\) \(.*\) \.\.\. " + _VERDICT + "$")
_UT_TAIL = re.compile(r"(?:^|\.\.\. )" + _VERDICT + "$")
_UT_BLOCK = re.compile(r"^(?:FAIL|ERROR): (\S+) \(([^\s()]+)\)(?: \(.*\))?\n-{20,}\n(.*?)(?=^={20,}|^-{20,}\nRan )",
                       re.M | re.S)
_UT_OUTCOME = {"ok": PASSED, "FAIL": FAILED, "ERROR": FAILED, "expected failure": XFAILED,
               "unexpected success": FAILED}  # (3.11+ fails the run on an unexpected success)


def parse_unittest(output: str, cwd: Path) -> list[Case] | None:
    """`python -m unittest -v`: a line per test (its verdict maybe lines later: a docstring, or what the test
    printed, comes between); failed subtests on indented lines of their own; tracebacks after."""
    details: dict[str, str] = {}
    for m in _UT_BLOCK.finditer(output):
        details[f"{m.group(2)}|{m.group(1)}"] = details.get(f"{m.group(2)}|{m.group(1)}", "") + m.group(3)
    found: dict[tuple[str, str], str] = {}  # (where, method) -> outcome, in order
    pending: tuple[str, str] | None = None
    ended = True  # the output stops with no closing part: the run ended (a crash, os._exit) mid-run
    for line in output.splitlines():
        # the results come first; the tracebacks and the tally after them are no results
        if line.startswith("=" * 20) or re.match(r"^-{20,}$|^Ran \d+ tests? in ", line):
            ended = False
            break
        sub = _UT_SUB.match(line)
        if sub:  # a failed subtest fails its test
            key = (sub.group(2), sub.group(1))
            if sub.group(3) in ("FAIL", "ERROR") or key not in found:
                found[key] = _outcome(sub.group(3))
            continue
        head = _UT_HEAD.match(line)
        if head:
            pending = (head.group(2), head.group(1))
            rest = head.group(3)
            verdict = re.fullmatch(_VERDICT, rest) if rest is not None else None
            if verdict:
                found[pending], pending = _outcome(verdict.group(1)), None
            continue
        if pending is not None:
            tail = _UT_TAIL.search(line)
            if tail:
                found[pending], pending = _outcome(tail.group(1)), None
    if ended and pending is not None and pending not in found:  # the run ended during this test
        found[pending] = CRASHED
    cases = []
    for (where, method), outcome in found.items():
        name = where if where.endswith("." + method) else f"{where}.{method}"
        if where.startswith("unittest.loader._FailedTest."):  # a module that failed to import
            name, outcome = where.removeprefix("unittest.loader._FailedTest."), ERROR
        message = details.get(f"{where}|{method}", "")
        if outcome == CRASHED:
            outcome, message = FAILED, "the run ended during this test, with no verdict (a crash?)"
        elif not message and outcome == FAILED:
            message = "unexpected success: marked expectedFailure, it passed"
        cases.append(Case(name, outcome, guess_file(name, cwd), _cut(message)))
    return cases if cases or re.search(r"^Ran \d+ tests? in ", output, re.M) else None


def _outcome(verdict: str) -> str:
    return SKIPPED if verdict.startswith("skipped") else _UT_OUTCOME.get(verdict, PASSED)


# --- go test -json ------------------------------------------------------------------------------------------------

def go_events(output: str) -> list[dict]:
    events = []
    for line in output.splitlines():
        if line.startswith("{"):
            try:
                event = json.loads(line)
            except ValueError:
                continue
            if isinstance(event, dict):
                events.append(event)
    return events


def parse_go(output: str) -> list[Case] | None:
    """`go test -json`: one JSON event per line; a test's verdict is its pass/fail/skip event. A package that
    failed with none of its tests failing (a build failure, TestMain exiting non-zero, a race found after the
    tests passed) is an error of its own: the run is not green beside its passes."""
    cases: dict[str, Case] = {}
    logs: dict[str, list[str]] = {}
    events = go_events(output)
    for event in events:
        package, test, action = event.get("Package", ""), event.get("Test"), event.get("Action")
        key = f"{package}.{test}" if test else package
        if action == "output":
            logs.setdefault(key, []).append(str(event.get("Output", "")))
        elif action in ("pass", "fail", "skip") and test:
            outcome = {"pass": PASSED, "fail": FAILED, "skip": SKIPPED}[action]
            cases[key] = Case(key, outcome, None, _cut("".join(logs.get(key, []))) if action == "fail" else "",
                              seconds(event.get("Elapsed")))
        elif action == "fail" and not test and package and not any(
                k.startswith(package + ".") and c.outcome == FAILED for k, c in cases.items()):
            cases[key] = Case(key, ERROR, None, _cut("".join(logs.get(key, []))), seconds(event.get("Elapsed")))
    return list(cases.values()) if events else parse_go_text(output)


# "--- PASS: TestAdd (0.00s)", indented for a subtest; "ok  \texample.com/calc\t0.01s", "FAIL\texample.com/calc
# 0.01s", "FAIL\texample.com/broken [build failed]"
_GO_VERDICT = re.compile(r"^\s*--- (PASS|FAIL|SKIP): (\S+) \((?:([\d.]+)s\))?")
_GO_PACKAGE = re.compile(r"^(ok|FAIL)\s+(\S+)\s+(?:\d|\(cached\)|\[)")


def parse_go_text(output: str) -> list[Case] | None:
    """`go test -v` without -json: a verdict line per test, its package named on the line closing the package
    (without -v no passing test is named: no per-test results then)."""
    if not re.search(r"^=== RUN ", output, re.M):
        return None
    cases: list[Case] = []
    pending: list[tuple[str, str, str, float | None]] = []  # (test, outcome, log, seconds) until their package's line
    log: list[str] = []
    for line in output.splitlines():
        verdict, package = _GO_VERDICT.match(line), _GO_PACKAGE.match(line)
        if verdict:
            outcome = {"PASS": PASSED, "FAIL": FAILED, "SKIP": SKIPPED}[verdict.group(1)]
            pending.append((verdict.group(2), outcome, "\n".join(log) if outcome == FAILED else "",
                            seconds(verdict.group(3))))
            log = []
        elif package:
            name = package.group(2)
            cases += [Case(f"{name}.{test}", outcome, None, _cut(text), took) for test, outcome, text, took in pending]
            if package.group(1) == "FAIL" and not any(o == FAILED for _, o, _, _ in pending):
                cases.append(Case(name, ERROR, None, _cut("\n".join(log))))
            pending, log = [], []
        elif not line.startswith("=== "):
            log.append(line)
    return cases


# --- cargo (libtest) ----------------------------------------------------------------------------------------------

# "test tests::adds ... ok", "test src/lib.rs - add (line 5) ... FAILED" (a doc test: spaces in its name),
# "test tests::slow ... ignored, slow on CI", "test tests::panics - should panic ... ok"
_CARGO_LINE = re.compile(r"^test (.+?)(?: - (?:should panic|compile fail|compile))? \.\.\. (ok|FAILED|ignored)"
                         r"(?:, (.*))?$", re.M)
# "test name ... " with no verdict after it: what the test printed came between (--nocapture; the verdict
# then stands on a later line of its own), or the binary died during it (cargo's error follows on that line)
_CARGO_OPEN = re.compile(r"^test (.+?)(?: - (?:should panic|compile fail|compile))? \.\.\. (?!(?:ok|FAILED|ignored)"
                         r"(?:, .*)?$)")
_CARGO_DIED = re.compile(r"process didn't exit successfully: .*$", re.M)
_CARGO_BLOCK = re.compile(r"^---- (.+?) stdout ----\n(.*?)(?=^---- |^failures:$)", re.M | re.S)


def parse_cargo(output: str) -> list[Case] | None:
    """libtest, over every test binary cargo ran (unit, integration, doc tests): one line per test, then each
    failure's output."""
    failures = {name: text for name, text in _CARGO_BLOCK.findall(output)}
    cases = [Case(name, {"ok": PASSED, "FAILED": FAILED, "ignored": SKIPPED}[verdict], None,
                  _cut(failures.get(name, "") if verdict == "FAILED" else why or ""))
             for name, verdict, why in _CARGO_LINE.findall(output)]
    lines = output.splitlines()
    for i, line in enumerate(lines):
        opened = _CARGO_OPEN.match(line)
        if opened:
            cases.append(_cargo_open(opened.group(1), lines[i + 1:], failures))
    return cases if cases or re.search(r"^test result: ", output, re.M) else None


def _cargo_open(name: str, after: list[str], failures: dict[str, str]) -> Case:
    for line in after:
        if line in ("ok", "FAILED", "ignored"):
            outcome = {"ok": PASSED, "FAILED": FAILED, "ignored": SKIPPED}[line]
            return Case(name, outcome, None, _cut(failures.get(name, "")) if outcome == FAILED else "")
        if line.startswith("test ") or re.match(r"^running \d+ tests?$", line):
            break
    died = "\n".join(_CARGO_DIED.findall("\n".join(after[:20])))
    return Case(name, FAILED, None, _cut(f"the test binary ended during this test, with no verdict\n{died}"))


# --- jest, vitest -------------------------------------------------------------------------------------------------

def parse_jest(text: str, cwd: Path) -> list[Case]:
    """jest's --json (vitest's json reporter writes the same shape). pending, skipped, todo and disabled tests
    did not run."""
    data = json.loads(text)
    cases = []
    for suite in data.get("testResults", []):
        file = suite.get("name") or suite.get("testFilePath") or ""
        rel = os.path.relpath(file, cwd) if os.path.isabs(file) else file
        results = suite.get("assertionResults", [])
        for case in results:
            status = case.get("status")
            outcome = PASSED if status == "passed" else (FAILED if status == "failed" else SKIPPED)
            cases.append(Case(case.get("fullName") or case.get("title", "?"), outcome, rel,
                              _cut("\n".join(case.get("failureMessages") or [])), seconds(case.get("duration"), 0.001)))
        if not results and suite.get("status") == "failed":  # the file did not even load
            cases.append(Case(rel, ERROR, rel, _cut(suite.get("message", ""))))
    return cases


# --- mocha --------------------------------------------------------------------------------------------------------

def parse_mocha(text: str, cwd: Path) -> list[Case]:
    """mocha's json reporter: `tests` holds every test that ran or was pending; `failures` the failed ones, and
    the hooks that failed ("before all" hook for ...), which are no test: an error around the tests they hid."""
    data = json.loads(text)

    def key(t: dict) -> tuple[str, str]:
        return str(t.get("fullTitle") or t.get("title") or "?"), str(t.get("file") or "")

    def rel(file: str) -> str | None:
        return (os.path.relpath(file, cwd) if os.path.isabs(file) else file) or None

    failed = {key(t): t for t in data.get("failures", []) if isinstance(t, dict)}
    pending = {key(t) for t in data.get("pending", []) if isinstance(t, dict)}
    cases, seen = [], set()
    for test in data.get("tests", []):
        if not isinstance(test, dict):
            continue
        name, file = key(test)
        seen.add((name, file))
        problem = failed.get((name, file))
        outcome = SKIPPED if (name, file) in pending else (FAILED if problem is not None else PASSED)
        cases.append(Case(name, outcome, rel(file), _mocha_message(problem), seconds(test.get("duration"), 0.001)))
    for (name, file), problem in failed.items():
        if (name, file) not in seen:  # a hook that failed: the tests it holds did not run
            cases.append(Case(name, ERROR, rel(file), _mocha_message(problem)))
    return cases


def _mocha_message(problem: dict | None) -> str:
    if not problem:
        return ""
    err = problem.get("err")
    return _cut(str(err.get("stack") or err.get("message") or "")) if isinstance(err, dict) else ""
