"""Planning a check (issue 37): which commands and tests of the profile it runs, in how many parts (shards), from
the changes since the commit it is judged against (reposwarm/checks/selection/plans.py). The parts then run as `validate`
activities, in parallel, on any worker host."""

from __future__ import annotations

import asyncio

from temporalio import activity

from activities.repo import synced
from activities.validate import checkout
from reposwarm.checks.selection import baselines, plans
from reposwarm.contracts import CheckPlan, PlanCheckInput
from reposwarm.runs import ledger
from reposwarm.runs.store import run_dir


@activity.defn
async def plan_check(req: PlanCheckInput) -> CheckPlan:
    """The parts a check of `req.ref` runs, decided on a checkout of it (the one its first part then reuses)."""
    repo = await asyncio.to_thread(synced, req.repo_path, req.run_id)
    path = run_dir(req.run_id) / "validate"
    await asyncio.to_thread(checkout, str(repo.path), path, req.ref)
    env = baselines.environment(req.profile)
    made = await asyncio.to_thread(lambda: plans.plan(path, req.ref, req.since, req.profile, req.scope,
                                                      lambda argv: baselines.last_durations(argv, env),
                                                      single=req.single))
    ledger.record_activity(req.run_id, "check_plan", ref=req.ref, since=req.since, scope=req.scope,
                           parts=len(made.parts), said=made.label,
                           changed=made.changed_count, fallback=made.fallback,
                           skipped=made.parts[0].skipped if made.parts else [])
    return made
