"""Durability under real faults: processes SIGKILLed mid-run, and the run must still deliver the same tree.

Each scenario is one swarm run (tests/faults_helpers.py): a worker in its own process (`python worker.py`,
its own task queue and REPOSWARM_HOME), the model a fake OpenAI-wire server taking 0.4 s per request, a
planner call (no --plan), three lanes (web and docs depend on api), a run_checks tool call, real check
commands, validation, review approved by the test, delivery. The reference runs undisturbed; each fault run
SIGKILLs something at one moment, detected from what the run does (a request reaching the model server, a
check command starting, the merge's git step, the ledger, the review phase):

  (a) planning      the worker, during the planner's model call
  (b) lane_turn     the worker, during lane api's second model turn
      lane_steps    ... during lane web's third model turn, which the activity of its second asked by itself
                    (patch turns-in-activity: web's second turn only wrote a file): the retried activity
                    must reuse the second turn's reply and its write's record, and ask only the third again
  (c) tool_call     the worker, during lane api's run_checks tool (its check command sleeps 1 s)
      quick_tool    ... just after lane api's edit_file, a local activity, ledgered its call, while the
                    workflow task that ran it is still open (20 quick reads follow it in the same turn): the
                    task is lost with the worker, and the replay runs the edit again, which must land once
  (d) merge         the worker, during merge_lane of api (the first lane to finish), inside `git merge-tree`
      merge_committed   ... just after merge_lane moved the integration branch, before the activity completed
  (e) validation    the worker, during the validation command (it sleeps 2 s on the merged tree)
  (f) review        the worker, while the run waits for review
  (g) server        the Temporal dev server (SQLite, WAL), while lanes web and docs run; restarted on the same
                    file and port 3 s later (server_long: during lane api's model call, down 20 s)

then starts a new worker process (same home, same queue), or the server again, and compares with the
reference:

- the same delivered tree (no edit lost, none doubled);
- the same model requests, per (agent, round, turn), each exactly once, except a request in flight at the
  kill, which may come twice (with the same body): no completed model call is made again;
- at least once, without a trace: the killed step was redone (attempt 2) and ledgered once; the ledger has
  no duplicate key and the same events as the reference; no checkpoint commit is duplicated (no commit
  whose tree is its parent's; the same commits as the reference);
- the same findings: the review package's contract flags and each merge's files in the ledger;
- the run completes within RECOVERY_LIMIT_S (180 s) of the kill.

Each test prints one line per scenario (pytest -s): seconds from the kill to the new process being ready,
to the next ledger event, and to the run's completion, and what Temporal had pending; the module ends with
all of them as a summary.

The scenarios run concurrently (each with its own processes): recoveries are bounded by activity timeouts
(a dead worker's activity is retried when its heartbeat timeout, 6 s, expires), so the file takes about as
long as the slowest scenario, not their sum. A run that misses RECOVERY_LIMIT_S fails with RecoveryTimeout,
naming what Temporal still waits for; FAULTS_WAIT_S=420 (with --timeout 1000) makes every scenario wait that
long instead, to see whether such a run still ends right once its activity timeouts expire.

Run: .venv/bin/python -m pytest tests/test_faults.py -q -s -p no:cacheprovider -m faults
"""

from __future__ import annotations

import asyncio
import re
from collections import Counter

import pytest
import pytest_asyncio
from temporalio.client import Client

from tests.faults_helpers import (
    RECOVERY_LIMIT_S,
    SERVER_DOWN_S,
    LedgerGap,
    Outcome,
    RecoveryTimeout,
    run_scenario,
)
from tests.helpers import git

pytestmark = pytest.mark.faults

SUMMARY: list[str] = []


class RepeatedCall(AssertionError):
    """A model call that its worker completed was made again."""


class IncompleteRetry(AssertionError):
    """A retried activity returned or recorded less than its first attempt would have."""


class OrphanedCheck(AssertionError):
    """A check command of a killed worker went on running."""


# The ledger event the killed activity writes when it ends, (event, lane/agent, call id or label): written only
# by the retry, since the kill came first.
RETRIED = {
    "planning": ("model_call", "planner", "planner-r1-t0"),
    "lane_turn": ("model_call", "api", "api-r1-t1"),
    "lane_steps": ("model_call", "web", "web-r1-t2"),
    "tool_call": ("tool_call", "api", "api_3"),
    "merge": ("merge", "api", ""),
    "merge_committed": ("merge", "api", ""),
    "validation": ("validation", "", "round 1 check 1"),
}


# Which scenarios a test needs besides its own `fault` parameter (the reference is always run).
NEEDS = {"test_check_commands_do_not_outlive_their_killed_worker": ("tool_call", "validation")}


class Campaign:
    """Every selected scenario, started at once on the session's event loop; a test awaits the ones it judges."""

    def __init__(self) -> None:
        self.outcomes: dict[str | None, Outcome] = {}
        self.tasks: dict[str | None, asyncio.Task[Outcome]] = {}

    async def get(self, fault: str | None) -> Outcome:
        out = self.outcomes[fault]
        try:
            await asyncio.shield(self.tasks[fault])
        finally:
            line = f"[faults] {out.summary()}"
            if line not in SUMMARY:
                SUMMARY.append(line)
                print(f"\n{line}", flush=True)
        return out


@pytest_asyncio.fixture(scope="module")
async def campaign(request: pytest.FixtureRequest, client: Client, tmp_path_factory: pytest.TempPathFactory):
    wanted: set[str | None] = {None}
    for item in request.session.items:
        if getattr(item, "module", None) is not request.module:
            continue
        params = getattr(getattr(item, "callspec", None), "params", {})
        wanted |= {params["fault"]} if "fault" in params else set(NEEDS.get(getattr(item, "originalname", ""), ()))
    address = client.service_client.config.target_host
    mp = pytest.MonkeyPatch()
    camp = Campaign()
    for fault in sorted(wanted, key=lambda f: (f is not None, f or "")):
        out = camp.outcomes[fault] = Outcome(fault=fault, tmp=tmp_path_factory.mktemp(f"fault-{fault or 'reference'}"))
        camp.tasks[fault] = asyncio.create_task(run_scenario(out, client, address, mp), name=f"fault-{fault}")
    yield camp
    for task in camp.tasks.values():  # a test deselected or interrupted: no need to wait for its scenario
        task.cancel()
    await asyncio.gather(*camp.tasks.values(), return_exceptions=True)
    mp.undo()
    print("\n[faults] summary, times from the kill:\n" + "\n".join(SUMMARY), flush=True)


# --- the checks every fault run must pass ---


def request_counts(out: Outcome) -> Counter[tuple[str, int, int]]:
    return Counter(c.key for c in out.calls)


def ledger_signature(out: Outcome) -> tuple[Counter[tuple[str, str, str]], set[str]]:
    """What the ledger says happened, without times, shas or attempts: events per lane/agent and call or label."""
    events: Counter[tuple[str, str, str]] = Counter()
    for e in out.ledger:
        if e["event"] != "model_call":  # a model call's every attempt is a line of its own
            who, ident = e.get("lane") or e.get("agent") or "", str(e.get("call_id") or e.get("label") or "")
            events[(e["event"], who, ident)] += 1
    return events, {e["call_id"] for e in out.ledger if e["event"] == "model_call"}


def check_at_least_once_left_no_trace(out: Outcome, ref: Outcome) -> None:
    entries = out.ledger  # every line parses (a half-written line would not)
    dup = [k for k, n in Counter(e["key"] for e in entries).items() if n > 1]
    assert not dup, f"duplicate ledger keys: {dup}"
    (events, calls), (ref_events, ref_calls) = ledger_signature(out), ledger_signature(ref)
    # (the difference itself, both ways: a whole signature printed by pytest is cut before it shows)
    assert (events, calls) == (ref_events, ref_calls), (
        f"the ledger differs from the reference's: only here {dict(events - ref_events)} {calls - ref_calls}, "
        f"only in the reference {dict(ref_events - events)} {ref_calls - calls}")
    for c in out.commits:
        if len(c["parents"]) == 1:
            assert c["tree"] != c["parent_trees"][0], \
                f"commit {c['sha'][:12]} repeats its parent's tree (a checkpoint made twice): {c['message']}"
    assert sorted(c["message"] for c in out.commits) == sorted(c["message"] for c in ref.commits), \
        "the delivered history's commits differ from the reference's (a checkpoint or merge lost or doubled)"
    checkpoints = Counter(c["message"].split(":")[0] for c in out.commits if "checkpoint after turn" in c["message"])
    assert all(n == 1 for n in checkpoints.values()), checkpoints


def check_against_reference(out: Outcome, ref: Outcome) -> None:
    assert out.delivered_tree == ref.delivered_tree, "the delivered tree differs from the reference's"
    counts, expected = request_counts(out), request_counts(ref)
    assert set(counts) == set(expected), f"model requests differ: {sorted(set(counts) ^ set(expected))}"
    repeated = {k: n for k, n in counts.items() if n > 1}
    assert all(n <= 2 for n in repeated.values()), f"a model request came more than twice: {repeated}"
    completed = sorted(set(repeated) - out.in_flight_at_kill)
    assert not completed, f"completed model calls were made again: {completed} (in flight at the kill: " \
                          f"{sorted(out.in_flight_at_kill)})"
    for key in repeated:  # a retried call asks exactly what the first attempt asked
        bodies = {c.raw for c in out.calls if c.key == key}
        assert len(bodies) == 1, f"the retried request {key} differs from the first"
    check_at_least_once_left_no_trace(out, ref)
    assert out.next_ledger_event_at is not None and out.completed_at is not None


def check_retried(out: Outcome) -> None:
    """The killed step really was redone by the new worker (a second attempt), and ledgered once."""
    if out.fault not in RETRIED:
        return
    event, who, ident = RETRIED[out.fault]
    lines = [e for e in out.ledger if e["event"] == event and (e.get("lane") or e.get("agent") or "") == who
             and str(e.get("call_id") or e.get("label") or "") == ident]
    if not lines:
        raise LedgerGap(f"no {event} line for {who} {ident} in the ledger, though the run completed")
    assert [e["attempt"] for e in lines] == [2], lines
    if out.fault == "tool_call":
        assert sum(1 for m in out.marks if re.match(r"start \d+ api ", m)) == 2  # the check ran again
    if out.fault == "validation":
        assert sum(1 for m in out.marks if re.match(r"start \d+ validate ", m)) == 2


def check_same_findings(out: Outcome, ref: Outcome) -> None:
    """What the run found out on the way is what the reference found: the review's contract flags, and each
    merge's files in the ledger (a retried merge must report the merge its first attempt made)."""
    def merges(o: Outcome) -> dict[str, list[str]]:
        return {e["lane"]: e.get("files") for e in o.ledger if e["event"] == "merge"}

    if out.review.get("contract_flags") != ref.review.get("contract_flags") or merges(out) != merges(ref):
        raise IncompleteRetry(
            f"{out.fault}: contract flags {out.review.get('contract_flags')} and merged files {merges(out)}; "
            f"the reference has {ref.review.get('contract_flags')} and {merges(ref)}")


def check_in_time(out: Outcome) -> None:
    assert out.recovery_s is not None
    if out.recovery_s > RECOVERY_LIMIT_S:
        raise RecoveryTimeout(f"{out.fault}: the run ended right, but {out.recovery_s}s after the kill")


# --- the tests ---


async def test_reference_run_undisturbed(campaign: Campaign) -> None:
    ref = await campaign.get(None)
    assert ref.result is not None and ref.repo is not None
    assert request_counts(ref) == Counter({("planner", 1, 0): 1, ("api", 1, 0): 1, ("api", 1, 1): 1, ("api", 1, 2): 1,
                                           ("web", 1, 0): 1, ("web", 1, 1): 1, ("web", 1, 2): 1,
                                           ("docs", 1, 0): 1, ("docs", 1, 1): 1})
    branch = ref.result.delivered_branch
    assert git(ref.repo, "show", f"{branch}:api/app.py") == "VERSION = 1  # the API's version\nNAME = 'swarm'"
    assert git(ref.repo, "show", f"{branch}:web/client.js") == "export const name = 'swarm';"
    assert git(ref.repo, "show", f"{branch}:docs/name.md") == "The name is `swarm`."
    events = Counter(e["event"] for e in ref.ledger)
    assert events["helper_spawn"] == 3 and events["merge"] == 3 and events["validation"] == 2, events
    assert sum(1 for m in ref.marks if re.match(r"start \d+ api ", m)) == 1  # run_checks ran once, in lane api
    check_at_least_once_left_no_trace(ref, ref)
    assert [f for f in ref.review["contract_flags"] if "VERSION" in f] == [
        "api changed the contract's VERSION in api/app.py (was: VERSION = 1)"], ref.review["contract_flags"]


@pytest.mark.parametrize("fault", [
    "planning",  # (a) the planner's model call in flight
    "lane_turn",  # (b) lane api's second model turn in flight
    "lane_steps",  # (b') lane web's third turn in flight, asked by the activity of its second
    "tool_call",  # (c) lane api's run_checks tool running its ~1 s check command
    "quick_tool",  # (c') lane api's edit_file, a local activity, just done, its workflow task still open
    "merge",  # (d) merge_lane of api, the first lane to finish, inside `git merge-tree`
    "merge_committed",  # (d') ... just after merge_lane moved the integration branch, before it completed
    "validation",  # (e) the ~2 s validation command running on the merged tree
    "review",  # (f) the run waiting for review
])
async def test_worker_sigkilled_then_replaced(campaign: Campaign, fault: str) -> None:
    ref = await campaign.get(None)
    out = await campaign.get(fault)
    assert out.killed_at is not None and out.completed_at is not None
    if fault.startswith("merge"):  # the ledger at the kill: api had finished (its last turn), nothing merged yet
        assert any(e["event"] == "model_call" and e.get("call_id") == "api-r1-t2" for e in out.ledger_at_kill)
        assert not any(e["event"] == "merge" for e in out.ledger_at_kill)
    if fault == "review":
        assert not out.pending_at_kill
    if fault == "quick_tool":  # the kill landed while the edit's turn was being carried out: it was carried out
        # again, either as the workflow task that ran the edit as local activities (replayed), or, where the turn
        # runs its quick calls itself (patch tools-in-turn), as the model turn's activity run again (its reply
        # reused, the edit's exactly-once record kept)
        again = [(e.get("outcome"), e.get("attempt")) for e in out.ledger
                 if e["event"] == "model_call" and e.get("call_id") == "api-r1-t1"]
        assert out.lost_workflow_tasks or any(outcome == "reused" and (attempt or 1) > 1 for outcome, attempt in again), \
            f"the kill came after the edit's turn was done (widen QUICK_READS): {again}"
    if fault == "lane_steps":  # the killed activity had answered web's second turn: its retry reused that reply
        second = [(e.get("outcome"), e.get("attempt")) for e in out.ledger
                  if e["event"] == "model_call" and e.get("call_id") == "web-r1-t1"]
        assert ("reused", 2) in second, f"web's third turn was not asked by its second turn's activity: {second}"
    check_retried(out)
    check_against_reference(out, ref)
    check_same_findings(out, ref)
    check_in_time(out)


@pytest.mark.parametrize("fault", ["server", "server_long"])
async def test_dev_server_sigkilled_and_restarted_on_its_database(campaign: Campaign, fault: str) -> None:
    """(g) The Temporal dev server (SQLite file, WAL) SIGKILLed while lanes web and docs run (lane web's model
    call in flight), restarted on the same file and port 3 s later; the worker process lives on and the run
    completes with nothing done twice. server_long: killed during lane api's model call and down for 20 s,
    longer than the SDK retries the turn's completion: the turn runs again, and must reuse the reply the worker
    had received rather than ask the model again."""
    ref = await campaign.get(None)
    out = await campaign.get(fault)
    assert out.killed_at is not None and out.completed_at is not None
    assert fault in SERVER_DOWN_S
    if fault == "server_long":  # the turn did run again (a shorter outage lets its first attempt complete)
        turn = [(e.get("outcome"), e.get("attempt")) for e in out.ledger
                if e["event"] == "model_call" and e.get("call_id") == "api-r1-t1"]
        assert ("reused", 2) in turn, turn
    again = [k for k, n in request_counts(out).items() if n > 1]
    if again:  # the worker lived through it: it had no reason to ask anything twice
        raise RepeatedCall(f"model calls made twice though no worker died: {again}")
    check_against_reference(out, ref)
    check_same_findings(out, ref)
    check_in_time(out)


async def test_check_commands_do_not_outlive_their_killed_worker(campaign: Campaign) -> None:
    """A check command running when its worker is SIGKILLed must die with it: left running, it would race the
    retried activity's own run of the same checks in the same worktree (validation `git clean -fdx`es it)."""
    for fault, where in (("tool_call", "api"), ("validation", "validate")):
        out = await campaign.get(fault)
        assert out.killed_at is not None
        marks = [m.split() for m in out.marks]
        # (the marks' times are rounded to the millisecond, and the kill comes within one of the start mark)
        killed = {pid for what, pid, at, ts in marks
                  if what == "start" and at == where and float(ts) <= out.killed_at + 0.01}
        assert killed, f"{fault}: no check command was running at the kill"
        survived = {pid for what, pid, at, ts in marks
                    if what == "end" and pid in killed and float(ts) > out.killed_at + 0.01}
        if survived:
            raise OrphanedCheck(f"{fault}: the check command(s) {sorted(survived)} of the killed worker ran to their "
                                f"end after the kill")

