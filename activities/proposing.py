"""Lanes the swarm proposes for a task (a run with no lanes file): the propose_lanes activity, and the check of a
person's edit of a proposal (check_proposal_edit).

The structure comes from code, not the model: the repository's packages, owners, imports and checks
(reposwarm/intel/layout.py survey and brief), and the repository map ranked toward the task, as the planner
has them (activities/planning.py). The planner model proposes lanes with `submit_lanes`; whatever it proposes is checked by the code that
checks a lanes file and by the guardrails (reposwarm/lanes/guardrails.py check_proposal), against the base
commit's files and import graph (reposwarm/checks/selection/resolve.py), read here: this worker has the repository (a
URL's clone too). A refused proposal goes back to the model once with its problems; refused again, the proposal
comes back with them and the run stops. What the guardrails cannot decide comes back as the proposal's warnings,
for the person confirming it, and in the ledger. The model call goes through reposwarm.models.calls.complete
(agent "proposer", round 0): a retried activity reuses the answer already paid for, and `--record` keeps it.
"""

from __future__ import annotations

import asyncio
import math
from pathlib import Path
from typing import TYPE_CHECKING

from pydantic import ValidationError
from temporalio import activity

from activities.planning import REPO_MAP_TOKENS, listing, listing_budget, local_repository, tracked_files
from reposwarm.agent.conversation import Message, UserMessage, corrected, lane_opening, to_wire
from reposwarm.agent.estimate import estimate_lane
from reposwarm.agent.prompts import PROPOSER_SYSTEM, proposal_correction, proposer_message
from reposwarm.agent.specs import SubmitLanesArgs, submit_lanes_spec
from reposwarm.contracts import (
    HelperRole,
    HelperTask,
    LanePlan,
    LaneProposal,
    ModelPrice,
    Plan,
    ProposalCheck,
    ProposeInput,
    ProposeOutcome,
    RepoLayout,
    Usage,
)
from reposwarm.contracts.model import ModelReply
from reposwarm.lanes.guardrails import check_proposal
from reposwarm.models import schema_problems, structured_reply
from reposwarm.models.calls import complete
from reposwarm.runs import ledger
from reposwarm.slices.policy import PathPolicy

if TYPE_CHECKING:
    from reposwarm.checks.selection.resolve import Graph

AGENT = "proposer"  # the model call's agent: the replay script's `proposer:` key, the recording's folder
DEFAULT_BUDGET = HelperRole.model_fields["token_budget"].default
BUDGET_HEADROOM = 1.5  # a lane's budget, when the model names none: its estimate and half again
BUDGET_STEP = 8_000
MAX_PREDICTED = 50  # predicted overlaps listed
FOCUS_FILES = 20  # files of the ranked map that put their packages first in the structure's brief


def import_graph(repo_path: str, base_sha: str) -> tuple[Graph | None, str]:
    """The base commit's import graph (cached per tree beside the symbol index), or why there is none: then the
    test lanes' depends_on go unchecked, and the proposal says so."""
    from reposwarm.checks.selection import resolve

    try:
        return resolve.load(Path(repo_path), base_sha), ""
    except Exception as err:  # noqa: BLE001 - a repository the graph cannot read leaves one rule unchecked, said
        return None, (f"the import graph of {base_sha[:12]} could not be read ({type(err).__name__}: "
                      f"{' '.join(str(err).split())[:200]}): which lanes' code the test lanes' tests import was not "
                      "checked")


def _map_files(map_text: str) -> list[str]:
    """The files of a repository map, best first (its `path:` lines)."""
    return [line[:-1] for line in map_text.splitlines() if line.endswith(":") and not line.startswith(" ")]


def parse_reply(reply: ModelReply) -> SubmitLanesArgs:
    """The proposal, as a submit_lanes call or as JSON in the reply's text; a ValueError says what is wrong."""
    text = structured_reply(reply, "submit_lanes", "proposal")
    try:
        return SubmitLanesArgs.model_validate_json(text)
    except ValidationError as err:
        problems = schema_problems(err, "arguments", 8)
        raise ValueError(f"the proposal does not match submit_lanes' arguments: {problems}") from None


def lane_estimates(proposal: LaneProposal, task: str, model: str, price: ModelPrice | None) -> LaneProposal:
    """Each lane's estimated tokens and cost (reposwarm/agent/estimate.py, as a dry run has them), from the
    first message the lane would get."""
    goals = {lp.lane: lp.goal for lp in proposal.plan.lanes} if proposal.plan else {}
    contract = proposal.plan.interface_contract if proposal.plan else ""
    tokens, costs = {}, {}
    for name, role in proposal.lanes.items():
        first = lane_opening(HelperTask(
            task_id=f"proposal.{name}.r1", run_id="proposal", repo_path=".", lane=name, round=1, role=role,
            goal=goals.get(name) or "(no goal)", task=task, interface_contract=contract,
            allowed_paths=role.allowed_paths, read_only_paths=role.read_only_paths, branch="-", base_sha="-",
            model=role.model or model, max_loops=1, checkpoint_key="-"))
        estimate = estimate_lane(name, role.model or model, role, first, price)
        tokens[name] = estimate.billed_tokens  # what its token_budget counts
        if estimate.cost_usd is not None:
            costs[name] = estimate.cost_usd
    return proposal.model_copy(update={"estimated_tokens": tokens, "estimated_cost_usd": costs})


def predicted_overlaps(proposal: LaneProposal, files: list[str]) -> list[str]:
    """Tracked files two lanes may both write (only inside declared overlaps: elsewhere that is refused), each
    with the lanes: what the converger will meet."""
    if not proposal.overlaps:
        return []
    import pathspec

    declared = pathspec.PathSpec.from_lines("gitwildmatch", proposal.overlaps)
    policies = {name: PathPolicy(".", role.allowed_paths, role.read_only_paths)
                for name, role in proposal.lanes.items()}
    found = []
    for path in declared.match_files(files):
        writers = [name for name, policy in policies.items() if policy.writable(path)]
        if len(writers) > 1:
            found.append(f"{path}: {', '.join(writers)}")
            if len(found) >= MAX_PREDICTED:
                break
    return found


def proposal_of(args: SubmitLanesArgs, run_model: str, layout: RepoLayout | None) -> LaneProposal:
    """The model's arguments as a proposal: lanes as a lanes file has them (the run's model for each), the plan
    (a goal per lane), the detected profile. Budgets it names none of are sized later (size_budgets)."""
    lanes: dict[str, HelperRole] = {}
    warnings, problems = [], []
    for lane in args.lanes:
        if lane.name in lanes:
            problems.append(f"lane {lane.name!r} is proposed twice")
            continue
        if lane.model and lane.model != run_model:
            warnings.append(f"lane {lane.name}: the model {lane.model!r} it names is not used (a proposal's lanes "
                            "use the run's model; name one in an edited lanes file)")
        try:
            lanes[lane.name] = HelperRole(
                allowed_paths=lane.allowed_paths, read_only_paths=lane.read_only_paths, depends_on=lane.depends_on,
                **({"token_budget": lane.token_budget} if lane.token_budget else {}),
                **({"max_turns": lane.max_turns} if lane.max_turns else {}))
        except ValidationError as err:
            problems.append(f"lane {lane.name!r}: {err.errors()[0]['msg']}")
    plan = Plan(interface_contract=args.interface_contract, summary=args.summary,
                lanes=[LanePlan(lane=lane.name, goal=lane.goal) for lane in args.lanes if lane.name in lanes]) \
        if lanes else None
    return LaneProposal(lanes=lanes, plan=plan, profile=layout.profile if layout else None, overlaps=args.overlaps,
                        warnings=warnings, problems=problems)


def size_budgets(proposal: LaneProposal, given: set[str]) -> LaneProposal:
    """A lane's token budget when the model named none: its estimate and half again (at least the default),
    so a lane of many files gets more; a named budget under its estimate is said."""
    lanes, warnings = dict(proposal.lanes), list(proposal.warnings)
    for name, role in proposal.lanes.items():
        estimate = proposal.estimated_tokens.get(name, 0)
        if name not in given:
            sized = max(DEFAULT_BUDGET, math.ceil(estimate * BUDGET_HEADROOM / BUDGET_STEP) * BUDGET_STEP)
            lanes[name] = role.model_copy(update={"token_budget": sized})
        elif role.token_budget < estimate:
            warnings.append(f"lane {name}: its budget of {role.token_budget:,} tokens is under its estimate of "
                            f"{estimate:,}")
    return proposal.model_copy(update={"lanes": lanes, "warnings": warnings})


def checked(proposal: LaneProposal, files: list[str], graph: Graph | None, max_lanes: int,
            unread: str = "") -> LaneProposal:
    """The proposal with the problems the lanes loader and the guardrails find in it (none: it may run), and
    their warnings (what they cannot decide: for the person confirming). `unread`: why there is no graph."""
    found = check_proposal(proposal, files, graph, max_lanes=max_lanes)
    problems = list(dict.fromkeys([*proposal.problems, *found.errors]))
    warnings = list(dict.fromkeys([*proposal.warnings, *found.warnings, *([unread] if unread else [])]))
    return proposal.model_copy(update={"problems": problems, "warnings": warnings,
                                       "predicted_overlaps": [] if problems else predicted_overlaps(proposal, files)})


def _ledger_line(run_id: str, event: str, proposal: LaneProposal) -> None:
    """The proposal's verdict in the run's ledger: its lanes, its problems (refused) and its warnings."""
    ledger.record_activity(run_id, event, lanes=list(proposal.lanes), attempts=proposal.attempts,
                           problems=proposal.problems, warnings=proposal.warnings)


def _read(reply: ModelReply, req: ProposeInput, files: list[str], layout: RepoLayout | None,
          graph: tuple[Graph | None, str]) -> LaneProposal:
    try:
        args = parse_reply(reply)
    except ValueError as err:
        return LaneProposal(problems=[str(err)])
    proposal = proposal_of(args, req.model, layout)
    proposal = lane_estimates(proposal, req.task, req.model, req.price)
    proposal = size_budgets(proposal, {lane.name for lane in args.lanes if lane.token_budget})
    return checked(proposal, files, graph[0], req.max_lanes, graph[1])


@activity.defn
async def propose_lanes(req: ProposeInput) -> ProposeOutcome:
    """Survey the base commit, ask the planner model for lanes (once more with the problems of a refused reply),
    and answer the checked proposal: its problems non-empty when it was refused twice."""
    repo_path = await asyncio.to_thread(local_repository, req.repo_path, req.base_sha)
    files = await asyncio.to_thread(tracked_files, repo_path, req.base_sha)
    loop = asyncio.get_running_loop()

    def progress(message: str) -> None:  # from the survey's and the map's thread: heartbeat details (`watch`)
        loop.call_soon_threadsafe(activity.heartbeat, message)

    from reposwarm.intel.layout import brief, survey_with_map

    # the structure and the map ranked toward the task from one read of the symbol index (seconds on 4M lines)
    layout, map_text = await asyncio.to_thread(survey_with_map, Path(repo_path), req.base_sha, req.task,
                                               budget_tokens=REPO_MAP_TOKENS, progress=progress)
    graph = await asyncio.to_thread(import_graph, repo_path, req.base_sha)

    structure = brief(layout, _map_files(map_text)[:FOCUS_FILES])
    shown = listing(files, listing_budget(map_text))
    messages: list[Message] = [UserMessage(content=proposer_message(
        req.task, structure, shown, req.max_lanes, repo_map=map_text))]
    usage, proposal = Usage(), LaneProposal()
    for turn in range(2):
        reply = await complete(req.run_id, req.model, agent=AGENT, round_no=0, turn=turn, system=PROPOSER_SYSTEM,
                               messages=to_wire(messages), tools=[submit_lanes_spec()], price=req.price, record=req.record)
        usage = usage + reply.usage
        proposal = _read(reply, req, files, layout, graph).model_copy(update={"attempts": turn + 1})
        if not proposal.problems:
            break
        messages += corrected(reply, proposal_correction(proposal.problems))
    activity.logger.info("proposal for %s: %d lanes, %d problems", req.run_id, len(proposal.lanes),
                         len(proposal.problems))
    await asyncio.to_thread(_ledger_line, req.run_id, "proposal", proposal)
    return ProposeOutcome(proposal=proposal, usage=usage)


@activity.defn
async def check_proposal_edit(req: ProposalCheck) -> LaneProposal:
    """A person's edit of a proposal, checked as the model's was (the file-dependent checks: slices matching no
    tracked file, tests depending on the code they import...), with its estimates; problems: refused."""
    repo_path = await asyncio.to_thread(local_repository, req.repo_path, req.base_sha)
    files = await asyncio.to_thread(tracked_files, repo_path, req.base_sha)
    graph, unread = await asyncio.to_thread(import_graph, repo_path, req.base_sha)
    proposal = lane_estimates(req.proposal, req.task, req.model, req.price)
    proposal = checked(proposal, files, graph, req.max_lanes, unread)
    await asyncio.to_thread(_ledger_line, req.run_id, "proposal_edit", proposal)
    return proposal

