"""Checks at monorepo scale (issue 37), end to end on the real dev server: a lane breaking an import is caught with
selection on, the repair is checked the same way, and the tests the change does not reach run once before the
review, as two shards in parallel (tests/record_checks.py is the run; the `selected` history replays it)."""

from __future__ import annotations

from pathlib import Path

import pytest

from reposwarm.contracts import Phase, ValidateInput, Verdict
from reposwarm.review.package import render_review, render_status
from reposwarm.runs import ledger, metrics
from reposwarm.runs.metrics import from_status
from tests import record_checks
from tests.helpers import wait_for_phase

pytestmark = pytest.mark.usefixtures("worker")


async def validate_inputs(client, run_id: str) -> list[ValidateInput]:
    found = []
    async for event in client.get_workflow_handle(run_id).fetch_history_events():
        attrs = event.activity_task_scheduled_event_attributes
        if event.HasField("activity_task_scheduled_event_attributes") and attrs.activity_type.name == "validate":
            found.append((await client.data_converter.decode(attrs.input.payloads, [ValidateInput]))[0])
    return found


async def test_a_broken_import_is_caught_by_the_selected_check_and_the_rest_runs_sharded(client, tmp_path: Path):
    run_id = await record_checks.start(client, tmp_path)
    try:
        status = await wait_for_phase(client, run_id, Phase.review, timeout=240)
        history = status.review.validations
        # check 1: only svc_a's test ran (the change reaches nothing else), and it caught the broken import
        assert "FAILED, red: 1 new failure" in history[0], history
        assert "(affected: 1 of 3 python test files, from 1 changed file" in history[0], history
        assert any(s.lane == "a" and s.attempt == 2 for s in status.lanes), status.lanes  # sent back to its lane
        # check 2: the repair passes the selected tests, then the remainder makes it the whole profile
        assert "PASSED, green (whole profile: affected: 1 of 3 python test files" in history[1], history
        assert "then the remainder: 2 of 3 python test files the selected check did not run" in history[1], history
        report = status.review.test_report
        assert report.verdict == Verdict.passed and report.tests_run == 3 and report.base_tests_run == 3, report
        assert report.skipped and "when: paths (docs/**)" in report.skipped[0], report.skipped
        # what ran where: the baseline whole, each selected check one part, the remainder two shards side by side
        inputs = await validate_inputs(client, run_id)
        labels = [i.label for i in inputs]
        assert labels == ["baseline", "round 1 check 1", "round 1 check 2", "round 1 check 2 remainder shard 1 of 2",
                          "round 1 check 2 remainder shard 2 of 2"], labels
        pytest_line = " ".join(record_checks.PYTEST)
        assert inputs[1].part.names == {pytest_line: ["svc_a/tests/test_a.py"]}, inputs[1].part
        shards = [set(i.part.names[pytest_line]) for i in inputs[3:]]
        assert shards[0] | shards[1] == {"svc_b/tests/test_b.py", "svc_c/tests/test_c.py"} and not shards[0] & \
            shards[1], shards
        review = render_review(status.review)
        assert "**PASSED**" in review and "whole profile" in review and "Not the whole profile" not in review
        assert "- not run: `" in review and "docs/**" in review, review
        assert "checks: PASSED (whole profile" in render_status(status)
        # report and report --home say the same of the check (its parts, from the ledger, are one check)
        served, hosted = from_status(status, 1.0).last_check, metrics.report(run_id, ledger.read(run_id)).last_check
        assert served is not None and served == hosted, (served, hosted)
    finally:
        await client.get_workflow_handle(run_id).terminate("test done")


async def test_full_at_delivery_runs_the_rest_after_approval_and_a_hidden_break_is_not_delivered(client, tmp_path):
    from reposwarm.contracts import ReviewDecision
    from tests.helpers import finish, make_repo, start_run, turn, write_yaml
    from workflows.swarm import SwarmWorkflow

    # svc_c's test reads svc_a's code by a path it builds: no import the graph could follow
    files = {**record_checks.FILES, "svc_c/tests/test_c.py": (
        "def test_svc_a_keeps_its_double():\n    assert 'double(' in open('svc_a/' + 'co' + 're.py').read()\n")}
    repo = make_repo(tmp_path / "repo", files)
    lanes = write_yaml(tmp_path / "lanes.yaml", {
        "swarm": {"lanes": {"a": {"allowed_paths": ["svc_a/"]}}},
        "validation": {"profiles": {"default": {"timeout_s": 120, "full_at": "delivery", "env": record_checks.QUICK,
                                                "commands": [record_checks.PYTEST]}}}})
    quad = "def quad(x):\n    return 4 * x\n"  # svc_a's tests pass; the hidden reader's does not
    script = write_yaml(tmp_path / "replay.yaml", {"version": 1, "lanes": {"a": {1: [
        turn(("a1", "write_file", {"path": "svc_a/core.py", "content": quad, "reason": "quad without double"})),
        finish("a2", "quad is 4x")]}}})
    plan = write_yaml(tmp_path / "plan.yaml", {"interface_contract": "svc_a keeps quad.", "lanes": [
        {"lane": "a", "goal": "Make quad simpler."}]})
    run_id = await start_run(client, repo, lanes, script, plan=plan)
    handle = client.get_workflow_handle_for(SwarmWorkflow.run, run_id)
    try:
        status = await wait_for_phase(client, run_id, Phase.review, timeout=240)
        report = status.review.test_report
        assert report.verdict == Verdict.passed and report.tests_run == 1, report  # svc_a's test alone
        review = render_review(status.review)
        assert "(not the whole profile: see Checks)" in review and "**Not the whole profile**" in review, review
        await handle.execute_update(SwarmWorkflow.review, ReviewDecision(approve=True, reviewer="ana"))
        with pytest.raises(Exception) as ended:
            await handle.result()
        assert "the whole profile did not pass before delivery (full_at: delivery)" in str(ended.value.cause), \
            ended.value.cause
        final = await handle.query(SwarmWorkflow.status)
        assert not final.delivered_branch and "test_svc_a_keeps_its_double" in str(final.test_report.failures)
    finally:
        try:
            await handle.terminate("test done")
        except Exception:
            pass


async def test_a_check_s_shards_spread_over_hosts_with_one_check_slot_each(client, tmp_path, monkeypatch):
    import uuid

    from temporalio.client import Client

    from reposwarm.cli.worker import make_worker

    # two hosts of one check slot each on a queue of their own: a host busy with a shard does not poll for checks,
    # so the other shard goes to the other host, and the two run at once
    queue = f"slots-{uuid.uuid4().hex[:6]}"
    monkeypatch.setenv("REPOSWARM_TASK_QUEUE", queue)
    monkeypatch.setenv("REPOSWARM_CHECK_SLOTS", "1")
    other = await Client.connect(client.service_client.config.target_host, namespace=client.namespace,
                                 data_converter=client.data_converter, identity="host-2")  # (another host)
    async with make_worker(client, queue), make_worker(other, queue):
        run_id = await record_checks.start(client, tmp_path)
        try:
            await wait_for_phase(client, run_id, Phase.review, timeout=240)
            scheduled, spans, hosts = {}, {}, {}
            async for e in client.get_workflow_handle(run_id).fetch_history_events():
                if e.HasField("activity_task_scheduled_event_attributes"):
                    a = e.activity_task_scheduled_event_attributes
                    if a.activity_type.name == "validate":
                        assert a.task_queue.name == f"{queue}.checks", a.task_queue.name
                        label = (await client.data_converter.decode(a.input.payloads, [ValidateInput]))[0].label
                        scheduled[e.event_id] = label
                if e.HasField("activity_task_started_event_attributes") and \
                        e.activity_task_started_event_attributes.scheduled_event_id in scheduled:
                    hosts[scheduled[e.activity_task_started_event_attributes.scheduled_event_id]] = \
                        e.activity_task_started_event_attributes.identity
                for field, at in (("activity_task_started_event_attributes", 0),
                                  ("activity_task_completed_event_attributes", 1)):
                    if e.HasField(field) and getattr(e, field).scheduled_event_id in scheduled:
                        spans.setdefault(scheduled[getattr(e, field).scheduled_event_id], [0.0, 0.0])[at] = \
                            e.event_time.ToDatetime().timestamp()
            one, two = (spans[f"round 1 check 2 remainder shard {i} of 2"] for i in (1, 2))
            assert one[0] < two[1] and two[0] < one[1], spans  # side by side
            shard_hosts = {hosts[f"round 1 check 2 remainder shard {i} of 2"] for i in (1, 2)}
            assert len(shard_hosts) == 2 and "host-2" in shard_hosts, hosts  # one on each host
        finally:
            await client.get_workflow_handle(run_id).terminate("test done")
