"""The run's record on the Temporal server, as memo fields, for clients with no worker at hand (workflow code).

Its status at every phase change and its latest review package, so a client answers status, review, report and
explain with no worker running, and after the run. The server refuses a memo over 2 MB in all (and logs a
warning over 2 KB): the status is kept under 400 KB and the package under 1.2 MB, trimmed (the full ones: a
worker host's files, with --home) when they would not be.
"""

from __future__ import annotations

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from reposwarm.contracts import Exercise, ReviewPackage, SwarmStatus

STATUS_MEMO, REVIEW_MEMO = "status", "review"
STATUS_LIMIT, REVIEW_LIMIT = 400_000, 1_200_000
TRIMMED = ("trimmed on the Temporal server (too large for a memo): `reposwarm review|explain RUN --home DIR` on a "
           "worker host, or the review ref in the repository, has all of it")


def memo_status(status: SwarmStatus) -> SwarmStatus:
    """The status as the memo holds it: without the package (a memo of its own), trimmed to its limit."""
    status = status.model_copy(update={"review": None})
    if len(status.model_dump_json()) > STATUS_LIMIT:
        status.rounds = [r.model_copy(update={"lanes": [ln.model_copy(update={
            "edits": [], "passes": [p.model_copy(update={"edits": []}) for p in ln.passes]}) for ln in r.lanes]})
            for r in status.rounds]
        status.warnings = [*status.warnings, TRIMMED]
    if len(status.model_dump_json()) > STATUS_LIMIT:
        status.rounds, status.overlaps, status.resolutions = status.rounds[-1:], [], []
        status.validations = status.validations[-20:]
    if len(status.model_dump_json()) > STATUS_LIMIT and status.proposal is not None:  # a refused reply's 200 lanes
        proposal = status.proposal
        status.proposal = proposal.model_copy(update={"lanes": dict(list(proposal.lanes.items())[:64]),
                                                      "problems": proposal.problems[:50],
                                                      "warnings": [*proposal.warnings[:50], TRIMMED]})
    return status


def memo_package(package: ReviewPackage) -> ReviewPackage:
    """The review package as the memo holds it, trimmed to its limit."""
    if len(package.model_dump_json()) > REVIEW_LIMIT:
        package = package.model_copy(update={
            "lanes": [ln.model_copy(update={"edits": [], "failed_calls": ln.failed_calls[:5],
                                            "passes": [p.model_copy(update={"edits": []}) for p in ln.passes]})
                      for ln in package.lanes],
            "warnings": [*package.warnings, TRIMMED]})
    if len(package.model_dump_json()) > REVIEW_LIMIT and package.test_report is not None:
        report = package.test_report
        package.test_report = report.model_copy(update={
            "failures": report.failures[:50], "pre_existing": report.pre_existing[:50],
            "fixed": report.fixed[:50], "flaky": report.flaky[:50], "commands": [],
            "exercise": trimmed_exercise(report.exercise)})
    return package


def trimmed_exercise(exercise: Exercise | None, keep: int = 200) -> Exercise | None:
    """The evidence on a large change with each list cut to `keep` files (the package says it was trimmed; the
    verdict stays as the whole evidence made it, only its count of files exercised is then of those kept)."""
    if exercise is None:
        return None
    return exercise.model_copy(update={
        "loaded": exercise.loaded[:keep], "not_loaded": exercise.not_loaded[:keep],
        "unknown": exercise.unknown[:keep], "outside": dict(list(exercise.outside.items())[:keep]),
        "shadowed": dict(list(exercise.shadowed.items())[:20]),
        "diff_lines": dict(list(exercise.diff_lines.items())[:keep])})
