"""Temporal workflows: they decide; activities do.

- swarm.py: SwarmWorkflow, one change request's spine (prepare, plan, round, review, deliver)
- scheduler.py: LaneScheduler, one round's lanes in DAG order within max_parallel and the dispatch budget
- merging.py: MergeQueue, each finished lane into the integration branch (the converger on a conflict)
- validation.py: Gate, the check profile on the merged tree, blame, repairs, rollback
- review.py: the review package of a round
- lane.py: LaneWorkflow, one lane's agent loop
- trial.py: TrialWorkflow, a batch of trials
- options.py: every activity's timeouts, heartbeats and retry policies
- failures.py: failures as one line a person reads

No module here imports one that does I/O, but for the activity functions it schedules (passed through).
"""
