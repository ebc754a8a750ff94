"""SwarmWorkflow: one change request, from plan to delivered branch.

prepare -> plan -> round (lanes in DAG order, <= max_parallel, each merged as
it finishes; then the gate) -> review (Update; Signal too) -> deliver, or on a
rejection plan again with the comment and go round again. The parts live
beside it: LaneScheduler (scheduler.py), MergeQueue (merging.py), Gate
(validation.py), the review package (review.py), activity options (options.py).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from datetime import timedelta

from temporalio import workflow
from temporalio.common import RawValue
from temporalio.exceptions import ActivityError, ApplicationError, ChildWorkflowError

with workflow.unsafe.imports_passed_through():
    from activities.delivery import deliver
    from activities.planning import plan_round
    from activities.publish import publish_review
    from activities.repo import prepare_run
    from reposwarm.agent.conversation import lane_opening
    from reposwarm.agent.estimate import estimate_lane
    from reposwarm.contracts import (
        DeliverInput,
        LaneResult,
        LaneState,
        Phase,
        Plan,
        PlanInput,
        PrepareInput,
        ProviderWait,
        PublishInput,
        ReviewDecision,
        ReviewPackage,
        ReviewReceipt,
        RoundRecord,
        SwarmRequest,
        SwarmResult,
        SwarmResume,
        SwarmStatus,
        TestReport,
        Verdict,
    )
    from reposwarm.review.webui import REPO_ATTR, STATUS_ATTR, md_escape, review_call
    from reposwarm.vcs.branches import delivered_branch
    from workflows import options
    from workflows.attributes import review_updates
    from workflows.budgets import Budgets
    from workflows.failures import root_cause
    from workflows.memo import REVIEW_MEMO, STATUS_MEMO, memo_package, memo_status
    from workflows.merging import MergeQueue
    from workflows.moving_base import BaseTracker
    from workflows.proposing import Proposals
    from workflows.review import approve_hint, decision_of, decision_refusal, end_round, review_package, reviewed
    from workflows.scheduler import LaneScheduler, WarmLanes, lane_task
    from workflows.validation import Gate, checks_line, repair_note

# the memo's field names and the search attributes (workflows/attributes.py), where clients look for them
__all__ = ["REPO_ATTR", "REVIEW_MEMO", "STATUS_ATTR", "STATUS_MEMO", "SwarmWorkflow"]


@dataclass
class Round:
    """What a round of lanes and checks came to, for its review."""

    results: dict[str, LaneResult]
    report: TestReport | None
    nothing_merged: bool


@workflow.defn
class SwarmWorkflow(Proposals, Budgets):
    @workflow.init
    def __init__(self, req: SwarmRequest) -> None:
        # Built from the request before any handler runs, so queries and updates always see a status.
        resume = req.resume
        self._status = resume.status if resume else SwarmStatus(
            run_id=req.run_id, repo_path=req.repo_path, task=req.task, phase=Phase.preparing, round=1)
        self._decision: ReviewDecision | None = None
        self._use_search_attributes = False
        self._registered = req.search_attributes  # the server's, as the client found them
        self._dispatches: dict[str, int] = dict(resume.dispatches) if resume else {}  # against max_helper_loops
        self._gate_state: Gate | None = None
        self._feedback: list[str] = list(resume.feedback) if resume else []  # the reviewers' comments so far
        self._reviewed_sha: str | None = resume.reviewed_sha if resume else None
        self._review_ref: str | None = resume.review_ref if resume else None
        self._roles = dict(req.config.swarm.lanes)  # what a reviewer's plan may name, and the slices it may narrow
        self._memo_phase: Phase | None = None
        self._base: BaseTracker | None = None
        self._warm = WarmLanes(run_id=req.run_id, started=set(resume.warm_lanes) if resume else set())
        self._waits: dict[str, ProviderWait] = {}  # model calls waiting for their provider, by agent
        self._details = ""
        self._record: RoundRecord | None = None

    # --- queries, the review Update and its Signal twin ---

    @workflow.query
    def status(self) -> SwarmStatus:
        return self._status

    def _refusal(self, decision: ReviewDecision) -> str | None:
        return decision_refusal(self._status, decision, self._roles, workflow.now(), self._decision is not None)

    @workflow.update
    async def review(self, decision: ReviewDecision) -> ReviewReceipt:
        round_no = self._status.round
        self._decision = decision
        await workflow.wait_condition(lambda: self._status.phase != Phase.review)
        return ReviewReceipt(run_id=self._status.run_id, round=round_no, approve=decision.approve,
                             phase=self._status.phase)

    @review.validator
    def _validate_review(self, decision: ReviewDecision) -> None:
        if (why := self._refusal(decision)) is not None:
            raise ApplicationError(why, non_retryable=True)

    @workflow.signal
    def provider_wait(self, wait: ProviderWait) -> None:
        """A model call waiting for its provider (or answered again): said once for the run (reposwarm/models/
        outage.py), in its status and its current details, not as a failure per lane."""
        if wait.cleared:
            self._waits.pop(wait.agent, None)
        else:
            self._waits[wait.agent] = wait
        waits = list(self._waits.values())
        if not waits:
            self._status.provider_wait = ""
        else:
            since = min(w.since for w in waits)
            providers = ", ".join(sorted({w.provider for w in waits}))
            self._status.provider_wait = (
                f"waiting for {providers} since {since[11:16]} UTC (retry {max(w.attempt for w in waits)}, next in "
                f"{min(w.next_retry_s for w in waits):.0f} s; {len(waits)} call(s) waiting): {waits[-1].error[:160]}")
        self._show()

    @workflow.signal
    def lane_done(self, result: LaneResult) -> None:
        """A warm lane's answer to its assignment (workflows/scheduler.py: WarmLanes)."""
        self._warm.done(result)

    @workflow.signal
    def review_signal(self, payload: RawValue) -> None:
        """The same decision as a Signal, which the Web UI can send; an invalid one is ignored with its reason.
        Raw, so that a payload which is not even a decision is recorded too (workflows/review.py decision_of)."""
        decision = decision_of(payload)
        why = decision if isinstance(decision, str) else self._refusal(decision)
        if why is not None:
            self._status.ignored_signals.append(why)
        elif not isinstance(decision, str):
            self._decision = decision

    # --- the run ---

    @workflow.run
    async def run(self, req: SwarmRequest) -> SwarmResult:
        try:
            result = await self._run(req)
        except (ActivityError, ChildWorkflowError, ApplicationError) as err:
            self._status.error = root_cause(err)
            self._phase(Phase.failed, f"failed: {md_escape(self._status.error)}")
            await self._warm.retire()
            raise
        await self._warm.retire()
        return result

    async def _run(self, req: SwarmRequest) -> SwarmResult:
        """The run's steps, round after round, to a delivered branch (or an end said in its status)."""
        self._use_search_attributes = bool(workflow.info().typed_search_attributes.get(REPO_ATTR))
        self._status.started_at = self._status.started_at or workflow.now().isoformat()
        self._status.base_branch = req.base_branch
        if req.propose is not None and req.resume is None:  # no lanes file: proposed, then confirmed (proposing.py)
            proposed = await self._proposed(req)
            if isinstance(proposed, SwarmResult):
                return proposed
            req, self._roles = proposed, dict(proposed.config.swarm.lanes)
        base_sha = await self._prepare(req)
        self._base = BaseTracker(req=req, status=self._status, start_sha=base_sha,
                                 head=(req.resume.base_head if req.resume else None) or base_sha)
        plan, rounds = req.resume.plan if req.resume else req.plan, req.config.swarm.max_review_rounds
        round_no = req.resume.next_round if req.resume else 1
        given = req.resume.next_plan if req.resume else req.plan  # a plan file, or a reviewer's plan
        while True:
            self._status.round = round_no
            planned = await self._plan(req, plan, round_no, given)
            if isinstance(planned, Plan):
                plan = planned
                if req.dry_run:
                    return self._dry_run(req, plan)
                outcome = await self._round(req, plan, round_no, base_sha)
                decision = await self._review(req, plan, base_sha, outcome)
            else:  # the planner failed after a rejection: the reviewed round goes back to review
                decision = await self._review_again(req, planned)
            if decision is None:
                self._phase(Phase.expired, "no review decision in time: nothing delivered, branches kept")
                return SwarmResult(run_id=req.run_id, expired=True, rounds=round_no, usage=self._status.usage)
            if decision.approve:
                return await self._deliver(req, plan)
            if req.auto_approve:  # unattended (trials): a red result ends the run, kept for scoring
                self._phase(Phase.not_approved, "automatic review: validation failed, nothing delivered")
                return SwarmResult(run_id=req.run_id, rounds=round_no, usage=self._status.usage,
                                   final_sha=self._status.integration_sha)
            self._feedback.append(decision.comment)
            given = decision.plan
            if round_no >= rounds:
                break
            round_no += 1
            if workflow.info().is_continue_as_new_suggested():
                await self._continue_as_new(req, base_sha, round_no, plan, given)
        raise ApplicationError(f"rejected {rounds} times; the review round limit is reached", non_retryable=True)

    # --- its steps ---

    async def _prepare(self, req: SwarmRequest) -> str:
        """The base commit: resolved, with the integration branch made on it (or carried from the last history)."""
        if req.resume is not None:
            self._restore_gate(req, req.resume)
            return req.resume.base_sha
        prep = await workflow.execute_activity(
            prepare_run, PrepareInput(run_id=req.run_id, repo_path=req.repo_path, base_ref=req.base_ref,
                                      swarm_branch=_swarm_branch(req), create_branch=not req.dry_run),
            **options.GIT)
        self._status.integration_branch = prep.integration_branch
        self._status.integration_sha = prep.base_sha
        self._status.lane_queue = prep.lane_queue
        return prep.base_sha

    async def _plan(self, req: SwarmRequest, plan: Plan | None, round_no: int, given: Plan | None) -> Plan | str:
        """The round's plan: the one given (a plan file in round 1, or a reviewer's with a rejection), else the
        model's. After a reviewed round, a planner that fails answers its reason instead: a rejection must never
        end the run, whose reviewed work stays approvable."""
        if given is not None:
            return given
        self._phase(Phase.planning, f"round {round_no}: planning")
        try:
            outcome = await workflow.execute_activity(
                plan_round,
                PlanInput(run_id=req.run_id, repo_path=req.repo_path, base_sha=self._status.integration_sha,
                          round=round_no, task=req.task, model=req.model, lanes=req.config.swarm.lanes,
                          feedback=self._feedback, previous_plan=plan, price=req.config.prices.get(req.model),
                          record=req.record, cache_ttl=req.config.swarm.cache_ttl),
                **options.model(req.config.swarm.model_outage_s))
        except ActivityError as err:
            if self._status.review is None or req.auto_approve:
                raise  # nothing reviewed yet to fall back to
            return root_cause(err)
        self._status.usage = self._status.usage + outcome.usage
        return outcome.plan

    async def _round(self, req: SwarmRequest, plan: Plan, round_no: int, base_sha: str) -> Round:
        """Lanes, merged as they finish; then the gate, sending failures back to the lanes that caused them."""
        round_start = self._status.integration_sha
        self._record = RoundRecord(round=round_no)
        self._status.rounds.append(self._record)
        self._status.lanes = [LaneState(lane=lp.lane, goal=lp.goal, attempt=0, agent=_agent_of(req, lp.lane))
                              for lp in plan.lanes]
        self._status.overlaps, self._status.resolutions, self._status.contract_flags = [], [], []
        queue = MergeQueue(req=req, plan=plan, round_no=round_no, status=self._status)
        gate = self._gate(req, base_sha)
        if gate is not None and round_no == 1:
            gate.start_baseline()
        goals = {lp.lane: lp.goal for lp in plan.lanes}
        results = await self._lanes(req, plan, round_no, queue, goals)
        if gate is not None:
            gate.results = results  # (repairs update it in place) their finish summaries may say why a test changed
        if gate is None:
            await self._refreshed(plan, round_no)
            return self._ended(Round(results=results, report=None,
                                     nothing_merged=self._status.integration_sha == round_start))
        report = await self._check(gate, round_no, f"running check profile {gate.profile_name!r}")
        while not report.passed:
            repairs = await gate.repairs(report, results, self._dispatches)
            if not repairs:
                break
            self._phase(Phase.running_lanes, f"round {round_no}: repairing {', '.join(repairs)}")
            results.update(await self._lanes(req, plan, round_no, queue,
                                             {lane: goals[lane] + repair_note(f) for lane, f in repairs.items()}))
            report = await self._check(gate, round_no, "checking again")
        if await self._refreshed(plan, round_no):
            report = await self._check(gate, round_no, "checking on the moved base")
        self._status.validations = list(gate.history)
        return self._ended(Round(results=results, report=report,
                                 nothing_merged=self._status.integration_sha == round_start))

    def _ended(self, outcome: Round) -> Round:
        end_round(self._record, self._status, outcome.nothing_merged)  # its merges (none once rolled back), rollbacks
        return outcome

    async def _lanes(self, req: SwarmRequest, plan: Plan, round_no: int, queue: MergeQueue,
                     goals: dict[str, str]) -> dict[str, LaneResult]:
        started, dispatched = workflow.now(), dict(self._dispatches)
        warm = req.config.swarm.warm_lanes
        if warm:
            self._warm.watch_s = req.config.swarm.host_timeout_s
        results = await LaneScheduler(
            req=req, plan=plan, round_no=round_no, status=self._status, queue=queue, dispatches=self._dispatches,
            feedback=self._feedback, progress=lambda details: self._phase(Phase.running_lanes, details),
            goals=goals, warm=self._warm if warm else None, gate=lambda: self._run_budget(req),
        ).run()
        if (record := self._record) is not None:
            record.lanes_s = round(record.lanes_s + (workflow.now() - started).total_seconds(), 3)
            for name, result in results.items():
                record.lane(name).add(result, self._dispatches.get(name, 0) - dispatched.get(name, 0))
        return results

    async def _check(self, gate: Gate, round_no: int, what: str) -> TestReport:
        self._phase(Phase.validating, f"round {round_no}: {what}")
        return await gate.check(round_no)

    async def _review(self, req: SwarmRequest, plan: Plan, base_sha: str, outcome: Round) -> ReviewDecision | None:
        """The round's package published, then the human gate; None when the review timeout passes first."""
        package = review_package(req, self._status, plan, base_sha, outcome.results, outcome.report, self._feedback)
        package.nothing_merged = outcome.nothing_merged
        package.base_moved = self._status.base_moved
        published = await workflow.execute_activity(
            publish_review, PublishInput(run_id=req.run_id, repo_path=req.repo_path, package=package,
                                         previous_sha=self._reviewed_sha), **options.GIT)
        package = reviewed(package, published, self._record)  # its diff, and the lanes the merged tree holds
        self._status.review, self._status.review_path = package, published.path
        self._review_ref, self._reviewed_sha = published.markdown_ref, package.integration_sha
        return await self._decide(req, package)

    async def _review_again(self, req: SwarmRequest, error: str) -> ReviewDecision | None:
        """The last reviewed round, back at review with the planner's failure said first."""
        why = f"planning round {self._status.round} failed: {error}"
        if self._status.review is None:  # _plan answers an error only after a reviewed round
            raise ApplicationError(why, non_retryable=True)
        self._status.review = self._status.review.model_copy(update={"planning_error": why})
        self._record = RoundRecord(round=self._status.round, planning_error=why)
        self._status.rounds.append(self._record)
        return await self._decide(req, self._status.review)

    async def _decide(self, req: SwarmRequest, package: ReviewPackage) -> ReviewDecision | None:
        self._memo_review(package)
        decision = await self._await_review(req, package.test_report)
        if decision is not None:
            self._status.decisions.append(decision)
            if self._record is not None:
                who = decision.reviewer or "a reviewer"
                self._record.decision = (f"approved by {who}" if decision.approve
                                         else f"rejected by {who}: {decision.comment}")
        return decision

    async def _await_review(self, req: SwarmRequest, report: TestReport | None) -> ReviewDecision | None:
        """Waiting holds no worker. Unattended runs (auto_approve) decide at once: approved when green."""
        self._decision = None
        stamp = dict(decided_at=workflow.now().isoformat(), round=self._status.round)
        nothing = self._status.review is not None and self._status.review.nothing_merged
        if req.auto_approve:
            # (unattended runs are trials: replayed commits change their tests on purpose, and the trial's score
            # runs the real commit's tests; lost and rewritten tests went back to their lanes first all the same)
            changed = report is not None and report.verdict_of == Verdict.passed_with_test_changes
            green = (report is None or report.passed or changed) and not nothing
            why = "nothing merged" if nothing else "validation failed"
            return ReviewDecision(approve=green, reviewer="auto", comment="" if green else why,
                                  accept_test_changes=changed, **stamp)
        checks = checks_line(report)
        if nothing:
            checks = "NOTHING MERGED: reject with a comment to plan again"
        if self._status.review is not None and self._status.review.planning_error:
            checks += f"; {self._status.review.planning_error}"
        self._phase(Phase.review, review_call(req.run_id, md_escape(checks), approve_hint(report)))
        timeout = req.config.swarm.review_timeout_s
        try:
            await workflow.wait_condition(lambda: self._decision is not None,
                                          timeout=timedelta(seconds=timeout) if timeout else None)
        except TimeoutError:
            return None
        decision = (self._decision or ReviewDecision(approve=False)).model_copy(
            update=dict(decided_at=workflow.now().isoformat(), round=self._status.round, not_after=""))
        self._phase(Phase.planning if not decision.approve else Phase.delivering,
                    f"{'approved' if decision.approve else 'rejected'} by {md_escape(decision.reviewer or 'a reviewer')}")
        return decision

    async def _refreshed(self, plan: Plan, round_no: int) -> bool:
        """The base's new commits merged into the integration branch (workflows/moving_base.py); True when it moved."""
        if self._base is None or not self._base.tracking:
            return False
        moved = await self._base.refresh(round_no, plan.interface_contract)
        if moved and self._gate_state is not None:  # (the checks judge against the base they merged)
            await self._gate_state.moved_base(self._base.head)
        return moved

    async def _deliver(self, req: SwarmRequest, plan: Plan | None) -> SwarmResult:
        branch = _swarm_branch(req)
        reviewed = self._status.integration_sha
        if plan is not None and await self._refreshed(plan, self._status.round):
            gate = self._gate_state
            report = await self._check(gate, self._status.round, "checking on the moved base before delivery") \
                if gate is not None else None
            if report is not None and not report.passed:
                self._status.integration_sha = reviewed
                self._status.base_moved += (f"; the refreshed tree failed its checks, so the reviewed state "
                                            f"{reviewed[:12]} is delivered: merge {req.base_branch} into it yourself")
        if self._gate_state is not None:  # (full_at: delivery: the tests the approved check did not run)
            await self._gate_state.before_delivery(self._status.round)
        self._phase(Phase.delivering, f"delivering {branch}")
        delivered = await workflow.execute_activity(
            deliver, DeliverInput(run_id=req.run_id, repo_path=req.repo_path,
                                  integration_sha=self._status.integration_sha, branch=branch,
                                  delivery=req.config.delivery, base_branch=req.base_branch,
                                  title=f"reposwarm: {req.task[:200]}", review_ref=self._review_ref),
            **options.DELIVER)
        self._status.delivered_branch = delivered.branch
        self._status.pull_request_url = delivered.pull_request_url
        where = f" and {delivered.pull_request_url}" if delivered.pull_request_url else ""
        self._phase(Phase.delivered, f"delivered `{delivered.branch}` in `{req.repo_path}`{where}")
        return SwarmResult(run_id=req.run_id, delivered_branch=delivered.branch,
                           delivered_sha=self._status.integration_sha, final_sha=self._status.integration_sha,
                           rounds=self._status.round, usage=self._status.usage,
                           pull_request_url=delivered.pull_request_url)

    def _dry_run(self, req: SwarmRequest, plan: Plan) -> SwarmResult:
        estimates = []
        for lp in plan.lanes:
            task = lane_task(req, plan, lp.lane, lp.goal, 1, self._status.integration_sha, self._feedback)
            estimates.append(estimate_lane(lp.lane, task.model, task.role, lane_opening(task),
                                           req.config.prices.get(task.model)))
        self._phase(Phase.planned, f"dry run: {len(estimates)} lanes planned, nothing dispatched")
        return SwarmResult(run_id=req.run_id, rounds=1, usage=self._status.usage, plan=plan, estimates=estimates)

    # --- continue-as-new between review rounds, and the gate it carries ---

    async def _continue_as_new(self, req: SwarmRequest, base_sha: str, next_round: int, plan: Plan | None,
                               next_plan: Plan | None) -> None:
        """A long review loop: the next round in a fresh history, carrying everything."""
        await workflow.wait_condition(workflow.all_handlers_finished)
        gate = self._gate_state
        baseline = await gate.baseline if gate is not None and gate.baseline is not None else None
        workflow.continue_as_new(req.model_copy(update={"resume": SwarmResume(
            status=self._status, base_sha=base_sha, next_round=next_round, plan=plan, feedback=self._feedback,
            reviewed_sha=self._reviewed_sha, review_ref=self._review_ref, dispatches=self._dispatches,
            next_plan=next_plan, base_head=self._base.head if self._base else None,
            warm_lanes=sorted(self._warm.started), baseline=baseline, last_green=gate.last_green if gate else None,
            consecutive_fails=gate.consecutive_fails if gate else 0, checks=gate.checks if gate else 0)}))

    def _restore_gate(self, req: SwarmRequest, resume: SwarmResume) -> None:
        gate = self._gate(req, resume.base_sha)
        if gate is None:
            return
        gate.last_green = resume.last_green or resume.base_sha
        gate.consecutive_fails, gate.checks = resume.consecutive_fails, resume.checks
        if resume.baseline is not None:
            gate.baseline = asyncio.get_running_loop().create_future()
            gate.baseline.set_result(resume.baseline)

    def _gate(self, req: SwarmRequest, base_sha: str) -> Gate | None:
        if self._gate_state is None:
            name = req.test_profile or req.config.validation.profile
            profile = req.config.validation.profiles.get(name)
            if profile is None:
                return None
            self._gate_state = Gate(req=req, status=self._status, profile_name=name, profile=profile,
                                    last_green=base_sha)
        return self._gate_state

    def _phase(self, phase: Phase, details: str) -> None:
        self._status.phase = phase
        lanes = "\n".join(f"- {s.lane}: {s.state}" + (f" ({s.turns} turns)" if s.turns else "")
                          for s in self._status.lanes)
        warnings = "".join(f"\n\n**Warning:** {md_escape(w)}" for w in self._status.warnings)
        head = f"**{phase.value}** (round {self._status.round}): {details}"
        if phase == Phase.review:  # what a person must act on comes first
            head = f"{details}\n\nround {self._status.round}"
        self._details = f"{head}{warnings}\n\n{lanes}"
        self._show()
        if self._use_search_attributes:
            workflow.upsert_search_attributes([STATUS_ATTR.value_set(phase.value),
                                               *review_updates(self._status, self._registered)])
        if phase != self._memo_phase:
            self._memo_status()

    def _show(self) -> None:
        """The run's current details (the Web UI's): budget pauses and a provider outage first, while they last."""
        waiting = f"**{md_escape(self._status.provider_wait)}**\n\n" if self._status.provider_wait else ""
        workflow.set_current_details(self._pause_lines() + waiting + self._details)

    # --- the run's record on the server (memo), for clients with no worker at hand (workflows/memo.py) ---

    def _memo_status(self) -> None:
        self._memo_phase = self._status.phase
        self._status.updated_at = workflow.now().isoformat()
        workflow.upsert_memo({STATUS_MEMO: memo_status(self._status)})

    def _memo_review(self, package: ReviewPackage) -> None:
        workflow.upsert_memo({REVIEW_MEMO: memo_package(package)})


def _swarm_branch(req: SwarmRequest) -> str:
    return delivered_branch(req.run_id, req.swarm_branch)


def _agent_of(req: SwarmRequest, lane: str) -> str:
    """Who does a lane's work, for the status ("" for the built-in loop, as status said before issue 47)."""
    role = req.config.swarm.lanes.get(lane)
    return role.agent_name if role is not None and role.agent_name != "builtin" else ""
