"""A run's search attributes: what the Temporal Web UI's list filters on and shows as columns (workflow code).

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
from temporalio.common import SearchAttributeKey, SearchAttributePair, SearchAttributeUpdate, TypedSearchAttributes

with workflow.unsafe.imports_passed_through():
    from reposwarm.contracts import Phase, ReviewPackage, SwarmStatus
    from reposwarm.text import inert_line

REPO_ATTR = SearchAttributeKey.for_keyword("RepoSwarmRepo")
STATUS_ATTR = SearchAttributeKey.for_keyword("RepoSwarmStatus")
KIND_ATTR = SearchAttributeKey.for_keyword("RepoSwarmKind")
TASK_ATTR = SearchAttributeKey.for_keyword("RepoSwarmTask")
VERDICT_ATTR = SearchAttributeKey.for_keyword("RepoSwarmVerdict")
ATTRIBUTES = (REPO_ATTR, STATUS_ATTR, KIND_ATTR, TASK_ATTR, VERDICT_ATTR)  # each one a server registers
RUN, DRY_RUN, TRIAL, LANE = "run", "dry_run", "trial", "lane"  # RepoSwarmKind's values
TASK_CHARS = 100


def registered_names(registered: Collection[str]) -> list[str]:
    """Ours among the attributes a server has (for a request's `search_attributes`). The repository and the phase
    go together: a run that has its repository's upserts its phase (SwarmWorkflow._phase)."""
    names = [key.name for key in ATTRIBUTES if key.name in registered]
    return names if STATUS_ATTR.name in names else [n for n in names if n != REPO_ATTR.name]


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
