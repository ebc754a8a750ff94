"""The base commit's tests judge the merged code (issue 31): what a lane did to the tests that judge it.

Three kinds of change, none of them ever plainly PASSED (reposwarm/checks/verdicts.py):

- lost: a test that passed on the base commit is, on the merged tree, skipped, xfailed, deselected, missing or
  renamed away (found by `verdicts.judge` from the two trees' per-test results);
- rewritten: the base commit's version of the test fails against the merged code while the lane's version
  passes there. Found by a second run of the check profile, in a checkout of the merged tree with every test file
  and piece of test configuration the lanes changed put back as the base commit has it (reposwarm/checks/changed_tests_git.py);
- reconfigured: a lane changed test configuration (reposwarm/checks/testpaths.py): listed by itself.

Each change names the lanes that changed its file and what they said of it (`stated`): a change whose lane
gave its reason is not sent back as a repair, and reaches the review under its own heading.
"""

from __future__ import annotations

import re
from pathlib import PurePosixPath

from reposwarm.checks import runners, testpaths
from reposwarm.contracts import TestChange, TestChangeKind, TestFailure

MAX_CHANGES = 100  # per command and kind: a deleted suite is one long list, cut with a count of the rest
PASSING = ("passed",)
FAILING = ("failed", "error")

# A lane's own words say why a test had to change when they name the test (or its file) and one of these.
REASON_WORDS = re.compile(r"\b(remov|delet|drop|renam|replac|chang|rewr|rework|updat|obsolet|deprecat|skip|"
                          r"xfail|disabl|split|mov)\w*", re.I)


# --- the comparison ------------------------------------------------------------------------------------------------

def _first_line(text: str) -> str:
    return next((line.strip() for line in text.splitlines() if line.strip()), "")[:300]


def capped(changes: list[TestChange], kind: TestChangeKind, command: str) -> list[TestChange]:
    if len(changes) <= MAX_CHANGES:
        return changes
    rest = len(changes) - MAX_CHANGES
    return changes[:MAX_CHANGES] + [TestChange(kind=kind, test=f"{rest} more", command=command,
                                               detail=f"and {rest} more {kind} tests in `{command}`")]


def lost(base: list[runners.Case], merged: list[runners.Case], command: str) -> list[TestChange]:
    """Tests that passed on the base commit and, on the merged tree, did not run as tests: skipped, xfailed,
    deselected, missing. A test missing because a file did not load on the merged tree is not lost: that file is a
    new failure, and the tests it hid are said as "fewer tests ran"."""
    by_name = {c.name: c for c in merged}
    base_errors = {c.name for c in base if c.outcome == "error"}
    new_load_errors = any(c.outcome == "error" and c.name not in base_errors for c in merged)
    found = []
    for case in base:
        if case.outcome not in PASSING:
            continue
        now = by_name.get(case.name)
        if now is None:
            if new_load_errors:
                continue
            detail = ("passed on the base commit; not on the merged tree at all (removed, renamed, deselected or "
                      "no longer collected)")
        elif now.outcome in PASSING + FAILING:
            continue
        else:
            detail = f"passed on the base commit; {now.outcome} on the merged tree" + (
                f" ({_first_line(now.message)})" if now.message else "")
        found.append(TestChange(kind=TestChangeKind.lost, test=case.name, file=case.file or (now.file if now else None),
                                command=command, detail=detail))
    return found


def rewritten(base: list[runners.Case], merged: list[runners.Case], base_tests: list[runners.Case],
              still_failing: list[TestFailure], command: str) -> list[TestChange]:
    """Tests that pass on the base commit and on the merged tree, while the base's version of them fails against
    the merged code. `still_failing`: the base's tests' failures after the re-run (a flake there blames no one)."""
    failing = {f.name: f for f in still_failing if f.command == command}
    merged_passed = {c.name for c in merged if c.outcome in PASSING}
    ran = {c.name for c in base_tests}
    # A base test file that does not even load against the merged code: its tests are missing from that run, and
    # the file's own error case says why.
    not_loaded = {(c.file or c.name): failing[c.name] for c in base_tests if c.outcome == "error" and c.name in failing}
    found = []
    for case in base:
        if case.outcome not in PASSING or case.name not in merged_passed:
            continue
        why = failing.get(case.name)
        if why is None and case.name not in ran and case.file:
            why = not_loaded.get(case.file)
        if why is None:
            continue
        found.append(TestChange(
            kind=TestChangeKind.rewritten, test=case.name, file=case.file or why.file, command=command,
            detail="passes on the base commit and on the merged tree, but the base commit's version of it fails "
                   f"against the merged code: {_first_line(why.message) or 'failed'}"))
    return found


def base_verdict_note(change: TestChange, still_failing: list[TestFailure]) -> TestChange:
    """A lost test, with what the base's version of it says of the merged code (the case that matters most:
    the test was hidden because it fails)."""
    why = next((f for f in still_failing if f.command == change.command and f.name == change.test), None)
    note = (f"; the base commit's version of it FAILS against the merged code: {_first_line(why.message) or 'failed'}"
            if why is not None else "; the base commit's version of it passes against the merged code")
    return change.model_copy(update={"detail": change.detail + note, "file": change.file or (why.file if why else None)})


def reconfigured(config: dict[str, str]) -> list[TestChange]:
    return [TestChange(kind=TestChangeKind.reconfigured, test=path, file=path,
                       detail=f"test configuration {how}") for path, how in sorted(config.items())]


# --- whose change, and what they said of it ------------------------------------------------------------------------

def owners(change: TestChange, touched: dict[str, list[str]]) -> list[str]:
    """The lanes that changed the test's file; with no file known (node and cargo name none for a passing test),
    the lanes that changed any test path; else every lane that changed something."""
    if change.file:
        lanes = [lane for lane, files in touched.items() if change.file in files]
        if lanes:
            return sorted(lanes)
    lanes = [lane for lane, files in touched.items() if any(testpaths.is_test(f) for f in files)]
    return sorted(lanes or [lane for lane, files in touched.items() if files])


def _names(change: TestChange) -> list[str]:
    """How a lane's words may name the test: its full name, its last part, its file and the file's name."""
    short = re.split(r"[.:/ ]", change.test)[-1]
    names = [change.test, short]
    if change.file:
        names += [change.file, PurePosixPath(change.file).name, PurePosixPath(change.file).stem]
    return [n for n in names if len(n) >= 3]


def stated(change: TestChange, statements: list[str]) -> str:
    """The lane's stated reason for the change: the first sentence of its goal or finish summary that names the
    test or its file together with a word of changing it (remove, rename, replace, change...); "" when none does.

    Deliberately simple, and documented: a lane that says why in words a reviewer can check is believed as far as
    the review, never further (the change is still listed, and the verdict is still PASSED WITH TEST CHANGES)."""
    names = _names(change)
    for text in statements:
        for sentence in re.split(r"(?<=[.!?;])\s+|\n+", text):
            if REASON_WORDS.search(sentence) and any(n in sentence for n in names):
                return sentence.strip()[:400]
    return ""


def attribute(changes: list[TestChange], touched: dict[str, list[str]], statements: dict[str, list[str]],
              diff_of: dict[str, str], shared_diff: str) -> list[TestChange]:
    """Each change with its lanes, their stated reason and the diff of its file (once per file: later changes of
    the same file point to it)."""
    shown: set[str] = set()
    out = []
    for change in changes:
        lanes = owners(change, touched)
        reason = next((r for lane in lanes if (r := stated(change, statements.get(lane, [])))), "")
        key = change.file or ""
        text = diff_of.get(key, "") if change.file else shared_diff
        if key in shown and text:
            text = "(the same file's diff is shown with an earlier change)"
        shown.add(key)
        out.append(change.model_copy(update={"lanes": lanes, "reason": reason, "diff": text}))
    return out


def needs_repair(change: TestChange) -> bool:
    """Lost and rewritten tests go back to their lanes first, unless the lane said why; configuration changes are
    listed for the review only."""
    return change.kind != TestChangeKind.reconfigured and not change.reason and bool(change.lanes)
