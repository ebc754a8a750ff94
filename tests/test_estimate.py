"""The dry run's per-lane estimate against what lanes really spend: the bundled demo, run end to end."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import Client

import activities.model
from reposwarm.agent.conversation import from_wire
from reposwarm.agent.estimate import (
    TOOL_SPEC_TOKENS,
    estimate_lane,
    expected_turns,
    first_request_tokens,
    goal_and_paths,
)
from reposwarm.agent.prompts import LANE_SYSTEM, lane_first_message
from reposwarm.agent.specs import tool_specs
from reposwarm.cli.local import DEMO, DEMO_TASK, make_demo_repo
from reposwarm.cli.runs import build_request, start
from reposwarm.contracts import HelperRole, LaneEstimate, LanePhase, Phase, SwarmRequest
from tests.helpers import wait_for_phase
from workflows.scheduler import lane_task
from workflows.swarm import SwarmWorkflow


def demo_request(repo: Path) -> SwarmRequest:
    """The request `starter.py demo` makes: the demo's lanes, plan and replay script."""
    ns = argparse.Namespace(repo=str(repo), task=DEMO_TASK, lanes=str(DEMO / "lanes.yaml"),
                            plan=str(DEMO / "plan.yaml"), model=f"replay:{DEMO / 'replay.yaml'}")
    return build_request(ns)


@pytest.fixture(scope="module")
def demo_repo() -> Path:
    return make_demo_repo()


async def test_demo_estimates_are_within_2x_of_what_the_lanes_spend(client: Client, worker: Any, demo_repo: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    # What the dry run says, from the workflow itself (as `starter.py run --dry-run` shows it)...
    dry = demo_request(demo_repo)
    dry.dry_run = True
    await start(client, dry)
    result = await client.get_workflow_handle_for(SwarmWorkflow.run, dry.run_id).result()
    estimates: dict[str, LaneEstimate] = {e.lane: e for e in result.estimates}
    assert set(estimates) == {"db_migration", "api_layer", "client", "test_author"}

    # ...and what the same plan really spends, every request the lanes send watched on its way to the model.
    sent: dict[tuple[str, int], tuple[int, Any]] = {}  # (lane, turn): (tokens sent, opening messages)
    complete = activities.model.complete

    async def watched(run_id: str, model_name: str, **kw: Any) -> Any:
        # counted now: the caller appends the reply to the same list afterwards
        chars = len(kw["system"]) + len(json.dumps(kw["tools"])) + len(json.dumps(kw["messages"]))
        sent[kw["agent"], kw["turn"]] = chars // 4, kw["messages"][:2]  # the opening: shared context, goal
        return await complete(run_id, model_name, **kw)

    monkeypatch.setattr(activities.model, "complete", watched)
    req = demo_request(demo_repo)
    await start(client, req)
    try:
        status = await wait_for_phase(client, req.run_id, Phase.review, timeout=240)
    finally:
        await client.get_workflow_handle(req.run_id).terminate("test done")

    actual = {lane.lane: lane for lane in status.lanes}
    assert set(actual) == set(estimates)
    for name, estimate in estimates.items():
        spent = actual[name].tokens
        assert spent > 0 and actual[name].state in (LanePhase.done, LanePhase.merged), actual[name]
        total = estimate.input_tokens + estimate.output_tokens
        assert spent / 2 <= total <= spent * 2, f"{name}: estimated {total:,} tokens, spent {spent:,}"
        assert estimate.turns / 2 <= actual[name].turns <= estimate.turns * 2, (name, estimate.turns, actual[name])
        assert estimate.within_budget  # the demo's lanes fit their budgets, and the dry run says so

        # The estimate's first request is the lane's real first request, counted the way reposwarm counts.
        real, message = sent[name, 0]
        assert abs(first_request_tokens(from_wire(message)) - real) <= 2, name


def test_the_fixed_part_is_measured_from_what_lanes_send() -> None:
    assert TOOL_SPEC_TOKENS == len(json.dumps(tool_specs())) // 4
    with_nothing = first_request_tokens("")
    assert with_nothing == len(LANE_SYSTEM) // 4 + len(json.dumps(tool_specs())) // 4 + len(
        json.dumps([{"role": "user", "content": ""}])) // 4


def test_goal_and_paths_are_read_back_from_the_first_message(demo_repo: Path) -> None:
    req = demo_request(demo_repo)
    assert req.plan is not None
    for lp in req.plan.lanes:
        task = lane_task(req, req.plan, lp.lane, lp.goal, 1, req.base_ref, ["make it faster"])
        assert goal_and_paths(lane_first_message(task), task.role) == (lp.goal, task.allowed_paths)
    # a message in another shape: all goal, the role's paths
    role = HelperRole(allowed_paths=["src/"])
    assert goal_and_paths("just do it", role) == ("just do it", ["src/"])


def first_message(goal: str, paths: list[str], contract: str = "As agreed.") -> str:
    return "\n".join(["Goal for lane big:", goal, "", "The whole change (for context):", "a change", "",
                      "Interface contract:", contract, "", f"You may write: {', '.join(paths)}",
                      "You may also read: (nothing else)"])


def total(estimate: LaneEstimate) -> int:
    return estimate.input_tokens + estimate.output_tokens


def test_bigger_lanes_estimate_more_and_stay_within_their_limits() -> None:
    role = HelperRole(allowed_paths=["src/"])
    small = estimate_lane("s", "m", role, first_message("Fix the typo in src/app.py.", ["src/"]), None)
    files = [f"src/mod{i}/core.py" for i in range(8)]
    many_paths = estimate_lane("m", "m", role, first_message("Rename the helper in src/.", files), None)
    named = estimate_lane("n", "m", role, first_message("Update " + ", ".join(files) + ".", ["src/"]), None)
    long_goal = estimate_lane("l", "m", role, first_message("Rework the parser so that it " + "handles more "
                                                             "cases and reports errors clearly; " * 40, ["src/"]),
                              None)
    for bigger in (many_paths, named, long_goal):
        assert bigger.turns > small.turns and total(bigger) > 2 * total(small)
        assert bigger.input_tokens > bigger.output_tokens
    assert expected_turns(first_message("Fix the typo in src/app.py.", ["src/"]), role) == small.turns == 5

    # never more turns than the role allows, and no request larger than compaction lets the conversation grow
    capped = HelperRole(allowed_paths=["src/"], max_turns=10, context_tokens=4_000)
    huge = estimate_lane("h", "m", capped, first_message("Update " + ", ".join(files) + ".", ["src/"]), None)
    assert huge.turns == 10
    fixed = first_request_tokens("") - len(json.dumps([{"role": "user", "content": ""}])) // 4
    assert huge.input_tokens <= huge.turns * (fixed + int(4_000 * 0.8))

    # a bigger contract or more feedback makes every turn dearer
    wordy = estimate_lane("w", "m", role, first_message("Fix the typo in src/app.py.", ["src/"], "x" * 8_000), None)
    assert wordy.turns == small.turns and wordy.input_tokens >= small.input_tokens + small.turns * 1_900


def test_the_estimate_counts_the_prompt_cache_as_the_provider_bills_it() -> None:
    from reposwarm.contracts import ModelPrice

    role = HelperRole(allowed_paths=["src/"])
    opening = from_wire([
        {"role": "system", "content": "The whole change (for context):\n" + "a shared contract " * 200},
        {"role": "user", "content": first_message("Update " + ", ".join(f"src/m{i}.py" for i in range(4)) + ".",
                                                  ["src/"])}])
    price = ModelPrice(input_per_mtok=3, output_per_mtok=15)
    cached = estimate_lane("c", "anthropic:claude-sonnet-4-5", role, opening, price)
    plain = estimate_lane("p", "replay:x.yaml", role, opening, None)
    assert plain.billed_tokens == plain.input_tokens + plain.output_tokens  # nothing cached, output counted once
    assert cached.input_tokens == plain.input_tokens and cached.turns == plain.turns
    billed_input = cached.billed_tokens - 5 * cached.output_tokens  # output at the price's 5x
    assert 0.1 * cached.input_tokens < billed_input < 0.5 * cached.input_tokens
    assert cached.cost_usd is not None and cached.uncached_cost_usd is not None
    assert cached.cost_usd == pytest.approx((billed_input * 3 + cached.output_tokens * 15) / 1e6, abs=1e-5)
    assert cached.uncached_cost_usd == pytest.approx((cached.input_tokens * 3 + cached.output_tokens * 15) / 1e6)
