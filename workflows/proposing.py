"""The run's first phase when it has no lanes file: `proposing` (workflow code).

The propose_lanes activity surveys the base commit and asks the planner model for lanes (activities/proposing.py);
a proposal the guardrails refuse twice stops the run with its problems. Otherwise the run waits, durably and
holding no worker, for a person's `confirm_lanes` Update (or its Signal twin, which the Web UI can send): accept,
accept an edit (a lanes file's YAML with a `plan:` section, reposwarm/lanes/proposal_file.py), or stop. `auto_accept`
(run --yes) takes the proposal at once; `only` (run --write-lanes) ends the run with it. Once accepted, the run
goes on with the proposal's lanes, overlaps and profile in the configuration it was started with (a
configuration-only reposwarm.yaml's profiles, prices, delivery and defaults; its selected profile is the
proposal's, never replaced by a detected one) and the proposal's plan as round 1's: no second planning call.

An edit is read in the Update's validator (parsing YAML and the contracts is deterministic), so one that does
not even load is refused at once; the checks that need the commit's files (slices matching nothing, a test lane
without the lanes it tests) run in an activity after the Update is taken, and a failure there is the Update's
failure: the person hears the problems, and the run keeps waiting. A Signal's refusal is kept in the status's
ignored_signals, as review_signal's are.

Only requests that ask for a proposal (SwarmRequest.propose) take this path: histories of earlier runs replay
as they ran.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from temporalio import workflow
from temporalio.common import RawValue
from temporalio.exceptions import ApplicationError

with workflow.unsafe.imports_passed_through():
    from activities.proposing import check_proposal_edit, propose_lanes
    from reposwarm.contracts import (
        LaneProposal,
        LanesDecision,
        LanesReceipt,
        Phase,
        ProposalCheck,
        ProposeInput,
        SwarmRequest,
        SwarmResult,
        SwarmStatus,
    )
    from reposwarm.contracts.errors import ConfigError
    from reposwarm.lanes.proposal_file import accepted_config, configured_profile, edited, read_text
    from reposwarm.review.webui import md_escape
    from reposwarm.text import inert_line
    from workflows import options
    from workflows.review import conversion_problem


_T = TypeVar("_T")


def _held(value: _T | None, what: str) -> _T:
    """The run's own state as the phase left it: missing, an ApplicationError that ends the run and says so (an
    assert would fail the workflow task at every retry instead)."""
    if value is None:
        raise ApplicationError(f"the proposing phase lost {what}", non_retryable=True)
    return value


SHOWN_LANES = 12  # lanes named in the run's details (the Web UI); status and the CLI show all


class Proposals:
    """SwarmWorkflow's proposing phase and its handlers (a base class: Temporal finds inherited handlers)."""

    _status: SwarmStatus
    _memo_phase: Phase | None
    _phase: Callable[[Phase, str], None]
    # the decisions sent so far (each numbered as it arrives) and what became of each: None taken, else refused
    _lanes_sent: int = 0
    _lanes_pending: tuple[int, LanesDecision, LaneProposal | None, bool] | None = None  # (.., by a Signal)
    _lanes_answers: dict[int, list[str]] | None = None
    _lanes_taken: bool = False

    # --- the Update and its Signal twin ---

    def _lanes_refusal(self, decision: LanesDecision) -> tuple[str | None, LaneProposal | None]:
        """Why the run may not take this decision now (None when it may), and the edited proposal it carries."""
        proposal = self._status.proposal
        if self._status.phase != Phase.proposing or proposal is None or proposal.problems or self._lanes_taken:
            return (f"run {self._status.run_id} is not waiting for its lanes to be confirmed (phase: "
                    f"{self._status.phase.value})"), None
        if self._lanes_pending is not None:
            return "another answer to the proposal is being checked; send yours again once it is", None
        if not decision.lanes_yaml:
            return None, None
        if not decision.accept:
            return "an edited lanes file comes with accept: a stop takes none", None
        try:
            config, plan = read_text(decision.lanes_yaml)
        except ConfigError as err:
            return f"the edited lanes were refused: {err}", None
        return None, edited(proposal, config, plan)

    def _lanes_send(self, decision: LanesDecision, edit: LaneProposal | None, signal: bool = False) -> int:
        self._lanes_sent += 1
        self._lanes_pending = (self._lanes_sent, decision, edit, signal)
        return self._lanes_sent

    @workflow.update
    async def confirm_lanes(self, decision: LanesDecision) -> LanesReceipt:
        """Accept the proposal, accept an edit of it, or stop the run; an edit whose checks fail is refused with
        its problems, and the run keeps waiting."""
        why, edit = self._lanes_refusal(decision)
        if why is not None:  # (the validator said so already; a replay of an older answer lands here)
            raise ApplicationError(why, non_retryable=True)
        number = self._lanes_send(decision, edit)
        await workflow.wait_condition(lambda: number in (self._lanes_answers or {}))
        problems = (self._lanes_answers or {})[number]
        if problems:
            raise ApplicationError("the edited lanes were refused: " + "; ".join(problems), non_retryable=True)
        await workflow.wait_condition(lambda: self._status.phase != Phase.proposing)
        lanes = list(self._status.proposal.lanes) if self._status.proposal and decision.accept else []
        return LanesReceipt(run_id=self._status.run_id, accepted=decision.accept, lanes=lanes,
                            phase=self._status.phase)

    @confirm_lanes.validator
    def _validate_confirm_lanes(self, decision: LanesDecision) -> None:
        why, _ = self._lanes_refusal(decision)
        if why is not None:
            raise ApplicationError(why, non_retryable=True)

    @workflow.signal
    def confirm_lanes_signal(self, payload: RawValue) -> None:
        """The same answer as a Signal (the Web UI can send one); an invalid one is ignored with its reason.
        Raw, so that a payload which is not even a decision is recorded too."""
        try:
            decision = workflow.payload_converter().from_payload(payload.payload, LanesDecision)
        except Exception as err:  # anything a sender can put in a payload ends as a reason, never a failed task
            self._status.ignored_signals.append(f"confirm_lanes_signal: not a lanes decision: "
                                                f"{conversion_problem(err)}")
            return
        why, edit = self._lanes_refusal(decision)
        if why is not None:
            self._status.ignored_signals.append(f"confirm_lanes_signal: {inert_line(why)[:2000]}")
        else:
            self._lanes_send(decision, edit, signal=True)

    # --- the phase ---

    def _show_proposal(self, details: str) -> None:
        self._memo_phase = None  # the proposal is news even while the phase stays: the record must have it
        self._phase(Phase.proposing, details)

    async def _proposed(self, req: SwarmRequest) -> SwarmRequest | SwarmResult:
        """The run's lanes: proposed, then confirmed (the request to go on with: its configuration and round-1
        plan the proposal's), or the run's end (the proposal written, or stopped by a person)."""
        opts = _held(req.propose, "the request's proposal options")
        self._lanes_answers = {}
        self._phase(Phase.proposing, "surveying the repository and asking the planner for lanes")
        outcome = await workflow.execute_activity(
            propose_lanes, ProposeInput(run_id=req.run_id, repo_path=req.repo_path, base_sha=req.base_ref,
                                        task=req.task, model=req.model, max_lanes=opts.max_lanes,
                                        price=req.config.prices.get(req.model), record=req.record),
            **options.model(req.config.swarm.model_outage_s))
        self._status.usage = self._status.usage + outcome.usage
        proposal = outcome.proposal
        if (profile := configured_profile(req.config, req.test_profile)) is not None:
            # the repository's configuration has its checks: they are the run's, not the ones detected
            proposal = proposal.model_copy(update={"profile": profile})
        self._status.proposal = proposal
        if proposal.problems:
            raise ApplicationError(f"the planner's proposal of lanes was refused {proposal.attempts} times: "
                                   + "; ".join(proposal.problems), non_retryable=True)
        if opts.only:
            self._phase(Phase.planned, f"{len(proposal.lanes)} lanes proposed and written; nothing dispatched")
            return SwarmResult(run_id=req.run_id, rounds=0, usage=self._status.usage, plan=proposal.plan,
                               proposal=proposal)
        if opts.auto_accept:
            accept = True
            proposal = self._status.proposal = proposal.model_copy(update={"decided": "accepted at once (run --yes)"})
        else:
            accept = await self._confirmed(req, opts.max_lanes)
            proposal = self._status.proposal
        self._lanes_taken = True
        if not accept:
            self._phase(Phase.not_approved, f"the proposed lanes were {md_escape(proposal.decided)}: nothing "
                                            "dispatched")
            return SwarmResult(run_id=req.run_id, rounds=0, usage=self._status.usage, proposal=proposal)
        self._phase(Phase.preparing, f"{len(proposal.lanes)} lanes accepted: {md_escape(', '.join(proposal.lanes))}")
        return req.model_copy(update={"config": accepted_config(req.config, proposal), "plan": proposal.plan,
                                      "propose": None})

    async def _confirmed(self, req: SwarmRequest, max_lanes: int) -> bool:
        """Wait for a person's answer; an edit is checked against the commit's files first, and one that fails is
        refused (the Update fails with the problems; a Signal's are kept) while the run keeps waiting."""
        while True:
            proposal = _held(self._status.proposal, "its proposal")
            shown = ", ".join(f"{name} ({', '.join(role.allowed_paths)})"
                              for name, role in list(proposal.lanes.items())[:SHOWN_LANES])
            more = f" and {len(proposal.lanes) - SHOWN_LANES} more" if len(proposal.lanes) > SHOWN_LANES else ""
            self._show_proposal(f"waiting for a person to confirm {len(proposal.lanes)} proposed lanes: "
                                f"{md_escape(shown)}{more}. Answer with `reposwarm confirm {req.run_id}` "
                                "(--lanes FILE: an edit; --reject: stop)")
            await workflow.wait_condition(lambda: self._lanes_pending is not None)
            number, decision, edit, signal = _held(self._lanes_pending, "the answer it waited for")
            problems: list[str] = []
            if edit is not None:
                checked = await workflow.execute_activity(
                    check_proposal_edit, ProposalCheck(
                        run_id=req.run_id, repo_path=req.repo_path, base_sha=req.base_ref, task=req.task,
                        model=req.model, proposal=edit, max_lanes=max_lanes,
                        price=req.config.prices.get(req.model)), **options.GIT)
                problems, proposal = checked.problems, checked
            _held(self._lanes_answers, "its answers")[number] = problems
            self._lanes_pending = None
            if problems:  # (an Update's refusal goes back to its sender; a Signal's is kept)
                if signal:
                    self._status.ignored_signals.append(inert_line(
                        f"confirm_lanes_signal: the edited lanes were refused: {'; '.join(problems)}")[:2000])
                continue
            who = inert_line(decision.reviewer) or "a person"
            said = f": {inert_line(decision.comment)[:500]}" if decision.comment else ""
            self._status.proposal = proposal.model_copy(update={"decided": (
                f"{'accepted' if decision.accept else 'stopped'} by {who} at {workflow.now():%Y-%m-%d %H:%M:%S} UTC"
                f"{' (edited)' if edit is not None else ''}{said}")})
            return decision.accept

