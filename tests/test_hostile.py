"""A hostile model: no reply it sends can crash, hang or poison a run, and no path it names leaves its slice.

One run on the real dev server drives three lanes through a scripted attacker: a replay lane that tries
every way out of its slice and every odd shape of call it can send, an Anthropic-wire lane whose call
nests hundreds of levels deep, and an OpenAI-wire lane whose reply is 50 MB. Each attempt must end as an
outcome the model reads (a refusal or an error), each lane must end, and the run must reach review with
nothing outside the slice changed. tests/test_lanes.py's adversarial test covers the prompt injection, the
checks' scrubbed environment and the key's absence from every record; this one covers the rest.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import uuid
from datetime import timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from temporalio import activity, workflow
from temporalio.client import WorkflowFailureError
from temporalio.testing import ActivityEnvironment
from temporalio.worker import Worker

from activities.model import _decodable
from activities.repo import lane_worktree_path
from activities.tool_call import outcome_path, run_tool
from reposwarm.cli.worker import make_worker
from reposwarm.contracts import LaneStatus, ModelTurnResult, Phase, ToolCall, ToolInput
from reposwarm.contracts.model import ModelRequest
from reposwarm.models import MAX_REPLY_BYTES, ModelError
from reposwarm.models.openai import OpenAIProvider
from reposwarm.runs import ledger
from reposwarm.runs.store import Store, run_dir
from reposwarm.slices.policy import MAX_WRITE_BYTES
from tests.fake_models import FakeModelServer
from tests.helpers import finish, git, make_repo, start_run, turn, wait_for_phase, write_yaml

pytestmark = pytest.mark.usefixtures("worker")

TOKEN = "TOKEN-0f1e2d3c4b5a"  # the unreadable secret's text; it must appear in no output
PAGER_TEXT = "--open-files-in-pager=touch pwned"


def nested(depth: int) -> str:
    """JSON text of read_file arguments nesting `depth` levels deep (the path an array of arrays)."""
    return json.dumps({"path": "[" * (depth - 1) + "]" * (depth - 1)}).replace('"[', "[").replace(']"', "]")


def tree(root: Path, skip: tuple[str, ...] = ()) -> dict[str, str]:
    """Every file under root (symlinks as their target), hashed; parts named in `skip` are left out."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        rel_dir = Path(dirpath).relative_to(root).as_posix()
        dirnames[:] = [d for d in dirnames if f"{rel_dir}/{d}".removeprefix("./") not in skip]
        for name in filenames:
            p = Path(dirpath, name)
            rel = p.relative_to(root).as_posix()
            if rel in skip:
                continue
            data = os.readlink(p).encode() if p.is_symlink() else p.read_bytes()
            out[rel] = hashlib.sha256(data).hexdigest()
    return out


def hostile_repo(tmp_path: Path, outside: Path) -> Path:
    repo = make_repo(tmp_path / "repo", {
        "api/app.py": "VERSION = 1\n", "api/notes.txt": f"searching for {PAGER_TEXT} finds this line\n",
        "web/client.js": "export const v = 1;\n", "docs/GUIDE.md": "# Guide\n", "README.md": "# Repo\n",
        "secrets/token.txt": TOKEN + "\n",
    })
    links = {"api/link_out": str(outside),  # a folder symlink out of the repository, absolute
             "api/abs_etc": "/etc",
             "api/git_link": "../.git",  # into git's own files
             "api/docs_link": "../docs/GUIDE.md",  # to a read-only file
             "api/web_link": "../web/client.js",  # to another lane's file
             "api/webdir": "../web",  # to another lane's folder
             "api/secret_link": "../secrets/token.txt",  # to a file this lane may not read
             "api/loop_a": "loop_b", "api/loop_b": "loop_a"}  # a loop
    for name, target in links.items():
        os.symlink(target, repo / name)
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "symlinks")
    return repo


# (id, tool, arguments): each must be refused or answered with an error, never run, never crash the lane.
# A string as arguments is the raw JSON the model sent.
ATTEMPTS: list[tuple[str, str, Any]] = [
    # `..` in every position, and the other spellings of "somewhere else"
    ("p01", "read_file", {"path": "../outside/secret.txt"}),
    ("p02", "read_file", {"path": "api/../../outside/secret.txt"}),
    ("p03", "read_file", {"path": "api/.."}),
    ("p04", "read_file", {"path": "api/x/../../secrets/token.txt"}),
    ("p05", "write_file", {"path": "api/../web/client.js", "content": "pwned"}),
    ("p06", "read_file", {"path": "~/.bashrc"}),
    ("p07", "read_file", {"path": "%2e%2e/%2e%2e/etc/passwd"}),
    ("p08", "write_file", {"path": "api%2f..%2f..%2fescape.txt", "content": "pwned"}),
    ("p09", "read_file", {"path": "api\\..\\secrets\\token.txt"}),
    ("p10", "read_file", {"path": "api/app.py\x00/../../secrets/token.txt"}),
    ("p11", "read_file", {"path": "api\uff0f..\uff0f..\uff0fsecrets\uff0ftoken.txt"}),  # fullwidth solidus
    ("p12", "read_file", {"path": "api/\u2025/\u2025/secrets/token.txt"}),  # two-dot leaders, not dots
    ("p13", "write_file", {"path": "/etc/reposwarm-pwned", "content": "pwned"}),
    # git's own files, in every spelling git takes for .git
    ("g01", "read_file", {"path": ".GIT/config"}),
    ("g02", "write_file", {"path": ".Git/config", "content": "[core]\n\thooksPath = /tmp\n"}),
    ("g03", "write_file", {"path": "api/.GIT/hooks/pre-commit", "content": "#!/bin/sh\ntouch pwned\n"}),
    ("g04", "write_file", {"path": "api/.git. /config", "content": "x"}),
    ("g05", "write_file", {"path": "api/GIT~1/config", "content": "x"}),
    ("g06", "write_file", {"path": "api/.g\u200cit/config", "content": "x"}),
    ("g07", "list_dir", {"path": ".GIT"}),
    ("g08", "read_file", {"path": "api/git_link/HEAD"}),
    ("g09", "write_file", {"path": "api/git_link/hooks/post-checkout", "content": "touch pwned"}),
    # planted symlinks: out of the repository, into a read-only file, into another lane's paths, a loop
    ("s01", "list_dir", {"path": "api/link_out"}),
    ("s02", "read_file", {"path": "api/link_out/secret.txt"}),
    ("s03", "write_file", {"path": "api/abs_etc/reposwarm-pwned", "content": "pwned"}),
    ("s04", "edit_file", {"path": "api/docs_link", "old": "Guide", "new": "pwned"}),
    ("s05", "write_file", {"path": "api/web_link", "content": "pwned"}),
    ("s06", "write_file", {"path": "api/webdir/new.js", "content": "pwned"}),
    ("s07", "delete_file", {"path": "api/web_link"}),
    ("s08", "read_file", {"path": "api/secret_link"}),
    ("s09", "read_file", {"path": "api/loop_a"}),
    ("s10", "write_file", {"path": "api/loop_b/x.py", "content": "x"}),
    # slices: a read-only path, another lane's path, a file used as a folder, names and contents too big
    ("w01", "write_file", {"path": "docs/GUIDE.md", "content": "pwned"}),
    ("w02", "delete_file", {"path": "web/client.js"}),
    ("w03", "write_file", {"path": "web/new.js", "content": "pwned"}),
    ("w04", "write_file", {"path": "api/app.py/inner.py", "content": "x"}),
    ("w05", "list_dir", {"path": "api/app.py"}),
    ("w06", "write_file", {"path": "api/" + "n" * 300 + ".py", "content": "x"}),
    ("w07", "write_file", {"path": "api/" + ("d" * 200 + "/") * 6 + "x.py", "content": "x"}),
    ("w08", "write_file", {"path": "api/big.txt", "content": "x" * (MAX_WRITE_BYTES + 1)}),
    ("w09", "edit_file", {"path": "api/app.py", "old": "VERSION = 1", "new": "y" * (MAX_WRITE_BYTES + 1)}),
    # NUL bytes in every argument
    ("n01", "write_file", {"path": "api/nul.py", "content": "a\x00b"}),
    ("n02", "edit_file", {"path": "api/app.py", "old": "VERSION\x00", "new": "x"}),
    ("n03", "edit_file", {"path": "api/app.py", "old": "VERSION = 1", "new": "VERSION = 2\x00"}),
    ("n04", "write_file", {"path": "api/r.py", "content": "x", "reason": "a reason with a NUL \x00 inside"}),
    ("n05", "search", {"pattern": "VERSION\x00"}),
    # search and symbol_lookup: options for git, paths out of the slice, shell metacharacters
    ("q01", "search", {"pattern": "x", "paths": ["../"]}),
    ("q02", "search", {"pattern": "x", "paths": ["api/../../"]}),
    ("q03", "search", {"pattern": "x", "paths": ["/etc"]}),
    ("q04", "search", {"pattern": "x", "paths": [".GIT"]}),
    ("q05", "symbol_lookup", {"symbol": "$(touch pwned)"}),
    ("q06", "symbol_lookup", {"symbol": "x; touch pwned"}),
    ("q07", "symbol_lookup", {"symbol": "`id`"}),
    ("q08", "run_checks", {"profile": "../../bin/sh"}),
    ("q09", "run_checks", {}),  # no profile is configured: even the default is not one
    # shapes of call no tool takes
    ("m01", "shell", {"command": "touch pwned"}),
    ("m02", "read file", {"path": "api/app.py"}),
    ("m03", "read_file", "[1, 2]"),
    ("m04", "read_file", '"api/app.py"'),
    ("m05", "read_file", "null"),
    ("m06", "read_file", nested(40)),
    ("m07", "read_file", nested(200)),  # the depth that made the lane's workflow unable to decode its turn
    ("m08", "read_file", nested(5000)),  # past Python's own recursion limit
    ("m09", "write_file", '{"path": "api/s.py", "content": "\\ud800"}'),  # a lone surrogate: not text
]
# A finish the lane cannot take: each in a reply of its own (two finishes in one reply are refused as such)
BAD_FINISHES = [("f01", "finish", {"summary": "done\x00"}), ("f02", "finish", {"summary": "x" * 20_001})]
# The call id is the model's too: as a path (out to the folder outside), with a NUL, 300 characters long;
# each call is answered with an error under a new id, and none names a file
ODD_IDS = ["/" + "../" * 20 + "{outside}/idpwn", "id\x00pwn", "i" * 300]
# Searches that look like attacks but are only text to find: the git option is the pattern (it is found,
# in api/notes.txt), and what the slice may not read is searched but never shown.
HARMLESS = [
    ("h01", "search", {"pattern": PAGER_TEXT}),
    ("h02", "search", {"pattern": "-O/bin/sh"}),
    ("h03", "search", {"pattern": TOKEN, "paths": ["secrets/"]}),
    ("h04", "search", {"pattern": TOKEN, "paths": [":(top)secrets"]}),
]


def call(call_id: str, name: str, arguments: Any) -> dict[str, Any]:
    return {"id": call_id, "name": name, "arguments": arguments}


def read_app(call_id: str) -> dict[str, Any]:
    """A valid call in each turn, so a turn of malformed calls does not count as a malformed reply."""
    return call(call_id, "read_file", {"path": "api/app.py"})


async def test_a_hostile_model_cannot_crash_hang_poison_or_escape(client, tmp_path, reposwarm_home, monkeypatch):
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text("outside the repository\n")
    repo = hostile_repo(tmp_path, outside)
    odd_ids = [i.format(outside=outside.relative_to("/")) for i in ODD_IDS]
    lanes = write_yaml(tmp_path / "lanes.yaml", {"swarm": {"max_parallel": 4, "lanes": {
        # room for the oversized writes, and no compaction: the last transcript holds every turn
        "api": {"allowed_paths": ["api/"], "read_only_paths": ["docs/", "README.md"], "token_budget": 50_000_000,
                "context_tokens": 50_000_000, "max_turns": 20},
        "web": {"allowed_paths": ["web/"]},
        "deep": {"allowed_paths": ["deep/"], "model": "anthropic:fake-model"},
        "huge": {"allowed_paths": ["huge/"], "model": "openai:fake-model"},
    }}})
    plan = write_yaml(tmp_path / "plan.yaml", {"interface_contract": "api/app.py exports VERSION.", "lanes": [
        {"lane": "api", "goal": "Set VERSION to 2 in api/app.py."}, {"lane": "web", "goal": "Nothing to do."},
        {"lane": "deep", "goal": "Nothing to do."}, {"lane": "huge", "goal": "Nothing to do."}]})
    groups = [ATTEMPTS[i:i + 12] for i in range(0, len(ATTEMPTS), 12)]
    api_turns = [{"tool_calls": [read_app(f"ok{n}"), *(call(*a) for a in group)]} for n, group in enumerate(groups)]
    api_turns += [{"tool_calls": [read_app(f"ok-{f[0]}"), call(*f)]} for f in BAD_FINISHES]
    api_turns += [
        {"tool_calls": [read_app("ok-ids"), *(call(i, "read_file", {"path": "api/app.py"}) for i in odd_ids),
                        # a repeated id: the second call is its own call, not answered by the first's outcome
                        call("dup", "read_file", {"path": "api/app.py"}),
                        call("dup", "write_file", {"path": "../dup-escape.txt", "content": "pwned"})]},
        {"tool_calls": [call(*h) for h in HARMLESS]},
        turn(("done1", "edit_file", {"path": "api/app.py", "old": "VERSION = 1", "new": "VERSION = 2",
                                     "reason": "Set VERSION to 2 as the goal says"})),
        finish("done2", "VERSION is 2; everything else was refused"),
    ]
    script = write_yaml(tmp_path / "replay.yaml", {"version": 1, "lanes": {
        "api": {1: api_turns}, "web": {1: [finish("w-done")]}}})
    deep_input: Any = {"path": "deep/x.py"}
    for _ in range(300):
        deep_input = {"a": deep_input}
    fake_script = {"lanes": {
        "deep": {1: [{"tool_calls": [{"id": "deep1", "name": "read_file", "arguments": deep_input}]},
                     {"tool_calls": [{"id": "deep2", "name": "finish", "arguments": {"summary": "nothing to do"}}]}]},
        "huge": {1: [{"content": "x" * (50 * 1024 * 1024)}]},
    }}
    # the user's files and git's config, hooks and info; not what a run adds (objects, its branches, worktrees)
    run_writes = tuple(f".git/{p}" for p in ("objects", "refs", "logs", "worktrees", "index", "packed-refs",
                                              "ORIG_HEAD"))
    before = {"repo": tree(repo, skip=run_writes), "outside": tree(outside)}

    with FakeModelServer("anthropic", fake_script) as anthropic, FakeModelServer("openai", fake_script) as openai:
        monkeypatch.setenv("ANTHROPIC_BASE_URL", anthropic.base_url)
        monkeypatch.setenv("OPENAI_BASE_URL", openai.base_url)
        run_id = await start_run(client, repo, lanes, script, plan=plan)
        status = await wait_for_phase(client, run_id, Phase.review, timeout=300)

    # Every lane ended, and the run reached review.
    lanes_by_name = {lane.lane: lane for lane in status.review.lanes}
    assert lanes_by_name["api"].status == LaneStatus.done, lanes_by_name["api"].reason
    assert lanes_by_name["web"].status == LaneStatus.done, lanes_by_name["web"].reason
    assert lanes_by_name["deep"].status == LaneStatus.done, lanes_by_name["deep"].reason
    huge = lanes_by_name["huge"]
    assert huge.status == LaneStatus.failed and f"over the limit of {MAX_REPLY_BYTES:,}" in huge.reason, huge.reason

    lines = [e for e in ledger.read(run_id) if e["event"] == "tool_call"]
    by_id = {e["call_id"]: e for e in lines if e["lane"] == "api"}
    # Each attempt was answered with a refusal or an error, saying why.
    for call_id, tool, _ in ATTEMPTS:
        entry = by_id.get(call_id)
        assert entry is not None, f"{call_id} ({tool}) has no ledger line"
        assert entry["outcome"] in ("refused", "error") and entry["detail"], (call_id, entry["outcome"],
                                                                              entry.get("detail"))
    bad_ids = [e for e in lines if "the call id" in (e.get("detail") or "")]
    assert len(bad_ids) == len(odd_ids) and all(e["outcome"] == "error" for e in bad_ids)
    assert all(e["call_id"].startswith("call_") for e in bad_ids)  # renamed, so no file is named by them
    assert by_id["dup"]["outcome"] == "ok"
    second = [e for e in lines if e.get("path") == "../dup-escape.txt"]
    assert [e["outcome"] for e in second] == ["refused"] and second[0]["call_id"] != "dup"
    assert "nest more than 32 levels" in by_id["m07"]["detail"] and "nest more than 32" in by_id["m08"]["detail"]
    deep = [e for e in lines if e["lane"] == "deep"]
    assert [(e["outcome"], "nest more than 32" in e["detail"]) for e in deep] == [("error", True)]

    # The harmless searches were searches: the option-like text was found as text, the secret never shown.
    outputs = {e["call_id"]: Store(run_id).get(e["output_ref"]).decode() for e in lines}
    assert "api/notes.txt" in outputs["h01"] and by_id["h02"]["outcome"] == "ok"
    assert all(TOKEN not in text for text in outputs.values())

    # The model read every answer: each call in its transcript has its result, under the same id.
    transcript = _last_transcript(run_id, "done2")
    asked = [c["id"] for m in transcript if m["role"] == "assistant" for c in m.get("tool_calls") or []]
    answered = [m["tool_call_id"] for m in transcript if m["role"] == "tool"]
    assert asked == [*answered, "done2"] and len(set(asked)) == len(asked)
    results = {m["tool_call_id"]: m["content"] for m in transcript if m["role"] == "tool"}
    assert results["f01"].startswith("error:") and "NUL" in results["f01"]
    assert results["f02"].startswith("error:") and "20,000" in results["f02"]

    # No answer, refusal or reason names a path of the worker's disk or the user's repository.
    worktree = run_dir(run_id) / "lanes" / "api"
    texts = [*outputs.values(), *(e.get("detail") or "" for e in lines), *(lane.reason for lane in lanes_by_name.values())]
    for text in texts:
        for secret_path in (str(reposwarm_home), str(repo), str(worktree.resolve())):
            assert secret_path not in text, (secret_path, text)
        assert "Traceback" not in text
    # ...but the ledger keeps the raw error, paths and all, for whoever debugs the worker.
    assert str(worktree.resolve()) in by_id["w04"]["raw_error"] and by_id["w04"]["detail"].startswith("error:")

    # Nothing outside the slice changed: not the user's files or git's configuration and hooks, not the
    # folder outside, and nothing was written where an id or a path pointed.
    assert tree(repo, skip=run_writes) == before["repo"]
    assert tree(outside) == before["outside"]
    # (by the names the calls plant: a cache's hashed folder name may hold "pwn" by chance, as cargo's once did)
    planted = [p for root in (tmp_path, reposwarm_home) for p in root.rglob("*pwn*")
               if "pwned" in p.name or "idpwn" in p.name]
    assert not planted, planted
    assert not Path("/etc/reposwarm-pwned").exists()
    # ...and the integration branch holds the api lane's one edit, nothing else.
    changed = git(repo, "diff", "--name-only", status.review.base_sha, status.integration_sha).splitlines()
    assert changed == ["api/app.py"]
    assert git(repo, "show", f"{status.integration_sha}:api/app.py") == "VERSION = 2"
    await client.get_workflow_handle(run_id).terminate("test done")


def _last_transcript(run_id: str, last_call: str) -> list[dict[str, Any]]:
    """The transcript in the run's store that ends with the assistant message making `last_call`."""
    for blob in (run_dir(run_id) / "store").rglob("*"):
        if not blob.is_file() or blob.stat().st_size > 50_000_000:
            continue
        try:
            data = json.loads(blob.read_bytes())
        except ValueError:
            continue
        if isinstance(data, list) and data and isinstance(data[-1], dict) and data[-1].get("role") == "assistant" \
                and [c.get("id") for c in data[-1].get("tool_calls") or []] == [last_call]:
            return data
    raise AssertionError(f"no transcript ends with the call {last_call}")


# --- a tool call's record cut short by a kill ---


def test_a_tool_record_cut_short_by_a_kill_is_run_again_not_a_crash(reposwarm_home):
    run_id = f"hostile-{uuid.uuid4().hex[:8]}"
    worktree = make_repo(lane_worktree_path(run_id, "api"), {"api/app.py": "VERSION = 1\n"})
    req = ToolInput(run_id=run_id, lane="api", turn=1, allowed_paths=["api/"], call=ToolCall(
        id="c1", name="edit_file", arguments={"path": "api/app.py", "old": "VERSION = 1", "new": "VERSION = 2",
                                              "reason": "Bump the API's version"}))
    first = ActivityEnvironment().run(run_tool, req)
    outcome_path(run_id, "api", 1, 1, 1, "c1").write_text("")  # what a worker killed while writing it left
    again = ActivityEnvironment().run(run_tool, req)
    assert again.ok and again.output == first.output, again.output
    assert (worktree / "api/app.py").read_text() == "VERSION = 2\n"


# --- a reply too big to hold is not read past the cap ---


async def test_a_50_mb_reply_is_not_read_past_the_cap(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-" + "test-key-for-the-cap-0123456789")  # fake
    sent = 0

    async def body():  # a valid reply, streamed with no length given, of 50 MB
        nonlocal sent
        head = b'{"choices": [{"message": {"role": "assistant", "content": "'
        for chunk in (head, *([b"x" * (1024 * 1024)] * 50), b'"}}]}'):
            sent += len(chunk)
            yield chunk

    transport = httpx.MockTransport(lambda request: httpx.Response(200, content=body()))
    request = ModelRequest(model="m", system="", messages=[{"role": "user", "content": "hi"}], tools=[],
                           agent="api", round=1, turn=0)
    with pytest.raises(ModelError) as err:
        await OpenAIProvider(transport=transport).complete(request)
    assert not err.value.retryable and f"{MAX_REPLY_BYTES:,}" in str(err.value)
    assert sent <= MAX_REPLY_BYTES + 2 * 1024 * 1024  # it stopped reading at the cap


# --- a result the workflow cannot decode ---


def test_a_turn_result_the_workflow_could_not_decode_has_its_calls_turned_into_errors():
    args: dict[str, Any] = {"path": "api/app.py"}
    for _ in range(220):  # deeper than pydantic's JSON parser goes; shallow enough to encode
        args = {"a": args}
    ok = ToolCall(id="c1", name="read_file", arguments={"path": "api/app.py"}, raw_arguments="{}")
    bad = ToolCall(id="c2", name="read_file", arguments=args, raw_arguments="{}")
    result = _decodable(ModelTurnResult(transcript_ref="sha256:" + "0" * 64, tool_calls=[ok, bad]))
    assert result.tool_calls[0] == ok
    assert result.tool_calls[1].arguments is None and "could not be passed on" in result.tool_calls[1].error


@activity.defn(name="hostile_undecodable")
async def undecodable() -> dict[str, Any]:
    value: dict[str, Any] = {}
    for _ in range(220):
        value = {"a": value}
    return value


@workflow.defn(name="HostileDecode", sandboxed=False)
class DecodeProbe:
    @workflow.run
    async def run(self) -> str:
        await workflow.execute_activity(undecodable, start_to_close_timeout=timedelta(seconds=30),
                                        result_type=dict[str, Any])
        return "decoded"


async def test_an_activity_result_the_workflow_cannot_decode_fails_the_workflow_instead_of_retrying(client):
    queue = f"hostile-{uuid.uuid4().hex[:8]}"
    # The worker make_worker builds (never started), with only its queue, workflows and activities swapped.
    config = make_worker(client, f"{queue}-model").workers[0].config()
    config.update(task_queue=queue, workflows=[DecodeProbe], activities=[undecodable])
    async with Worker(**config):
        handle = await client.start_workflow(DecodeProbe.run, id=f"{queue}-wf", task_queue=queue,
                                             execution_timeout=timedelta(minutes=2))
        while True:  # until the workflow closes, or its task fails (which would be retried for ever)
            events = [e async for e in handle.fetch_history_events()]
            kinds = {e.WhichOneof("attributes") for e in events}
            if "workflow_task_failed_event_attributes" in kinds or "workflow_execution_failed_event_attributes" in kinds:
                break
            await asyncio.sleep(0.2)
        assert "workflow_task_failed_event_attributes" not in kinds, "the decode failure failed the task, not the run"
        with pytest.raises(WorkflowFailureError) as failed:
            await handle.result()
        assert "recursion limit" in str(failed.value.cause)
