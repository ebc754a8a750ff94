"""The model-call seam (reposwarm.models.calls.complete) and the run's exactly-once records.

complete() runs as Temporal runs an activity (temporalio.testing.ActivityEnvironment) against a fake model
server speaking the real OpenAI wire format, which keeps every request it got: so a test sees what the
provider was asked, what the ledger says of it, and what the run's folder holds.
"""

from __future__ import annotations

import dataclasses
import functools
import uuid
from datetime import timedelta
from pathlib import Path

import pytest
from pydantic import BaseModel
from temporalio.exceptions import ApplicationError
from temporalio.testing import ActivityEnvironment

from reposwarm.contracts import ModelPrice
from reposwarm.models.calls import complete
from reposwarm.runs import ledger
from reposwarm.runs.exactly_once import Once, keyed_path
from reposwarm.runs.store import run_dir
from tests.fake_models import FakeModelServer
from tests.helpers import turn

SECRET = "db-password-5e4d3c2b1a"  # a worker's secret the model quotes back; no record may hold it


def ask(run_id: str, **overrides):
    """A lane's first turn, as model_turn asks it."""
    fields = dict(agent="api", round_no=1, turn=0, system="You are a helper.", tools=[],
                  messages=[{"role": "user", "content": "Goal for lane api: read the app"}],
                  price=ModelPrice(input_per_mtok=2.0, output_per_mtok=8.0))
    return functools.partial(complete, run_id, "openai:fake-coder", **{**fields, **overrides})


def model_lines(run_id: str) -> list[tuple[int, str, float | None]]:
    return [(e["attempt"], e["outcome"], e.get("cost_usd")) for e in ledger.read(run_id) if e["event"] == "model_call"]


@pytest.fixture
def openai_env(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-" + "test-key-for-the-seam-0123456789")  # fake
    monkeypatch.setenv("REPOSWARM_TEST_DB_PASSWORD", SECRET)

    def serving(fake: FakeModelServer) -> None:
        monkeypatch.setenv("OPENAI_BASE_URL", fake.base_url)
    return serving


async def test_a_reply_already_paid_for_is_reused_by_the_retry_not_asked_again(reposwarm_home, openai_env):
    run_id = f"calls-{uuid.uuid4().hex[:8]}"
    script = {"lanes": {"api": {1: [turn(("c1", "read_file", {"path": "app.py"}), content=f"the key is {SECRET}")]}}}
    env = ActivityEnvironment()
    with FakeModelServer("openai", script) as fake:
        openai_env(fake)
        first = await env.run(ask(run_id))
        # The worker died after the answer and before Temporal heard of it: the activity's next attempt.
        env.info = dataclasses.replace(env.info, attempt=2)
        again = await env.run(ask(run_id))
    assert len(fake.requests) == 1
    assert [c.id for c in again.tool_calls] == ["c1"] and again.usage == first.usage
    assert first.usage.cost_usd == pytest.approx((1200 * 2.0 + 80 * 8.0) / 1e6)
    assert model_lines(run_id) == [(1, "ok", first.usage.cost_usd), (2, "reused", 0.0)]
    kept = list((run_dir(run_id) / "replies").rglob("*.json"))
    assert len(kept) == 1 and SECRET not in kept[0].read_text()  # redacted where it is kept...
    assert SECRET not in again.content  # ...so the retry gets the redacted answer


async def test_provider_errors_become_temporal_failures_that_say_whether_to_retry(reposwarm_home, openai_env):
    run_id = f"calls-{uuid.uuid4().hex[:8]}"
    env = ActivityEnvironment()
    with FakeModelServer("openai", {"lanes": {"api": {1: [turn(("c1", "finish", {"summary": "x"}))]}}},
                         rate_limit_first=1) as fake:
        openai_env(fake)
        with pytest.raises(ApplicationError) as limited:
            await env.run(ask(run_id))
        # No turn 2 in the script: the fake server answers 400, which no retry mends.
        env.info = dataclasses.replace(env.info, attempt=2)
        with pytest.raises(ApplicationError) as refused:
            await env.run(ask(run_id, turn=1, messages=[{"role": "user", "content": "Goal for lane api: x"},
                                                        {"role": "assistant", "content": "done"}]))
    assert limited.value.type == "ModelError" and not limited.value.non_retryable
    assert limited.value.next_retry_delay == timedelta(seconds=1)  # the API's Retry-After, honoured
    assert refused.value.non_retryable
    assert [line[:2] for line in model_lines(run_id)] == [(1, "error"), (2, "error")]
    assert not (run_dir(run_id) / "replies").exists()  # nothing kept that a retry could mistake for an answer


class _Result(BaseModel):
    value: str


def test_a_record_that_cannot_be_read_counts_as_none(reposwarm_home):
    run_id = f"once-{uuid.uuid4().hex[:8]}"
    done = Once(keyed_path(run_id, "effects", "/../../x" + "y" * 300), _Result)
    assert done.path.is_relative_to(run_dir(run_id) / "effects") and done.recorded() is None
    done.path.parent.mkdir(parents=True)
    for cut_short in ("", '{"value": ', '{"other": 1}', "\udcff"):
        done.path.write_text(cut_short, encoding="utf-8", errors="surrogateescape")
        assert done.recorded() is None
    assert done.record(_Result(value="v")) == _Result(value="v") == done.recorded()
    assert [p.name for p in Path(done.path.parent).iterdir()] == [done.path.name]  # no temporary file left
