"""Dispatching one round's lanes, for SwarmWorkflow (workflow code: decisions only).

A lane starts once the lanes it depends on (among those dispatched together)
are merged, with at most max_parallel running at once; one whose dependency
ended without merging is cancelled. Each run of a lane counts against its
dispatch budget for the whole run (swarm.max_helper_loops: the reference
design's MAX_HELPER_LOOPS). Each lane is merged as it finishes; one whose
conflict the converger could not settle is redone on top of the integration
branch while its budget lasts, its dependents waiting for it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import timedelta

from temporalio import workflow
from temporalio.exceptions import ActivityError, ChildWorkflowError, FailureError, WorkflowAlreadyStartedError

with workflow.unsafe.imports_passed_through():
    from activities.lanes import ended_lanes, start_lanes
    from activities.model import warm_prefix
    from reposwarm.agent.estimate import CHARS_PER_TOKEN, SYSTEM_TOKENS, TOOL_SPEC_TOKENS
    from reposwarm.agent.prompts import run_context
    from reposwarm.contracts import (
        ChangeSet,
        HelperTask,
        LanePhase,
        LaneResult,
        LaneStarts,
        LaneState,
        LaneStatus,
        Plan,
        SwarmRequest,
        SwarmStatus,
        WarmInput,
    )
    from reposwarm.contracts.cost import warming_pays
    from reposwarm.vcs.branches import lane_branch
    from workflows import options
    from workflows.failures import short_reason
    from workflows.lane import LaneWorkflow
    from workflows.merging import MergeQueue


def lane_task(req: SwarmRequest, plan: Plan, lane: str, goal: str, round_no: int, base_sha: str,
              feedback: list[str], attempt: int = 1) -> HelperTask:
    """One lane's assignment: its goal, its slice (narrowed by the plan), its model and budgets."""
    role = req.config.swarm.lanes[lane]
    narrowed = next((lp.allowed_paths for lp in plan.lanes if lp.lane == lane and lp.allowed_paths), None)
    return HelperTask(
        task_id=f"{req.run_id}.{lane}.r{round_no}" + (f".a{attempt}" if attempt > 1 else ""),
        feedback=list(feedback),
        run_id=req.run_id, repo_path=req.repo_path, lane=lane, round=round_no, attempt=attempt, role=role,
        goal=goal, task=req.task, interface_contract=plan.interface_contract,
        allowed_paths=narrowed or role.allowed_paths, read_only_paths=role.read_only_paths,
        branch=lane_branch(req.run_id, lane), base_sha=base_sha,
        model=role.model or req.model, max_loops=req.config.swarm.max_helper_loops,
        checkpoint_key=f"{req.run_id}/{lane}/r{round_no}",
        price=req.config.prices.get(role.model or req.model), record=req.record, sparse=req.config.swarm.sparse,
        host_timeout_s=req.config.swarm.host_timeout_s, outage_s=req.config.swarm.model_outage_s,
        check_profiles=req.config.validation.profiles,
        default_profile=req.test_profile or req.config.validation.profile,
        budget_wait_s=req.config.swarm.budget_wait_s, cache_ttl=req.config.swarm.cache_ttl,
        other_lanes=_other_lanes(req, plan, lane) if role.agent_name != "builtin" else {},
    )


def _other_lanes(req: SwarmRequest, plan: Plan, lane: str) -> dict[str, str]:
    """The plan's other lanes in a line each (goal, slice), for an outside agent's prompt."""
    lanes = req.config.swarm.lanes
    return {lp.lane: f"{' '.join(lp.goal.split())[:300]} (writes {', '.join(lp.allowed_paths or lanes[lp.lane].allowed_paths)})"
            for lp in plan.lanes if lp.lane != lane and lp.lane in lanes}


# An answer a lane sent just before it ended may be on its way when its end is seen: this long for it to arrive.
GRACE = timedelta(seconds=5)


@dataclass
class WarmLanes:
    """The run's warm lanes: one LaneWorkflow per lane for the whole run (id <run>.<lane>), started at its first
    dispatch and sent each later one (a repair, a redo after a conflict, the next round's goal) as a Signal; it
    answers each with a Signal (`lane_done`). Workflows cannot send each other Updates, so Signals both ways.
    The lanes outlive a continue-as-new of the run and are retired at its end.

    The lanes the run asks for in one workflow task are started together by the client, in one local activity
    (activities/lanes.py), not as child workflows one by one; a lane that ends without answering (terminated,
    timed out, failed) is found by asking the server every `watch_s` (swarm.host_timeout_s) while any answer is
    awaited, and its dispatch ends failed with the reason."""

    run_id: str
    started: set[str] = field(default_factory=set)
    results: dict[str, LaneResult] = field(default_factory=dict)  # by task id, until its dispatch takes it
    watch_s: float = 60
    # the batch of lanes being asked for in this workflow task (workflow id -> task), and its start
    batch: tuple[dict[str, HelperTask], asyncio.Task[str | None]] | None = None
    waiting: dict[str, str] = field(default_factory=dict)  # task id -> lane: the answers awaited
    watcher: asyncio.Task[None] | None = None

    def done(self, result: LaneResult) -> None:
        self.results[result.changeset.task_id] = result

    def workflow_id(self, lane: str) -> str:
        return f"{self.run_id}.{lane}"

    async def dispatch(self, task: HelperTask) -> LaneResult:
        if task.lane in self.started:
            try:
                await workflow.get_external_workflow_handle(self.workflow_id(task.lane)).signal(
                    LaneWorkflow.assign, task)
            except FailureError:  # the lane has ended (idle too long): a fresh one
                self.started.discard(task.lane)
        if task.lane not in self.started:
            self.started.add(task.lane)
            if (why := await self._start(task)) is not None:
                # kept as started: the batch may have started it before it failed, and the lane's next
                # dispatch then reaches it as an `assign` (or, not found, starts it afresh)
                return _failed(task.task_id, task.lane, why)
        return await self._answer(task)

    async def _start(self, task: HelperTask) -> str | None:
        """Start the lane with the others asked for in this workflow task, in one batch; why not, if it failed."""
        if self.batch is None:
            lanes: dict[str, HelperTask] = {}
            self.batch = (lanes, asyncio.ensure_future(self._start_batch(lanes)))
        lanes, starting = self.batch
        lanes[self.workflow_id(task.lane)] = task
        return await starting

    async def _start_batch(self, lanes: dict[str, HelperTask]) -> str | None:
        self.batch = None  # this runs once every dispatch of the workflow task has added its lane
        try:
            await workflow.execute_local_activity(
                start_lanes, LaneStarts(task_queue=workflow.info().task_queue, lanes=lanes), **options.LANES)
        except ActivityError as err:
            return f"its workflow could not be started: {short_reason(err)}"
        return None

    async def _answer(self, task: HelperTask) -> LaneResult:
        self.waiting[task.task_id] = task.lane
        if self.watcher is None or self.watcher.done():
            self.watcher = asyncio.ensure_future(self._watch())
        await workflow.wait_condition(lambda: task.task_id in self.results)
        self.waiting.pop(task.task_id, None)
        return self.results.pop(task.task_id)

    async def _watch(self) -> None:
        """While answers are awaited: every watch_s, ask which of their lanes have ended; each of those answers
        as failed, with the server's reason."""
        while self.waiting:
            try:
                await workflow.wait_condition(lambda: not self.waiting, timeout=self.watch_s)
                return
            except TimeoutError:
                pass
            try:
                ends = await workflow.execute_local_activity(
                    ended_lanes, sorted({self.workflow_id(lane) for lane in self.waiting.values()}), **options.LANES)
            except ActivityError:
                continue  # asked again at the next look
            if not ends:
                continue
            await workflow.sleep(GRACE)
            ended = {e.workflow_id: e for e in ends}
            for task_id, lane in list(self.waiting.items()):
                end = ended.get(self.workflow_id(lane))
                if end is not None and task_id not in self.results:
                    self.started.discard(lane)
                    self.results[task_id] = _failed(task_id, lane,
                                                    f"its workflow ended without answering: {end.reason}")

    async def retire(self) -> None:
        """Tell every warm lane the run has ended, and wait until the server has the Signals."""
        for lane in sorted(self.started):
            try:
                await workflow.get_external_workflow_handle(self.workflow_id(lane)).signal(LaneWorkflow.retire)
            except FailureError:
                pass  # already ended
        self.started.clear()


def _failed(task_id: str, lane: str, reason: str) -> LaneResult:
    return LaneResult(lane=lane, status=LaneStatus.failed, reason=reason, changeset=ChangeSet(task_id=task_id))


@dataclass
class LaneScheduler:
    """One dispatch of lanes within a round (the round's lanes, or the lanes a red check sends back)."""

    req: SwarmRequest
    plan: Plan
    round_no: int
    status: SwarmStatus
    queue: MergeQueue
    dispatches: dict[str, int]  # lane -> dispatches so far in the whole run (the run's own dict, updated here)
    feedback: list[str]  # the reviewer's comments from earlier rounds
    progress: Callable[[str], None]  # says where the round is (the run's details, phase running_lanes)
    goals: dict[str, str]  # lane -> its goal for this dispatch
    waiting: list[str] = field(default_factory=list)
    running: dict[str, asyncio.Task[LaneResult]] = field(default_factory=dict)
    results: dict[str, LaneResult] = field(default_factory=dict)  # settled lanes only
    merged: set[str] = field(default_factory=set)
    redo: dict[str, str] = field(default_factory=dict)  # lane -> the conflict note for its next dispatch
    warm: WarmLanes | None = None  # the run's warm lanes; None: a fresh LaneWorkflow per dispatch
    gate: Callable[[], Awaitable[bool]] | None = None  # the run's cost budget, asked before lanes are dispatched

    def __post_init__(self) -> None:
        self.waiting = list(self.goals)
        self.states: dict[str, LaneState] = {s.lane: s for s in self.status.lanes}

    async def run(self) -> dict[str, LaneResult]:
        """Every lane to its end (merged, redone, failed or cancelled); each merged as it finishes."""
        self.progress(f"round {self.round_no}: {len(self.waiting)} lanes")
        await self._warm_prefix()
        while self.waiting or self.running:
            if self.waiting and self.gate is not None and not await self.gate():
                for name in list(self.waiting):
                    self._cancel(name, "the run's cost budget is spent")
            self._start_ready()
            if not self.running:
                continue
            await workflow.wait(list(self.running.values()), return_when=asyncio.FIRST_COMPLETED)
            for name in [n for n in list(self.running) if self.running[n].done()]:
                await self._settle(name, self.running.pop(name).result())
                self.status.first_pass_merge_rate = self.queue.rate()
                self.progress(f"round {self.round_no}: {len(self.merged)}/{len(self.goals)} lanes merged")
        return self.results

    async def _warm_prefix(self) -> None:
        """Lanes that start together with the same model and no conversation yet each send the run's shared prefix
        at once, and each would pay to write it: one call writes it first where that is cheaper
        (contracts/cost.py warming_pays: N*(write - read) > write, for a prefix long enough to be cached)."""
        swarm = self.req.config.swarm
        fresh = [n for n in self.waiting if self.states[n].attempt == 0
                 and not any(d in self.goals for d in swarm.lanes[n].depends_on)
                 and (self.warm is None or n not in self.warm.started)][:swarm.max_parallel]
        by_model: dict[str, list[HelperTask]] = {}
        for name in fresh:
            task = lane_task(self.req, self.plan, name, self.goals[name], self.round_no, self.status.integration_sha,
                             self.feedback)
            by_model.setdefault(task.model, []).append(task)
        for model, tasks in sorted(by_model.items()):
            shared = run_context(tasks[0])
            tokens = SYSTEM_TOKENS + TOOL_SPEC_TOKENS + len(shared) // CHARS_PER_TOKEN
            if not warming_pays(model, tasks[0].price, tokens, len(tasks)):
                continue
            self.progress(f"round {self.round_no}: writing the shared prompt prefix to {model}'s cache")
            try:
                usage = await workflow.execute_activity(
                    warm_prefix, WarmInput(run_id=self.req.run_id, round=self.round_no, model=model, shared=shared,
                                           price=tasks[0].price, cache_ttl=tasks[0].cache_ttl,
                                           record=self.req.record), **options.model(swarm.model_outage_s))
            except ActivityError as err:  # the lanes write it themselves
                workflow.logger.warning("warming the prompt cache failed: %s", short_reason(err))
                continue
            self.status.usage = self.status.usage + usage

    def _start_ready(self) -> None:
        swarm = self.req.config.swarm
        for name in list(self.waiting):
            deps = [d for d in swarm.lanes[name].depends_on if d in self.goals]
            blocked = [d for d in deps if d in self.results and d not in self.merged]
            if blocked:
                self._cancel(name, f"dependency {', '.join(blocked)} did not merge")
                continue
            if len(self.running) >= swarm.max_parallel or not all(d in self.merged for d in deps):
                continue
            if self.dispatches.get(name, 0) >= swarm.max_helper_loops:
                self._cancel(name, f"dispatched {self.dispatches[name]} times already "
                                   f"(MAX_HELPER_LOOPS={swarm.max_helper_loops})")
                continue
            self._start(name)

    def _cancel(self, name: str, reason: str) -> None:
        self.waiting.remove(name)
        state = self.states[name]
        state.state, state.reason = LanePhase.cancelled, reason
        self.results[name] = LaneResult(lane=name, status=LaneStatus.cancelled, reason=reason,
                                        changeset=ChangeSet(task_id=f"{self.req.run_id}.{name}.r{self.round_no}"))

    def _start(self, name: str) -> None:
        self.waiting.remove(name)
        self.dispatches[name] = self.dispatches.get(name, 0) + 1
        state = self.states[name]
        state.state = LanePhase.running
        state.attempt += 1
        task = lane_task(self.req, self.plan, name, self.goals[name] + self.redo.pop(name, ""), self.round_no,
                         self.status.integration_sha, self.feedback, attempt=state.attempt)
        task.lane_queue = self.status.lane_queue
        if self.warm is not None:
            task.warm, state.workflow_id = True, self.warm.workflow_id(name)
        else:
            state.workflow_id = task.task_id
        self.running[name] = asyncio.create_task(self._lane(task))

    async def _lane(self, task: HelperTask) -> LaneResult:
        if self.warm is not None:
            return await self.warm.dispatch(task)
        try:
            return await workflow.execute_child_workflow(LaneWorkflow.run, task, id=task.task_id)
        except (ChildWorkflowError, WorkflowAlreadyStartedError) as err:  # a lane that fails is a result
            return _failed(task.task_id, task.lane, short_reason(err))

    async def _settle(self, name: str, result: LaneResult) -> None:
        """A lane's dispatch ended: count it, and merge its work (done, or out of budget with work kept)."""
        self.results[name] = result
        state = self.states[name]
        state.state, state.reason = LanePhase.ended(result.status), result.reason
        state.turns, state.tool_calls = result.turns, result.tool_calls
        state.tokens, state.cost_usd = result.usage.total_tokens, result.usage.cost_usd
        state.cache_read_tokens = result.usage.cache_read_tokens
        self.status.usage = self.status.usage + result.usage
        if result.status not in (LaneStatus.done, LaneStatus.budget_exhausted):
            return
        self.queue.note_overlaps(name, result)
        landing = await self.queue.land(name, result)
        if landing.merged:
            self.merged.add(name)
            state.state = LanePhase.merged if result.status == LaneStatus.done else LanePhase.merged_budget_exhausted
        elif self.dispatches.get(name, 0) < self.req.config.swarm.max_helper_loops:
            self.redo[name] = landing.redo_note
            self.results.pop(name)  # not settled yet: its dependents keep waiting
            self.waiting.insert(0, name)
            state.state = LanePhase.redo_after_conflict
        else:
            state.state, state.reason = LanePhase.conflict, "unresolved conflict; its branch is kept for review"
