"""A second, cheap count of each runner's test results, independent of its parser: the runner's own closing
summary where it prints one, or a looser reading of its result lines. A command whose output holds more
results than the parser read has tests no verdict saw: it is reported as not fully judged, never PASSED."""

from __future__ import annotations

import json
import re
from pathlib import Path
from xml.etree import ElementTree

from reposwarm.checks.runners.parsers import ERROR, Case, go_events

# pytest's last line: "= 3 failed, 6 passed, 1 skipped, 1 deselected, 1 xfailed, 2 errors in 0.07s =" (or bare
# with -q); errors are left out: a passing test that errors in teardown is counted in both
_PYTEST_SUMMARY = re.compile(r"^(?:=+ )?(\d+ [a-z]+(?:, \d+ [a-z]+)*) in \d+(?:\.\d+)?s\b", re.M)
_PYTEST_RESULTS = ("passed", "failed", "skipped", "xfailed", "xpassed")


def _pytest(output: str) -> int | None:
    found = _PYTEST_SUMMARY.findall(output)
    if not found:
        return None
    counts = {word: int(n) for n, word in re.findall(r"(\d+) ([a-z]+)", found[-1])}
    return sum(counts.get(word, 0) for word in _PYTEST_RESULTS)


def _unittest(output: str) -> int | None:
    ran = re.findall(r"^Ran (\d+) tests? in ", output, re.M)
    return sum(int(n) for n in ran) if ran else None


def _cargo(output: str) -> int | None:
    # any line shaped like a result, whatever its name holds, and each test binary's closing tally (a binary
    # that crashed mid-run prints none: its lines still count)
    lines = len(re.findall(r"^test .+ \.\.\. ", output, re.M))
    tallies = re.findall(r"^test result: \w+\. (\d+) passed; (\d+) failed; (\d+) ignored;", output, re.M)
    if not lines and not tallies:
        return None
    return max(lines, sum(int(p) + int(f) + int(i) for p, f, i in tallies))


def _go(output: str) -> int | None:
    events = go_events(output)
    if not events:  # `go test -v` without -json: its verdict lines
        lines = re.findall(r"^\s*--- (?:PASS|FAIL|SKIP): ", output, re.M)
        return len(lines) if lines else None
    return sum(1 for e in events if e.get("Action") == "output"
               and re.match(r"^\s*--- (PASS|FAIL|SKIP): ", str(e.get("Output", ""))))


def _read(report: Path | None) -> str | None:
    try:
        return report.read_text(encoding="utf-8", errors="replace") if report is not None else None
    except OSError:
        return None


def _node(output: str, report: Path | None) -> tuple[int, int] | None:
    """node's spec reporter closes with "ℹ tests N" and "ℹ suites M"; a test with subtests is a testsuite in
    the JUnit report, and a describe block is a suite in both: N + M is the cases read plus the testsuites."""
    tests = re.findall(r"^ℹ tests (\d+)$", output, re.M)
    suites = re.findall(r"^ℹ suites (\d+)$", output, re.M)
    text = _read(report)
    if not tests or text is None:
        return None
    return int(tests[-1]) + (int(suites[-1]) if suites else 0), len(re.findall(r"<testsuite\b", text))


def _junit(report: Path | None) -> int | None:
    try:
        root = ElementTree.parse(report).getroot() if report is not None else None
    except (OSError, ElementTree.ParseError):
        return None
    if root is None:
        return None
    if root.tag == "testsuites" and (root.get("tests") or "").isdigit():
        said = [int(root.get("tests") or 0)]
    else:  # the top-level suites' own counts (a nested suite's cases are its parent's too)
        tops = [root] if root.tag == "testsuite" else [s for s in root if s.tag == "testsuite"]
        said = [int(s.get("tests") or 0) for s in tops if (s.get("tests") or "").isdigit()]
    return sum(said) if said else None


def _jest(report: Path | None) -> int | None:
    text = _read(report)
    try:
        total = json.loads(text).get("numTotalTests") if text else None
    except (ValueError, AttributeError):
        return None
    return total if isinstance(total, int) else None


def _mocha(report: Path | None) -> int | None:
    """mocha's own tally: the passes, the pending and the failures (a failed hook is one of them)."""
    text = _read(report)
    try:
        stats = json.loads(text).get("stats") if text else None
        return sum(int(stats[k]) for k in ("passes", "pending", "failures")) if isinstance(stats, dict) else None
    except (ValueError, AttributeError, KeyError, TypeError):
        return None


def unparsed(runner: str, output: str, report: Path | None, cases: list[Case] | None) -> int:
    """How many more test results the command's output holds than its parser read (0: none beyond them)."""
    parsed = len(cases or [])
    tested = len([c for c in cases or [] if c.outcome != ERROR])  # a file that did not load is no test result
    if runner == "node":
        pair = _node(output, report)
        return max(0, pair[0] - pair[1] - parsed) if pair else 0
    expected = {"junit": lambda: _junit(report), "pytest": lambda: _pytest(output), "unittest": lambda: _unittest(output),
                "cargo": lambda: _cargo(output), "go": lambda: _go(output),
                "jest": lambda: _jest(report), "vitest": lambda: _jest(report), "mocha": lambda: _mocha(report)}.get(runner, lambda: None)()
    if expected is None:
        return 0
    seen = parsed if runner in ("unittest", "cargo", "junit", "mocha") else tested
    return max(0, expected - seen)
