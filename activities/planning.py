"""The planner as an activity: plan_round asks the model for a round's Plan (a goal per lane, the contract).

What the planner models see of the repository is made here too, and the proposer (activities/proposing.py) shows
its model the same: the base commit opened on this host, its file list cut to a token budget (shallow paths
first), and the repository map ranked toward the task (reposwarm/intel/repomap.py). The model call goes through
reposwarm.models.calls.complete (agent "planner"): a retried activity reuses the answer already paid for.
"""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Callable

from pydantic import ValidationError
from temporalio import activity
from temporalio.exceptions import ApplicationError

from reposwarm.agent.conversation import Message, UserMessage, corrected, to_wire
from reposwarm.agent.prompts import PLANNER_SYSTEM, plan_correction, planner_message
from reposwarm.contracts import LanesFile, Plan, PlanInput, PlanOutcome, SwarmConfig, Usage
from reposwarm.contracts.errors import ConfigError
from reposwarm.contracts.model import ModelReply
from reposwarm.intel.repomap import repo_map
from reposwarm.lanes.loading import check_plan
from reposwarm.models import schema_problems, structured_reply
from reposwarm.models.calls import complete
from reposwarm.symbols.index import SymbolIndexError
from reposwarm.vcs import gitcmd
from reposwarm.vcs.remote import open_repository

SUBMIT_PLAN = {
    "name": "submit_plan",
    "description": "Submit the plan: the interface contract and one goal per lane.",
    "parameters": {k: v for k, v in Plan.model_json_schema().items() if k != "title"},
}
REPO_MAP_TOKENS = 4_000  # the repository map: the most relevant definitions, by file
REPO_LISTING_TOKENS = 1_500  # the shallow file list after the map
REPO_LISTING_ONLY_TOKENS = 6_000  # the file list when there is no map (no language the index parses)


def local_repository(repo_path: str, base_sha: str) -> str:
    """Where git opens the repository on this host (a remote's clone, with the base commit in it)."""
    repo = open_repository(repo_path)
    repo.have(base_sha)
    return str(repo.path)


def tracked_files(repo_path: str, base_sha: str) -> list[str]:
    """The base commit's files."""
    return gitcmd.repo(repo_path).ls_tree("-r", "--name-only", base_sha).splitlines()


def listing(files: list[str], budget_tokens: int) -> list[str]:
    """The file list cut to a token budget, shallow paths first so the whole tree's shape shows."""
    out: list[str] = []
    used = 0
    for name in sorted(files, key=lambda f: (f.count("/"), f)):
        used += len(name) // 4 + 1
        if used > budget_tokens:
            out.append(f"... and {len(files) - len(out)} more files")
            break
        out.append(name)
    return sorted(out[:-1]) + out[-1:] if used > budget_tokens else sorted(out)


def listing_budget(map_text: str) -> int:
    """The file list's budget: short after a map, longer in its place."""
    return REPO_LISTING_TOKENS if map_text else REPO_LISTING_ONLY_TOKENS


def base_map(repo_path: str, base_sha: str, focus: str, progress: Callable[[str], None]) -> str:
    """The repository map of the base commit; without one (an index failure) the planner gets the file list."""
    try:
        return repo_map(repo_path, base_sha, budget_tokens=REPO_MAP_TOKENS, focus_text=focus, progress=progress)
    except (SymbolIndexError, sqlite3.Error, ImportError, OSError) as err:
        activity.logger.warning("no repository map for %s: %s", repo_path, err)
        return ""


def _parse_plan(reply: ModelReply, lanes: LanesFile) -> Plan:
    """The plan comes as a submit_plan call (structured output) or as JSON in the reply's text."""
    text = structured_reply(reply, "submit_plan", "plan")
    try:
        plan = Plan.model_validate_json(text)
    except ValidationError as err:
        problems = schema_problems(err, "plan", 5)
        raise ValueError(f"the plan does not match the Plan schema: {problems}") from None
    try:
        check_plan(plan, lanes, "plan")
    except ConfigError as err:
        raise ValueError(str(err)) from None
    return plan


@activity.defn
async def plan_round(req: PlanInput) -> PlanOutcome:
    """Ask the model for a Plan; an invalid plan goes back to it once with the error, then fails the run."""
    repo_path = await asyncio.to_thread(local_repository, req.repo_path, req.base_sha)
    files = await asyncio.to_thread(tracked_files, repo_path, req.base_sha)
    loop = asyncio.get_running_loop()

    def progress(message: str) -> None:  # from the map's thread: heartbeat details, shown by `starter.py watch`
        loop.call_soon_threadsafe(activity.heartbeat, message)

    map_text = await asyncio.to_thread(base_map, repo_path, req.base_sha, "\n".join([req.task, *req.feedback]),
                                       progress)
    shown = listing(files, listing_budget(map_text))
    lanes = LanesFile(swarm=SwarmConfig(lanes=req.lanes))
    messages: list[Message] = [UserMessage(content=planner_message(
        req.task, req.lanes, req.feedback, req.previous_plan, shown, repo_map=map_text))]
    error, usage = "", Usage()
    for turn in range(2):
        reply = await complete(req.run_id, req.model, agent="planner", round_no=req.round, turn=turn,
                               system=PLANNER_SYSTEM, messages=to_wire(messages), tools=[SUBMIT_PLAN],
                               price=req.price, record=req.record, cache_ttl=req.cache_ttl)
        usage = usage + reply.usage
        try:
            return PlanOutcome(plan=_parse_plan(reply, lanes), usage=usage)
        except ValueError as err:
            error = str(err)
            messages += corrected(reply, plan_correction(error))
    raise ApplicationError(f"the planner's plan was invalid twice: {error}", type="InvalidPlan", non_retryable=True)
