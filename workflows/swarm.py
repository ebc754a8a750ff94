"""SwarmWorkflow: one change request, from plan to delivered branch.

prepare -> plan -> lanes (children, DAG order, <= max_parallel) -> merge each
as it finishes -> validate -> review (Update; Signal too) -> deliver, or on a
rejection plan again with the comment and go round again.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta

from temporalio import workflow
from temporalio.common import RetryPolicy, SearchAttributeKey, SearchAttributePair, TypedSearchAttributes
from temporalio.exceptions import ApplicationError

with workflow.unsafe.imports_passed_through():
    from activities.delivery import deliver
    from activities.model import plan_round
    from activities.publish import publish_review
    from activities.repo import prepare_run
    from reposwarm.agent.estimate import estimate_lane
    from reposwarm.agent.prompts import lane_first_message
    from reposwarm.branches import lane_branch
    from reposwarm.contracts import (
        ChangeSet,
        DeliverInput,
        HelperTask,
        LaneResult,
        LaneReview,
        LaneState,
        LaneStatus,
        Phase,
        Plan,
        PlanInput,
        PrepareInput,
        PublishInput,
        ReviewDecision,
        ReviewPackage,
        ReviewReceipt,
        SwarmRequest,
        SwarmResult,
        SwarmResume,
        SwarmStatus,
        TestReport,
        Usage,
    )
    from workflows import GIT, root_cause, short_reason
    from workflows.lane import LaneWorkflow
    from workflows.merging import MergeQueue
    from workflows.validation import Gate, repair_note

REPO_ATTR = SearchAttributeKey.for_keyword("RepoSwarmRepo")
STATUS_ATTR = SearchAttributeKey.for_keyword("RepoSwarmStatus")


def search_attributes(repo_path: str, phase: str) -> TypedSearchAttributes:
    return TypedSearchAttributes([SearchAttributePair(REPO_ATTR, repo_path), SearchAttributePair(STATUS_ATTR, phase)])


@workflow.defn
class SwarmWorkflow:
    @workflow.init
    def __init__(self, req: SwarmRequest) -> None:
        # Built from the request before any handler runs, so queries and updates always see a status.
        self._status = req.resume.status if req.resume else SwarmStatus(
            run_id=req.run_id, repo_path=req.repo_path, task=req.task, phase=Phase.preparing, round=1)
        self._decision: ReviewDecision | None = None
        self._use_search_attributes = False
        self._dispatches: dict[str, int] = dict(req.resume.dispatches) if req.resume else {}  # MAX_HELPER_LOOPS
        self._gate_state: Gate | None = None
        self._feedback: list[str] = []

    # --- queries, the review Update and its Signal twin ---

    @workflow.query
    def status(self) -> SwarmStatus:
        return self._status

    def _refusal(self, decision: ReviewDecision) -> str | None:
        if self._status.phase != Phase.review:
            return f"the run is not waiting for review (phase: {self._status.phase.value})"
        if self._decision is not None:
            return f"round {self._status.round} already has a decision"
        if not decision.approve and not decision.comment.strip():
            return "a rejection needs a comment: it becomes the next plan's input"
        if decision.approve and self._status.review is not None and self._status.review.nothing_merged:
            return ("nothing was merged in this round, so there is nothing to approve; reject with a comment "
                    "to plan again")
        return None

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
    def review_signal(self, decision: ReviewDecision) -> None:
        """The same decision as a Signal, which the Web UI can send; an invalid one is ignored with its reason."""
        if (why := self._refusal(decision)) is not None:
            self._status.ignored_signals.append(why)
            return
        self._decision = decision

    # --- the run ---

    @workflow.run
    async def run(self, req: SwarmRequest) -> SwarmResult:
        swarm_branch = req.swarm_branch or f"swarm/{req.run_id}"
        try:
            self._use_search_attributes = bool(workflow.info().typed_search_attributes.get(REPO_ATTR))
            resume = req.resume
            if resume is None:
                prep = await workflow.execute_activity(
                    prepare_run, PrepareInput(run_id=req.run_id, repo_path=req.repo_path, base_ref=req.base_ref,
                                              swarm_branch=swarm_branch, create_branch=not req.dry_run), **GIT)
                self._status.integration_branch = prep.integration_branch
                self._status.integration_sha = base_sha = prep.base_sha
            else:
                base_sha = resume.base_sha
                self._restore_gate(req, resume)
            plan = resume.plan if resume else req.plan
            feedback: list[str] = list(resume.feedback) if resume else []
            reviewed_sha: str | None = resume.reviewed_sha if resume else None
            review_ref: str | None = resume.review_ref if resume else None
            rounds = req.config.swarm.max_review_rounds
            for round_no in range(resume.next_round if resume else 1, rounds + 1):
                self._status.round = round_no
                if plan is None or round_no > 1:
                    self._phase(Phase.planning, f"round {round_no}: planning")
                    planner = req.model
                    outcome = await workflow.execute_activity(
                        plan_round,
                        PlanInput(run_id=req.run_id, repo_path=req.repo_path, base_sha=self._status.integration_sha,
                                  round=round_no, task=req.task, model=planner, lanes=req.config.swarm.lanes,
                                  feedback=feedback, previous_plan=plan, price=req.config.prices.get(planner),
                                  record=req.record),
                        start_to_close_timeout=timedelta(minutes=10), heartbeat_timeout=timedelta(seconds=30),
                        retry_policy=RetryPolicy(initial_interval=timedelta(seconds=2), maximum_attempts=6),
                    )
                    plan = outcome.plan
                    self._status.usage = self._status.usage + outcome.usage
                if req.dry_run:
                    return self._dry_run(req, plan)
                self._feedback = list(feedback)
                round_start = self._status.integration_sha
                results, report = await self._round(req, plan, round_no, base_sha)
                package = self._package(req, plan, round_no, base_sha, results, report, feedback)
                package.nothing_merged = self._status.integration_sha == round_start
                published = await workflow.execute_activity(
                    publish_review, PublishInput(run_id=req.run_id, repo_path=req.repo_path, package=package,
                                                 previous_sha=reviewed_sha), **GIT)
                package.since_last_round = published.since_last_round
                self._status.review, self._status.review_path = package, published.path
                review_ref, reviewed_sha = published.markdown_ref, package.integration_sha
                decision = await self._await_review(req, report)
                if decision is None:
                    self._phase(Phase.expired, "no review decision in time: nothing delivered, branches kept")
                    return SwarmResult(run_id=req.run_id, expired=True, rounds=round_no, usage=self._status.usage)
                self._status.decisions.append(decision)
                if decision.approve:
                    break
                if req.auto_approve:  # unattended (trials): a red result ends the run, kept for scoring
                    self._phase(Phase.not_approved, "automatic review: validation failed, nothing delivered")
                    return SwarmResult(run_id=req.run_id, rounds=round_no, usage=self._status.usage,
                                       final_sha=self._status.integration_sha)
                feedback.append(decision.comment)
                if workflow.info().is_continue_as_new_suggested() and round_no < rounds:
                    # A long review loop: start the next round in a fresh history, carrying everything.
                    await workflow.wait_condition(workflow.all_handlers_finished)
                    workflow.continue_as_new(req.model_copy(update={"resume": await self._carry(
                        base_sha, round_no + 1, plan, feedback, reviewed_sha, review_ref)}))
            else:
                raise ApplicationError(f"rejected {rounds} times; the review round limit is reached",
                                       non_retryable=True)

            self._phase(Phase.delivering, f"delivering {swarm_branch}")
            delivered = await workflow.execute_activity(
                deliver, DeliverInput(run_id=req.run_id, repo_path=req.repo_path,
                                      integration_sha=self._status.integration_sha, branch=swarm_branch,
                                      delivery=req.config.delivery, base_branch=req.base_branch,
                                      title=f"reposwarm: {req.task[:200]}", review_ref=review_ref),
                start_to_close_timeout=timedelta(minutes=5), heartbeat_timeout=timedelta(seconds=30),
                retry_policy=RetryPolicy(maximum_attempts=5, initial_interval=timedelta(seconds=2)))
            self._status.delivered_branch = delivered.branch
            self._status.pull_request_url = delivered.pull_request_url
            where = f" and {delivered.pull_request_url}" if delivered.pull_request_url else ""
            self._phase(Phase.delivered, f"delivered **{delivered.branch}** in `{req.repo_path}`{where}")
            return SwarmResult(run_id=req.run_id, delivered_branch=delivered.branch,
                               delivered_sha=self._status.integration_sha, final_sha=self._status.integration_sha,
                               rounds=self._status.round,
                               usage=self._status.usage, pull_request_url=delivered.pull_request_url)
        except Exception as err:
            self._status.error = root_cause(err)
            self._phase(Phase.failed, f"failed: {self._status.error}")
            raise

    async def _carry(self, base_sha: str, next_round: int, plan: Plan | None, feedback: list[str],
                     reviewed_sha: str | None, review_ref: str | None) -> SwarmResume:
        gate = self._gate_state
        baseline = await gate.baseline if gate is not None and gate.baseline is not None else None
        return SwarmResume(status=self._status, base_sha=base_sha, next_round=next_round, plan=plan,
                           feedback=feedback, reviewed_sha=reviewed_sha, review_ref=review_ref,
                           dispatches=self._dispatches, baseline=baseline,
                           last_green=gate.last_green if gate else None,
                           consecutive_fails=gate.consecutive_fails if gate else 0, checks=gate.checks if gate else 0)

    def _restore_gate(self, req: SwarmRequest, resume: SwarmResume) -> None:
        gate = self._gate(req, resume.base_sha)
        if gate is None:
            return
        gate.last_green = resume.last_green or resume.base_sha
        gate.consecutive_fails, gate.checks = resume.consecutive_fails, resume.checks
        if resume.baseline is not None:
            gate.baseline = asyncio.get_running_loop().create_future()
            gate.baseline.set_result(resume.baseline)

    def _dry_run(self, req: SwarmRequest, plan: Plan) -> SwarmResult:
        estimates = []
        for lp in plan.lanes:
            task = self._helper_task(req, lp.lane, lp.goal, plan, 1)
            estimates.append(estimate_lane(lp.lane, task.model, task.role, lane_first_message(task),
                                           req.config.prices.get(task.model)))
        self._phase(Phase.planned, f"dry run: {len(estimates)} lanes planned, nothing dispatched")
        return SwarmResult(run_id=req.run_id, rounds=1, usage=self._status.usage, plan=plan, estimates=estimates)

    def _phase(self, phase: Phase, details: str) -> None:
        self._status.phase = phase
        lanes = "\n".join(f"- {s.lane}: {s.state}" + (f" ({s.turns} turns)" if s.turns else "")
                          for s in self._status.lanes)
        warnings = "".join(f"\n\n**Warning:** {w}" for w in self._status.warnings)
        workflow.set_current_details(
            f"**{phase.value}** (round {self._status.round}): {details}{warnings}\n\n{lanes}")
        if self._use_search_attributes:
            workflow.upsert_search_attributes([STATUS_ATTR.value_set(phase.value)])

    async def _round(self, req: SwarmRequest, plan: Plan, round_no: int,
                     base_sha: str) -> tuple[dict[str, LaneResult], TestReport | None]:
        """Lanes, merged as they finish; then the gate, sending failures back to the lanes that caused them."""
        self._status.lanes = [LaneState(lane=lp.lane, goal=lp.goal, attempt=0) for lp in plan.lanes]
        self._status.overlaps, self._status.resolutions, self._status.contract_flags = [], [], []
        queue = MergeQueue(req=req, plan=plan, round_no=round_no, status=self._status)
        gate = self._gate(req, base_sha)
        if gate is not None and round_no == 1:
            gate.start_baseline()
        results = await self._run_lanes(req, plan, round_no, {lp.lane: lp.goal for lp in plan.lanes}, queue)
        if gate is None:
            return results, None
        self._phase(Phase.validating, f"round {round_no}: running check profile {gate.profile_name!r}")
        report = await gate.check(round_no)
        while not report.passed:
            if gate.exhausted:
                await gate.rollback()
                if req.config.swarm.on_red == "fail":
                    raise ApplicationError(f"validation failed {gate.consecutive_fails} times in a row; rolled back "
                                           f"to {gate.last_green[:12]}", non_retryable=True)
                break
            touched = {lane: [e.path for e in r.changeset.edits] for lane, r in results.items()}
            blamed = await gate.blame(report, touched)
            loops = req.config.swarm.max_helper_loops
            repairs = {lane: failures for lane, failures in blamed.items() if self._dispatches.get(lane, 0) < loops}
            if not repairs:
                gate.history.append("no lane left to repair within MAX_HELPER_LOOPS: going to review as it is")
                break
            goals = {lp.lane: lp.goal for lp in plan.lanes}
            self._phase(Phase.running_lanes, f"round {round_no}: repairing {', '.join(repairs)}")
            repaired = await self._run_lanes(
                req, plan, round_no, {lane: goals[lane] + repair_note(f) for lane, f in repairs.items()}, queue)
            results.update(repaired)
            self._phase(Phase.validating, f"round {round_no}: checking again")
            report = await gate.check(round_no)
        self._status.validations = list(gate.history)
        return results, report

    def _gate(self, req: SwarmRequest, base_sha: str) -> Gate | None:
        if self._gate_state is None:
            name = req.test_profile or req.config.validation.profile
            profile = req.config.validation.profiles.get(name)
            if profile is None:
                return None
            self._gate_state = Gate(req=req, status=self._status, profile_name=name, profile=profile,
                                    last_green=base_sha)
        return self._gate_state

    async def _run_lanes(self, req: SwarmRequest, plan: Plan, round_no: int, goals: dict[str, str],
                         queue: MergeQueue) -> dict[str, LaneResult]:
        """Start lanes whose dependencies are merged, at most max_parallel at once; merge each as it ends."""
        roles = req.config.swarm.lanes
        states = {s.lane: s for s in self._status.lanes}
        redo: dict[str, str] = {}  # lane -> the conflict note for its next dispatch
        waiting = list(goals)
        running: dict[str, asyncio.Task[LaneResult]] = {}
        results: dict[str, LaneResult] = {}
        merged: set[str] = set()
        self._phase(Phase.running_lanes, f"round {round_no}: {len(waiting)} lanes")

        while waiting or running:
            for name in list(waiting):
                deps = [d for d in roles[name].depends_on if d in goals]
                blocked = [d for d in deps if d in results and d not in merged]
                if blocked:
                    waiting.remove(name)
                    states[name].state = "cancelled"
                    states[name].reason = f"dependency {', '.join(blocked)} did not merge"
                    results[name] = LaneResult(lane=name, status=LaneStatus.cancelled, reason=states[name].reason,
                                               changeset=ChangeSet(task_id=f"{req.run_id}.{name}.r{round_no}"))
                    continue
                if len(running) >= req.config.swarm.max_parallel or not all(d in merged for d in deps):
                    continue
                waiting.remove(name)
                if self._dispatches.get(name, 0) >= req.config.swarm.max_helper_loops:
                    states[name].state = "cancelled"
                    states[name].reason = (f"dispatched {self._dispatches[name]} times already "
                                           f"(MAX_HELPER_LOOPS={req.config.swarm.max_helper_loops})")
                    results[name] = LaneResult(lane=name, status=LaneStatus.cancelled, reason=states[name].reason,
                                               changeset=ChangeSet(task_id=f"{req.run_id}.{name}.r{round_no}"))
                    continue
                self._dispatches[name] = self._dispatches.get(name, 0) + 1
                states[name].state = "running"
                states[name].attempt += 1
                task = self._helper_task(req, name, goals[name] + redo.pop(name, ""), plan, round_no,
                                         attempt=states[name].attempt)
                running[name] = asyncio.create_task(self._lane(task))
            if not running:
                continue
            await workflow.wait(list(running.values()), return_when=asyncio.FIRST_COMPLETED)
            for name in [n for n in list(running) if running[n].done()]:
                result = running.pop(name).result()
                results[name] = result
                state = states[name]
                state.state, state.reason = result.status.value, result.reason
                state.turns, state.tool_calls = result.turns, result.tool_calls
                state.tokens, state.cost_usd = result.usage.total_tokens, result.usage.cost_usd
                self._status.usage = self._status.usage + result.usage
                if result.status in (LaneStatus.done, LaneStatus.budget_exhausted):
                    queue.note_overlaps(name, result)
                    landing = await queue.land(name, result)
                    if landing.merged:
                        merged.add(name)
                        state.state = "merged" if result.status == LaneStatus.done else "merged (budget exhausted)"
                    elif self._dispatches.get(name, 0) < req.config.swarm.max_helper_loops:
                        redo[name] = landing.redo_note
                        results.pop(name)  # not settled yet: its dependents keep waiting
                        waiting.insert(0, name)
                        state.state = "redo after conflict"
                    else:
                        state.state = "conflict"
                        state.reason = "unresolved conflict; its branch is kept for review"
                self._status.first_pass_merge_rate = queue.rate()
                self._phase(Phase.running_lanes, f"round {round_no}: {len(merged)}/{len(goals)} lanes merged")
        return results

    async def _lane(self, task: HelperTask) -> LaneResult:
        try:
            return await workflow.execute_child_workflow(LaneWorkflow.run, task, id=task.task_id)
        except Exception as err:
            return LaneResult(lane=task.lane, status=LaneStatus.failed, reason=short_reason(err),
                              changeset=ChangeSet(task_id=task.task_id))

    def _helper_task(self, req: SwarmRequest, name: str, goal: str, plan: Plan, round_no: int,
                     attempt: int = 1) -> HelperTask:
        role = req.config.swarm.lanes[name]
        profile_name = req.test_profile or req.config.validation.profile
        narrowed = next((lp.allowed_paths for lp in plan.lanes if lp.lane == name and lp.allowed_paths), None)
        return HelperTask(
            task_id=f"{req.run_id}.{name}.r{round_no}" + (f".a{attempt}" if attempt > 1 else ""),
            feedback=list(self._feedback),
            run_id=req.run_id, repo_path=req.repo_path, lane=name, round=round_no, attempt=attempt, role=role, goal=goal, task=req.task, interface_contract=plan.interface_contract,
            allowed_paths=narrowed or role.allowed_paths, read_only_paths=role.read_only_paths,
            branch=lane_branch(req.run_id, name), base_sha=self._status.integration_sha,
            model=role.model or req.model, max_loops=req.config.swarm.max_helper_loops,
            checkpoint_key=f"{req.run_id}/{name}/r{round_no}",
            price=req.config.prices.get(role.model or req.model), record=req.record, sparse=req.config.swarm.sparse,
            host_timeout_s=req.config.swarm.host_timeout_s,
            check_profiles=req.config.validation.profiles, default_profile=profile_name,
        )

    def _package(self, req: SwarmRequest, plan: Plan, round_no: int, base_sha: str, results: dict[str, LaneResult],
                 report: TestReport | None, feedback: list[str]) -> ReviewPackage:
        goals = {lp.lane: lp.goal for lp in plan.lanes}
        lanes = [
            LaneReview(lane=name, goal=goals[name], status=r.status, reason=r.reason, summary=r.changeset.summary,
                       assumptions=r.changeset.assumptions, edits=r.changeset.edits, diff_stat=r.changeset.diff_stat,
                       usage=r.usage, turns=r.turns, tool_calls=r.tool_calls, refusals=r.refusals,
                       elapsed_s=r.elapsed_s)
            for name, r in results.items()
        ]
        conflicts = [f"{name}: {', '.join(r.changeset.conflicts)} (branch {lane_branch(req.run_id, name)} kept)"
                     for name, r in results.items() if r.changeset.conflicts]
        if report is not None and report.unsandboxed:
            warning = ("checks ran UNSANDBOXED (REPOSWARM_SANDBOX=off on the worker): code the lanes wrote ran "
                       "with the worker's own powers")
            if warning not in self._status.warnings:
                self._status.warnings.append(warning)
        return ReviewPackage(run_id=req.run_id, round=round_no, task=req.task, repo_path=req.repo_path,
                             warnings=list(self._status.warnings),
                             base_sha=base_sha, integration_sha=self._status.integration_sha, plan=plan, lanes=lanes,
                             test_report=report, conflicts=conflicts, resolutions=list(self._status.resolutions),
                             overlaps=list(self._status.overlaps), contract_flags=list(self._status.contract_flags),
                             first_pass_merge_rate=self._status.first_pass_merge_rate,
                             validations=list(self._status.validations),
                             usage=sum((r.usage for r in results.values()), Usage()),
                             previous_comments=list(feedback), ui_url=req.ui_url)

    async def _await_review(self, req: SwarmRequest, report: TestReport | None) -> ReviewDecision | None:
        """The human gate. Waiting holds no worker; None when the review timeout passes first."""
        self._decision = None
        stamp = dict(decided_at=workflow.now().isoformat(), round=self._status.round)
        nothing = self._status.review is not None and self._status.review.nothing_merged
        if req.auto_approve:
            green = (report is None or report.passed) and not nothing
            why = "nothing merged" if nothing else "validation failed"
            return ReviewDecision(approve=green, reviewer="auto", comment="" if green else why, **stamp)
        checks = "no checks configured" if report is None else ("checks passed" if report.passed else "checks FAILED")
        if nothing:
            checks = "NOTHING MERGED: reject with a comment to plan again"
        self._phase(Phase.review, f"waiting for a reviewer ({checks}); approve or reject with starter.py")
        timeout = req.config.swarm.review_timeout_s
        try:
            await workflow.wait_condition(lambda: self._decision is not None,
                                          timeout=timedelta(seconds=timeout) if timeout else None)
        except TimeoutError:
            return None
        decision = (self._decision or ReviewDecision(approve=False)).model_copy(
            update=dict(decided_at=workflow.now().isoformat(), round=self._status.round))
        self._phase(Phase.planning if not decision.approve else Phase.delivering,
                    f"{'approved' if decision.approve else 'rejected'} by {decision.reviewer or 'a reviewer'}")
        return decision
