"""`budget RUN [--lane L] --raise 2x | --add-usd 5 | --add-tokens N | --stop`: answer a lane (or the run) paused at
its budget (workflows/budgets.py), from any machine that reaches the Temporal server.

The answer is the run's `budget` Update; the run forwards a lane's to the lane, which goes on where it stopped (a
raise) or ends as budget_exhausted with its work kept (a stop). `status` and `watch` show what is paused and how
to answer; with no answer in swarm.budget_wait_s, a paused lane ends as budget_exhausted on its own.
"""

from __future__ import annotations

import argparse
import re

from reposwarm.cli.common import UserError, client_or_die, prog
from reposwarm.cli.run_state import NoWorker, send_update, view, worker_polling
from reposwarm.contracts import BudgetChange
from reposwarm.contracts.cost import change_problem, usd

_FACTOR = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*[xX]?\s*$")


def factor(text: str) -> float:
    """`2x`, `1.5`, `3X`: a factor above 1."""
    match = _FACTOR.match(text)
    value = float(match.group(1)) if match else 0.0
    if not 1 < value <= 100:
        raise UserError(f"--raise {text}: give a factor above 1 and at most 100, like 2x or 1.5")
    return value


def change_of(args: argparse.Namespace) -> BudgetChange:
    from reposwarm.cli.runs import reviewer_name

    change = BudgetChange(lane=args.lane or "", raise_factor=factor(args.raise_by) if args.raise_by else None,
                          add_usd=args.add_usd, add_tokens=args.add_tokens, stop=args.stop, by=reviewer_name())
    if (why := change_problem(change)) is not None:
        raise UserError(why)
    return change


async def cmd_budget(args: argparse.Namespace) -> int:
    for name, value in (("--add-usd", args.add_usd), ("--add-tokens", args.add_tokens)):
        if value is not None and value <= 0:
            raise UserError(f"{name} {value}: give a positive amount")
    change = change_of(args)
    client = await client_or_die()
    v = await view(client, args.run)  # live: the pause is in the run's state (its memo keeps phases only)
    if v.closed:
        raise UserError(f"run {args.run} has ended ({v.ending}): there is no budget to answer")
    paused = {p.lane: p for p in v.status.paused}
    who = f"lane {change.lane}" if change.lane else "the run"
    if change.lane not in paused:
        names = ", ".join(f"lane {p}" if p else "the run" for p in paused) or "nothing"
        raise UserError(f"{who} is not paused at its budget (paused: {names}); {prog()} status {args.run} shows it")
    if not await worker_polling(client, v.queue):
        raise NoWorker(v.queue, "the answer was not sent")
    from reposwarm.cli.runs import swarm_workflow

    wf = swarm_workflow()
    receipt = await send_update(client.get_workflow_handle_for(wf.run, args.run), wf.budget, change,
                                word="the answer", taken="waiting for the run to pass it on ...")
    if receipt.stopped:
        print(f"stopped {who} of run {args.run} at its budget: it ends as budget_exhausted, its work kept")
    else:
        amount = usd(receipt.budget) if receipt.what == "cost" else f"{receipt.budget:,.0f} billed tokens"
        print(f"raised the budget of {who} of run {args.run} to {amount}: it goes on where it stopped")
    return 0
