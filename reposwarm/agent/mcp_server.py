"""An MCP server over one repository: the lanes' tool surface, for any MCP client.

    python starter.py mcp --repo PATH [--allow GLOB ...] [--read-only GLOB ...] [--lanes FILE] [--http PORT]

Tools: read_file, list_dir, search, symbol_lookup, write_file, edit_file,
delete_file and run_checks, with the same names and argument schemas as the
lanes (reposwarm.agent.tools.TOOL_ARGS), run by the same Toolbox under the same
PathPolicy. `finish` is lane-only (it ends a lane's work inside a swarm run)
and is not served.

Paths are gitignore-style globs from the repository root. --allow paths are
readable and writable, and writes land straight in the repository's working
tree; --read-only paths are readable only; with neither, the whole repository
is read-only ("**"). .git is never readable or writable. run_checks runs only
the check profiles of a lanes file (--lanes FILE: validation.profiles).

A refusal or a failed call is an MCP tool error (is_error) carrying the
message; success is text. Outputs are redacted like the lanes' outputs. Calls
run one at a time. Transport: stdio, or streamable HTTP at
http://127.0.0.1:PORT/mcp (loopback only). Logs go to stderr, never stdout.
"""

from __future__ import annotations

import json
import logging
import socket
import sys
import threading
from importlib import metadata
from pathlib import Path
from typing import Any

import anyio
import mcp.types as types
from mcp.server import Server, ServerRequestContext
from mcp.server.stdio import stdio_server

from reposwarm.agent.paths import PathPolicy, ToolRefused
from reposwarm.agent.specs import TOOL_ARGS, tool_specs
from reposwarm.agent.tools import Toolbox
from reposwarm.config import apply_env, load_lanes_file
from reposwarm.contracts import CheckProfile
from reposwarm.runs import ledger

log = logging.getLogger("reposwarm.mcp")

LANE_ONLY = frozenset({"finish"})
SERVED = tuple(name for name in TOOL_ARGS if name not in LANE_ONLY)
HOST = "127.0.0.1"
PATH = "/mcp"
_HINTS = {
    "read_file": types.ToolAnnotations(read_only_hint=True, open_world_hint=False),
    "list_dir": types.ToolAnnotations(read_only_hint=True, open_world_hint=False),
    "search": types.ToolAnnotations(read_only_hint=True, open_world_hint=False),
    "symbol_lookup": types.ToolAnnotations(read_only_hint=True, open_world_hint=False),
    "write_file": types.ToolAnnotations(read_only_hint=False, destructive_hint=True, idempotent_hint=True,
                                        open_world_hint=False),
    "edit_file": types.ToolAnnotations(read_only_hint=False, destructive_hint=True, open_world_hint=False),
    "delete_file": types.ToolAnnotations(read_only_hint=False, destructive_hint=True, open_world_hint=False),
    "run_checks": types.ToolAnnotations(read_only_hint=False, destructive_hint=False, open_world_hint=False),
}


def make_policy(repo: str | Path, allow: list[str], read_only: list[str]) -> PathPolicy:
    """The server's slice: allowed globs are writable; with no globs at all, everything is read-only."""
    if not allow and not read_only:
        read_only = ["**"]
    return PathPolicy(repo, list(allow), list(read_only))


def load_check_profiles(lanes: str | Path | None) -> tuple[dict[str, CheckProfile], str]:
    """The lanes file's check profiles and default profile (environment knobs applied); none without a file."""
    if lanes is None:
        return {}, "default"
    validation = apply_env(load_lanes_file(lanes)).validation
    return dict(validation.profiles), validation.profile


def served_tools() -> list[types.Tool]:
    """The served tools, with the lanes' descriptions and input schemas."""
    return [types.Tool(name=spec["name"], description=spec["description"], input_schema=spec["parameters"],
                       annotations=_HINTS.get(spec["name"]))
            for spec in tool_specs() if spec["name"] in SERVED]


def _text(text: str, *, error: bool = False) -> types.CallToolResult:
    return types.CallToolResult(content=[types.TextContent(type="text", text=text)], is_error=error)


class RepoTools:
    """Runs MCP tool calls through one Toolbox, one call at a time."""

    def __init__(self, toolbox: Toolbox) -> None:
        self.toolbox = toolbox
        self._lock = threading.Lock()

    def call(self, name: str, arguments: dict[str, Any] | None) -> types.CallToolResult:
        """One tool call; refusals and errors become is_error results carrying the message."""
        if name not in SERVED:
            why = "is lane-only" if name in LANE_ONLY else "is not a tool here"
            return _text(f"refused: {name!r} {why}; the tools are: {', '.join(SERVED)}", error=True)
        if name == "run_checks" and not self.toolbox.check_profiles:
            return _text("refused: run_checks has no check profiles to run; start the server with --lanes FILE "
                         "(run_checks runs that lanes file's validation.profiles)", error=True)
        arguments = {} if arguments is None else arguments
        with self._lock:
            try:
                output, error = self.toolbox.call(name, arguments, json.dumps(arguments)), False
            except ToolRefused as err:
                output, error = f"refused: {err}", True
            except (ValueError, OSError) as err:
                output, error = f"error: {err}", True
            except Exception as err:  # a bug, not the caller's fault: say so, keep the details in the log
                log.exception("tool %s crashed", name)
                output, error = f"error: {name} failed unexpectedly ({type(err).__name__})", True
        path = arguments.get("path") if isinstance(arguments.get("path"), str) else ""
        log.info("%s %s: %s", name, path, output.splitlines()[0][:200] if error else "ok")
        # Tools without a store have no full log to point at.
        return _text(ledger.redact(output.replace("; full log None)", ")")), error=error)


def describe(policy: PathPolicy, profiles: dict[str, CheckProfile]) -> str:
    """The server's instructions: what this client may read, write and run."""
    readable = ", ".join([*policy.allowed_patterns, *policy.read_only_patterns])
    writable = (f"{', '.join(policy.allowed_patterns)}, except read-only paths (writes go straight to the working "
                f"tree)" if policy.allowed_patterns else "nothing")
    checks = ", ".join(sorted(profiles)) or "none (run_checks is refused; the server has no lanes file)"
    return (f"Tools over the git repository {policy.root}; paths are relative to its root. Readable: {readable}. "
            f"Writable: {writable}. .git is never readable. Check profiles: {checks}.")


def build_server(repo: str | Path, allow: list[str], read_only: list[str], lanes: str | Path | None = None) -> Server:
    """An MCP server exposing the tool surface over `repo`; raises ConfigError for a bad lanes file."""
    policy = make_policy(repo, allow, read_only)
    profiles, default_profile = load_check_profiles(lanes)
    tools = RepoTools(Toolbox(policy, check_profiles=profiles, default_profile=default_profile))
    listing = types.ListToolsResult(tools=served_tools())
    schemas = {tool.name: tool.input_schema for tool in listing.tools}

    async def list_tools(ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None
                         ) -> types.ListToolsResult:
        return listing

    async def call_tool(ctx: ServerRequestContext[Any], params: types.CallToolRequestParams) -> types.CallToolResult:
        # Tools block (files, git grep, checks with their own event loop): run them in a worker thread.
        return await anyio.to_thread.run_sync(tools.call, params.name, params.arguments)

    return Server("reposwarm", version=_version(), instructions=describe(policy, profiles),
                  get_tool_input_schema=schemas.get, on_list_tools=list_tools, on_call_tool=call_tool)


def _version() -> str:
    try:
        return metadata.version("reposwarm")
    except metadata.PackageNotFoundError:
        return "dev"


def listen(port: int) -> socket.socket:
    """A listening loopback socket for --http; raises OSError/OverflowError when the port cannot be had."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((HOST, port))
        sock.listen(128)
    except BaseException:
        sock.close()
        raise
    sock.setblocking(False)
    return sock


def setup_logging(level: int = logging.INFO) -> None:
    """Everything to stderr: on stdio, stdout carries only the protocol."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("reposwarm mcp: %(message)s"))
    log.handlers[:] = [handler]
    log.setLevel(level)
    log.propagate = False
    logging.basicConfig(stream=sys.stderr, level=logging.WARNING)


async def serve(server: Server, sock: socket.socket | None = None) -> None:
    """Serve over stdio until the client closes it, or over streamable HTTP on `sock` until stopped."""
    log.info("%s", server.instructions)
    if sock is None:
        log.info("serving over stdio")
        async with stdio_server() as (read, write):
            await server.run(read, write, server.create_initialization_options())
        return
    import uvicorn

    app = server.streamable_http_app(streamable_http_path=PATH, host=HOST)
    host, port = sock.getsockname()[:2]
    log.info("serving streamable HTTP at http://%s:%d%s", host, port, PATH)
    config = uvicorn.Config(app, log_level="warning", access_log=False, lifespan="on")
    await uvicorn.Server(config).serve(sockets=[sock])
