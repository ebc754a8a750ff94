"""TrialWorkflow: a batch of trials, each a whole swarm run on a commit's parent, scored against the commit.

Trials run as child SwarmWorkflows, several at once up to a limit, approved
automatically when green. A trial that fails is scored as failed and the
others go on. The batch is durable: killed midway, it resumes without running
a finished trial again.
"""

from __future__ import annotations

import asyncio

from temporalio import workflow
from temporalio.exceptions import ChildWorkflowError, WorkflowAlreadyStartedError

with workflow.unsafe.imports_passed_through():
    from activities.trials import prepare_trial_clone, score_trial
    from reposwarm.contracts import (
        ScoreInput,
        SwarmRequest,
        SwarmResult,
        TrialBatchRequest,
        TrialBatchResult,
        TrialCloneInput,
        TrialScore,
        TrialSpec,
    )
    from workflows import options
    from workflows.failures import root_cause
    from workflows.swarm import SwarmWorkflow


@workflow.defn
class TrialWorkflow:
    def __init__(self) -> None:
        self._scores: list[TrialScore] = []
        self._total = 0

    @workflow.query
    def scores(self) -> TrialBatchResult:
        return TrialBatchResult(batch_id=workflow.info().workflow_id, scores=self._scores)

    @workflow.run
    async def run(self, req: TrialBatchRequest) -> TrialBatchResult:
        self._total = len(req.trials)
        clone = (await workflow.execute_activity(
            prepare_trial_clone, TrialCloneInput(batch_id=req.batch_id, repo_path=req.repo_path),
            **options.TRIAL_CLONE)).path
        slots = asyncio.Semaphore(req.max_parallel)

        async def one(spec: TrialSpec) -> None:
            async with slots:
                self._scores.append(await self._trial(req, clone, spec))
                workflow.set_current_details(f"{len(self._scores)} of {self._total} trials scored")

        await asyncio.gather(*(one(spec) for spec in req.trials))
        order = {spec.sha: i for i, spec in enumerate(req.trials)}
        return TrialBatchResult(batch_id=req.batch_id, scores=sorted(self._scores, key=lambda s: order[s.sha]))

    async def _trial(self, req: TrialBatchRequest, clone: str, spec: TrialSpec) -> TrialScore:
        run_id = f"{req.batch_id}-{spec.sha[:10]}"
        model = f"oracle:{clone}#{spec.sha}" + (f"?{req.oracle_options}" if req.oracle_options else "") \
            if req.model == "oracle" else req.model
        swarm = SwarmRequest(run_id=run_id, repo_path=clone, task=spec.message, config=req.config, model=model,
                             base_ref=spec.parent, swarm_branch=f"trial/{run_id}", auto_approve=True)
        result: SwarmResult | None = None
        failure = ""
        try:
            result = await workflow.execute_child_workflow(SwarmWorkflow.run, swarm, id=run_id)
        except (ChildWorkflowError, WorkflowAlreadyStartedError) as err:  # a failed trial is a score, not the end
            failure = root_cause(err)
        profile = req.config.validation.profiles.get(req.config.validation.profile)
        return await workflow.execute_activity(
            score_trial,
            ScoreInput(batch_id=req.batch_id, clone_path=clone, spec=spec, run_id=run_id,
                       result_sha=result.final_sha if result and result.final_sha else None,
                       failure=failure or ("not approved: validation failed" if result and not result.delivered_sha
                                           else ""), profile=profile),
            **options.scoring(profile))
