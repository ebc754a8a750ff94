"""A lane whose agent is not the built-in loop (HelperRole.agent: claude-code, codex, acp): its assignment runs as one
heartbeating activity, a session of the agent (activities/agent_lane.py), on the lane's host in its worktree.

LaneWorkflow (workflows/lane.py) takes this in as a base class: the worktree, the host, a lost host's rebuild, the
budget pause and the result are the built-in lane's own. What differs is only the work: one session instead of
turns. A session the proxy ended at the lane's budget pauses the lane as a built-in lane pauses (`_paused`); raised,
the same session is resumed ("raised"). A warm lane's next assignment (a repair, the next round) resumes the
session it had, with the assignment as its message. Workflow code: decisions only.
"""

from __future__ import annotations

from typing import Any

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from activities.agent_lane import SESSION_S, agent_session
    from reposwarm.contracts import (
        AgentSessionInput,
        AgentSessionResult,
        BudgetChange,
        BudgetPause,
        FileEdit,
        Finish,
        HelperTask,
        LaneResume,
        LaneState,
    )
    from reposwarm.contracts.agent_session import SessionKind
    from reposwarm.review.webui import md_escape
    from workflows import budgets, options
    from workflows.endings import Ending, HostLost

MAX_TOLD = 20  # lines of reverted writes carried to the agent's next message


class OutsideAgent:
    """The outside agent's part of LaneWorkflow (its methods are LaneWorkflow's)."""

    _progress: LaneState
    _answer: BudgetChange | None  # a person's answer to a budget pause (LaneWorkflow.budget)

    # LaneWorkflow's own (workflows/lane.py), which come first in its method order
    async def _worktree_made(self, state: LaneResume) -> None:
        raise NotImplementedError

    async def _on_host(self, task: HelperTask, state: LaneResume, fn: Any, arg: Any, **opts: Any) -> Any:
        raise NotImplementedError

    async def _paused(self, task: HelperTask, state: LaneResume, over: BudgetPause) -> bool:
        raise NotImplementedError

    async def _rebuild(self, task: HelperTask, state: LaneResume, edits: dict[str, FileEdit]) -> None:
        raise NotImplementedError

    def _step(self, step: str) -> None:
        raise NotImplementedError

    async def _agent_work(self, task: HelperTask, state: LaneResume, edits: dict[str, FileEdit]) -> Any:
        """The assignment as sessions of the lane's agent until one ends it (done, failed, or at its budget
        unanswered); returns the lane's Ending (workflows/endings.py)."""
        await self._worktree_made(state)  # the session needs the worktree: made first
        agent = task.role.agent_name
        kind: SessionKind = "next" if state.agent_session else "first"
        session_s = min(task.role.max_wall_s, SESSION_S)
        while True:
            if workflow.now().timestamp() - state.started_at > task.role.max_wall_s:
                return Ending.out_of_budget(f"wall-time budget of {task.role.max_wall_s:.0f}s used up")
            # (a call counts as one token at least: a lane at its budget exactly asks a person first)
            if (over := budgets.over(task, state, 1)) is not None:
                if await self._paused(task, state, over):
                    kind = "raised" if state.agent_session else kind
                    continue
                return Ending.out_of_budget(budgets.ended(over, self._answer, task.budget_wait_s))
            tokens, dollars = budgets.budgets_of(task, state)
            self._step(f"{agent} session")
            workflow.set_current_details(
                f"**{task.lane}** (round {task.round}, agent {agent}): session running, "
                f"{state.tool_calls} tool calls so far, {budgets.spent_line(task, state)}\n\n"
                f"Goal: {md_escape(task.goal[:300])}")
            ask = AgentSessionInput(task=task, kind=kind, resume=state.agent_session, spent=state.usage,
                                    token_budget=tokens, cost_budget_usd=dollars, told=state.agent_told)
            try:
                done: AgentSessionResult = await self._on_host(task, state, agent_session, ask,
                                                               **options.agent_session(session_s))
            except HostLost:
                # The CLI's state was on the lost host: a new session, on the worktree rebuilt from the checkpoint
                await self._rebuild(task, state, edits)
                state.agent_session, kind = "", "first"
                continue
            state.agent_told = []
            self._account_session(task, state, edits, done)
            if done.budget_refused and budgets.over(task, state, 1) is not None:
                kind = "raised"
                continue  # pauses above, as a built-in lane at its budget
            finish = Finish(summary=done.final_text or f"(the {agent} agent ended without a summary)")
            if done.budget_refused:
                return Ending.out_of_budget(done.reason or "the session reached the lane's budget")
            if not done.ok:
                return Ending.failed(done.reason, finish)
            return Ending.finished(finish)

    def _account_session(self, task: HelperTask, state: LaneResume, edits: dict[str, FileEdit],
                         done: AgentSessionResult) -> None:
        """A session's figures on the lane's tally, as a built-in lane's turns and calls are."""
        state.usage = state.usage + done.usage
        state.turn += done.turns
        state.tool_calls += done.tool_calls
        state.agent_session = done.session_id or state.agent_session
        state.refusals += len(done.reverted)
        for line in done.reverted:
            if len(state.failed_calls) < 50:
                state.failed_calls.append(f"{task.role.agent_name} session: reverted outside the slice: {line}"[:300])
        state.agent_told = [*state.agent_told, *done.reverted][:MAX_TOLD]
        for edit in done.edits:
            earlier = edits.get(edit.path)
            edits[edit.path] = edit if earlier is None else earlier.model_copy(update={
                "operation": edit.operation if earlier.operation != "create" or edit.operation == "delete"
                else "create"})
        self._progress.turns, self._progress.tool_calls = state.turn, state.tool_calls
        self._progress.tokens, self._progress.cost_usd = state.usage.total_tokens, state.usage.cost_usd
        self._progress.cache_read_tokens = state.usage.cache_read_tokens
        workflow.set_current_details(
            f"**{task.lane}** (round {task.round}, agent {task.role.agent_name}): session "
            f"{done.session_id[:12] or '-'} ended, {state.tool_calls} tool calls, {budgets.spent_line(task, state)}, "
            f"{len(edits)} files changed\n\nGoal: {md_escape(task.goal[:300])}")
