"""Budgets that pause and ask (workflow code: decisions only).

A lane's token_budget counts billed input-token equivalents and its cost_budget_usd dollars
(reposwarm/contracts/cost.py). Before each model call the lane checks that the call it is about to make fits; if
not, it pauses with its work committed (every turn that changed files is a checkpoint commit), tells its run
(`lane_paused`) and waits up to swarm.budget_wait_s for a person: the run's `budget` Update (or its Signal twin,
`budget_signal`, which the Web UI can send) raises the budget, and the lane goes on where it stopped, or stops
it, and the lane ends as budget_exhausted, as it does when no answer comes.

The run's own swarm.cost_budget_usd is checked before each lane is dispatched: at it, the run pauses the same
way (lanes already running finish their turn within their own budgets); unanswered or stopped, the lanes not
yet dispatched are cancelled and the round goes on to its checks and review with what was merged.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta

from temporalio import workflow
from temporalio.common import RawValue
from temporalio.exceptions import ApplicationError, FailureError

with workflow.unsafe.imports_passed_through():
    from reposwarm.contracts import (
        BudgetChange,
        BudgetPause,
        BudgetReceipt,
        HelperTask,
        LaneResume,
        SwarmRequest,
        SwarmStatus,
        Usage,
    )
    from reposwarm.contracts.cost import change_problem, next_billed, over_budget, raised, unit_problem, usd
    from reposwarm.text import inert_line
    from workflows.review import conversion_problem

def next_call(task: HelperTask, last: Usage, new_chars: int) -> float:
    """What the lane's next call will bill, in input-token equivalents (reposwarm/contracts/cost.py next_billed)."""
    return next_billed(task.model, task.price, last, new_chars)


def budgets_of(task: HelperTask, r: LaneResume) -> tuple[int, float | None]:
    """The assignment's token and dollar budgets: as a person raised them at a pause, else the role's."""
    return r.token_budget or task.role.token_budget, r.cost_budget_usd or task.role.cost_budget_usd


def over(task: HelperTask, r: LaneResume, next_billed: float) -> BudgetPause | None:
    """The budget the next call would take the lane past, or None."""
    tokens, dollars = budgets_of(task, r)
    return over_budget(task.lane, task.price, r.usage, tokens, dollars, next_billed)


def apply(r: LaneResume, pause: BudgetPause, answer: BudgetChange | None) -> bool:
    """The lane's budget as raised (True), or no raise (a stop, or no answer)."""
    new = raised(pause, answer) if answer is not None else None
    if new is None:
        return False
    if pause.what == "tokens":
        r.token_budget = int(new)
    else:
        r.cost_budget_usd = new
    return True


def ended(pause: BudgetPause, answer: BudgetChange | None, wait_s: float) -> str:
    """Why the lane ended at its budget, in one line (`wait_s`: how long it waited for an answer)."""
    what = (f"cost budget of {usd(pause.budget)} ({usd(pause.spent)} spent)" if pause.what == "cost"
            else f"token budget of {pause.budget:,.0f} billed tokens ({pause.spent:,.0f} spent)")
    if answer is not None and answer.stop:
        return f"{what} reached; stopped at its budget by {inert_line(answer.by) or 'a reviewer'}"
    if wait_s > 0:
        return f"{what} would be exceeded by the next call; no raise came in {wait_s:.0f} s"
    return f"{what} would be exceeded by the next call"


def spent_line(task: HelperTask, r: LaneResume) -> str:
    """"41,200 of 64,000 billed tokens ($0.41), 78% of input read from the cache", for the lane's details."""
    tokens, _ = budgets_of(task, r)
    cost = f" (${r.usage.cost_usd:.2f})" if task.price is not None else ""
    cache = f", {r.usage.cache_hit_share:.0%} of input from the cache" if r.usage.cache_read_tokens else ""
    return f"{r.usage.billed:,} of {tokens:,} billed tokens{cost}{cache}"


class Budgets:
    """SwarmWorkflow's budget pauses and the `budget` Update (a base class: Temporal finds inherited handlers)."""

    _status: SwarmStatus
    _show: Callable[[], None]
    _run_answer: BudgetChange | None = None

    def _budget_refusal(self, change: BudgetChange) -> str | None:
        if (why := change_problem(change)) is not None:
            return why
        pause = next((p for p in self._status.paused if p.lane == change.lane), None)
        if pause is None:
            who = f"lane {change.lane}" if change.lane else "the run"
            return f"{who} is not paused at its budget (paused: {self._paused_names() or 'none'})"
        return unit_problem(pause, change)

    def _paused_names(self) -> str:
        return ", ".join(p.lane or "the run" for p in self._status.paused)

    async def _send_budget(self, change: BudgetChange) -> BudgetReceipt:
        pause = next(p for p in self._status.paused if p.lane == change.lane)
        new = raised(pause, change)
        if change.lane:
            await workflow.get_external_workflow_handle(pause.workflow_id).signal("budget", change)
        else:
            self._run_answer = change
        self._status.paused = [p for p in self._status.paused if p.lane != change.lane]
        self._show()
        return BudgetReceipt(lane=change.lane, stopped=new is None, budget=new or pause.budget, what=pause.what)

    @workflow.update
    async def budget(self, change: BudgetChange) -> BudgetReceipt:
        """Raise a paused lane's (or the run's) budget, or stop it."""
        return await self._send_budget(change)

    @budget.validator
    def _validate_budget(self, change: BudgetChange) -> None:
        if (why := self._budget_refusal(change)) is not None:
            raise ApplicationError(why, non_retryable=True)

    @workflow.signal
    async def budget_signal(self, payload: RawValue) -> None:
        """The same answer as a Signal (the Web UI can send one); a refused one is kept in ignored_signals."""
        try:
            change = workflow.payload_converter().from_payload(payload.payload, BudgetChange)
        except Exception as err:  # noqa: BLE001 - whatever the payload is, it is recorded, never raised
            self._status.ignored_signals.append(f"budget: {conversion_problem(err)}")
            return
        if (why := self._budget_refusal(change)) is not None:
            self._status.ignored_signals.append(f"budget: {why}")
            return
        try:
            await self._send_budget(change)
        except FailureError as err:  # the lane has ended meanwhile
            self._status.ignored_signals.append(f"budget: {err}")

    @workflow.signal
    def lane_paused(self, pause: BudgetPause) -> None:
        """A lane at its budget, waiting for an answer (or, cleared, no longer)."""
        self._status.paused = [p for p in self._status.paused if p.lane != pause.lane]
        if not pause.cleared:
            self._status.paused.append(pause)
        self._show()

    def _pause_lines(self) -> str:
        return "".join(f"**{p.line(self._status.run_id)}**\n\n" for p in self._status.paused)

    async def _run_budget(self, req: SwarmRequest) -> bool:
        """The run's cost budget before the next dispatch: under it (True), or paused at it and raised (True), or
        stopped or unanswered (False)."""
        budget = self._status.cost_budget_usd or req.config.swarm.cost_budget_usd  # (the status survives a CAN)
        spent = self._status.usage.cost_usd
        if budget is None or spent < budget:
            return True
        wait = req.config.swarm.budget_wait_s
        pause = BudgetPause(what="cost", spent=spent, budget=budget, since=workflow.now().isoformat(), wait_s=wait)
        if wait <= 0:
            return False
        self._run_answer = None
        self.lane_paused(pause)
        try:
            await workflow.wait_condition(lambda: self._run_answer is not None, timeout=timedelta(seconds=wait))
        except TimeoutError:
            pass
        self.lane_paused(pause.model_copy(update={"cleared": True}))
        new = raised(pause, self._run_answer) if self._run_answer is not None else None
        if new is None:
            self._status.warnings.append(f"the run's cost budget of {usd(budget)} is spent ({usd(spent)}); "
                                         "lanes not yet dispatched were cancelled")
            return False
        self._status.cost_budget_usd = new
        return True

