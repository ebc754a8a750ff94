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
from reposwarm.config import ENV_KNOBS

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
async def stdio_session(errlog: Path, *args: str) -> AsyncIterator[ClientSession]:
    """Start `starter.py mcp ARGS` over stdio and hand back an initialised client session."""
    params = StdioServerParameters(command=sys.executable, args=mcp_argv(*args), cwd=str(ROOT))
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
        assert not error and text.startswith("checks passed"), text
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
