"""A run's search attributes as a workflow sets them (workflow code): the keys are reposwarm/review/webui.py's.

Keyword each: RepoSwarmRepo (the repository), RepoSwarmStatus (the phase, upserted at each change), RepoSwarmKind
(`run`, `dry_run`, `trial` or `lane`: a saved view keeps to the runs a person acts on), RepoSwarmTask (the task's
first line, cut at 100 characters) and RepoSwarmVerdict (the last reviewed round's verdict, upserted when the run
reaches review: `passed`, `passed_with_test_changes`, `failed`, `not_judged` (the
checks ran another copy of the changed code: reposwarm/checks/exercised.py), `nothing_merged`, `unchecked`). A
server that lacks one refuses a workflow that sets it, so a run sets only those its server has
registered: the client looks (reposwarm/review/webui.py registered_attributes) and says which, in the start's attributes
and in the request's `search_attributes`.
"""

from __future__ import annotations

from collections.abc import Collection

from temporalio import workflow
from temporalio.common import SearchAttributePair, SearchAttributeUpdate, TypedSearchAttributes

with workflow.unsafe.imports_passed_through():
    from reposwarm.contracts import Phase, ReviewPackage, SwarmStatus
    from reposwarm.review.webui import (
        KIND_ATTR,
        REPO_ATTR,
        STATUS_ATTR,
        TASK_ATTR,
        TASK_CHARS,
        VERDICT_ATTR,
    )
    from reposwarm.text import inert_line

def start_attributes(registered: Collection[str], *, repo: str, phase: str, kind: str,
                     task: str) -> TypedSearchAttributes:
    """A run's attributes at its start, those of them the server has."""
    values = {REPO_ATTR: repo, STATUS_ATTR: phase, KIND_ATTR: kind, TASK_ATTR: inert_line(task)[:TASK_CHARS]}
    return TypedSearchAttributes([SearchAttributePair(key, value) for key, value in values.items()
                                  if key.name in registered])


def verdict_word(package: ReviewPackage) -> str:
    """The round's verdict as one Keyword a saved query can name."""
    if package.nothing_merged:
        return "nothing_merged"
    return package.test_report.verdict_of.name if package.test_report is not None else "unchecked"


def review_updates(status: SwarmStatus, registered: Collection[str]) -> list[SearchAttributeUpdate]:
    """Beside the phase's upsert: at review, the round's verdict, where the server has the attribute."""
    if status.phase != Phase.review or status.review is None or VERDICT_ATTR.name not in registered:
        return []
    return [VERDICT_ATTR.value_set(verdict_word(status.review))]
