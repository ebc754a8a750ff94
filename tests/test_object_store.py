"""A run's files in a shared object store (REPOSWARM_OBJECT_STORE): what one host writes, another host with an
empty REPOSWARM_HOME reads, through a real S3-compatible server (moto's server mode, tests/conftest.py s3_server);
and Temporal's External Storage keeps a large payload in the same bucket, history holding only its reference."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from pydantic import BaseModel
from temporalio.api.common.v1 import Payload
from temporalio.client import Client
from temporalio.testing import ActivityEnvironment

from activities.publish import publish_review
from reposwarm.client import connect
from reposwarm.contracts import Plan, PublishInput, ReviewPackage
from reposwarm.contracts.errors import ConfigError
from reposwarm.runs import ledger, objects
from reposwarm.runs.exactly_once import Once, keyed_path
from reposwarm.runs.store import Store, run_dir
from tests.conftest import S3Server

ROOT = Path(__file__).resolve().parents[1]


class _Result(BaseModel):
    value: str


def _new_run() -> str:
    return f"objects-{uuid.uuid4().hex[:8]}"


@pytest.fixture
def s3(s3_server: S3Server, monkeypatch: pytest.MonkeyPatch) -> S3Server:
    """The object store configured for this test only (monkeypatch takes every variable back afterwards)."""
    for name, value in s3_server.env().items():
        monkeypatch.setenv(name, value)
    return s3_server


def on_host(monkeypatch: pytest.MonkeyPatch, home: Path) -> Path:
    """Act as a worker host whose REPOSWARM_HOME is `home` (a host that shares no disk with the others)."""
    monkeypatch.setenv("REPOSWARM_HOME", str(home))
    return home


def keys(s3: S3Server, run_id: str, under: str = "") -> list[str]:
    listed = s3.client().list_objects_v2(Bucket=s3.bucket, Prefix=f"{s3.prefix}/runs/{run_id}/{under}")
    return [item["Key"] for item in listed.get("Contents", [])]


def test_a_blob_put_on_one_host_is_read_on_another_with_an_empty_home(s3, tmp_path, monkeypatch):
    run_id, data = _new_run(), os.urandom(5000)
    on_host(monkeypatch, tmp_path / "a")
    ref = Store(run_id).put(data)
    digest = ref.removeprefix("sha256:")
    key = f"{s3.prefix}/runs/{run_id}/store/{digest[:2]}/{digest}"
    assert s3.client().get_object(Bucket=s3.bucket, Key=key)["Body"].read() == data
    assert Store(run_id).put(data) == ref and keys(s3, run_id) == [key]

    second = on_host(monkeypatch, tmp_path / "b")
    assert not second.exists()
    assert Store(run_id).get(ref) == data  # nothing of it on this host's disk: it came from the bucket
    assert (run_dir(run_id) / "store" / digest[:2] / digest).read_bytes() == data  # and is kept here now
    assert Store(run_id).get_json(Store(run_id).put_json({"a": [1, 2]})) == {"a": [1, 2]}

    missing = "sha256:" + "0" * 64
    with pytest.raises(FileNotFoundError, match=f"s3://{s3.bucket}/{s3.prefix}/runs/{run_id}/store/00/"):
        Store(run_id).get(missing)


def test_with_no_object_store_a_run_s_files_stay_on_their_host(tmp_path, monkeypatch):
    monkeypatch.delenv("REPOSWARM_OBJECT_STORE", raising=False)
    run_id = _new_run()
    on_host(monkeypatch, tmp_path / "a")
    ref = Store(run_id).put(b"only here")
    assert Store(run_id).get(ref) == b"only here" and objects.list(run_id, "store/")
    on_host(monkeypatch, tmp_path / "b")
    with pytest.raises(FileNotFoundError, match="is not in the store of this run at /"):
        Store(run_id).get(ref)
    assert objects.get(run_id, "store/x") is None and objects.list(run_id) == []


def test_an_effect_recorded_on_one_host_is_recorded_on_another(s3, tmp_path, monkeypatch):
    run_id = _new_run()
    on_host(monkeypatch, tmp_path / "a")
    done = Once(keyed_path(run_id, "effects", "call-1"), _Result)
    assert done.recorded() is None
    done.record(_Result(value="paid once"))
    on_host(monkeypatch, tmp_path / "b")
    again = Once(keyed_path(run_id, "effects", "call-1"), _Result)
    assert not again.path.exists()
    assert again.recorded() == _Result(value="paid once")
    assert Once(keyed_path(run_id, "effects", "call-2"), _Result).recorded() is None
    rel = keyed_path(run_id, "effects", "call-1").relative_to(run_dir(run_id)).as_posix()
    assert keys(s3, run_id, "effects/") == [f"{s3.prefix}/runs/{run_id}/{rel}"]


def test_ledger_lines_of_two_hosts_are_one_ledger_and_a_retry_adds_nothing(s3, tmp_path, monkeypatch):
    run_id = _new_run()
    on_host(monkeypatch, tmp_path / "a")
    ledger.record(run_id, "tool_call", key="wf/run/1/tool_call", lane="api", attempt=1)
    on_host(monkeypatch, tmp_path / "b")
    ledger.record(run_id, "tool_call", key="wf/run/2/tool_call", lane="web", attempt=1)
    lines = ledger.read(run_id)
    assert [e["key"] for e in lines] == ["wf/run/1/tool_call", "wf/run/2/tool_call"]  # by time
    assert len(keys(s3, run_id, "ledger/")) == 2

    # host a's activity retried on host b: the same key, nothing new anywhere
    before = {k: s3.client().get_object(Bucket=s3.bucket, Key=k)["Body"].read() for k in keys(s3, run_id, "ledger/")}
    ledger.record(run_id, "tool_call", key="wf/run/1/tool_call", lane="api", attempt=2)
    after = {k: s3.client().get_object(Bucket=s3.bucket, Key=k)["Body"].read() for k in keys(s3, run_id, "ledger/")}
    assert after == before
    assert [(e["key"], e["attempt"]) for e in ledger.read(run_id)] == [("wf/run/1/tool_call", 1),
                                                                      ("wf/run/2/tool_call", 1)]
    assert "wf/run/1/tool_call" not in ledger.ledger_path(run_id).read_text()  # host b's own file: its line only


def test_an_aws_secret_in_a_ledger_line_is_redacted_and_the_endpoint_is_not(s3, tmp_path, monkeypatch):
    secret, key_id = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY", "AKIAIOSFODNN7EXAMPLE"
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", secret)  # moto takes any credentials
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", key_id)
    run_id = _new_run()
    on_host(monkeypatch, tmp_path / "a")
    ledger.record(run_id, "note", key="k", detail=f"env said {secret} as {key_id} at {s3.endpoint}")
    (stored,) = [s3.client().get_object(Bucket=s3.bucket, Key=k)["Body"].read().decode()
                 for k in keys(s3, run_id, "ledger/")]
    for text in (stored, ledger.ledger_path(run_id).read_text()):
        assert secret not in text and key_id not in text
        assert "[redacted:AWS_SECRET_ACCESS_KEY]" in text and "[redacted:AWS_ACCESS_KEY_ID]" in text
        assert s3.endpoint in text  # where the store is: no secret, and logs need it


def _package(run_id: str, repo: Path) -> ReviewPackage:
    return ReviewPackage(run_id=run_id, round=1, task="Add a priority to tasks", repo_path=str(repo),
                         base_sha="a" * 40, integration_sha="b" * 40, lanes=[],
                         plan=Plan(interface_contract="api/app.py exports NAME.",
                                   lanes=[{"lane": "api", "goal": "Set NAME."}]))


def _cli(*args: str, env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(ROOT / "starter.py"), *args], capture_output=True, text=True,
                          env=env, cwd=cwd, timeout=60)


def test_the_cli_reads_a_review_package_and_ledger_from_the_store_with_an_empty_home(s3, tmp_path, monkeypatch):
    run_id = _new_run()
    on_host(monkeypatch, tmp_path / "worker")
    published = ActivityEnvironment().run(publish_review, PublishInput(run_id=run_id, repo_path=str(tmp_path),
                                                                       package=_package(run_id, tmp_path)))
    markdown = Store(run_id).get(published.markdown_ref).decode()
    assert {k.rsplit("/", 1)[1] for k in keys(s3, run_id, "review/")} == {"latest.md", "latest.json", "round-1.md",
                                                                            "round-1.json"}
    elsewhere = tmp_path / "laptop"
    elsewhere.mkdir()
    env = {k: v for k, v in os.environ.items() if k != "REPOSWARM_HOME"}  # with s3's variables, set above
    review = _cli("review", run_id, "--home", str(elsewhere), env=env, cwd=elsewhere)
    assert review.returncode == 0, review.stderr
    assert review.stdout == markdown and "Add a priority to tasks" in review.stdout
    as_json = _cli("review", run_id, "--json", "--home", str(elsewhere), env=env, cwd=elsewhere)
    assert as_json.returncode == 0, as_json.stderr
    assert json.loads(as_json.stdout)["repo_path"] == str(tmp_path)
    report = _cli("report", run_id, "--json", "--home", str(elsewhere), env=env, cwd=elsewhere)
    assert report.returncode == 0, report.stderr  # from the ledger's review_package line, read from the bucket

    # round 2 published by another worker host: a home holding round 1's copy shows round 2, not its own copy
    on_host(monkeypatch, tmp_path / "worker2")
    round2 = _package(run_id, tmp_path).model_copy(update={"round": 2, "task": "Round two's task"})
    published = ActivityEnvironment().run(publish_review, PublishInput(run_id=run_id, repo_path=str(tmp_path),
                                                                       package=round2))
    assert (tmp_path / "worker" / "runs" / run_id / "review" / "latest.md").read_text() == markdown
    review = _cli("review", run_id, "--home", str(tmp_path / "worker"), env=env, cwd=elsewhere)
    assert review.returncode == 0, review.stderr
    assert review.stdout == Store(run_id).get(published.markdown_ref).decode() and "Round two's task" in review.stdout

    # without the object store, an empty home has nothing to show, and says where it looked
    alone = {k: v for k, v in env.items() if k != "REPOSWARM_OBJECT_STORE"}
    empty = tmp_path / "empty"
    empty.mkdir()
    missing = _cli("review", run_id, "--home", str(empty), env=alone, cwd=empty)
    assert missing.returncode == 2 and f"no saved review package at {empty}" in missing.stderr


@pytest.mark.parametrize("value", ["bucket-name", "http://bucket/x", "s3://", "s3:///prefix", "s3://bucket/a/../b"])
def test_a_bad_object_store_value_is_an_error_naming_the_variable(tmp_path, monkeypatch, value):
    monkeypatch.setenv("REPOSWARM_OBJECT_STORE", value)
    on_host(monkeypatch, tmp_path)
    with pytest.raises(ConfigError, match="REPOSWARM_OBJECT_STORE"):
        Store(_new_run()).put(b"x")
    review = _cli("review", "some-run", "--home", str(tmp_path), env=dict(os.environ), cwd=tmp_path)
    assert review.returncode == 2 and review.stderr.startswith("error: REPOSWARM_OBJECT_STORE")


@pytest.mark.parametrize("relpath", ["../x", "/etc/passwd", "a/../../b", "a//b", "./a", "", "a\\b"])
def test_a_run_s_file_cannot_leave_the_run_s_folder(tmp_path, monkeypatch, relpath):
    on_host(monkeypatch, tmp_path)
    with pytest.raises(ValueError, match="not a relative path inside a run's folder"):
        objects.put(_new_run(), relpath, b"x")


async def test_a_large_payload_goes_to_the_bucket_and_history_keeps_its_reference(s3, client: Client, monkeypatch):
    monkeypatch.setenv("TEMPORAL_ADDRESS", client.service_client.config.target_host)
    shared = await connect("reposwarm-test")
    workflow_id = f"objects-{uuid.uuid4().hex[:8]}"
    big, small = "x" * 300_000, "y" * 100
    handle = await shared.start_workflow("NoSuchWorkflow", args=[big, small], id=workflow_id,
                                         task_queue=f"nobody-{uuid.uuid4().hex[:6]}")
    try:
        history = await client.get_workflow_handle(workflow_id).fetch_history()  # a client with no External Storage
        started = history.events[0].workflow_execution_started_event_attributes
        reference, inline = started.input.payloads
        assert reference.metadata["messageType"] == b"temporal.api.sdk.v1.ExternalStorageReference"
        assert reference.ByteSize() < 2000 and reference.external_payloads[0].size_bytes > 300_000
        assert json.loads(inline.data) == small  # under the threshold: inline, as before
        claim = json.loads(reference.data)["claimData"]
        assert claim["bucket"] == s3.bucket and workflow_id in claim["key"]
        stored = Payload.FromString(s3.client().get_object(Bucket=s3.bucket, Key=claim["key"])["Body"].read())
        assert json.loads(stored.data) == big
        assert claim["key"].endswith(hashlib.sha256(stored.SerializeToString()).hexdigest())
        # and a client with the store reads the workflow's input back whole
        again = await shared.get_workflow_handle(workflow_id).fetch_history()
        decoded = await shared.data_converter.decode(again.events[0].workflow_execution_started_event_attributes
                                                     .input.payloads, [str, str])
        assert decoded == [big, small]
    finally:
        await handle.terminate()


async def test_a_bad_payload_threshold_is_an_error_naming_the_variable(s3, monkeypatch):
    monkeypatch.setenv("REPOSWARM_PAYLOAD_THRESHOLD", "lots")
    with pytest.raises(ConfigError, match="REPOSWARM_PAYLOAD_THRESHOLD"):
        await connect()
