"""The gate's verdict: a check on the merged tree judged against the same check on the base commit, per test.

A failure the base commit has too is pre-existing, never blamed on the swarm; one the base has not is new.
A test failing on the base and passing on the merged tree is fixed. And a check is never PASSED on a tree
where less of the suite ran: fewer tests than on the base (an import error, a collection error, a suite that
did not start) fails the gate even when the command already exited non-zero on the base, and so does a
worse exit class (tests failed on the base; a usage, collection or internal error on the merged tree). A
command that fails on the base and gives no per-test results cannot be judged at all: it says so, and the
check does not pass.

Three verdicts, never a silent green (issue 31): PASSED (no new failure, no problem, and the tests that judge the
tree are the base commit's: nothing lost, nothing rewritten to pass, no test configuration changed); PASSED WITH
TEST CHANGES (green, but only with the test changes listed, reposwarm/checks/changed_tests.py); FAILED. A test that
passed on the base commit and is skipped, xfailed, deselected or missing on the merged tree is lost; the tests it
stands for are not counted as "fewer tests ran" (it is said once, as a test change).

A fourth, NOT JUDGED (issue 44, reposwarm/checks/exercised.py): the checks loaded a changed module from outside the
tree (an installed copy, an editable install of a checkout, a stale build), so their passing tests say nothing
about the change. Precedence: a new failure or a problem is FAILED still (something the tree ran is broken; the
modules loaded from outside are said beside it, since the failures may be that copy's); else a change loaded from
outside is NOT JUDGED, never PASSED nor PASSED WITH TEST CHANGES. A changed source file no check loaded is counted
("3 of 5 changed source files exercised") and fails the check only where the profile says `require_exercised:
true` (`required`). A report with no evidence (`exercise` None) is judged as before.
"""

from __future__ import annotations

from collections.abc import Callable

from reposwarm.checks import changed_tests, exercised, runners
from reposwarm.contracts import CommandResult, TestChange, TestChangeKind, TestFailure, TestReport, Verdict

NOT_JUDGED = ("this check already fails on the base commit and gives no per-test results: fix the check, "
              "or add {junit}")

NO_TEST_RAN = ("this check already fails on the base commit and no test ran there (its test files did not "
               "load): fix the check")

CaseLoader = Callable[[CommandResult], "list[runners.Case] | None"]


def _ran(cases: list[runners.Case]) -> set[str]:
    return {c.name for c in runners.ran(cases)}


def judge(report: TestReport, baseline: TestReport | None, cases: CaseLoader) -> TestReport:
    """`report` (the merged tree) judged against `baseline` (the base commit), command by command. With no baseline
    (a lane's run_checks before the base commit's results are in) it is only settled where its evidence has a
    changed module loaded from outside the tree: never a pass then."""
    if baseline is None:
        return settle(report) if exercised.outside(report) else report
    base_by_argv = {tuple(c.argv): c for c in baseline.commands}
    known = {f.key for f in baseline.failures + baseline.pre_existing}
    new: list[TestFailure] = []
    old: list[TestFailure] = []
    fixed: list[TestFailure] = []
    # (a command whose output holds results its parser missed is not fully judged: runners.not_fully_judged)
    problems: list[str] = [p for p in map(runners.not_fully_judged, report.commands) if p]
    changes: list[TestChange] = []
    for cmd in report.commands:
        command = " ".join(cmd.argv)
        mine = [f for f in report.failures if f.command == command]
        base = base_by_argv.get(tuple(cmd.argv))
        if base is None:  # not run on the base (a profile changed between rounds): all its failures are new
            new += mine
            continue
        base_cases, merged_cases = cases(base), cases(cmd)
        base_failed = base.exit_code != 0 or base.timed_out
        if base_failed and (base_cases is None or not _ran(base_cases)):
            why = NOT_JUDGED if base_cases is None else NO_TEST_RAN
            if base_cases is None and (unread := runners.unread(base.reason)):  # {junit} is no help: npm test, tox
                why = f"this check already fails on the base commit and gives no per-test results: {unread}"
            if base.reason and runners.stops_judging(base.reason):  # {junit} would not help: the reason says what to
                why = f"this check fails on the base commit: {base.reason}"  # fix (a missing command, a timeout, a limit)
            problems.append(f"`{command}`: {why}")
            old += mine  # not blamed on the swarm, but not passed either
            continue
        new += [f for f in mine if f.key not in known]
        old += [f for f in mine if f.key in known]
        if base_cases is not None:
            base_ran = _ran(base_cases)
            merged_ran = _ran(merged_cases) if merged_cases is not None else set()
            failing_on_base = {c.name for c in runners.failing(base_cases)}
            fixed += [TestFailure(name=c.name, file=c.file, command=command) for c in merged_cases or []
                      if c.outcome == "passed" and c.name in failing_on_base]
            lost = changed_tests.lost(base_cases, merged_cases, command) if merged_cases is not None else []
            changes += changed_tests.capped(lost, TestChangeKind.lost, command)
            if merged_cases is None:
                problems.append(f"`{command}`: no per-test results on the merged tree ({len(base_ran)} tests ran "
                                "on the base commit): the suite did not start")
            elif len(merged_ran) < len(base_ran) and \
                    (missing := sorted(base_ran - merged_ran - {c.test for c in lost})):
                problems.append(f"`{command}`: fewer tests ran on the merged tree ({len(merged_ran)}) than on the "
                                f"base commit ({len(base_ran)}); not run: {', '.join(missing[:5])}"
                                + (f" and {len(missing) - 5} more" if len(missing) > 5 else ""))
        if base.exit_class and cmd.exit_class and cmd.exit_class.severity > base.exit_class.severity and \
                cmd.exit_class.severity >= runners.NO_TESTS.severity:
            problems.append(f"`{command}`: {base.exit_class} on the base commit, {cmd.exit_class} on the merged tree "
                            f"(exit {base.exit_code} -> {cmd.exit_code})")
    return settle(report.model_copy(update={
        "failures": new, "pre_existing": old, "fixed": fixed, "problems": problems, "test_changes": changes,
        "base_tests_run": baseline.tests_run}))


def selected(report: TestReport) -> bool:
    """Whether only some of the profile's tests ran (docs/scale.md): said with the verdict, and never taken as a
    run of the whole profile."""
    return bool(report.selection) and not report.selection.startswith("whole profile")


def settle(report: TestReport) -> TestReport:
    """The verdict from what the report holds; `passed` only for a plain PASSED. (The precedence: the module's
    docstring.)"""
    if report.failures or report.problems:
        verdict = Verdict.failed
    elif exercised.outside(report):
        verdict = Verdict.not_judged
    else:
        verdict = Verdict.passed_with_test_changes if report.test_changes else Verdict.passed
    return report.model_copy(update={"verdict": verdict, "passed": verdict == Verdict.passed})


def required(report: TestReport, require: bool) -> TestReport:
    """The report with the profile's `require_exercised` applied to the whole check (after its parts are merged):
    a changed source file no check loaded is a problem, so the check is FAILED; said once. Unchanged when not
    required, with no evidence, or with nothing missing."""
    problem = exercised.required_problem(report) if require else ""
    if not problem or any(p.startswith(exercised.REQUIRED) for p in report.problems):
        return report
    return settle(report.model_copy(update={"problems": [*report.problems, problem]}))


def change_counts(report: TestReport) -> list[str]:
    """"2 lost, 1 rewritten": the test changes by kind."""
    return [f"{n} {kind}" for kind in TestChangeKind
            if (n := sum(c.kind == kind for c in report.test_changes if not c.test.endswith(" more")))]


def why_failed(report: TestReport) -> str:
    """Why a check did not pass, first, when that is not its tests. FAILED: a command that could not run or finish
    (not found, timed out, killed at a limit) on the merged tree, else the first problem; and a changed module
    loaded from outside the tree, beside it. NOT JUDGED: which changed module was loaded from where, and the fix.
    "" otherwise."""
    verdict = report.verdict_of
    if verdict == Verdict.not_judged:
        return exercised.outside_reason(report)
    if verdict != Verdict.failed:
        return ""
    why = report.problems[0] if report.problems and not report.failures else ""
    for cmd in report.commands:
        if cmd.reason and runners.stops_judging(cmd.reason):
            why = f"`{' '.join(cmd.argv)}`: {cmd.reason}"
            break
    return "; ".join(said for said in (why, exercised.outside_reason(report)) if said)


def summary(report: TestReport, note: str = "") -> str:
    """One line, starting with the verdict word: what a lane, a reviewer, status and watch read first. `note`:
    said first after it, in its parentheses (a targeted run says so: "PASSED (targeted: 2 tests of ...)")."""
    # (a check that ran only some tests says so first: never shown as a run of the whole profile)
    note = "; ".join(said for said in (report.selection, note) if said)
    parts = [f"{len(report.failures)} new failure(s)"] if report.failures else []
    parts += [f"tests {', '.join(change_counts(report))}"] if report.test_changes else []
    parts += [f"{len(report.pre_existing)} pre-existing"] if report.pre_existing else []
    parts += [f"{len(report.fixed)} fixed"] if report.fixed else []
    parts += [f"{len(report.flaky)} flaky"] if report.flaky else []
    parts += [f"{len(report.problems)} problem(s)"] if report.problems else []
    # ("3 of 5 changed source files exercised": in the parentheses, as every note, so the verdict word stays the
    # line's first words, which a lane's tally reads: workflows/lane.py _account)
    inner = "; ".join(said for said in (note, exercised.counted(report), ", ".join(parts)) if said)
    head = report.verdict_of.value + (f" ({inner})" if inner else "")
    if why := why_failed(report):
        head += f": {why[:300]}"
    if report.tests_run is not None:
        base = f" (base commit: {report.base_tests_run})" if report.base_tests_run is not None else ""
        total = " in all" if len(report.commands) > 1 else ""  # (each command's own figure is per command)
        head += f"; {report.tests_run} tests ran{total}{base}"
    return head
