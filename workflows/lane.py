"""LaneWorkflow: one lane, a coding agent working in its own worktree and branch.

The loop is small on purpose: a model turn (activity), its tool calls (one
activity each, path-guarded), a checkpoint commit after any turn that changed
files, until finish or a budget (tokens, turns, wall time). The turn runs its
reply's quick calls itself (reads and edits), and where they were all it had,
goes on to the next turn in the same activity (TurnSteps), so a step costs no
workflow task of its own. The workflow only decides; every side effect is an
activity, so a killed worker resumes without redoing a completed call. Long
lanes continue-as-new when Temporal suggests it, carrying their state
(transcript and edits by reference).
"""

from __future__ import annotations

import re
from datetime import timedelta
from typing import Any

from temporalio import workflow
from temporalio.exceptions import ActivityError, ApplicationError, FailureError, TimeoutType
from temporalio.exceptions import TimeoutError as TemporalTimeoutError

with workflow.unsafe.imports_passed_through():
    from activities.model import model_turn
    from activities.repo import checkpoint_lane, create_lane_worktree, describe_lane
    from activities.tool_call import run_tool
    from reposwarm.agent.conversation import (
        ToolResult,
        UserMessage,
        finish_outcome,
        is_finish,
        lane_opening,
        to_wire,
    )
    from reposwarm.agent.prompts import NO_TOOL_CALL, host_lost_note, lane_next_message
    from reposwarm.contracts import (
        BudgetChange,
        BudgetPause,
        ChangeSet,
        CheckpointInput,
        FileEdit,
        HelperTask,
        LaneDescription,
        LanePhase,
        LaneResult,
        LaneResume,
        LaneState,
        LaneWorktree,
        ModelTurnInput,
        ModelTurnResult,
        ToolCall,
        ToolInput,
        ToolOutcome,
        TurnSteps,
        TurnTools,
        Usage,
    )
    from reposwarm.review.webui import md_escape
    from workflows import budgets, options
    from workflows.agent_lane import OutsideAgent
    from workflows.endings import Ending, HostLost
    from workflows.failures import root_cause, short_reason


# Tools that touch one file or folder and return in milliseconds. The model turn runs a reply's first calls itself
# while they are quick, on the lane's host (patch "tools-in-turn"): a step of reads and edits is one activity, with
# host affinity as with the shared queue (bench/results.json: step, host_affinity). Where the turn cannot (the first
# turn, its worktree made beside it) and the worktree is on this workflow's own host (the shared-queue affinity),
# they run as local activities, in the workflow task that asked for them, instead of a round trip through the
# server. Searches, symbol look-ups (an index may be built on first use) and checks stay activities: they can take
# long.
QUICK_TOOLS = frozenset({"read_file", "list_dir", "write_file", "edit_file", "delete_file"})
# A turn whose calls were all quick goes on to the next by itself, in the same activity (patch "turns-in-activity",
# reposwarm/contracts/turns.py TurnSteps): up to this many turns, starting none after this many seconds. A step
# then costs no workflow task, activity task or history event of its own (docs/benchmarks.md, Orchestration CPU
# per lane step); the lane's progress and the Web UI's details move once an activity, not once a turn.
TURNS_AT_ONCE = 16
TURNS_AT_ONCE_S = 30.0
MAX_FAILED_CALLS = 50  # lines kept of a lane's failed and refused calls; the rest are counted
MAX_DECLINED = 2  # replies in a row the model may decline (stop reason refusal) before the lane ends failed
MAX_COMMANDS = 50  # lines kept of the commands a lane ran (the `run` tool); the rest are counted
FAILED_LINE_CHARS = 160
CLAIMS_GREEN = re.compile(r"tests? pass|all (tests|checks) pass|checks? (pass|green)|passing|green", re.IGNORECASE)
CHECKS_FLAG = "the summary says the checks pass, but the lane's last run_checks failed"


# A warm lane no run has asked anything of in this long ends (its run was terminated, or its reviewer is slow: the
# next assignment then starts a fresh lane). A waiting lane holds no worker and no slot.
IDLE = timedelta(hours=24)


def _reassigned(task: HelperTask, state: LaneResume, now: float) -> LaneResume:
    """A warm lane's state for its next assignment: the same conversation, worktree and host; fresh counters and
    budgets; the assignment as the next message."""
    return LaneResume(turn=0, transcript_ref=state.transcript_ref, usage=Usage(), started_at=now,
                      pending=[UserMessage(content=lane_next_message(task)).wire()], host_queue=state.host_queue,
                      shared_queue=state.shared_queue, rebuilt=state.rebuilt, reassigned=True,
                      agent_session=state.agent_session, agent_told=state.agent_told)


@workflow.defn
class LaneWorkflow(OutsideAgent):
    def __init__(self) -> None:
        self._progress = LaneState(lane="", state=LanePhase.starting)
        self._next: HelperTask | None = None
        self._retired = False
        self._making: workflow.ActivityHandle[LaneWorktree] | None = None  # a worktree made beside the first turn
        self._to_make: HelperTask | None = None  # a worktree the first turn's activity makes (patch worktree-in-turn)
        self._answer: BudgetChange | None = None  # a person's answer to a budget pause, forwarded by the run

    @workflow.query
    def progress(self) -> LaneState:
        return self._progress

    @workflow.run
    async def run(self, task: HelperTask) -> LaneResult:
        state = task.resume or LaneResume(
            turn=0, transcript_ref=None, usage=Usage(), started_at=workflow.now().timestamp(),
            pending=to_wire(lane_opening(task)),
        )
        while True:
            result = await self._assignment(task, state)
            if not task.warm:
                return result
            # A warm lane reports to its run and waits for its next assignment (or to be retired). Cleared before the
            # report: the next assignment may arrive in the same workflow task as the report's confirmation.
            self._next, self._retired = None, False
            await workflow.get_external_workflow_handle(task.run_id).signal("lane_done", result)
            try:
                await workflow.wait_condition(lambda: self._next is not None or self._retired, timeout=IDLE)
            except TimeoutError:  # wait_condition's (asyncio's), not Temporal's
                return result
            if self._next is None:
                return result
            task, state = self._next, _reassigned(self._next, state, workflow.now().timestamp())
            if workflow.info().is_continue_as_new_suggested():
                await workflow.wait_condition(workflow.all_handlers_finished)
                workflow.continue_as_new(task.model_copy(update={"resume": state}))

    @workflow.signal
    def assign(self, task: HelperTask) -> None:
        """A warm lane's next assignment, from its run."""
        self._next = task

    @workflow.signal
    def budget(self, change: BudgetChange) -> None:
        """A person's answer to this lane's budget pause (the run's `budget` Update forwards it)."""
        self._answer = change

    @workflow.signal
    def retire(self) -> None:
        """The run has ended: nothing more to do."""
        self._retired = True

    async def _assignment(self, task: HelperTask, state: LaneResume) -> LaneResult:
        """One assignment: its worktree, turns until one ends it (finish, a budget, a failure), then its result."""
        self._progress = LaneState(lane=task.lane, state=LanePhase.running, goal=task.goal, turns=state.turn,
                                   tool_calls=state.tool_calls, tokens=state.usage.total_tokens,
                                   agent=task.role.agent_name)
        edits = {e.path: e for e in state.edits}
        await self._worktree_for(task, state, edits)
        try:
            if task.role.agent_name == "builtin":
                ending = await self._turns(task, state, edits)
            else:  # an outside agent (workflows/agent_lane.py): one session as one activity, not turns
                ending = await self._agent_work(task, state, edits)
        except (ActivityError, ApplicationError) as err:
            # A failure that ends the lane (an activity out of retries, a non-retryable error) ends it as data:
            # failed, with one line saying why, and its turns, calls and tokens kept.
            ending = Ending.failed(short_reason(err))
            workflow.logger.warning("lane %s failed: %s", task.lane, root_cause(err))
        return await self._result(task, state, edits, ending)

    async def _worktree_for(self, task: HelperTask, state: LaneResume, edits: dict[str, FileEdit]) -> None:
        """The assignment's worktree: made beside the first turn, made first, or brought to the new base."""
        if not state.host_queue and task.lane_queue:
            # Every worker on the lane queue shares one home: the first model turn needs no worktree, so it runs
            # while the worktree is made, in the turn's own activity (a built-in lane's: its quick calls run
            # there once it is made, and the turns go on) or as an activity beside it (the turn's tool calls wait
            # for it: _worktree_made).
            if task.role.agent_name == "builtin" and workflow.patched("worktree-in-turn"):
                self._to_make = task
            else:
                self._making = workflow.start_activity(create_lane_worktree, task, **options.GIT)
            state.host_queue, state.shared_queue = task.lane_queue, True
        elif not state.host_queue:
            self._step("making the worktree")
            made = await workflow.execute_activity(create_lane_worktree, task, **options.GIT)
            state.host_queue, state.shared_queue = made.host_queue, made.shared_queue
        elif state.reassigned:  # a warm lane's next assignment: its worktree and branch on the new base
            self._step("bringing the worktree to the new base")
            try:
                made = await self._on_host(task, state, create_lane_worktree, task, **options.GIT)
                state.host_queue, state.shared_queue = made.host_queue, made.shared_queue
            except HostLost:
                await self._rebuild(task, state, edits)
            state.reassigned = False

    async def _turns(self, task: HelperTask, state: LaneResume, edits: dict[str, FileEdit]) -> Ending:
        """Turns until one ends the assignment. Budgets count billed tokens and dollars (reposwarm/contracts/cost.py),
        and a lane at its budget pauses for a person's answer (workflows/budgets.py) before it ends there."""
        role = task.role
        next_billed = 0.0  # what the next call is expected to bill
        while state.turn < role.max_turns:
            if workflow.info().is_continue_as_new_suggested():
                await self._worktree_made(state)
                state.edits, state.continued = list(edits.values()), state.continued + 1
                workflow.continue_as_new(task.model_copy(update={"resume": state}))
            if workflow.now().timestamp() - state.started_at > role.max_wall_s:
                return Ending.out_of_budget(f"wall-time budget of {role.max_wall_s:.0f}s used up")
            if (over := budgets.over(task, state, next_billed)) is not None:
                if await self._paused(task, state, over):
                    continue
                return Ending.out_of_budget(budgets.ended(over, self._answer, task.budget_wait_s))
            try:
                turns = await self._turn(task, state, edits)
            except HostLost:
                await self._rebuild(task, state, edits)
                continue
            for result, new_chars, valid_calls in turns:
                next_billed = budgets.next_call(task, result.usage, new_chars)
                if (ending := self._judged(task, state, result, valid_calls)) is not None:
                    return ending
        return Ending.out_of_budget(f"turn budget of {role.max_turns} used up")

    def _judged(self, task: HelperTask, state: LaneResume, result: ModelTurnResult, valid_calls: int) -> Ending | None:
        """What a turn's reply means for the lane: it finished, it failed (declined or malformed too often in a row),
        or (None) it goes on."""
        # A reply cut at the output limit, or one the model declined, is no malformed reply: the model was told why
        # and goes on (both flags are False in results recorded before them: those go as they went). Declining
        # twice in a row ends the lane: a third ask would most likely be declined too.
        state.declined = state.declined + 1 if result.declined else 0
        if state.declined >= MAX_DECLINED:
            return Ending.failed(f"the model declined {state.declined} replies in a row (stop reason refusal): "
                                 + (result.content[:300] or "it gave no reason"))
        if valid_calls or not (result.cut or result.declined):
            state.malformed = 0 if valid_calls else state.malformed + 1
        if state.malformed >= task.role.max_malformed_replies:
            return Ending.failed(f"{state.malformed} malformed replies in a row (no usable tool call); the last: "
                                 + (next((c.error for c in result.tool_calls if c.error), None) or "no tool call"))
        return Ending.finished(result.finish) if result.finish is not None else None

    async def _paused(self, task: HelperTask, state: LaneResume, over: BudgetPause) -> bool:
        """At its budget, with its work committed: wait for a raise (True: go on) or a stop, up to budget_wait_s."""
        if task.budget_wait_s <= 0:
            return False
        self._answer = None
        over = over.model_copy(update={"since": workflow.now().isoformat(), "wait_s": task.budget_wait_s,
                                       "workflow_id": workflow.info().workflow_id})
        said = over.line(task.run_id)
        self._progress.state, self._progress.reason = LanePhase.paused, said
        self._step("paused at its budget")
        workflow.set_current_details(f"**{task.lane}** (round {task.round}): {md_escape(said)}")
        run = workflow.get_external_workflow_handle(task.run_id)
        try:
            await run.signal("lane_paused", over)
            await workflow.wait_condition(lambda: self._answer is not None,
                                          timeout=timedelta(seconds=task.budget_wait_s))
        except TimeoutError:  # wait_condition's: no answer in time
            pass
        except FailureError:  # the run is gone: nobody to ask
            return False
        try:
            await run.signal("lane_paused", over.model_copy(update={"cleared": True}))
        except FailureError:
            pass
        self._progress.state, self._progress.reason = LanePhase.running, ""
        self._step("")
        return budgets.apply(state, over, self._answer)

    def _step(self, step: str) -> None:
        """What the lane is doing now, for the progress query (`watch`): state only, no workflow command, so
        recorded histories replay as they were."""
        self._progress.step = step
        self._progress.step_since = workflow.now().timestamp() if step else None

    async def _turn(self, task: HelperTask, state: LaneResume,
                    edits: dict[str, FileEdit]) -> list[tuple[ModelTurnResult, int, int]]:
        """One model turn and its tool calls on the lane's host (and the turns it went on to by itself), then a
        checkpoint commit if files changed; returns each turn's result, the size of what its calls said, and how
        many of them were usable."""
        role = task.role
        self._step(f"model turn {state.turn + 1}")
        # the turn runs its quick calls itself where the worktree is made (not beside this turn)
        tools = TurnTools(names=sorted(QUICK_TOOLS), allowed_paths=task.allowed_paths,
                          read_only_paths=task.read_only_paths) \
            if self._making is None and workflow.patched("tools-in-turn") else None
        steps = self._steps(task, state) if tools is not None and workflow.patched("turns-in-activity") else None
        to_make, self._to_make = self._to_make, None  # (made in the turn's activity: its calls run after it)
        result = await self._on_host(
            task, state, model_turn,
            ModelTurnInput(run_id=task.run_id, agent=task.lane, round=task.round, attempt=task.attempt,
                           turn=state.turn, model=task.model, transcript_ref=state.transcript_ref,
                           new_messages=state.pending, if_lost=state.if_lost, context_tokens=role.context_tokens,
                           price=task.price, record=task.record, cache_ttl=task.cache_ttl,
                           max_output_tokens=role.max_output_tokens, thinking_tokens=role.thinking_tokens,
                           reasoning_effort=role.reasoning_effort, tools=tools, steps=steps, worktree=to_make),
            **options.model(task.outage_s),
        )
        if result.worktree is not None:
            state.host_queue, state.shared_queue = result.worktree.host_queue, result.worktree.shared_queue
        state.pending, state.if_lost = [], []
        turns: list[tuple[ModelTurnResult, int, int]] = []
        changed = False
        last = len(result.then)
        for i, each in enumerate([result, *result.then]):
            state.transcript_ref, state.usage = each.transcript_ref, state.usage + each.usage
            state.turn += 1
            self._progress.turns, self._progress.tokens = state.turn, state.usage.total_tokens
            self._progress.cost_usd = state.usage.cost_usd
            self._progress.cache_read_tokens = state.usage.cache_read_tokens
            await self._worktree_made(state)
            if changed and i == last and _calls_left(each):
                # The turns the activity went on to changed files, and this one has calls to run as activities
                # (a check, a command: they may take long, and a lost host loses the worktree): their work is
                # committed first, as it would have been after each of those turns.
                await self._checkpoint(task, state, edits, state.turn - 1)
                changed = False
            # (a turn the activity went on from has its calls' results in the transcript already)
            made, new_chars, valid_calls = await self._run_calls(task, each, state, edits, answered=i < last)
            self._progress.tool_calls = state.tool_calls
            changed = changed or made
            turns.append((each, new_chars, valid_calls))
        workflow.set_current_details(
            f"**{task.lane}** (round {task.round}): turn {state.turn} of at most {role.max_turns}, "
            f"{state.tool_calls} tool calls, {budgets.spent_line(task, state)}, "
            f"{len(edits)} files changed\n\nGoal: {md_escape(task.goal[:300])}")
        if changed:
            await self._checkpoint(task, state, edits, state.turn)
        return turns

    async def _checkpoint(self, task: HelperTask, state: LaneResume, edits: dict[str, FileEdit], turn: int) -> None:
        """A checkpoint commit of the lane's worktree on its host, after `turn`."""
        self._step("checkpoint")
        await self._on_host(
            task, state, checkpoint_lane,
            CheckpointInput(run_id=task.run_id, lane=task.lane, repo_path=task.repo_path,
                            allowed_paths=task.allowed_paths,
                            read_only_paths=task.read_only_paths,
                            message=f"reposwarm {task.lane}: checkpoint after turn {turn}\n\n"
                                    + "\n".join(f"- {e.path}: {e.reason}" for e in edits.values())),
            **options.GIT,
        )

    def _steps(self, task: HelperTask, state: LaneResume) -> TurnSteps:
        """How far the turn may go on by itself: within its share of turns and seconds, and the lane's budgets."""
        tokens, dollars = budgets.budgets_of(task, state)
        return TurnSteps(turns=max(1, min(TURNS_AT_ONCE, task.role.max_turns - state.turn)), seconds=TURNS_AT_ONCE_S,
                         wall_deadline=state.started_at + task.role.max_wall_s, spent=state.usage,
                         token_budget=tokens, cost_budget_usd=dollars)

    async def _worktree_made(self, state: LaneResume) -> None:
        """Wait for a worktree made beside the first turn; its failure fails the lane like any activity's. One the
        first turn was to make, needed before that turn ran (a continue-as-new, an ending): made now."""
        if self._to_make is not None:
            task, self._to_make = self._to_make, None
            self._step("making the worktree")
            made = await workflow.execute_activity(create_lane_worktree, task, **options.GIT)
            state.host_queue, state.shared_queue = made.host_queue, made.shared_queue
        if self._making is not None:
            making, self._making = self._making, None
            if not making.done():
                self._step("making the worktree")
            made = await making
            state.host_queue, state.shared_queue = made.host_queue, made.shared_queue

    async def _on_host(self, task: HelperTask, state: LaneResume, fn: Any, arg: Any, **opts: Any) -> Any:
        """Run an activity on the host that holds the lane's worktree (and its store)."""
        if state.shared_queue:  # every worker on it holds the worktree: no host to lose; eager dispatch
            return await workflow.execute_activity(fn, arg, task_queue=state.host_queue, **opts)
        try:
            return await workflow.execute_activity(fn, arg, task_queue=state.host_queue,
                                                   **options.host_bound(task.host_timeout_s), **opts)
        except ActivityError as err:
            if isinstance(err.cause, TemporalTimeoutError) and err.cause.type == TimeoutType.SCHEDULE_TO_START:
                raise HostLost(state.host_queue) from err
            raise

    async def _rebuild(self, task: HelperTask, state: LaneResume, edits: dict[str, FileEdit]) -> None:
        """The lane's host is gone: a worktree from its last checkpoint commit on another host, a fresh transcript."""
        lost = state.host_queue
        self._step("rebuilding the worktree")
        # resume set: the ledger records a checkpoint restore; the branch's checkpoints are checked out as they are
        rebuilt = await workflow.execute_activity(create_lane_worktree, task.model_copy(update={"resume": state}),
                                                  **options.GIT)
        state.host_queue, state.shared_queue = rebuilt.host_queue, rebuilt.shared_queue
        state.rebuilt += 1
        done = "\n".join(f"- {e.operation} {e.path}: {e.reason}" for e in edits.values()) or "- nothing yet"
        moved = host_lost_note(lost, done)
        # The conversation goes on where the transcript is in a shared object store; the model turn starts
        # afresh from the goal (if_lost) where it is not.
        state.if_lost = to_wire(lane_opening(task, moved))
        # (the results of the turn's calls that ran go on; model_turn answers the rest as lost)
        state.pending = [*state.pending, UserMessage(content=moved).wire()] if state.transcript_ref else state.if_lost
        workflow.logger.warning("lane %s: host %s lost; rebuilt on %s", task.lane, lost, state.host_queue)

    async def _run_calls(self, task: HelperTask, result: ModelTurnResult, state: LaneResume,
                         edits: dict[str, FileEdit], *, answered: bool = False) -> tuple[bool, int, int]:
        """Run a reply's tool calls in order, each answered in the next message (unless `answered`: the turn went on
        by itself, its calls' results in the transcript); returns (files changed, output size, usable calls)."""
        changed, new_chars, valid = False, 0, 0
        if not result.tool_calls:
            state.pending.append(UserMessage(content=NO_TOOL_CALL).wire())
            return changed, 60, 0  # (about the size of that message, as it was always counted)
        for i, call in enumerate(result.tool_calls):
            state.tool_calls += 1
            if is_finish(call):  # the lane's own: no activity runs it (reposwarm/agent/conversation.py)
                outcome = finish_outcome(call)
                answer = ToolResult(tool_call_id=call.id, content=outcome.output)
            elif i < len(result.outcomes) and result.outcomes[i].call_id == call.id:  # run in the turn already
                outcome = result.outcomes[i]
                answer = ToolResult(tool_call_id=call.id, content_ref=outcome.output_ref)
            else:
                tool_input = ToolInput(
                    run_id=task.run_id, lane=task.lane, call=call, round=task.round, attempt=task.attempt,
                    turn=state.turn, allowed_paths=task.allowed_paths, read_only_paths=task.read_only_paths,
                    check_profiles=task.check_profiles, default_profile=task.default_profile,
                    default_reason=result.content[:200], shell=task.role.shell)
                self._step(_call_label(call))
                if call.name in QUICK_TOOLS and state.shared_queue:
                    outcome = await workflow.execute_local_activity(run_tool, tool_input, **options.QUICK)
                else:
                    outcome = await self._on_host(task, state, run_tool, tool_input,
                                                  **options.tool(task.check_profiles))
                answer = ToolResult(tool_call_id=call.id, content_ref=outcome.output_ref)
            state.refusals += outcome.refused
            _account(state, call, outcome)
            valid += not outcome.malformed
            new_chars += outcome.output_chars
            # (a `run` command's files are `edits`: several, or none; outcomes recorded before it have none)
            for made in ([outcome.edit] if outcome.edit is not None else []) + outcome.edits:
                edit = made.model_copy(update={"turns": [state.turn]})
                edits[edit.path] = _merge_edit(edits.get(edit.path), edit)
                changed = True
            if not answered:
                state.pending.append(answer.wire())
        return changed, new_chars, valid

    async def _result(self, task: HelperTask, state: LaneResume, edits: dict[str, FileEdit],
                      ending: Ending) -> LaneResult:
        """The lane's result, from its branch as described on its host (rebuilt first if the host was lost); when
        the branch cannot be described, from the evidence in hand, failed."""
        described: LaneDescription | None = None
        try:
            await self._worktree_made(state)
            described = await self._described(task, state)
        except HostLost:
            await self._rebuild(task, state, edits)
            described = await self._described(task, state)
        except ActivityError as err:  # the worktree cannot be described: the evidence in hand still counts
            ending = Ending.failed(ending.reason or short_reason(err), ending.finish)
        return self._evidence(task, state, edits, ending, described)

    async def _described(self, task: HelperTask, state: LaneResume) -> LaneDescription:
        self._step("describing the branch")
        if state.shared_queue and workflow.patched("describe-local"):
            # Every worker on the shared queue holds the worktree (as for the quick tools): a git diff or two as a
            # local activity, so the lane's end costs no activity task and no workflow task after it.
            local: LaneDescription = await workflow.execute_local_activity(describe_lane, task, **options.QUICK)
            return local
        described: LaneDescription = await self._on_host(task, state, describe_lane, task, **options.GIT)
        return described

    def _evidence(self, task: HelperTask, state: LaneResume, edits: dict[str, FileEdit], ending: Ending,
                  described: LaneDescription | None) -> LaneResult:
        """The lane's result: what its branch holds (`described`, when the worktree could be read) and what it
        did (turns, tool calls, refusals, tokens), for a failed lane as much as for a finished one."""
        described = described or LaneDescription()
        final_edits = []
        for path, letter in sorted(described.files.items()):
            operation = {"A": "create", "D": "delete"}.get(letter, "modify")
            edit = edits.get(path)
            final_edits.append(FileEdit(
                path=path, operation=operation,
                reason=edit.reason if edit else "changed by the lane outside its recorded edits",
                content_ref=edit.content_ref if edit and operation != "delete" else None,
                turns=edit.turns if edit else []))
        self._progress.state, self._progress.reason = LanePhase.ended(ending.status), ending.reason
        self._step("")
        finish = ending.finish
        summary = finish.summary if finish else ending.reason
        unlisted = state.tool_errors + state.refusals - len(state.failed_calls)
        return LaneResult(
            lane=task.lane, status=ending.status, reason=ending.reason, usage=state.usage, turns=state.turn,
            tool_calls=state.tool_calls, refusals=state.refusals, tool_errors=state.tool_errors,
            failed_calls=state.failed_calls + ([f"... and {unlisted} more"] if unlisted > 0 else []),
            flags=[CHECKS_FLAG] if finish and state.last_checks_ok is False and CLAIMS_GREEN.search(finish.summary)
            else [],
            elapsed_s=round(workflow.now().timestamp() - state.started_at, 3),
            commands=state.commands + ([f"... and {state.commands_run - len(state.commands)} more"]
                                       if state.commands_run > len(state.commands) else []),
            agent=task.role.agent_name, agent_session=state.agent_session,
            changeset=ChangeSet(task_id=task.task_id, edits=final_edits, summary=summary,
                                assumptions=finish.assumptions if finish else [], diff_stat=described.diff_stat,
                                head_sha=described.head_sha),
        )


def _calls_left(result: ModelTurnResult) -> bool:
    """Whether a turn has calls its activity did not run, that the workflow runs as activities (not finish)."""
    return any(not is_finish(call) for call in result.tool_calls[len(result.outcomes):])


def _merge_edit(earlier: FileEdit | None, later: FileEdit) -> FileEdit:
    """Several edits to one file become one, keeping every distinct reason."""
    if earlier is None:
        return later
    reasons = earlier.reason if later.reason in earlier.reason else f"{earlier.reason}; {later.reason}"
    operation = "create" if earlier.operation == "create" and later.operation != "delete" else later.operation
    return FileEdit(path=later.path, operation=operation, reason=reasons, content_ref=later.content_ref,
                    turns=sorted(set(earlier.turns) | set(later.turns)))


def _call_label(call: ToolCall) -> str:
    """A call as the lane's step and its failure lines name it: the tool, and the path it works on if any."""
    path = (call.arguments or {}).get("path")
    return f"{call.name} {path[:120]}" if isinstance(path, str) and path else call.name


def _note_failure(state: LaneResume, call: ToolCall, output: str) -> None:
    """One line for the review per failed or refused call, the first MAX_FAILED_CALLS of them: a failed
    edit did not apply, and a reviewer reading "8 tool calls" should know."""
    if len(state.failed_calls) < MAX_FAILED_CALLS:
        first = next(iter(output.splitlines()), "")
        state.failed_calls.append(f"turn {state.turn} {_call_label(call)}: {first[:FAILED_LINE_CHARS]}")


def _account(state: LaneResume, call: ToolCall, outcome: ToolOutcome) -> None:
    """A tool call's outcome in the lane's tally: a call that ran and failed, and how its last check went.

    A run_checks call whose checks fail still runs fine (ok): whether they passed is its output's first line,
    "checks PASSED ...", "checks PASSED WITH TEST CHANGES ..." or "checks FAILED ..." ("checks passed ..." before).
    """
    if not outcome.ok:
        state.tool_errors += not outcome.refused
        _note_failure(state, call, outcome.output)
    if call.name == "run_checks":
        # "checks passed" before verdicts; since them, the verdict word ("checks PASSED WITH TEST CHANGES" is not)
        first = outcome.output.split(",", 1)[0].split(";", 1)[0].split(" (", 1)[0]
        state.last_checks_ok = outcome.ok and (outcome.output.startswith("checks passed") or first == "checks PASSED")
    if outcome.ran:  # a `run` command that ran: "$ python gen.py -> exit 0", for the review
        state.commands_run += 1
        if len(state.commands) < MAX_COMMANDS:
            state.commands.append(outcome.ran)
