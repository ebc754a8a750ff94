"""A round's review package and the decision on it, for SwarmWorkflow (workflow code: decisions only).

What a person reads before approving: the plan, each lane's account (LaneReview,
from its LaneResult), conflicts and how they were settled, the checks, warnings.
What they send back (an Update, or a Signal from the Web UI) is checked here,
by pure functions of the run's status, so a payload can be refused with its
reason but never fail a workflow task.
"""

from __future__ import annotations

from datetime import datetime

from pydantic import ValidationError
from temporalio import workflow
from temporalio.common import RawValue

with workflow.unsafe.imports_passed_through():
    from reposwarm.checks import exercised
    from reposwarm.contracts import (
        FileEdit,
        HelperRole,
        LaneResult,
        LaneReview,
        Phase,
        Plan,
        Published,
        ReviewDecision,
        ReviewPackage,
        RoundRecord,
        SwarmRequest,
        SwarmStatus,
        TestReport,
        Usage,
        Verdict,
    )
    from reposwarm.review.package import with_published
    from reposwarm.slices.narrowing import plan_problem
    from reposwarm.text import inert_line
    from reposwarm.vcs.branches import lane_branch

UNSANDBOXED = ("checks ran UNSANDBOXED (REPOSWARM_SANDBOX=off on the worker): code the lanes wrote ran "
               "with the worker's own powers")


def review_package(req: SwarmRequest, status: SwarmStatus, plan: Plan, base_sha: str,
                   results: dict[str, LaneResult], report: TestReport | None, feedback: list[str]) -> ReviewPackage:
    """The package of the round in `status`; a warning the run must carry from now on is added to `status`.

    Its figures are the ones status has (issue 33): each lane's whole round from the round's record (its first
    pass and every repair, each pass listed too), the run's usage so far, the round's merges and rollbacks; and
    every lane being approved, an earlier round's too while its work is in the merged tree."""
    goals = {lp.lane: lp.goal for lp in plan.lanes}
    conflicts = [f"{name}: {', '.join(r.changeset.conflicts)} (branch {lane_branch(req.run_id, name)} kept)"
                 for name, r in results.items() if r.changeset.conflicts]
    if report is not None and report.unsandboxed and UNSANDBOXED not in status.warnings:
        status.warnings.append(UNSANDBOXED)
    record = next((r for r in reversed(status.rounds) if r.round == status.round), None)
    states = {s.lane: str(s.state) for s in status.lanes}
    lanes = [lane_review(r, goals[name], record, status.round, states.get(name, "")) for name, r in results.items()]
    lanes += carried_lanes(status.review, status.round, set(results))
    ran = [ln for ln in record.lanes if ln.dispatches] if record is not None else []
    round_usage = sum((ln.usage for ln in ran), Usage()) if ran else sum((r.usage for r in results.values()), Usage())
    return ReviewPackage(run_id=req.run_id, round=status.round, task=req.task, repo_path=req.repo_path,
                         warnings=list(status.warnings),
                         base_sha=base_sha, integration_sha=status.integration_sha, plan=plan,
                         lanes=lanes,
                         test_report=report, conflicts=conflicts, resolutions=list(status.resolutions),
                         overlaps=list(status.overlaps), contract_flags=list(status.contract_flags),
                         first_pass_merge_rate=status.first_pass_merge_rate,
                         validations=list(status.validations),
                         usage=status.usage, round_usage=round_usage,
                         rollbacks=record.rollbacks if record is not None else 0,
                         merged=record.merged if record is not None else None,
                         integration_branch=status.integration_branch,
                         previous_comments=list(feedback), ui_url=req.ui_url)


def lane_review(result: LaneResult, goal: str, record: RoundRecord | None, round_no: int, state: str) -> LaneReview:
    """A lane's part of the review: its last pass's words (summary, assumptions, flags), and its whole round's
    figures and files from the round's record, which counts every pass (a repair that wrote nothing leaves the
    file its first pass wrote visible)."""
    review = LaneReview.of(result, goal).model_copy(update={"round": round_no, "state": state})
    found = next((ln for ln in record.lanes if ln.lane == result.lane), None) if record is not None else None
    if found is None or not found.passes:
        return review
    edits: dict[str, FileEdit] = {}
    for one in found.passes:
        for edit in one.edits:
            earlier = edits.get(edit.path)
            if earlier is not None and earlier.operation == "create" and edit.operation != "delete":
                edit = edit.model_copy(update={"operation": "create"})
            if earlier is not None and edit.reason not in earlier.reason:
                edit = edit.model_copy(update={"reason": f"{earlier.reason}; {edit.reason}"})
            edits[edit.path] = edit
    return review.model_copy(update={
        "usage": found.usage, "turns": found.turns, "tool_calls": found.tool_calls, "refusals": found.refusals,
        "tool_errors": found.tool_errors, "elapsed_s": found.seconds, "dispatches": found.dispatches,
        "passes": list(found.passes), "edits": sorted(edits.values(), key=lambda e: e.path)})


def carried_lanes(previous: ReviewPackage | None, round_no: int, current: set[str]) -> list[LaneReview]:
    """The lanes of earlier rounds whose work the merged tree still holds (as the last review found them): what an
    approval of this round delivers with it. A lane of this round too is listed again, under its earlier round."""
    if previous is None or previous.round >= round_no:
        return []
    out = []
    for lane in previous.lanes:
        held = lane.in_tree if lane.in_tree is not None else lane.state.startswith("merged")
        if held and lane.edits:
            out.append(lane.model_copy(update={"round": lane.round or previous.round}))
    return out


def end_round(record: RoundRecord | None, status: SwarmStatus, nothing_merged: bool) -> None:
    """The round's merges and rollbacks in its record: a lane whose merge a rollback undid is no merge."""
    if record is None:
        return
    record.merged = 0 if nothing_merged else sum(s.state.startswith("merged") for s in status.lanes)
    record.rollbacks = rollbacks_in(status.validations, record.round)


def rollbacks_in(validations: list[str], round_no: int) -> int:
    """The rollbacks of a round, from the gate's lines: each follows the check lines of its round."""
    current, count = 0, 0
    for line in validations:
        if line.startswith("round ") and " check " in line:
            current = int(line.split()[1]) if line.split()[1].isdigit() else current
        elif line.startswith("rolled back") and current == round_no:
            count += 1
    return count


def reviewed(package: ReviewPackage, published: Published, record: RoundRecord | None) -> ReviewPackage:
    """The package with what publishing it found out in git (the diff; which lanes the merged tree holds), as the
    published Markdown has it; the round's merges counted again from that."""
    package = with_published(package, published)
    if record is not None and package.merged is not None:
        record.merged = package.merged
    return package


def decision_of(payload: RawValue) -> ReviewDecision | str:
    """A Signal's payload as a decision, or why it is none. The Signal takes the raw payload because the SDK
    drops one that fails to convert without a word; here its reason is kept for `ignored_signals`."""
    try:
        return workflow.payload_converter().from_payload(payload.payload, ReviewDecision)
    except Exception as err:  # anything a sender can put in a payload ends as a reason, never a failed task
        return f"not a review decision: {conversion_problem(err)}"


def conversion_problem(err: BaseException) -> str:
    cause: BaseException | None = err
    while cause is not None and not isinstance(cause, ValidationError):
        cause = cause.__cause__ or cause.__context__
    if not isinstance(cause, ValidationError):
        return inert_line(str(err))[:200] or type(err).__name__
    problems = [f"{'.'.join(map(str, e['loc'])) or 'payload'}: {str(e['msg']).removeprefix('Value error, ')}"
                for e in cause.errors(include_url=False, include_input=False)[:3]]
    return inert_line("; ".join(problems))[:400]


def decision_refusal(status: SwarmStatus, decision: ReviewDecision, roles: dict[str, HelperRole], now: datetime,
                     taken: bool) -> str | None:
    """Why the run may not take this decision now (None when it may): the Update's validator and the Signal's
    handler ask the same."""
    if status.phase != Phase.review:
        return f"the run is not waiting for review (phase: {status.phase.value})"
    if taken:
        return f"round {status.round} already has a decision"
    if not decision.approve and not decision.comment.strip():
        return "a rejection needs a comment: it becomes the next plan's input"
    review = status.review
    if decision.approve and review is not None and review.nothing_merged:
        return ("nothing was merged in this round, so there is nothing to approve; reject with a comment "
                "to plan again")
    deadline = decision.deadline
    if deadline is not None and now > deadline:
        return (f"this decision expired at {decision.not_after[11:19]} UTC before the run could take it "
                "(no worker took it in time); send it again")
    if decision.plan is not None:
        if decision.approve:
            return "a plan goes with a rejection: it is the next round's plan"
        if (why := plan_problem(decision.plan, roles)) is not None:
            return f"the plan is refused: {why}"
    if decision.approve and review is not None and review.test_report is not None:
        return red_refusal(review.round, review.test_report, decision)
    return None


def red_refusal(round_no: int, report: TestReport, decision: ReviewDecision) -> str | None:
    """An approval of a red round (or of one green only with changed tests, or of one whose checks ran another copy
    of the changed code) must say it means it."""
    verdict = report.verdict_of
    if verdict == Verdict.not_judged and not decision.accept_unjudged:
        why = first_reason(report)
        return (f"checks NOT JUDGED in round {round_no}{f' ({why})' if why else ''}: the checks did not run the "
                "change's own code, so they say nothing about it; fix the check's environment and reject to check "
                'again, or approve with --accept-unjudged (Signal: "accept_unjudged": true) to deliver it unjudged')
    if verdict == Verdict.failed and not decision.accept_red:
        why = first_reason(report)
        return (f"checks FAILED in round {round_no}{f' ({why})' if why else ''}: approve with --accept-red "
                '(Signal: "accept_red": true) to deliver it anyway')
    if verdict == Verdict.passed_with_test_changes and not decision.accept_test_changes:
        changes = report.test_changes
        first = changes[0] if changes else None
        what = (f" ({len(changes)} test change(s), first: {first.kind} {first.test}"
                f"{' by ' + ', '.join(first.lanes) if first.lanes else ''})" if first else "")
        return (f"checks PASSED WITH TEST CHANGES in round {round_no}{what}: the tests that judged it were changed; "
                'read them in the review, then approve with --accept-test-changes (Signal: '
                '"accept_test_changes": true) to deliver it')
    return None


def first_reason(report: TestReport) -> str:
    """The first thing that made the checks fail (or not judge), in a few words."""
    if report.verdict_of == Verdict.not_judged:
        found = exercised.outside(report)
        first = next(iter(found), "")
        return inert_line(f"{first} was loaded from {found[first]}, not from the tree")[:160] if first else ""
    for command in report.commands:
        if command.reason:
            return inert_line(command.reason)[:160]
    if report.failures:
        failure = report.failures[0]
        more = f" and {len(report.failures) - 1} more" if len(report.failures) > 1 else ""
        return inert_line(f"{failure.name} failed{more}")[:160]
    return inert_line(report.problems[0])[:160] if report.problems else ""


def approve_hint(report: TestReport | None) -> str:
    """The flag an approval of this round needs ("" for none), as the CLI and the Web UI's hint spell it."""
    if report is None or report.verdict_of == Verdict.passed:
        return ""
    return {Verdict.failed: "accept_red", Verdict.not_judged: "accept_unjudged"}.get(report.verdict_of,
                                                                                   "accept_test_changes")
