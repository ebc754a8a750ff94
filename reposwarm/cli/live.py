"""Following a run: `watch` and `run --wait`.

On a terminal, one live view redrawn in place (rich): a line for the phase, one row per lane with what it is doing
right now (model turn 4, run_checks for 12 s). Otherwise (a pipe, a log, CI) one line per change. Both end with
the next step.
"""

from __future__ import annotations

import asyncio
import sys
import time
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, TextIO

from temporalio.client import Client, WorkflowExecutionDescription
from temporalio.service import RPCError

from reposwarm.checks import verdicts
from reposwarm.cli.common import UserError, prog
from reposwarm.cli.run_state import QUERY_TIMEOUT_S, NoWorker, RunView, ended_at, view, worker_polling
from reposwarm.contracts import LanePhase, LaneState, Phase, SwarmStatus
from reposwarm.text import error_line, inert, inert_line

if TYPE_CHECKING:  # rich is imported where a terminal's view is drawn: status, and watch into a pipe, need none of it
    from rich.console import Group

PROGRESS_QUERY = "progress"  # LaneWorkflow.progress, named: workflows/lane.py brings every activity's module

TICK_S = 1.0
BUSY_MAX_S = 600  # a worker of this host that polls and has not answered for this long: said, and the wait ends


def age(seconds: float) -> str:
    seconds = int(seconds)
    return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m" if seconds >= 3600 else f"{seconds // 60}m{seconds % 60:02d}s"


def lane_workflow_id(run_id: str, lane: LaneState, round_no: int) -> str:
    return f"{run_id}.{lane.lane}.r{round_no}" + (f".a{lane.attempt}" if lane.attempt > 1 else "")


async def with_lane_progress(client: Client, status: SwarmStatus) -> None:
    """Running lanes' live progress (turns, tokens, current step), asked of the lanes themselves."""
    async def one(lane: LaneState) -> None:
        try:
            wid = lane.workflow_id or lane_workflow_id(status.run_id, lane, status.round)
            live = await client.get_workflow_handle(wid).query(PROGRESS_QUERY, result_type=LaneState)
        except RPCError:
            return
        lane.turns, lane.tool_calls, lane.tokens, lane.cost_usd = live.turns, live.tool_calls, live.tokens, \
            live.cost_usd
        lane.step, lane.step_since, lane.cache_read_tokens = live.step, live.step_since, live.cache_read_tokens
        if live.state == LanePhase.paused:  # at its budget, waiting for a person (the run's status says how)
            lane.state, lane.reason = live.state, live.reason

    await asyncio.gather(*(one(lane) for lane in status.lanes if lane.state == "running"))


def step_text(lane: LaneState, now: float) -> str:
    if lane.state != "running":
        return error_line(lane.reason, 60)  # a lane's words (and paths it chose), or a provider's page: one line
    if not lane.step:
        return ""
    since = f" for {int(now - lane.step_since)} s" if lane.step_since and now - lane.step_since >= 2 else ""
    return f"{inert_line(lane.step)}{since}"


def headline(v: RunView) -> str:
    s = v.status
    elapsed = (ended_at(v.description) - v.description.start_time).total_seconds()
    return f"{s.run_id}  {s.phase.value}  round {s.round}  {age(elapsed)}"


def table(v: RunView, notes: list[str]) -> Group:
    from rich.console import Group
    from rich.table import Table
    from rich.text import Text

    now = datetime.now(UTC).timestamp()
    rows = Table(box=None, pad_edge=False, show_edge=False)
    for column, justify in (("lane", "left"), ("state", "left"), ("now", "left"), ("turns", "right"),
                            ("tools", "right"), ("tokens", "right")):
        rows.add_column(column, justify=justify)  # type: ignore[arg-type]
    for lane in v.status.lanes:
        # Text, not markup: a lane's step is no place for rich's [link=...] either
        agent = f" ({lane.agent})" if lane.agent and lane.agent != "builtin" else ""  # an outside agent's lane
        rows.add_row(lane.lane + agent, str(lane.state), Text(step_text(lane, now)), str(lane.turns),
                     str(lane.tool_calls), f"{lane.tokens:,}")
    parts: list[Any] = [Text(headline(v), style="bold")]
    if v.status.provider_wait:
        parts.append(Text(f"  {error_line(v.status.provider_wait, 400)}", style="yellow"))
    parts += [Text(f"  {p.line(v.run_id)}", style="yellow") for p in v.status.paused]
    parts += [Text(f"  {inert_line(note)}", style="dim") for note in notes]
    parts.append(rows)
    return Group(*parts)


def line(v: RunView) -> str:
    """The run in one line; a change in it is worth a new line."""
    lanes = "  ".join(f"{lane.lane}" + (f"[{lane.agent}]" if lane.agent and lane.agent != "builtin" else "")
                      + f":{lane.state}" + (f"({lane.step})" if lane.state == "running" and lane.step else "")
                      for lane in v.status.lanes)
    waiting = f"  ({error_line(v.status.provider_wait.split(';')[0])})" if v.status.provider_wait else ""
    paused = "".join(f"  ({p.line(v.run_id)})" for p in v.status.paused)
    return inert(f"[{v.status.phase.value} r{v.status.round}] {lanes}{waiting}{paused}".rstrip())


def next_step(v: RunView) -> str:
    run = v.run_id
    if v.closed:
        return f"{run}: {v.ending}"
    if v.status.phase == Phase.review:
        # the gate's verdict first, in the words status and the review use (reposwarm/checks/verdicts.py)
        report = v.status.test_report
        checks = f"checks: {verdicts.summary(report)}\n" if report is not None else ""
        return (f"{checks}waiting for review: {prog()} review {run}, then {prog()} approve {run} "
                f"or {prog()} reject {run} --comment TEXT")
    if proposal_ready(v.status):
        return (f"waiting for its lanes to be confirmed ({prog()} status {run} shows them): {prog()} confirm {run} "
                f"accepts them, {prog()} confirm {run} --lanes FILE an edit of them, {prog()} confirm {run} "
                "--reject stops the run")
    return f"{run}: {v.status.phase.value}"


def proposal_ready(status: SwarmStatus) -> bool:
    """A run in its first phase, with no lanes file, whose proposed lanes wait for a person (workflows/proposing.py)."""
    return status.phase == Phase.proposing and status.proposal is not None and not status.proposal.problems


async def progress_notes(client: Client, desc: WorkflowExecutionDescription) -> list[str]:
    """What the run's own activities last said of their progress (their heartbeat details): "indexing the
    repository: 4,000 of 20,272 new files parsed", so a long step shows it is moving."""
    notes = []
    for pending in desc.raw_description.pending_activities:
        if not pending.heartbeat_details.payloads:
            continue
        try:
            details = await client.data_converter.decode(pending.heartbeat_details.payloads)
        except Exception:  # noqa: BLE001 - progress is a courtesy; an odd payload must not stop the watch
            continue
        if details and isinstance(details[0], str):
            notes.append(f"{pending.activity_type.name}: {details[0]}")
    return notes


async def follow(client: Client, run_id: str, *, until_review: bool, out: TextIO | None = None) -> RunView:
    """Show the run until it waits for review (when `until_review`) or ends. A run no worker moves is said in
    one line (NoWorker) within about QUERY_TIMEOUT_S, never waited on in silence. A worker process of this host
    that still polls but has not answered in time is busy, not gone: said once, and waited for (BUSY_MAX_S)."""
    out = out or sys.stdout
    unanswered_since: float | None = None
    said_busy = False
    last = ""
    live = None
    if out.isatty():
        from rich.console import Console
        from rich.live import Live

        live = Live(console=Console(file=out), auto_refresh=False, transient=False)
    try:
        if live is not None:
            live.start()
        while True:
            asked = time.monotonic()
            v = await view(client, run_id)
            done = v.closed or (until_review and (v.status.phase == Phase.review or proposal_ready(v.status)))
            if not v.live and not done:
                unanswered_since = unanswered_since or asked
                waited = time.monotonic() - unanswered_since
                if not await worker_polling(client, v.queue):
                    raise NoWorker(v.queue, f"run {run_id} is not moving (it is at phase {v.status.phase.value})")
                if waited >= QUERY_TIMEOUT_S:
                    # (a worker process of this host that still polls is busy, not gone: a loaded machine, a long
                    # replay. Giving up on it made `try` stop its own worker in the middle of a validation.)
                    from reposwarm.cli.local import busy_here

                    pid = await busy_here(client, v.queue)
                    if pid is None:
                        raise NoWorker(v.queue, f"run {run_id} is not moving (it is at phase {v.status.phase.value})")
                    if waited >= BUSY_MAX_S:
                        raise UserError(f"the worker (pid {pid}) polls task queue {v.queue!r} but has not answered "
                                        f"for run {run_id} in {waited:.0f} s (it is at phase "
                                        f"{v.status.phase.value}): see its log")
                    if not said_busy:
                        said_busy = True
                        print(f"the worker (pid {pid}, this host) polls but has not answered in {waited:.0f} s: it is "
                              "busy; following the run's record on the server until it answers", file=sys.stderr,
                              flush=True)
            else:
                unanswered_since = None
            if v.live:
                await with_lane_progress(client, v.status)
            if live is not None:
                live.update(table(v, await progress_notes(client, v.description)), refresh=True)
            elif (now := line(v)) != last:
                print(f"{datetime.now():%H:%M:%S} {now}", file=out, flush=True)
                last = now
            if done:
                return v
            await asyncio.sleep(TICK_S)
    finally:
        if live is not None:
            live.stop()
