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
the check profiles of a lanes file (--lanes FILE: validation.profiles), and
never in the user's checkout: in a throwaway copy of it (CheckCopy) holding
only the readable paths (--allow and --read-only) as the checkout holds them
now, uncommitted and untracked files included, and no other file of the
checkout, committed or not: a check the client wrote reads and prints nothing
the client could not read with read_file. The copy is filtered by the lanes'
own view filter (checks/sandbox/gitview.readable_tree), and the sandbox gives
the check the git view a lane's check gets, of the same paths. What the checks
change there is never written back: changes outside the writable paths are
reverted and reported as a lane's run_checks reports them, and the others are
reported as discarded (the client keeps a change with the file tools). A check
that needs a file outside the writable paths (a root pyproject.toml, a
conftest.py, tests) gets it by naming it with --read-only.

A refusal or a failed call is an MCP tool error (is_error) carrying the
message; success is text. Outputs are redacted like the lanes' outputs. Calls
run one at a time. Transport: stdio, or streamable HTTP at
http://127.0.0.1:PORT/mcp (loopback only). Logs go to stderr, never stdout.
"""

from __future__ import annotations

import atexit
import json
import logging
import os
import shutil
import signal
import socket
import sys
import threading
import uuid
import weakref
from importlib import metadata
from pathlib import Path
from typing import Any

import anyio
import mcp.types as types
from mcp.server import Server, ServerRequestContext
from mcp.server.stdio import stdio_server

from reposwarm.agent.specs import FINISH, TOOL_ARGS, tool_specs
from reposwarm.agent.tools import Toolbox
from reposwarm.checks.sandbox import gitview
from reposwarm.contracts import CheckProfile
from reposwarm.lanes.loading import apply_env, load_lanes_file
from reposwarm.runs import ledger
from reposwarm.runs.store import home as reposwarm_home
from reposwarm.slices.leftovers import changes
from reposwarm.slices.policy import PathPolicy, ToolRefused
from reposwarm.vcs import gitcmd

log = logging.getLogger("reposwarm.mcp")

# (`run` would run a command in the user's own checkout, where nothing reverts what it writes: lanes only)
LANE_ONLY = frozenset({FINISH, "run"})
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


COPIES_FOLDER = "mcp"  # under REPOSWARM_HOME: the swarm's own trees, so the Toolbox reverts what the checks change
SNAPSHOT_INDEX = "reposwarm-snapshot-index"
VIEW_INDEX = "reposwarm-view-index"
SHOWN = 20  # changes listed by name in a result; the rest are counted


_COPIES: weakref.WeakSet[CheckCopy] = weakref.WeakSet()


def close_copies() -> None:
    """Remove every CheckCopy of this process."""
    for copy in list(_COPIES):
        copy.close()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # (someone else's process: alive)
        return True
    return True


class CheckCopy:
    """The throwaway tree run_checks runs in, never the user's checkout.

    A checks run executes code the MCP client wrote, and the sandbox lets it read and write its whole tree: run
    in the checkout, it could overwrite read-only paths, other folders and the user's uncommitted work, and read
    and print any file the client may not read. So each run first records the checkout as it is now (tracked,
    uncommitted and untracked files; not ignored ones), keeps of it only the paths the client may read (--allow
    and --read-only, filtered by the lanes' own view filter, gitview.readable_tree), commits that in a private
    repository under REPOSWARM_HOME, and checks the commit out there. The sandbox shows the check, as it shows a
    lane's, a git view of that commit filtered to the same paths, never this repository. That repository
    borrows the checkout's objects (alternates) and writes its own, so nothing of the user's git directory
    is written: not the index, not a ref, not a worktree entry. The tree is recycled between runs (a
    `checkout -f` rewrites only what differs; DESIGN.md section 10) and removed when the server ends.
    """

    def __init__(self, checkout: PathPolicy) -> None:
        self.checkout = checkout
        # what the client may read, as a lane's run_checks names it to its check's view (agent/checking.py)
        self.readable = (*checkout.allowed_patterns, *checkout.read_only_patterns)
        self.root: Path | None = None
        # serve() removes it on its way out (the CLI leaves by os._exit: no atexit there); atexit for other hosts
        _COPIES.add(self)
        atexit.register(self.close)

    def _git(self, *args: str, cwd: Path, env: dict[str, str] | None = None) -> str:
        done = gitcmd.run(list(args), cwd=cwd, capture_output=True, env=env)
        if done.returncode != 0:
            why = done.stderr.decode("utf-8", "replace").strip().splitlines()
            raise ValueError(f"run_checks could not copy the checkout (git {args[0]}: "
                             f"{why[-1][:300] if why else f'exit {done.returncode}'})")
        return str(done.stdout.decode("utf-8", "surrogateescape").strip())

    def _make(self) -> Path:
        folder = reposwarm_home() / COPIES_FOLDER
        if folder == self.checkout.root or self.checkout.root in folder.parents:
            # its snapshot would take in the copy itself
            raise ToolRefused(f"run_checks needs REPOSWARM_HOME outside the repository; {folder} is inside "
                              f"{self.checkout.root}")
        folder.mkdir(parents=True, exist_ok=True)
        host = socket.gethostname()
        for stale in folder.glob(f"{host}-*-*"):  # left by a server killed before it could clean up
            pid = stale.name[len(host) + 1:].split("-", 1)[0]
            if pid.isdigit() and not _alive(int(pid)):
                shutil.rmtree(stale, ignore_errors=True)
        root = folder / f"{host}-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        self._git("init", "-q", "--", str(root), cwd=folder)
        common = Path(self._git("rev-parse", "--path-format=absolute", "--git-common-dir", cwd=self.checkout.root))
        (root / ".git" / "objects" / "info" / "alternates").write_text(f"{common / 'objects'}\n")
        return root.resolve()

    def refresh(self) -> Path:
        """Make the copy hold what the checkout holds now; returns its root."""
        if self.root is None or not gitcmd.healthy_worktree(self.root):
            self.close()
            self.root = self._make()
        checkout, dot = self.checkout.root, self.root / ".git"
        common = Path(self._git("rev-parse", "--path-format=absolute", "--git-common-dir", cwd=checkout))
        exclude = common / "info" / "exclude"  # what the user ignores there stays out of the copy too
        (dot / "info" / "exclude").unlink(missing_ok=True)
        if exclude.is_file():
            shutil.copyfile(exclude, dot / "info" / "exclude")
        # The user's index, copied (never written): its stat data lets `add -A` hash only what changed; copy2
        # keeps its mtime, which git's racy-file check compares file times with. (`add -A` is right here, as it
        # never is for a lane: it snapshots the user's own checkout, as it is, into a private throwaway index.)
        index = Path(self._git("rev-parse", "--path-format=absolute", "--git-path", "index", cwd=checkout))
        snapshot_index = dot / SNAPSHOT_INDEX
        snapshot_index.unlink(missing_ok=True)
        if index.is_file():
            shutil.copy2(index, snapshot_index)
        env = {"GIT_INDEX_FILE": str(snapshot_index)}
        self._git(f"--git-dir={dot}", f"--work-tree={checkout}", "add", "-A", cwd=checkout, env=env)
        whole = self._git(f"--git-dir={dot}", "write-tree", cwd=checkout, env=env)
        # Only what the client may read goes into the copy, filtered as a lane's check's view is
        # (gitview.readable_tree): the checks never see another file of the checkout, committed or not.
        view_index = dot / VIEW_INDEX
        view_index.unlink(missing_ok=True)
        try:
            tree, _ = gitview.readable_tree(whole, self.readable, {"GIT_DIR": str(dot),
                                                                   "GIT_INDEX_FILE": str(view_index)})
        except gitview.GitViewError as err:
            raise ValueError(f"run_checks could not copy the checkout's readable paths ({err})") from None
        head = gitcmd.rev(gitcmd.repo(checkout), "HEAD")  # None before the first commit
        commit = self._git(f"--git-dir={dot}", *gitcmd.IDENTITY, "commit-tree", tree, *(["-p", head] if head else []),
                           "-m", "reposwarm mcp: the checkout's readable paths as run_checks found them", cwd=checkout)
        self._git("checkout", "-q", "-f", "--detach", commit, cwd=self.root)
        self._git("clean", "-q", "-ffdx", cwd=self.root)  # what the last run left, build output included
        return self.root

    def discarded(self, policy: PathPolicy) -> list[str]:
        """What the checks changed in the copy inside the writable paths (and left there): never written back."""
        lines = []
        for change in changes(policy.root):
            if change.code == "!!":  # caches and build output: nobody keeps them
                continue
            what = "created" if change.code == "??" else "deleted" if "D" in change.code else "changed"
            lines.append(f"{change.path} ({what})")
        return lines

    def close(self) -> None:
        if self.root is not None:
            shutil.rmtree(self.root, ignore_errors=True)
            self.root = None


class RepoTools:
    """Runs MCP tool calls through one Toolbox, one call at a time; run_checks in a CheckCopy."""

    def __init__(self, toolbox: Toolbox) -> None:
        self.toolbox = toolbox
        self.copy = CheckCopy(toolbox.policy)
        self._checks: Toolbox | None = None
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
                if name == "run_checks":
                    output, error = self._run_checks(arguments), False
                else:
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

    def _run_checks(self, arguments: dict[str, Any]) -> str:
        """The lanes' run_checks, over the copy: its Toolbox reverts and reports what the checks changed outside
        the writable paths (the copy is under REPOSWARM_HOME); what they changed inside is reported here."""
        root = self.copy.refresh()
        if self._checks is None or self._checks.policy.root != root:
            mine = self.toolbox
            policy = PathPolicy(root, mine.policy.allowed_patterns, mine.policy.read_only_patterns)
            self._checks = Toolbox(policy, check_profiles=mine.check_profiles, default_profile=mine.default_profile)
        text = self._checks.call("run_checks", arguments, json.dumps(arguments))
        kept = self.copy.discarded(self._checks.policy)
        if kept:
            more = f"; and {len(kept) - SHOWN} more" if len(kept) > SHOWN else ""
            text += ("\nnot kept: the checks ran in a throwaway copy of the checkout, and their changes there are "
                     "never written back (make a change you want with write_file, edit_file or delete_file): "
                     + "; ".join(kept[:SHOWN]) + more)
        return text


def describe(policy: PathPolicy, profiles: dict[str, CheckProfile]) -> str:
    """The server's instructions: what this client may read, write and run."""
    readable = ", ".join([*policy.allowed_patterns, *policy.read_only_patterns])
    writable = (f"{', '.join(policy.allowed_patterns)}, except read-only paths (writes go straight to the working "
                f"tree)" if policy.allowed_patterns else "nothing")
    where = (" run_checks runs in a throwaway copy of the readable paths of the working tree (uncommitted files "
             "included; no other file) and writes nothing back." if profiles else "")
    checks = ", ".join(sorted(profiles)) or "none (run_checks is refused; the server has no lanes file)"
    return (f"Tools over the git repository {policy.root}; paths are relative to its root. Readable: {readable}. "
            f"Writable: {writable}. .git is never readable. Check profiles: {checks}.{where}")


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
    """Serve over stdio until the client closes it, or over streamable HTTP on `sock` until stopped; then (or on
    SIGTERM) remove the run_checks copies."""
    log.info("%s", server.instructions)
    try:
        if sock is None:
            await _serve_stdio(server)
        else:
            await _serve_http(server, sock)
    finally:
        close_copies()


def _die_clean(signum: int, frame: object) -> None:
    """SIGTERM on stdio: remove the copies, then die of the signal as before (the server's stdin read blocks in a
    thread that nothing can cancel, so there is no orderly way out to wait for)."""
    close_copies()
    signal.signal(signum, signal.SIG_DFL)
    os.kill(os.getpid(), signum)


async def _serve_stdio(server: Server) -> None:
    log.info("serving over stdio")
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, _die_clean)
    async with stdio_server() as (read, write):
        await server.run(read, write, server.create_initialization_options())


async def _serve_http(server: Server, sock: socket.socket) -> None:
    import uvicorn

    app = server.streamable_http_app(streamable_http_path=PATH, host=HOST)
    host, port = sock.getsockname()[:2]
    log.info("serving streamable HTTP at http://%s:%d%s", host, port, PATH)
    config = uvicorn.Config(app, log_level="warning", access_log=False, lifespan="on")
    await uvicorn.Server(config).serve(sockets=[sock])
