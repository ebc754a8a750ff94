"""What the Temporal Web UI shows of a run: its summary and details (Markdown there), and what a reviewer does.

The UI renders a workflow's summary and details as Markdown, so free text (a task, a goal, a path such as
`calc/__init__.py`) is escaped before it goes in; otherwise `__init__` reads as bold.
"""

from __future__ import annotations

import re
from collections.abc import Collection
from typing import Any

from temporalio.common import SearchAttributeKey

from reposwarm.text import inert

_MARKDOWN = re.compile(r"([\\`*_{}\[\]<>()#+!|~])")

# The list's saved views (README, "In the Web UI"; tests/test_webui.py takes them): the runs a reviewer must act
# on, and every run, with no lane, dry run or trial (RepoSwarmKind: workflows/attributes.py).
# The search attributes the list filters on and shows as columns (Keyword each; workflows/attributes.py sets them)
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

REVIEW_VIEW = "Waiting for my review"
RUNS_VIEW = "reposwarm runs"
SAVED_VIEWS = {
    REVIEW_VIEW: "RepoSwarmKind = 'run' AND RepoSwarmStatus = 'review' AND ExecutionStatus = 'Running'",
    RUNS_VIEW: "RepoSwarmKind = 'run'",
}
COLUMNS = ("Status", "Workflow ID", "Start", "RepoSwarmStatus", "RepoSwarmVerdict", "RepoSwarmTask")


def md_escape(text: str) -> str:
    """Free text shown as itself in Markdown, with no escape sequence or control character (reposwarm/text.py)."""
    return _MARKDOWN.sub(r"\\\1", inert(text))


def static_summary(task: str) -> str:
    """The one line the UI shows for a run (its Summary, in the run's page and in a list column)."""
    return f"reposwarm: {inert(task)[:120]}"


def static_details(task: str, repo: str, base_sha: str, lanes: list[str], planned: str, model: str) -> str:
    return (f"**Task:** {md_escape(task)}\n\n**Repository:** `{repo}` at `{base_sha[:12]}`\n\n"
            f"**Lanes:** {md_escape(', '.join(lanes))} ({planned})\n\n**Model:** `{model}`")


def review_call(run_id: str, checks: str, accept: str = "") -> str:
    """What leads a run's current details while it waits for a person: the state, and both ways to act.

    `accept` is the flag an approval of this round must carry (workflows/review.py approve_hint): "accept_red"
    for checks that FAILED, "accept_test_changes" for PASSED WITH TEST CHANGES, "accept_unjudged" for NOT JUDGED;
    the hint then says it, on the command line and in the Signal's payload, as the run refuses an approval
    without it."""
    flag = f" --{accept.replace('_', '-')}" if accept else ""
    extra = f', "{accept}": true' if accept else ""
    why = {"accept_red": " (the checks failed: an approval must say it delivers a red round)",
           "accept_test_changes": " (tests were changed: an approval must say it accepts them)",
           "accept_unjudged": " (the checks ran another copy of the changed code, not the tree's: an approval must "
                              "say it delivers a change they did not judge)"}.get(accept, "")
    return (f"**WAITING FOR YOUR REVIEW** ({checks}): read it with `reposwarm review {run_id}`, then approve with "
            f"`reposwarm approve {run_id}{flag}`{why} or reject with `reposwarm reject {run_id} --comment \"...\"`. "
            "In this UI: More Actions → Send a Signal → `review_signal` with input "
            f'`{{"approve": true{extra}, "reviewer": "you"}}` (or `{{"approve": false, "comment": "what to change"}}`).')


async def registered_attributes(client: Any) -> frozenset[str]:
    """The custom search attributes the client's server has (empty when it cannot say): a run sets only those of
    its own (workflows/attributes.py) the server has, since a server refuses a workflow setting one it lacks.
    A busy server's passing refusal (unavailable, overloaded) is asked again, with the client's retry
    policy: else a run on a loaded machine would start without its attributes, and its verdict never show in a
    saved view."""
    from temporalio.api.operatorservice.v1 import ListSearchAttributesRequest
    from temporalio.service import RPCError

    try:
        resp = await client.operator_service.list_search_attributes(
            ListSearchAttributesRequest(namespace=client.namespace), retry=True)
    except RPCError:
        return frozenset()
    return frozenset(resp.custom_attributes)
