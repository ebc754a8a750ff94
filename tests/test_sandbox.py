"""The sandbox every check command runs in (reposwarm/checks/sandbox/), for real: bubblewrap, real processes, a real
git repository with a linked worktree like a lane's. Every test judges from the host what a command could see or
do, never from the command's word alone."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
from temporalio.testing import ActivityEnvironment

from activities.validate import validate
from reposwarm.agent.tools import RunChecksArgs, Toolbox
from reposwarm.checks import sandbox
from reposwarm.checks.runner import common_git_dir, run_profile
from reposwarm.checks.sandbox import SandboxUnavailable, Tree
from reposwarm.contracts import CheckProfile, ValidateInput
from reposwarm.runs.store import run_dir
from reposwarm.slices.policy import PathPolicy, ToolRefused
from tests.helpers import git, make_repo

ROOT = Path(__file__).resolve().parents[1]
SECRET = "postgres://app:hunter2-" + uuid.uuid4().hex  # under a harmless-looking name: redaction by name misses it
MIB = 1024 * 1024

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="bubblewrap is Linux-only")

# Tries everything a lane-written check should not be able to do, and says what happened to each attempt.
ATTACK = r'''
import json, os, socket, subprocess, sys
args = json.loads(sys.argv[1])
out = {}

def attempt(name, fn):
    try:
        out[name] = ["ok", fn()]
    except Exception as err:
        out[name] = ["failed", f"{type(err).__name__}: {err}"]

def read(path):
    with open(path, "rb") as f:
        return f.read().decode(errors="replace")

def write(path, text="pwned\n", mode="a"):
    with open(path, mode) as f:
        f.write(text)

def every(name):
    found = {}
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                found[pid] = read(f"/proc/{pid}/{name}")
            except OSError as err:
                found[pid] = f"unreadable: {err}"
    return found

def git(*argv):
    return subprocess.run(["git", "-c", "user.name=x", "-c", "user.email=x@x", *argv], capture_output=True,
                          text=True, check=True).stdout.strip()

attempt("worker_environ", lambda: read(f"/proc/{args['worker_pid']}/environ"))
attempt("all_environ", lambda: every("environ"))
attempt("processes", lambda: every("cmdline"))
for i, path in enumerate(args["outside"]):
    attempt(f"outside_{i}", lambda path=path: write(path))
attempt("hook", lambda: write(args["hook"], "#!/bin/sh\necho pwned\n", "w"))
attempt("git_config", lambda: write(args["git_config"], "[core]\n\thooksPath = /tmp\n"))
attempt("dot_git", lambda: write(".git", "gitdir: /tmp/elsewhere\n", "w"))
attempt("planted", lambda: [read(p) for p in args["planted"]])
attempt("home", lambda: os.listdir(os.environ["HOME"]))
attempt("connect", lambda: socket.create_connection(("127.0.0.1", args["port"]), timeout=5).close())
attempt("caps", lambda: [x for x in read("/proc/self/status").splitlines() if x.startswith("CapEff")][0])
attempt("git_head", lambda: git("rev-parse", "HEAD"))
attempt("git_commit", lambda: git("commit", "--allow-empty", "-q", "-m", "pwned"))
attempt("inside", lambda: write("inside.txt"))
out["env"] = dict(os.environ)
print(json.dumps(out))
'''


@pytest.fixture
def lane(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Tree:
    """A repository and a linked worktree of it under REPOSWARM_HOME, as a lane's; HOME with a dotfile in it."""
    monkeypatch.setenv("REPOSWARM_HOME", str(tmp_path / "rshome"))
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.delenv(sandbox.SWITCH, raising=False)
    monkeypatch.delenv(sandbox.BWRAP, raising=False)
    (tmp_path / "home").mkdir()
    (tmp_path / "home" / ".netrc").write_text(f"machine db password {SECRET}\n")
    other_run = tmp_path / "rshome" / "runs" / "another-run"
    other_run.mkdir(parents=True)
    (other_run / "ledger.jsonl").write_text(f'{{"secret": "{SECRET}"}}\n')
    repo = make_repo(tmp_path / "repo", {"README.md": "# the user's checkout\n", ".gitignore": "build/\n",
                                         "api/app.py": "VERSION = 1\n", "docs/index.md": "# Docs\n"})
    worktree = tmp_path / "rshome" / "runs" / "this-run" / "lanes" / "api"
    git(repo, "worktree", "add", "-q", "--detach", str(worktree), "HEAD")
    return Tree(root=worktree.resolve(), git_dir=common_git_dir(worktree))


def profile(**limits) -> CheckProfile:
    return CheckProfile(commands=[["true"]], timeout_s=120, **limits)


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def host_processes(marker: str) -> list[int]:
    """Processes of the whole machine whose command line holds `marker`."""
    found = []
    for entry in os.scandir("/proc"):
        if entry.name.isdigit() and int(entry.name) != os.getpid():
            try:
                if marker.encode() in Path(f"/proc/{entry.name}/cmdline").read_bytes():
                    found.append(int(entry.name))
            except OSError:
                pass
    return found


def gone(marker: str, within_s: float = 10) -> bool:
    """Whether every process holding `marker` is gone (a killed process takes a moment to be reaped)."""
    deadline = time.monotonic() + within_s
    while host_processes(marker):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


async def attack(lane: Tree, tmp_path: Path, port: int, **limits) -> dict:
    (lane.root / "attack.py").write_text(ATTACK)
    repo_git = lane.git_dir
    assert repo_git is not None
    args = {"worker_pid": os.getpid(), "port": port, "hook": str(repo_git / "hooks" / "post-commit"),
            "git_config": str(repo_git / "config"),
            "outside": [str(tmp_path / "outside.txt"), f"/tmp/reposwarm-probe-{uuid.uuid4().hex}",
                        f"/var/tmp/reposwarm-probe-{uuid.uuid4().hex}", str(tmp_path / "repo" / "README.md"),
                        str(tmp_path / "rshome" / "runs" / "another-run" / "ledger.jsonl")],
            "planted": [str(tmp_path / "home" / ".netrc"),
                        str(tmp_path / "rshome" / "runs" / "another-run" / "ledger.jsonl")]}
    ran = await sandbox.run([sys.executable, "attack.py", json.dumps(args)], lane, profile(**limits), 120)
    assert ran.exit_code == 0, ran.output.decode(errors="replace")
    assert SECRET.encode() not in ran.output  # the raw output: no redaction between the command and this test
    return {"args": args, **json.loads(ran.output.decode().strip().splitlines()[-1])}


async def test_a_check_sees_and_writes_nothing_of_the_worker_but_its_tree(lane, tmp_path, monkeypatch):
    monkeypatch.setenv("DB_CONN", SECRET)
    monkeypatch.setenv("PASSED_ONE", "passed-by-the-operator")
    monkeypatch.setenv("REPOSWARM_CHECK_ENV_PASS", "PASSED_ONE")
    repo = tmp_path / "repo"
    before = {p: digest(p) for p in (repo / ".git" / "config", lane.root / ".git", repo / "README.md")}
    head = git(repo, "rev-parse", "HEAD")
    with socket.create_server(("127.0.0.1", 0)) as server:
        out = await attack(lane, tmp_path, server.getsockname()[1], env={"APP_MODE": "test"})

    # the worker's process and environment: not there
    assert out["worker_environ"][0] == "failed"
    processes = out["processes"][1]
    # only bwrap's PID 1 and the check itself (the worker here is pytest, under the same Python)
    assert sorted(cmdline.split("\0")[0] for cmdline in processes.values()) == sorted([sandbox.bwrap(), sys.executable])
    assert out["env"]["APP_MODE"] == "test" and out["env"]["PASSED_ONE"] == "passed-by-the-operator"
    allowed = {"PATH", "LANG", "TZ", "TERM", "HOME", "TMPDIR", "CI", "PYTHONDONTWRITEBYTECODE", "APP_MODE",
               "PASSED_ONE", "PWD"}  # (bwrap sets PWD to the tree)
    assert {k for k in out["env"] if not k.startswith("LC_")} <= allowed
    assert out["caps"][1].split()[-1] == "0000000000000000"  # no capabilities, though the worker is root here

    # nothing outside the tree written: the test's folder, /tmp, the root file system, the user's checkout,
    # another run's store
    for path in out["args"]["outside"]:
        assert not Path(path).exists() or digest(Path(path)) == before.get(Path(path), digest(Path(path)))
    assert not (tmp_path / "outside.txt").exists()
    assert not any(Path(p).exists() for p in out["args"]["outside"] if "reposwarm-probe-" in p)
    assert digest(repo / "README.md") == before[repo / "README.md"]
    assert SECRET in (tmp_path / "rshome" / "runs" / "another-run" / "ledger.jsonl").read_text()
    assert "pwned" not in (tmp_path / "rshome" / "runs" / "another-run" / "ledger.jsonl").read_text()
    # the dotfiles of HOME and the other run's files: invisible
    assert out["planted"][0] == "failed" and out["home"] == ["ok", []]
    # git inside works, read-only: no hook, no config, no commit, and the worktree's .git file stays
    assert out["git_head"] == ["ok", head]
    assert out["git_commit"][0] == "failed" and git(repo, "rev-parse", "HEAD") == head
    assert out["hook"][0] == "failed" and not (repo / ".git" / "hooks" / "post-commit").exists()
    assert out["git_config"][0] == "failed" and out["dot_git"][0] == "failed"
    assert all(digest(p) == d for p, d in before.items())
    # no network: the test's listening socket cannot be reached
    assert out["connect"][0] == "failed"
    # and the tree itself is writable
    assert out["inside"][0] == "ok" and (lane.root / "inside.txt").read_text() == "pwned\n"


async def test_a_profile_that_asks_for_the_network_gets_it(lane, tmp_path):
    with socket.create_server(("127.0.0.1", 0)) as server:
        out = await attack(lane, tmp_path, server.getsockname()[1], network=True)
    assert out["connect"] == ["ok", None]
    assert out["hook"][0] == "failed"  # the rest of the sandbox stays


async def test_a_toolchain_in_a_virtual_environment_under_tmp_still_runs(lane, tmp_path, monkeypatch):
    # /tmp is private in the sandbox; a clean clone in /tmp (as CI makes) has its venv there, and every check that
    # names that venv's python, or finds it on PATH, must still run (read-only)
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    monkeypatch.setenv("PATH", f"{venv / 'bin'}{os.pathsep}{os.environ['PATH']}")
    ran = await sandbox.run(["python", "-c", "import sys; print(sys.prefix); open(sys.prefix + '/x', 'w')"], lane,
                            profile(), timeout_s=60)
    assert str(venv).encode() in ran.output, ran.output
    assert b"Read-only file system" in ran.output and not (venv / "x").exists()


async def test_private_tmp_and_home_are_bounded_by_tmp_mb(lane):
    # memory-backed: unbounded, a check filling /tmp would fill the machine's memory
    script = ("import os\nfor where in ('/tmp', os.environ['HOME']):\n    try:\n"
              "        with open(where + '/fill', 'wb') as f:\n            f.write(b'x' * (8 * 1024 * 1024))\n"
              "        print(where, 'filled', flush=True)\n    except OSError as err:\n"
              "        print(where, 'full', err.errno, flush=True)\n")
    ran = await sandbox.run([sys.executable, "-c", script], lane, profile(tmp_mb=4, max_file_mb=64), timeout_s=60)
    lines = ran.output.decode().splitlines()
    assert [line.split()[1] for line in lines if line.split()[0] in ("/tmp", os.environ["HOME"])] == ["full", "full"]
    assert "/tmp and HOME 4 MB each" in "; ".join(ran.limits)


async def test_a_command_over_its_timeout_is_killed_with_its_children(lane):
    marker = f"reposwarm-sleeper-{uuid.uuid4().hex}"
    # (the child leaves the check's process group and session: a kill of the group would miss it)
    script = ("import subprocess, sys, time\n"
              f"subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(300)', '{marker}'],\n"
              "                 start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)\n"
              "print('started', flush=True)\n"
              "time.sleep(300)\n")
    ran = await sandbox.run([sys.executable, "-c", script], lane, profile(), timeout_s=2)
    assert ran.timed_out and ran.exit_code is None
    assert b"started" in ran.output and b"killed after 2s timeout" in ran.output
    assert gone(marker), "a child of the check outlived its timeout"


async def test_output_over_the_cap_ends_the_command(lane):
    ran = await sandbox.run([sys.executable, "-c", "import sys\nwhile True:\n    sys.stdout.write('x' * 65536)\n"],
                            lane, profile(max_output_mb=1), timeout_s=120)
    assert ran.output_cut and not ran.timed_out and ran.exit_code is None
    assert len(ran.output) <= MIB + 200
    assert ran.output.endswith(b"[reposwarm: output passed 1 MB: the command was ended there]")


async def test_processes_stop_at_max_processes(lane):
    script = ("import subprocess\n"
              "kids = []\n"
              "try:\n"
              "    for _ in range(64):\n"
              "        kids.append(subprocess.Popen(['sleep', '30']))\n"
              "except OSError as err:\n"
              "    print('refused:', err)\n"
              "print('started', len(kids))\n"
              "for kid in kids:\n"
              "    kid.kill()\n")
    ran = await sandbox.run([sys.executable, "-c", script], lane, profile(max_processes=8), timeout_s=120)
    output = ran.output.decode()
    assert ran.exit_code == 0, output
    started = int(output.split("started ")[1].split()[0])
    assert started < 8, output  # (the check itself is one of the 8)
    assert "refused:" in output
    assert any("processes" in limit and "NOT" not in limit for limit in ran.limits), ran.limits


async def test_a_big_allocation_fails_under_memory_mb(lane):
    script = "try:\n    b = bytearray(512 * 1024 * 1024)\n    print('allocated')\nexcept MemoryError:\n    print('MemoryError')\n"
    ran = await sandbox.run([sys.executable, "-c", script], lane, profile(memory_mb=256), timeout_s=120)
    assert ran.output.decode().strip() == "MemoryError"


async def test_a_big_file_fails_at_max_file_mb(lane):
    script = ("try:\n"
              "    with open('big.bin', 'wb') as f:\n"
              "        f.write(b'x' * (3 * 1024 * 1024))\n"
              "    print('written')\n"
              "except OSError as err:\n"
              "    print('refused:', err)\n")
    ran = await sandbox.run([sys.executable, "-c", script], lane, profile(max_file_mb=1), timeout_s=120)
    assert "File too large" in ran.output.decode()
    assert (lane.root / "big.bin").stat().st_size <= MIB


def test_a_check_dies_with_its_killed_worker(lane, tmp_path):
    """--die-with-parent: a SIGKILLed worker takes its running checks along, whatever they started."""
    marker = f"reposwarm-orphan-{uuid.uuid4().hex}"
    worker = tmp_path / "worker.py"
    worker.write_text(
        "import asyncio, sys\n"
        f"sys.path.insert(0, {str(ROOT)!r})\n"
        "from pathlib import Path\n"
        "from reposwarm.checks import sandbox\n"
        "from reposwarm.contracts import CheckProfile\n"
        f"tree = sandbox.Tree(root=Path({str(lane.root)!r}), git_dir=None)\n"
        # (a child in a session of its own: a kill of the check's process group would miss it)
        "script = ('import subprocess, sys, time; subprocess.Popen([sys.executable, \"-c\", \"import time; '\n"
        "          'time.sleep(300)\", sys.argv[1]], start_new_session=True); time.sleep(300)')\n"
        f"argv = [sys.executable, '-c', script, {marker!r}]\n"
        "asyncio.run(sandbox.run(argv, tree, CheckProfile(commands=[['x']]), 600))\n")
    proc = subprocess.Popen([sys.executable, str(worker)], start_new_session=True)
    try:
        deadline = time.monotonic() + 60
        while len(host_processes(marker)) < 4:  # bwrap, its PID 1 in the sandbox, the check, its child
            assert proc.poll() is None and time.monotonic() < deadline, "the check never started"
            time.sleep(0.05)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        assert gone(marker), "the check outlived its killed worker"
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


async def test_without_bubblewrap_a_check_is_refused_in_one_line(lane, monkeypatch):
    monkeypatch.setenv(sandbox.BWRAP, "/nonexistent/bwrap")
    checks = CheckProfile(commands=[[sys.executable, "-c", "open('ran.txt', 'w').close()"]])
    with pytest.raises(SandboxUnavailable) as refused:
        await run_profile(checks, lane.root, None)
    message = str(refused.value)
    assert "\n" not in message and "/nonexistent/bwrap" in message
    assert "apt-get install bubblewrap" in message and "REPOSWARM_SANDBOX=off" in message
    assert not (lane.root / "ran.txt").exists()
    assert sandbox.status() == message


def test_the_run_checks_tool_refuses_without_bubblewrap(lane, monkeypatch):
    monkeypatch.setenv(sandbox.BWRAP, "/nonexistent/bwrap")
    tools = Toolbox(PathPolicy(lane.root, ["api/"]), check_profiles={"default": profile()})
    with pytest.raises(ToolRefused, match="apt-get install bubblewrap"):
        tools.run_checks(RunChecksArgs())


async def test_with_the_sandbox_off_checks_run_and_say_they_ran_unsandboxed(lane, tmp_path, monkeypatch):
    monkeypatch.setenv(sandbox.SWITCH, "off")
    monkeypatch.setenv(sandbox.BWRAP, "/nonexistent/bwrap")
    outside = tmp_path / f"written-{uuid.uuid4().hex}"
    checks = CheckProfile(commands=[[sys.executable, "-c", f"open({str(outside)!r}, 'w').close()"]])
    report = await run_profile(checks, lane.root, None)
    assert report.passed and outside.exists()  # (what the sandbox would have stopped)
    assert report.unsandboxed and not report.commands[0].sandboxed
    assert sandbox.status() == sandbox.OFF_WARNING and "unsandboxed" in sandbox.OFF_WARNING


def test_a_bad_sandbox_switch_is_named(monkeypatch):
    monkeypatch.setenv(sandbox.SWITCH, "of")
    with pytest.raises(ValueError, match="REPOSWARM_SANDBOX='of'"):
        sandbox.enabled()


async def test_junit_reports_are_written_from_the_sandbox_and_redacted(lane, monkeypatch):
    key = "sk-" + "sandboxfakekey0123456789abcdef"  # fake
    script = ("import sys\n"
              "open(sys.argv[1], 'w').write('<testsuite><testcase classname=\"tests.test_x.T\" name=\"test_key\">'\n"
              f"    '<failure message=\"leaked {key}\">trace</failure></testcase></testsuite>')\n"
              "sys.exit(1)\n")
    report = await run_profile(CheckProfile(commands=[[sys.executable, "-c", script, "{junit}"]]), lane.root, None)
    assert [f.name for f in report.failures] == ["tests.test_x.T.test_key"]
    assert key not in report.failures[0].message and "[redacted" in report.failures[0].message


def test_what_checks_change_outside_a_lanes_slice_is_reverted_and_refused(lane):
    script = ("open('docs/new.md', 'w').write('planted')\n"
              "open('README.md', 'a').write('changed')\n"
              "open('api/mine.txt', 'w').write('kept')\n")
    tools = Toolbox(PathPolicy(lane.root, ["api/"]),
                    check_profiles={"default": CheckProfile(commands=[[sys.executable, "-c", script]])})
    text = tools.run_checks(RunChecksArgs())
    assert "refused: the checks changed paths outside this lane's slice; reverted: " in text
    assert "docs/new.md" in text and "README.md" in text
    assert not (lane.root / "docs" / "new.md").exists()
    assert (lane.root / "README.md").read_text() == "# the user's checkout\n"
    assert (lane.root / "api" / "mine.txt").read_text() == "kept"


async def test_validation_leaves_nothing_in_its_checkout(lane, tmp_path):
    repo = tmp_path / "repo"
    script = ("import os\n"
              "open('junk.txt', 'w').write('x')\n"
              "open('api/app.py', 'a').write('BROKEN = True\\n')\n"
              "os.makedirs('build', exist_ok=True)\n"
              "open('build/out.bin', 'w').write('x')\n")
    req = ValidateInput(run_id=f"sandbox-{uuid.uuid4().hex[:8]}", repo_path=str(repo), ref=git(repo, "rev-parse", "HEAD"),
                        profile_name="default", label="round 1 check 1",
                        profile=CheckProfile(commands=[[sys.executable, "-c", script]]))
    report = await ActivityEnvironment().run(validate, req)
    assert report.passed and not report.unsandboxed
    checkout = run_dir(req.run_id) / "validate"
    assert git(checkout, "status", "--porcelain", "--ignored") == ""


async def test_validation_goes_on_where_a_killed_git_left_its_lock(lane, tmp_path):
    """A worker killed while git worked in the run's checkout leaves index.lock; the next attempt, on any worker
    of the host, makes the checkout again rather than fail on it at every retry."""
    repo = tmp_path / "repo"
    req = ValidateInput(run_id=f"sandbox-{uuid.uuid4().hex[:8]}", repo_path=str(repo), ref=git(repo, "rev-parse", "HEAD"),
                        profile_name="default", label="baseline", profile=CheckProfile(commands=[["true"]]))
    assert (await ActivityEnvironment().run(validate, req)).passed
    checkout = run_dir(req.run_id) / "baseline"
    lock = Path(git(checkout, "rev-parse", "--absolute-git-dir")) / "index.lock"
    lock.write_text("")
    report = await ActivityEnvironment().run(validate, req)
    assert report.passed and not lock.exists()
    # killed during `git worktree add` itself: the folder half made, its registration locked ("initializing")
    git(repo, "worktree", "lock", "--reason", "initializing", str(checkout))
    shutil.rmtree(checkout)
    assert (await ActivityEnvironment().run(validate, req)).passed
    # killed while `git worktree add` of another worktree (a lane's) wrote its registration: `commondir` empty,
    # and every later add of the repository fails reading it, whichever worktree it adds
    lane_tree = tmp_path / "lane"
    git(repo, "worktree", "add", "-q", "--detach", str(lane_tree), "HEAD")
    registration = Path(git(lane_tree, "rev-parse", "--absolute-git-dir"))
    (registration / "commondir").write_text("")
    shutil.rmtree(checkout)
    assert (await ActivityEnvironment().run(validate, req)).passed
    assert not registration.exists()  # forgotten: it pointed at nothing git could read


@pytest.mark.parametrize("sandboxed", [True, False])
async def test_checks_run_below_the_worker_s_priority(lane, monkeypatch, sandboxed):
    """A host's CPU-heavy checks must not starve its worker (late heartbeats get activities retried): the check
    runs niced, and so does its session's autogroup, where niceness would otherwise weigh only inside it."""
    if not sandboxed:
        monkeypatch.setenv("REPOSWARM_SANDBOX", "off")
    monkeypatch.setenv("REPOSWARM_CHECK_NICE", "7")
    script = "import os\nprint('nice', os.nice(0) - 0)\nprint(open('/proc/self/autogroup').read().strip())\n"
    ran = await sandbox.run([sys.executable, "-c", script], lane, profile(), timeout_s=60)
    out = ran.output.decode()
    worker = os.nice(0)
    assert f"nice {min(19, worker + 7)}" in out, out
    if "autogroup" in out:  # a kernel with autogroup scheduling: the check's group is niced too
        assert out.rstrip().endswith("nice 7"), out
    monkeypatch.setenv("REPOSWARM_CHECK_NICE", "twenty")
    with pytest.raises(SandboxUnavailable, match="REPOSWARM_CHECK_NICE"):
        await sandbox.run(["true"], lane, profile(), timeout_s=60)
