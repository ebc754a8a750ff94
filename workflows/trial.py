"""TrialWorkflow: a batch of trials, each a whole swarm run on a commit's parent, scored against the commit.

Trials run as child SwarmWorkflows, several at once up to a limit, approved
automatically when green. A trial that fails is scored as failed and the
others go on. The batch is durable: killed midway, it resumes without running
a finished trial again.

A trial cannot read its answer: each has a clone of its own holding its base
commit's history alone, and the oracle and the scoring read the gold commit
from the user's repository, in the worker. Each task is vetted first
(vet_trial): a commit whose tests do not pass on it, or do not fail on its
base, is a bad task, scored as such with no swarm run. Each trial's run carries
the search attributes the server has (RepoSwarmKind `trial` among them), so the
Web UI's saved views tell trials from the runs a person reviews
(workflows/attributes.py).
"""

from __future__ import annotations

import asyncio
from datetime import timedelta

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ChildWorkflowError, WorkflowAlreadyStartedError

with workflow.unsafe.imports_passed_through():
    from activities.trials import prepare_trial_clone, score_trial, vet_trial
    from reposwarm.contracts import (
        Phase,
        ScoreInput,
        SwarmRequest,
        SwarmResult,
        TrialBatchRequest,
        TrialBatchResult,
        TrialCloneInput,
        TrialScore,
        TrialSpec,
        TrialVetInput,
    )
    from reposwarm.contracts.config import CheckProfile
    from reposwarm.review.webui import TRIAL
    from workflows import options
    from workflows.attributes import start_attributes
    from workflows.failures import root_cause
    from workflows.swarm import SwarmWorkflow

def vetting(profile: CheckProfile | None) -> dict:
    """Vetting a task: the profile on the commit and on its base, each failing command run twice at most."""
    return dict(start_to_close_timeout=timedelta(seconds=(profile.timeout_s if profile else 0) * 4 + 300),
                heartbeat_timeout=options.HEARTBEAT, retry_policy=RetryPolicy(maximum_attempts=3))


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
        slots = asyncio.Semaphore(req.max_parallel)

        async def one(spec: TrialSpec) -> None:
            async with slots:
                self._scores.append(await self._trial(req, spec))
                workflow.set_current_details(f"{len(self._scores)} of {self._total} trials scored")

        await asyncio.gather(*(one(spec) for spec in req.trials))
        order = {spec.sha: i for i, spec in enumerate(req.trials)}
        return TrialBatchResult(batch_id=req.batch_id, scores=sorted(self._scores, key=lambda s: order[s.sha]))

    async def _trial(self, req: TrialBatchRequest, spec: TrialSpec) -> TrialScore:
        run_id = f"{req.batch_id}-{spec.sha[:10]}"
        profile = req.config.validation.profiles.get(req.config.validation.profile)
        vetted = await workflow.execute_activity(
            vet_trial, TrialVetInput(repo_path=req.repo_path, spec=spec, profile=profile), **vetting(profile))
        if not vetted.ok:  # the task cannot judge a swarm: none runs, and it counts in no score
            return await workflow.execute_activity(
                score_trial, ScoreInput(batch_id=req.batch_id, clone_path="", spec=spec, run_id=run_id,
                                        result_sha=None, profile=profile, repo_path=req.repo_path,
                                        bad_reason=vetted.reason),
                **options.scoring(profile))
        clone = (await workflow.execute_activity(
            prepare_trial_clone, TrialCloneInput(batch_id=req.batch_id, repo_path=req.repo_path, sha=spec.sha,
                                                 base=spec.parent),
            **options.TRIAL_CLONE)).path
        # the oracle (a model in the worker, never in a lane) reads the answer where the lanes cannot
        model = f"oracle:{req.repo_path}#{spec.sha}" + (
            f"?{req.oracle_options}" if req.oracle_options else "") if req.model == "oracle" else req.model
        swarm = SwarmRequest(run_id=run_id, repo_path=clone, task=spec.message, config=req.config, model=model,
                             base_ref=spec.parent, swarm_branch=f"trial/{run_id}", auto_approve=True)
        result: SwarmResult | None = None
        failure = ""
        try:
            attributes = start_attributes(req.search_attributes, repo=clone, phase=Phase.preparing.value, kind=TRIAL,
                                          task=spec.message)
            result = await workflow.execute_child_workflow(SwarmWorkflow.run, swarm, id=run_id,
                                                           search_attributes=attributes)
        except (ChildWorkflowError, WorkflowAlreadyStartedError) as err:  # a failed trial is a score, not the end
            failure = root_cause(err)
        return await workflow.execute_activity(
            score_trial,
            ScoreInput(batch_id=req.batch_id, clone_path=clone, spec=spec, run_id=run_id,
                       result_sha=result.final_sha if result and result.final_sha else None,
                       failure=failure or ("not approved: validation failed" if result and not result.delivered_sha
                                           else ""), profile=profile,
                       repo_path=req.repo_path),
            **options.scoring(profile))
