"""The MCP server end to end: `starter.py mcp` as a real subprocess, driven by the mcp package's own client.

Over stdio and over streamable HTTP (loopback), against a real git repository
in tmp_path; every tool is called and its effect on the repository checked.
Every wait is bounded.
"""

from __future__ import annotations

import json
import os
import queue
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import IO, Any

import anyio
import httpx
import pytest
from mcp import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client

from reposwarm.agent.specs import tool_specs
from reposwarm.lanes.loading import ENV_KNOBS

ROOT = Path(__file__).resolve().parents[1]
TOOLS = {"read_file", "list_dir", "search", "symbol_lookup", "write_file", "edit_file", "delete_file", "run_checks"}
GIT_ENV = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t"}
APP = 'def greet(name):\n    return "hi " + name\n\n\nprint(greet("world"))\n'

pytestmark = pytest.mark.timeout(180)


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    """A small committed repository: src/ (to be allowed), docs/ (read-only), a README outside both."""
    root = tmp_path / "repo"
    (root / "src").mkdir(parents=True)
    (root / "docs").mkdir()
    (root / "src" / "app.py").write_text(APP)
    (root / "src" / "util.py").write_text("from app import greet\n\nGREETING = greet('util')\n")
    (root / "docs" / "guide.md").write_text("# Guide\nCall greet to greet.\n")
    (root / "README.md").write_text("top-level readme mentioning greet\n")
    env = {**os.environ, **GIT_ENV}
    for argv in (["init", "-q"], ["add", "."], ["commit", "-qm", "init"]):
        subprocess.run(["git", "-C", str(root), *argv], check=True, env=env, capture_output=True, timeout=30)
    return root


@pytest.fixture
def lanes_file(tmp_path: Path) -> Path:
    """A lanes file with one check profile that prints ok (run with this interpreter: no PATH guessing)."""
    path = tmp_path / "lanes.yaml"
    path.write_text(
        "swarm:\n  lanes:\n    app: {allowed_paths: [\"src/\"]}\n"
        "validation:\n  profile: quick\n  profiles:\n    quick:\n"
        f"      commands:\n        - [{json.dumps(sys.executable)}, \"-c\", \"print('ok')\"]\n      timeout_s: 60\n"
    )
    return path


def mcp_argv(*args: str) -> list[str]:
    return ["starter.py", "mcp", *args]


@asynccontextmanager
async def stdio_session(errlog: Path, *args: str, env: dict[str, str] | None = None) -> AsyncIterator[ClientSession]:
    """Start `starter.py mcp ARGS` over stdio and hand back an initialised client session."""
    params = StdioServerParameters(command=sys.executable, args=mcp_argv(*args), cwd=str(ROOT), env=env)
    with errlog.open("w") as err:
        async with stdio_client(params, errlog=err) as (read, write):
            async with ClientSession(read, write, read_timeout_seconds=60) as session:
                with anyio.fail_after(60):
                    await session.initialize()
                yield session


async def call(session: ClientSession, name: str, **arguments: Any) -> tuple[str, bool]:
    """Call a tool; its text and whether it was an error."""
    with anyio.fail_after(60):
        result = await session.call_tool(name, arguments)
    return "".join(block.text for block in result.content if block.type == "text"), result.is_error


async def test_stdio_every_tool(repo: Path, lanes_file: Path, tmp_path: Path) -> None:
    errlog = tmp_path / "server.stderr"
    args = ("--repo", str(repo), "--allow", "src/**", "--read-only", "docs/", "--lanes", str(lanes_file))
    async with stdio_session(errlog, *args) as session:
        with anyio.fail_after(60):
            listed = (await session.list_tools()).tools
        assert {tool.name for tool in listed} == TOOLS and len(listed) == 8
        schemas = {tool.name: tool.input_schema for tool in listed}
        lane_specs = {spec["name"]: spec["parameters"] for spec in tool_specs()}
        for name, schema in schemas.items():
            assert schema == lane_specs[name], name  # the lanes' own argument schemas
        assert set(schemas["edit_file"]["required"]) == {"path", "old", "new"}
        assert set(schemas["read_file"]["properties"]) == {"path", "start_line", "end_line"}

        text, error = await call(session, "read_file", path="src/app.py", start_line=2, end_line=2)
        assert not error and 'return "hi " + name' in text and "def greet" not in text
        assert text.startswith("src/app.py (lines 2-2 of 5)")

        text, error = await call(session, "list_dir", path=".")
        assert not error and {"src/", "docs/"} <= set(text.splitlines()) and "README.md" not in text
        text, error = await call(session, "list_dir", path="src")
        assert not error and text.splitlines() == ["app.py", "util.py"]

        text, error = await call(session, "search", pattern=r"greet\(")
        assert not error and "src/app.py:1:def greet(name):" in text and "src/util.py:3:" in text
        assert "README.md" not in text  # outside the readable paths

        text, error = await call(session, "symbol_lookup", symbol="greet")
        assert not error
        definitions, references = text.split("references:")
        assert "src/app.py:1: function greet" in definitions
        assert "src/app.py:5" in references and "src/util.py:1" in references

        text, error = await call(session, "read_file", path="docs/guide.md")
        assert not error and "Call greet" in text  # read-only paths are readable

        text, error = await call(session, "write_file", path="src/new.py", content="VALUE = 1\n",
                                 reason="add a module over MCP")
        assert not error and "wrote src/new.py" in text
        assert (repo / "src" / "new.py").read_text() == "VALUE = 1\n"  # straight into the working tree

        text, error = await call(session, "edit_file", path="src/new.py", old="VALUE = 1", new="VALUE = 2")
        assert not error and "replaced 1 occurrence" in text
        assert (repo / "src" / "new.py").read_text() == "VALUE = 2\n"

        text, error = await call(session, "delete_file", path="src/util.py", reason="no longer needed here")
        assert not error and "deleted src/util.py" in text
        assert not (repo / "src" / "util.py").exists()

        text, error = await call(session, "write_file", path="outside.txt", content="nope")
        assert error and text.startswith("refused:") and "allowed paths" in text
        assert not (repo / "outside.txt").exists()
        text, error = await call(session, "edit_file", path="README.md", old="greet", new="hello")
        assert error and text.startswith("refused:")
        assert (repo / "README.md").read_text() == "top-level readme mentioning greet\n"

        text, error = await call(session, "write_file", path="docs/guide.md", content="overwritten")
        assert error and "read-only" in text
        assert (repo / "docs" / "guide.md").read_text() == "# Guide\nCall greet to greet.\n"

        text, error = await call(session, "read_file", path=".git/config")
        assert error and text.startswith("refused:") and ".git" in text

        text, error = await call(session, "edit_file", path="src/app.py", old="greet")  # `new` missing
        assert error and "bad arguments for edit_file" in text and "new" in text
        text, error = await call(session, "finish", summary="done")
        assert error and "lane-only" in text

        text, error = await call(session, "run_checks")
        assert not error and text.lower().startswith("checks passed"), text
        assert "\nok" in text and "full log None" not in text
        text, error = await call(session, "run_checks", profile="nightly")
        assert error and "'nightly' is not one" in text

    log = errlog.read_text()
    assert "serving over stdio" in log and "write_file outside.txt: refused" in log  # logs on stderr


async def test_stdio_defaults_read_only_without_lanes(repo: Path, tmp_path: Path) -> None:
    """No --allow and no --read-only: everything (but .git) readable, nothing writable, no checks."""
    async with stdio_session(tmp_path / "server.stderr", "--repo", str(repo)) as session:
        text, error = await call(session, "read_file", path="README.md")
        assert not error and "top-level readme" in text
        text, error = await call(session, "search", pattern="greet")
        assert not error and "README.md:1:" in text and "docs/guide.md:2:" in text
        text, error = await call(session, "write_file", path="src/app.py", content="x")
        assert error and text.startswith("refused:")
        assert (repo / "src" / "app.py").read_text() == APP
        text, error = await call(session, "delete_file", path="README.md")
        assert error and (repo / "README.md").exists()
        text, error = await call(session, "run_checks")
        assert error and text.startswith("refused:") and "--lanes" in text


def test_stdout_carries_only_the_protocol(repo: Path, lanes_file: Path, tmp_path: Path) -> None:
    """Raw JSON-RPC over the pipes: every line on stdout is a protocol message, even around a check run."""
    messages: list[dict[str, Any]] = [
        {"jsonrpc": "2.0", "id": 1, "method": "initialize",
         "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}},
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "run_checks", "arguments": {}}},
        {"jsonrpc": "2.0", "id": 3, "method": "tools/call",
         "params": {"name": "read_file", "arguments": {"path": ".git/config"}}},
    ]
    errlog = tmp_path / "server.stderr"
    lines: queue.Queue[str] = queue.Queue()
    with errlog.open("w") as err:
        proc = subprocess.Popen([sys.executable, *mcp_argv("--repo", str(repo), "--lanes", str(lanes_file))],
                                cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err, text=True)
    assert proc.stdin is not None and proc.stdout is not None

    def pump(stream: IO[str]) -> None:
        for line in stream:
            lines.put(line)

    reader = threading.Thread(target=pump, args=(proc.stdout,), daemon=True)
    reader.start()
    try:
        replies: dict[int, dict[str, Any]] = {}
        for message in messages:
            proc.stdin.write(json.dumps(message) + "\n")
            proc.stdin.flush()
            if "id" in message:
                reply = json.loads(lines.get(timeout=60))
                replies[reply["id"]] = reply
        proc.stdin.close()  # the client goes away: the server ends
        assert proc.wait(timeout=30) == 0, errlog.read_text()
        reader.join(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)
    assert lines.empty()  # nothing else was written to stdout
    assert replies[1]["result"]["serverInfo"]["name"] == "reposwarm"
    assert replies[2]["result"]["isError"] is False and "\nok" in replies[2]["result"]["content"][0]["text"]
    assert replies[3]["result"]["isError"] is True
    assert "Tools over the git repository" in errlog.read_text()  # the log went to stderr


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_until_answering(url: str, proc: subprocess.Popen[bytes], timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"server exited with {proc.returncode}")
        try:
            httpx.get(url, timeout=1)  # any HTTP answer means it is up
            return
        except httpx.TransportError:
            time.sleep(0.2)
    raise AssertionError(f"{url} did not answer within {timeout}s")


async def test_streamable_http(repo: Path, tmp_path: Path) -> None:
    port = free_port()
    url = f"http://127.0.0.1:{port}/mcp"
    env = {k: v for k, v in os.environ.items() if k not in ENV_KNOBS}
    with (tmp_path / "http.out").open("wb") as out, (tmp_path / "http.err").open("wb") as err:
        proc = subprocess.Popen(
            [sys.executable, *mcp_argv("--repo", str(repo), "--allow", "src/", "--http", str(port))],
            cwd=ROOT, env=env, stdin=subprocess.DEVNULL, stdout=out, stderr=err)
        try:
            wait_until_answering(url, proc)
            with anyio.fail_after(60):
                async with streamable_http_client(url) as (read, write):
                    async with ClientSession(read, write, read_timeout_seconds=30) as session:
                        await session.initialize()
                        assert {tool.name for tool in (await session.list_tools()).tools} == TOOLS
                        text, error = await call(session, "read_file", path="src/app.py", start_line=1, end_line=1)
                        assert not error and "def greet(name):" in text and "return" not in text
                        text, error = await call(session, "write_file", path="README.md", content="replaced")
                        assert error and text.startswith("refused:")
                        text, error = await call(session, "write_file", path="src/over_http.txt", content="hi")
                        assert not error
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=10)
    assert (repo / "README.md").read_text() == "top-level readme mentioning greet\n"
    assert (repo / "src" / "over_http.txt").read_text() == "hi"
    assert f"http://127.0.0.1:{port}/mcp" in (tmp_path / "http.err").read_text()


@pytest.mark.parametrize("case", ["missing", "not-git", "bad-lanes", "busy-port"])
def test_bad_input(case: str, repo: Path, tmp_path: Path) -> None:
    args = {
        "missing": ["--repo", "/nonexistent"],
        "not-git": ["--repo", str(tmp_path)],
        "bad-lanes": ["--repo", str(repo), "--lanes", str(tmp_path / "no-such-lanes.yaml")],
        "busy-port": ["--repo", str(repo), "--http", "{port}"],
    }[case]
    expected = {"missing": "no such repository: /nonexistent", "not-git": "not a git repository",
                "bad-lanes": "no such file", "busy-port": "cannot listen on 127.0.0.1"}[case]
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen(1)
        argv = [a.replace("{port}", str(busy.getsockname()[1])) for a in args]
        done = subprocess.run([sys.executable, *mcp_argv(*argv)], cwd=ROOT, capture_output=True, text=True,
                              stdin=subprocess.DEVNULL, timeout=60)
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith("error:") and expected in done.stderr, done.stderr
    assert done.stdout == ""


def git(root: Path, *argv: str) -> str:
    # no optional locks: the test's own `git status` must not refresh the index it compares
    env = {**os.environ, **GIT_ENV, "GIT_OPTIONAL_LOCKS": "0"}
    return subprocess.run(["git", "-C", str(root), *argv], check=True, env=env, capture_output=True, text=True,
                          timeout=30).stdout


# Contents the client may not read (outside --allow and --read-only): none may reach a check's output.
SECRET = f"committed-secret-{uuid.uuid4().hex}"
UNCOMMITTED = f"uncommitted-line-{uuid.uuid4().hex}"
UNTRACKED = f"untracked-secret-{uuid.uuid4().hex}"


@pytest.fixture
def checkout(tmp_path: Path) -> Path:
    """services/a/ (to be allowed), services/b/ and services/e/ (read-only), services/c/, docs/ and README.md
    (neither), with the user's uncommitted work in it: changes inside and outside the readable paths, a staged
    change, untracked files inside and outside, an ignored file."""
    root = tmp_path / "checkout"
    for rel, text in {"services/a/app.py": "A = 1\n", "services/b/ro.txt": "read-only\n",
                      "services/c/other.txt": "other\n", "services/c/notes.txt": "notes\n", "README.md": "readme\n",
                      "services/e/e.txt": "e\n", "docs/secret.md": SECRET + "\n",
                      ".gitignore": "*.log\n__pycache__/\n"}.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    git(root.parent, "init", "-q", str(root))
    git(root, "add", ".")
    git(root, "commit", "-qm", "init")
    (root / "services" / "c" / "notes.txt").write_text(f"notes\n{UNCOMMITTED}\n")
    (root / "services" / "c" / "untracked.txt").write_text(UNTRACKED + "\n")
    (root / "services" / "b" / "ro.txt").write_text("read-only\nedited, not committed\n")
    (root / "README.md").write_text("readme\nstaged by the user\n")
    git(root, "add", "README.md")
    (root / "services" / "a" / "draft.py").write_text("DRAFT = 'wip'\n")
    (root / "build.log").write_text("ignored output\n")
    return root


def checks_lanes(tmp_path: Path) -> Path:
    """A lanes file whose one check runs services/a/run_me.py, which the MCP client writes."""
    path = tmp_path / "checks.yaml"
    path.write_text(
        "swarm:\n  lanes:\n    a: {allowed_paths: [\"services/a/\"]}\n"
        "validation:\n  profile: quick\n  profiles:\n    quick:\n"
        f"      commands:\n        - [{json.dumps(sys.executable)}, \"services/a/run_me.py\"]\n      timeout_s: 60\n")
    return path


def every_file(root: Path) -> dict[str, bytes]:
    """Every file under root, .git's own included (its index, refs, objects, worktree list), and the status."""
    found = {path.relative_to(root).as_posix(): path.read_bytes() for path in root.rglob("*")
             if path.is_file() and not path.is_symlink()}
    found["<git status>"] = git(root, "status", "--porcelain", "--untracked-files=all", "--ignored").encode()
    return found


ATTACK = '''import os, pathlib, shutil
for rel in ["services/b/ro.txt", "services/c/other.txt", "NEW_ROOT.txt", "services/c/notes.txt",
            "services/a/draft.py", "services/a/app.py"]:
    pathlib.Path(rel).parent.mkdir(parents=True, exist_ok=True)
    pathlib.Path(rel).write_text("PWNED\\n")
shutil.rmtree("services/e")  # the worker's git restores services/e/e.txt: through the link, into the checkout?
os.symlink({checkout!r} + "/services/e", "services/e")
os.symlink({checkout!r} + "/README.md", "services/a/link.md")
for target in [{checkout!r} + "/services/a/app.py", {checkout!r} + "/services/c/notes.txt"]:
    try:
        pathlib.Path(target).write_text("PWNED\\n")
        print("wrote", target)
    except OSError as err:
        print("blocked", target, type(err).__name__)
print("attack ran in", os.getcwd())
'''

HONEST = '''import os, pathlib
read = lambda rel: pathlib.Path(rel).read_text()
assert read("services/a/draft.py") == "DRAFT = 'wip'\\n"  # untracked, inside the view
assert read("services/b/ro.txt") == "read-only\\nedited, not committed\\n"  # uncommitted, read-only
# outside the view: not in the copy at all
assert sorted(os.listdir(".")) == [".git", "services"], os.listdir(".")
assert sorted(os.listdir("services")) == ["a", "b", "e"], os.listdir("services")
pathlib.Path("services/a/out.txt").write_text("a side effect\\n")
print("honest ok in", os.getcwd())
'''
ARGS = ("--allow", "services/a/", "--read-only", "services/b/", "--read-only", "services/e/")


async def test_run_checks_attack_leaves_the_checkout_as_it_was(checkout: Path, tmp_path: Path) -> None:
    """A test written through the MCP tools overwrites a read-only file, another folder's file, a new root file
    and the user's uncommitted files: the checkout (and its git directory) ends byte for byte as it was, and the
    result names every change."""
    home = tmp_path / "home"
    async with stdio_session(tmp_path / "server.stderr", "--repo", str(checkout), *ARGS, "--lanes",
                             str(checks_lanes(tmp_path)), env={"REPOSWARM_HOME": str(home)}) as session:
        text, error = await call(session, "write_file", path="services/a/run_me.py",
                                 content=ATTACK.format(checkout=str(checkout)))
        assert not error and (checkout / "services" / "a" / "run_me.py").exists()  # the client's write lands
        before = every_file(checkout)
        text, error = await call(session, "run_checks")
        assert not error and "attack ran in" in text, text
        assert every_file(checkout) == before
        ran_in = text.split("attack ran in ", 1)[1].split()[0]
        assert Path(ran_in).resolve() != checkout.resolve() and str(home) in ran_in
        outside, _, rest = text.partition("refused: the checks changed paths outside this lane's slice; reverted: ")
        assert rest, text
        for line in ["services/b/ro.txt (changed; outside this lane's writable paths)",
                     # (outside the view, so never in the copy: the attack made them there)
                     "services/c/other.txt (created; outside this lane's writable paths)",
                     "NEW_ROOT.txt (created; outside this lane's writable paths)",
                     "services/c/notes.txt (created; outside this lane's writable paths)",
                     "services/e/e.txt (deleted; outside this lane's writable paths)",
                     "services/a/link.md is a symlink leading outside the repository"]:
            assert line in rest, text
        kept = rest.split("not kept: ", 1)[1]
        assert "services/a/draft.py (changed)" in kept and "services/a/app.py (changed)" in kept
        assert "run_me.py" not in kept

        # the next run gets a fresh copy: nothing of the attack is left in it
        await call(session, "write_file", path="services/a/run_me.py", content=HONEST)
        text, error = await call(session, "run_checks")
        assert not error and "honest ok" in text, text
        assert len(list((home / "mcp").iterdir())) == 1  # one copy, recycled
    assert list((home / "mcp").iterdir()) == []  # removed with the server


async def test_run_checks_sees_uncommitted_work_and_writes_nothing_back(checkout: Path, tmp_path: Path) -> None:
    """An honest check passes against what the checkout holds now (uncommitted, staged and untracked files);
    what it writes stays in the copy, and the result says so."""
    async with stdio_session(tmp_path / "server.stderr", "--repo", str(checkout), *ARGS, "--lanes",
                             str(checks_lanes(tmp_path)), env={"REPOSWARM_HOME": str(tmp_path / "home")}) as session:
        text, error = await call(session, "write_file", path="services/a/run_me.py", content=HONEST)
        assert not error
        before = every_file(checkout)
        text, error = await call(session, "run_checks")
        assert not error and text.lower().startswith("checks passed") and "honest ok in" in text, text
        assert "refused:" not in text  # it changed nothing outside services/a/
        assert "not kept:" in text and "services/a/out.txt (created)" in text
        assert every_file(checkout) == before and not (checkout / "services" / "a" / "out.txt").exists()
        assert "throwaway copy" in (tmp_path / "server.stderr").read_text()  # the instructions say so


# Tries every way at what the client may not read, and prints what each attempt gave (a read that works prints
# the text; one that fails, its error), as one compact JSON line (the result keeps the output's tail only).
SNOOP = '''import json, os, subprocess
out = {{}}
def read(label, path):
    try:
        with open(path, "rb") as f:
            out[label] = "ok:" + f.read().decode(errors="replace")
    except OSError as err:
        out[label] = "failed:" + type(err).__name__
def git(label, *argv):
    done = subprocess.run(["git", *argv], capture_output=True, text=True)
    out[label] = f"exit {{done.returncode}}:" + done.stdout + done.stderr
read("secret", "docs/secret.md")
read("secret-up", "../docs/secret.md")
read("secret-abs", {checkout!r} + "/docs/secret.md")
read("notes", "services/c/notes.txt")
read("notes-abs", {checkout!r} + "/services/c/notes.txt")
read("untracked", "services/c/untracked.txt")
read("untracked-abs", {checkout!r} + "/services/c/untracked.txt")
read("alternates", ".git/objects/info/alternates")
read("snapshot-index", ".git/reposwarm-snapshot-index")
read("read-only", "services/b/ro.txt")
git("git-secret", "show", "HEAD:docs/secret.md")
git("git-notes", "show", "HEAD:services/c/notes.txt")
git("git-read-only", "show", "HEAD:services/b/ro.txt")
git("git-log", "log", "--all", "--format=%H %P %s")
git("blobs", "cat-file", "--batch-all-objects", "--batch-check")
out["top"] = sorted(os.listdir("."))
print(json.dumps(out))
'''


async def test_run_checks_sees_only_the_readable_paths(checkout: Path, tmp_path: Path) -> None:
    """A test the client writes tries to read and print a committed file outside --allow and --read-only, an
    uncommitted change and an untracked file outside them, through the tree, the checkout's own path, git and
    the copy's git directory: every attempt fails, and nothing the server returns or logs holds their content;
    the read-only file (as the checkout holds it now, uncommitted change included) reads."""
    home = tmp_path / "home"
    errlog = tmp_path / "server.stderr"
    async with stdio_session(errlog, "--repo", str(checkout), *ARGS, "--lanes", str(checks_lanes(tmp_path)),
                             env={"REPOSWARM_HOME": str(home)}) as session:
        text, error = await call(session, "write_file", path="services/a/run_me.py",
                                 content=SNOOP.format(checkout=str(checkout)))
        assert not error, text
        text, error = await call(session, "read_file", path="docs/secret.md")
        assert error and SECRET not in text  # (what the check must not get round: the client's own refusal)
        text, error = await call(session, "run_checks")
        assert not error and text.lower().startswith("checks passed"), text
    for hidden in (SECRET, UNCOMMITTED, UNTRACKED):
        assert hidden not in text and hidden not in errlog.read_text()
    found = [line for line in text.splitlines() if line.startswith("{")]
    assert len(found) == 1, text
    seen = json.loads(found[0])
    for label in ("secret", "secret-up", "secret-abs", "notes", "notes-abs", "untracked", "untracked-abs",
                  "alternates", "snapshot-index"):
        assert seen[label].startswith("failed:"), (label, seen[label])
    assert seen["git-secret"].startswith("exit 128:") and seen["git-notes"].startswith("exit 128:"), seen
    assert seen["read-only"] == "ok:read-only\nedited, not committed\n"
    assert seen["git-read-only"] == "exit 0:read-only\nedited, not committed\n"
    assert seen["top"] == [".git", "services"]
    assert seen["git-log"].startswith("exit 0:") and len(seen["git-log"].splitlines()) == 1  # one commit, no parent
    # no object of the files outside the view is in the check's git at all
    blobs = {line.split()[0] for line in seen["blobs"].splitlines() if " blob " in line}
    for rel in ("docs/secret.md", "services/c/notes.txt", "services/c/untracked.txt", "README.md"):
        assert git(checkout, "hash-object", rel).strip() not in blobs, rel
    assert git(checkout, "rev-parse", "HEAD:docs/secret.md").strip() not in blobs
    assert git(checkout, "hash-object", "services/b/ro.txt").strip() in blobs


def test_run_checks_copy_removed_on_sigterm_and_stale_ones_swept(checkout: Path, tmp_path: Path) -> None:
    """A server stopped by SIGTERM removes its copy; one left by a killed server is removed by the next."""
    home = tmp_path / "home"
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait(timeout=30)
    stale = home / "mcp" / f"{socket.gethostname()}-{gone.pid}-deadbeef"  # a server that died without cleaning up
    (stale / "services").mkdir(parents=True)
    alive = home / "mcp" / f"{socket.gethostname()}-{os.getpid()}-cafef00d"  # a running one's: kept
    alive.mkdir()
    (checkout / "services" / "a" / "run_me.py").write_text("print('ran')\n")
    messages: list[dict[str, Any]] = [
        {"jsonrpc": "2.0", "id": 1, "method": "initialize",
         "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}},
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "run_checks", "arguments": {}}},
    ]
    reply: dict[str, Any] = {}
    with (tmp_path / "server.stderr").open("w") as err:
        proc = subprocess.Popen([sys.executable, *mcp_argv("--repo", str(checkout), *ARGS, "--lanes",
                                                           str(checks_lanes(tmp_path)))],
                                cwd=ROOT, env={**os.environ, "REPOSWARM_HOME": str(home)}, stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, stderr=err, text=True)
    assert proc.stdin is not None and proc.stdout is not None
    try:
        for message in messages:
            proc.stdin.write(json.dumps(message) + "\n")
            proc.stdin.flush()
            if "id" in message:
                reply = json.loads(proc.stdout.readline())
        assert reply["result"]["isError"] is False and "ran" in reply["result"]["content"][0]["text"], reply
        copies = sorted(path.name for path in (home / "mcp").iterdir())
        assert len(copies) == 2 and alive.name in copies and stale.name not in copies
        proc.terminate()
        assert proc.wait(timeout=30) == -15, (tmp_path / "server.stderr").read_text()  # dies of it, as before
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)
    assert [path.name for path in (home / "mcp").iterdir()] == [alive.name]


def test_run_checks_before_the_first_commit(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A repository with no commit yet: the copy holds its untracked files (in-process server, real checks)."""
    from reposwarm.agent.tools import Toolbox
    from reposwarm.cli.mcp_server import RepoTools, close_copies, load_check_profiles, make_policy

    root = tmp_path / "fresh"
    (root / "services" / "a").mkdir(parents=True)
    git(tmp_path, "init", "-q", str(root))
    (root / "services" / "a" / "run_me.py").write_text(
        "import pathlib\nprint(pathlib.Path('services/a/notes.txt').read_text(), pathlib.Path('outside.txt').exists())\n")
    (root / "services" / "a" / "notes.txt").write_text("not committed yet\n")
    (root / "outside.txt").write_text("outside the view\n")
    profiles, default = load_check_profiles(checks_lanes(tmp_path))
    before = every_file(root)
    monkeypatch.setenv("REPOSWARM_HOME", str(tmp_path / "home"))
    tools = RepoTools(Toolbox(make_policy(root, ["services/a/"], []), check_profiles=profiles, default_profile=default))
    result = tools.call("run_checks", {})
    text = "".join(block.text for block in result.content if block.type == "text")
    assert not result.is_error and "not committed yet\n False" in text, text
    close_copies()
    assert every_file(root) == before and list((tmp_path / "home" / "mcp").iterdir()) == []
