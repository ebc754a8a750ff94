"""Benchmark a swarm on two worker hosts against one (issue #20, item 5): the throughput a second host adds.

Why: lanes on several hosts are only worth the set-up if a second host really takes work off the first. Every
run here is a real run through the product's own code (build_request and start from reposwarm.cli.runs, the
workflows, the activities, `python worker.py` processes) on a local Temporal dev server.

    python bench/bench_hosts.py [--quick] [--lanes 32] [--turns 3] [--check-cpu-s 1.5] [--check-nice 0]
                                [--sequence 1,2,1] [--out bench/results_hosts.json]

The work: a run of N lanes (default 32, all at once: max_parallel = N), each with a folder of its own
(lane00/ .. lane31/, allowed_paths that folder) in a bare git remote named by a file:// URL (each worker host
clones it into its own home). Each lane's script: --turns turns of write_file in its folder, one run_checks,
finish; the model is tests.fake_models.FakeModelServer on the OpenAI wire (as bench_swarm.py's parallel
section), answering every request after --model-delay seconds (1 s). The validation profile (what run_checks
runs in the lane's worktree, and the gate on the merged result) is a Python one-liner burning --check-cpu-s
seconds of CPU (SHA-256 in a loop until that much process time has passed), so the work has a CPU-bound part
a second host can share. Checks run in the product's bubblewrap sandbox (reposwarm/checks/sandbox.py); when
bwrap cannot make one here the workers get REPOSWARM_SANDBOX=off and the results say so.

How hosts are emulated on one machine (the results file's "emulation" says exactly this): a "host" is a
`python worker.py` process with its own REPOSWARM_HOME (separate homes: no shared files; the other host's home
and the bench's own are also hidden from it by an empty tmpfs in a mount namespace of its own, where `unshare`
can do that), REPOSWARM_AFFINITY=host, started under `taskset -c <core>` so that each host has ONE core of its
own (host 1 = core 0, host 2 = core 1; the single-host run uses core 0 only); the checks a lane runs are
children of the worker and inherit the pinning. The Temporal dev server runs unpinned, and so does this
process (the starter's calls, the fake model server): they share the machine's cores with the hosts.

Runs, each on a fresh task queue and fresh homes (no worker, clone or worktree carries over): 1 host, then 2
hosts, then 1 host again (--sequence), interleaved to see the machine's drift. The figures: each run's
elapsed time from the start request to the review phase (the headline; merging and the validation gate are
in it) and of the lanes phase (the first lane's start to the last lane's end, from the hosts' ledgers);
speedup = median elapsed with 1 host / median elapsed with 2 hosts; each host's share of the lanes (its
helper_spawn events) and of the checks; the CPU seconds each host used over the run: its worker process and
everything it started (git, the checks), counted by a cpuacct (cgroup v1) or cgroup v2 group the bench moves the
worker into as it starts. /proc/<pid>/stat (the worker and its reaped children; psutil reads the same) is kept
beside it, and misses the checks: bwrap exits without reaping the sandbox's PID 1, so a check's CPU never
reaches the worker's children times (CpuCgroup says more); without a cgroup the bench falls back to it and
says so. Also the dev server's CPU and this process's (/proc), each core's busy share (/proc/stat), and the CPU
other processes on the machine used meanwhile (the machine's busy time less all of the above: the noise). The
review is approved (an Update, as a reviewer does) and the delivery timed beside the run.

Whether a run did the whole work is checked, not assumed: the lanes not done at review (with their reasons) and
the activity attempts the server retried (from the histories), each run's. A host whose one core runs many
CPU-bound checks at once can starve its own worker (each check is a session, hence a scheduling autogroup, of
its own, weighing as much as the worker), whose heartbeats then come late: attempts time out and are retried,
lanes can fail. --check-nice N makes the check lower its own priority and its autogroup's first, to compare
the same work without that.

With --quick (the default when CI=true): 8 lanes of 2 turns. Prints a Markdown table and writes
bench/results_hosts.json.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import platform
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from temporalio.client import Client  # noqa: E402

from bench.bench_swarm import (  # noqa: E402
    FAKE_KEY,
    KNOBS,
    TRANSFER_READS,
    activity_spans,
    dev_server_pid,
    finish_run,
    histories,
    lane_ids,
    process_cpu_s,
    read_ledger,
    start_on,
    write_run_files,
)
from reposwarm.checks import sandbox  # noqa: E402
from reposwarm.cli.worker import DEFAULT_CONCURRENCY  # noqa: E402
from reposwarm.contracts import LaneStatus, Phase, ReviewDecision  # noqa: E402
from tests.fake_models import FakeModelServer  # noqa: E402
from tests.helpers import WorkerProcess, finish, git, make_repo, start_dev_server, turn  # noqa: E402
from workflows.swarm import SwarmWorkflow  # noqa: E402

# The check: burns `s` seconds of this process's CPU (process time, not wall time: two checks sharing a core
# each take twice as long on the clock, and the work is the same on every configuration).
# With a niceness (argv[2], --check-nice), the check lowers its own scheduling priority first: its process's and
# its autogroup's (with the kernel's autogroups on, each session is a scheduling group of its own and a check is
# one, the sandbox starting it in a new session: a process's niceness then weighs only inside its session).
BURN = ("import hashlib, os, sys, time\n"
        "nice = int(sys.argv[2])\n"
        "if nice:\n"
        "    os.nice(nice)\n"
        "    try:\n"
        "        open('/proc/self/autogroup', 'w').write(str(nice))\n"
        "    except OSError as err:\n"
        "        print(f'autogroup not niced: {err}')\n"
        "limit = float(sys.argv[1]); start = time.process_time(); h = b'reposwarm'; n = 0\n"
        "while time.process_time() - start < limit:\n"
        "    for _ in range(2000):\n"
        "        h = hashlib.sha256(h).digest()\n"
        "    n += 2000\n"
        "print(f'ok: {n} hashes in {time.process_time() - start:.2f} s of CPU')\n")


def log(msg: str) -> None:
    print(f"[bench_hosts {time.strftime('%H:%M:%S')}] {msg}", flush=True)


def _r(x: float | None, nd: int = 2) -> float | None:
    return None if x is None else round(x, nd)


# --- the machine ---------------------------------------------------------------------------------------------


def require_taskset() -> str:
    found = shutil.which("taskset")
    if not found:
        raise SystemExit("bench_hosts: `taskset` is missing; it pins each emulated host to a core of its own. "
                         "Install util-linux (apt-get install util-linux) and run again.")
    return found


def core_times() -> dict[str, tuple[int, int, int]]:
    """(busy, total, steal) jiffies of each CPU since boot, by name (cpu0, cpu1...); steal: time the hypervisor
    gave this virtual CPU's turn to another machine (counted as busy)."""
    out = {}
    for line in Path("/proc/stat").read_text().splitlines():
        name, *values = line.split()
        if name.startswith("cpu") and name != "cpu":
            v = [int(x) for x in values]
            out[name] = (sum(v) - v[3] - v[4], sum(v), v[7] if len(v) > 7 else 0)
    return out


def topology() -> dict[str, Any]:
    """What the kernel says of the cores: the threads sharing each core (SMT siblings), and whether this is a
    virtual machine (a "core" is then a virtual CPU, which may share a physical core with others)."""
    cpus = Path("/sys/devices/system/cpu")
    siblings = {}
    for cpu in sorted(cpus.glob("cpu[0-9]*")):
        f = cpu / "topology" / "thread_siblings_list"
        if f.exists():
            siblings[cpu.name] = f.read_text().strip()
    flags = next((line for line in Path("/proc/cpuinfo").read_text().splitlines() if line.startswith("flags")), "")
    return {"thread_siblings": siblings, "virtual_machine": " hypervisor" in flags}


def cpu_model() -> str | None:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return None


def allowed_cpus(pid: int) -> str:
    """The CPUs a process may run on, as the kernel has it (Cpus_allowed_list): the pinning, checked."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("Cpus_allowed_list:"):
            return line.split(":", 1)[1].strip()
    return "?"


class CpuCgroup:
    """A cgroup of the cpuacct controller (cgroup v1) or of cgroup v2 that a host's worker is moved into as it
    starts: the kernel counts the CPU of the worker and of every process it starts there, reaped or not.

    /proc/<pid>/stat's children times miss the checks: bwrap (--unshare-pid) exits as soon as the sandbox's
    PID 1 reports the command's exit, without reaping that PID 1, which then dies an orphan and is reaped by
    the machine's init, so the check's CPU never reaches the worker's cutime. (The sandbox's pids cgroup is
    another hierarchy: moving the launcher there leaves it in this one.)"""

    def __init__(self, path: Path, version: str) -> None:
        self.path, self.version = path, version

    @classmethod
    def make(cls, name: str) -> CpuCgroup | None:
        """A new group `name` beside this process's own (empty ones an earlier bench left there are removed)."""
        for parent, version in sandbox.own_cgroups("cpuacct"):
            try:
                for stale in parent.glob("reposwarm-bench-*"):
                    with contextlib.suppress(OSError):
                        stale.rmdir()  # refused while processes are in it
                where = parent / name
                where.mkdir()
            except OSError:
                continue
            group = cls(where, version)
            if group.usage_s() is None:
                group.remove()
                continue
            return group
        return None

    def add(self, pid: int) -> None:
        (self.path / "cgroup.procs").write_text(str(pid))

    def usage_s(self) -> float | None:
        try:
            if self.version == "cgroup":
                return int((self.path / "cpuacct.usage").read_text()) / 1e9
            stat = dict(line.split() for line in (self.path / "cpu.stat").read_text().splitlines())
            return int(stat["usage_usec"]) / 1e6
        except (OSError, KeyError, ValueError):
            return None

    def remove(self) -> None:
        for _ in range(100):  # its processes gone, the cgroup empties as they are reaped
            try:
                self.path.rmdir()
                return
            except FileNotFoundError:
                return
            except OSError:
                time.sleep(0.05)


def can_hide() -> bool:
    """Whether `unshare --mount` works here (root, or user namespaces): a host can then be kept from the others'
    homes by a tmpfs over each, as tests/test_hosts.py does."""
    if not shutil.which("unshare"):
        return False
    return subprocess.run(["unshare", "--mount", "true"], capture_output=True).returncode == 0


# --- hosts ---------------------------------------------------------------------------------------------------


class PinnedWorker(WorkerProcess):
    """tests.helpers.WorkerProcess (`python worker.py`, its own home, queue and log) under `taskset -c CORE`."""

    def __init__(self, core: int, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.core = core

    def start(self) -> PinnedWorker:
        cmd = [sys.executable, str(ROOT / "worker.py")]
        if self.hide:
            mounts = " && ".join(f"mount -t tmpfs tmpfs {shlex.quote(str(p))}" for p in self.hide)
            cmd = ["unshare", "--mount", "sh", "-c", f"{mounts} && exec {shlex.join(cmd)}"]
        # taskset, unshare and sh each exec the next: the process is the worker's, pinned with all it starts
        self.proc = subprocess.Popen(["taskset", "-c", str(self.core), *cmd], cwd=ROOT, env=self.env,
                                     stdout=self.log.open("ab"), stderr=subprocess.STDOUT, start_new_session=True)
        return self

    def tail(self, lines: int = 40) -> str:
        text = self.log.read_text(errors="replace").splitlines() if self.log.exists() else []
        return "\n".join(text[-lines:])


def bare_remote(tmp: Path, lanes: int) -> tuple[Path, str]:
    """A bare repository with one commit on main (a folder per lane), and its file:// URL."""
    files = {"README.md": "bench_hosts\n"}
    for i in range(lanes):
        files[f"lane{i:02d}/README.md"] = f"lane {i}\n"
        files[f"lane{i:02d}/mod.py"] = f"X = {i}\n"
    work = make_repo(tmp / "work", files)
    bare = tmp / "remote.git"
    git(tmp, "clone", "-q", "--bare", str(work), str(bare))
    return bare, f"file://{bare}"


async def watch_phases(client: Client, run_id: str, until: Phase, timeout: float) -> dict[str, float]:
    """The first time (perf_counter) each phase of the run was seen, polling its status every 0.1 s, until
    `until` (or a failed run: AssertionError with its error)."""
    handle = client.get_workflow_handle_for(SwarmWorkflow.run, run_id)
    seen: dict[str, float] = {}
    deadline = time.perf_counter() + timeout
    while True:
        try:
            status = await handle.query(SwarmWorkflow.status)
            seen.setdefault(status.phase.value, time.perf_counter())
            if status.phase == until:
                return seen
            if status.phase == Phase.failed:
                raise AssertionError(f"run {run_id} failed: {status.error}")
        except AssertionError:
            raise
        except Exception:  # noqa: BLE001 - not started yet
            pass
        if time.perf_counter() > deadline:
            raise AssertionError(f"run {run_id} did not reach {until.value} in {timeout:.0f} s (phases seen: "
                                 f"{list(seen)})")
        await asyncio.sleep(0.1)


async def one_run(client: Client, address: str, tmp: Path, url: str, files: tuple[Path, Path, Path],
                  n_hosts: int, cores: list[int], label: str, base_env: dict[str, str], hide: bool,
                  args: argparse.Namespace) -> dict[str, Any]:
    queue = f"bench-hosts-{label}-{uuid.uuid4().hex[:6]}"
    homes = [tmp / label / f"host-{h + 1}" for h in range(n_hosts)]
    for home in homes:
        home.mkdir(parents=True, exist_ok=True)
    cli_home = Path(os.environ["REPOSWARM_HOME"])
    workers = [PinnedWorker(cores[h], address, queue, home,
                            {"REPOSWARM_AFFINITY": "host", **base_env},
                            hide=([other for other in homes if other != home] + [cli_home]) if hide else None)
               for h, home in enumerate(homes)]
    server_pid = dev_server_pid(address)
    groups: dict[str, CpuCgroup] = {}
    for h, w in enumerate(workers):
        w.start()
        group = CpuCgroup.make(f"reposwarm-bench-{queue}-host{h + 1}")
        try:
            if group is not None:
                group.add(w.proc.pid)  # type: ignore[union-attr] # before it has started anything
                groups[f"host{h + 1}"] = group
        except OSError as err:
            log(f"host{h + 1}: no cgroup for its CPU ({err}): /proc/<pid>/stat instead, which misses the checks")
    try:
        for w in workers:
            await w.ready()
        pinned = {f"host{h + 1}": allowed_cpus(w.proc.pid) for h, w in enumerate(workers)}  # type: ignore[union-attr]
        pids = {**{f"host{h + 1}": w.proc.pid for h, w in enumerate(workers)},  # type: ignore[union-attr]
                "dev_server": server_pid, "bench_and_fake_model": os.getpid()}
        cpu0 = {k: process_cpu_s(p) for k, p in pids.items() if p}
        group0 = {k: g.usage_s() or 0.0 for k, g in groups.items()}
        cores0 = core_times()
        t0 = time.perf_counter()
        wall0 = time.time()
        lanes_file, script, plan = files
        task = f"bench hosts: {args.lanes} lanes on {n_hosts} host(s)"
        # start_on takes the repository as a Path and str()s it: a URL passes through as it is
        run_id = await start_on(client, queue, url, lanes_file, script, plan,  # type: ignore[arg-type]
                                "openai:bench-fake", task)
        try:
            phases = await watch_phases(client, run_id, Phase.review, args.timeout)
        except AssertionError as err:
            tails = "\n".join(f"--- {w.log} (last lines)\n{w.tail()}" for w in workers)
            raise RuntimeError(f"{err}\n{tails}") from err
        t_review = phases[Phase.review.value]
        cpu1 = {k: process_cpu_s(p) for k, p in pids.items() if p}
        group1 = {k: g.usage_s() or 0.0 for k, g in groups.items()}
        cores1 = core_times()
        status = await client.get_workflow_handle_for(SwarmWorkflow.run, run_id).query(SwarmWorkflow.status)
        bad = {lane.lane: f"{lane.status.value}: {lane.reason}"[:160] for lane in status.review.lanes
               if lane.status != LaneStatus.done} if status.review else {}
        retries = await retried_attempts(client, run_id, [f"lane{i:02d}" for i in range(args.lanes)])
        # the review, approved as a reviewer does (an Update), then the delivery to the remote, timed beside the run
        delivery: dict[str, Any] = {}
        t_approve = time.perf_counter()
        try:
            handle = client.get_workflow_handle_for(SwarmWorkflow.run, run_id)
            await handle.execute_update(SwarmWorkflow.review, ReviewDecision(approve=True))
            result = await asyncio.wait_for(handle.result(), args.timeout)
            delivery = {"approved_to_delivered_s": _r(time.perf_counter() - t_approve),
                        "delivered_branch": result.delivered_branch}
        except Exception as err:  # noqa: BLE001 - the figures above stand; say what happened to the delivery
            delivery = {"error": f"{type(err).__name__}: {err}"[:300]}
            log(f"{label}: approving or delivering failed: {delivery['error']}")
            await finish_run(client, run_id)
    finally:
        for w in workers:
            w.stop()
        for group in groups.values():
            group.remove()
    elapsed = t_review - t0
    ledgers = {f"host{h + 1}": read_ledger(home, run_id) for h, home in enumerate(homes)}
    lanes_by_host = {h: sorted({e["lane"] for e in lines if e["event"] == "helper_spawn"})
                     for h, lines in ledgers.items()}
    checks_by_host = {h: sum(1 for e in lines if e["event"] == "tool_call" and e.get("tool") == "run_checks")
                      for h, lines in ledgers.items()}
    models_by_host = {h: sum(1 for e in lines if e["event"] == "model_call") for h, lines in ledgers.items()}
    errors = Counter(f"{e.get('activity')}: {str(e.get('error', ''))[:90]}" for lines in ledgers.values()
                     for e in lines if e["event"] == "activity_error")
    starts = [float(e["ts"]) for lines in ledgers.values() for e in lines if e["event"] == "helper_spawn"]
    ends = [float(e["ts"]) for lines in ledgers.values() for e in lines if e["event"] == "lane_end"]
    lanes_phase = (max(ends) - min(starts)) if starts and ends else None
    proc_stat = {k: cpu1[k] - cpu0[k] for k in cpu0}
    # a host's CPU: its cgroup's (the worker and everything it started) where one could be made, else /proc's
    spent = {**proc_stat, **{k: group1[k] - group0[k] for k in groups}}
    core_busy = {c: _r((cores1[c][0] - cores0[c][0]) / max(1, cores1[c][1] - cores0[c][1]))
                 for c in cores1 if c in cores0}
    # the machine's busy CPU time over the run, and what of it none of this bench's processes used (other work
    # on the machine: the noise this run had)
    tick = os.sysconf("SC_CLK_TCK")
    machine_busy = sum(cores1[c][0] - cores0[c][0] for c in cores1 if c in cores0) / tick
    steal = {c: _r((cores1[c][2] - cores0[c][2]) / tick, 1) for c in cores1 if c in cores0}
    out: dict[str, Any] = {
        "hosts": n_hosts, "run_id": run_id, "task_queue": queue, "pinned_cpus": pinned,
        "elapsed_s": _r(elapsed), "lanes_phase_s": _r(lanes_phase),
        "phases_s": {p: _r(t - t0) for p, t in phases.items()},  # first seen, from the start request
        "start_request_at": round(wall0, 2),
        "lanes_by_host": {h: len(v) for h, v in lanes_by_host.items()},
        "lane_share": {h: _r(len(v) / args.lanes) for h, v in lanes_by_host.items()},
        "checks_by_host": checks_by_host, "model_calls_by_host": models_by_host,
        "cpu_s": {k: _r(v, 1) for k, v in spent.items()},
        "cpu_s_from": {k: (f"cgroup ({groups[k].version}: {groups[k].path.parent})" if k in groups
                           else "/proc/<pid>/stat: the process and its reaped children") for k in spent},
        "host_cpu_s_proc_stat": {k: _r(proc_stat[k], 1) for k in proc_stat if k.startswith("host")},
        "cpu_cores_used": {k: _r(v / elapsed) for k, v in spent.items()},
        "core_busy": core_busy, "machine_busy_cpu_s": _r(machine_busy, 1),
        "other_processes_cpu_s": _r(max(0.0, machine_busy - sum(spent.values()) - sum(filter(None, steal.values()))),
                                    1),
        "steal_s": steal,
        "lanes_not_done": bad, "retried_attempts": retries,
        "activity_errors_in_ledgers": dict(errors.most_common(8)), "delivery": delivery,
    }
    hosts_cpu = ", ".join(f"{h} {out['cpu_s'][h]} s ({out['lanes_by_host'][h]} lanes, {checks_by_host[h]} checks)"
                          for h in lanes_by_host)
    log(f"{label}: {n_hosts} host(s): elapsed {out['elapsed_s']} s to review (lanes phase {out['lanes_phase_s']} s); "
        f"CPU {hosts_cpu}; dev server {out['cpu_s'].get('dev_server')} s; other processes "
        f"{out['other_processes_cpu_s']} s; cores busy {core_busy}"
        + (f"; LANES NOT DONE: {bad}" if bad else "")
        + (f"; retried attempts {retries['by_activity']} ({retries['timed_out']} timed out)"
           if retries["total"] else "; no activity retried"))
    return out


async def retried_attempts(client: Client, run_id: str, lanes: list[str]) -> dict[str, Any]:
    """Activity attempts the server retried in the run (the swarm's workflow and its lanes'), from their
    histories: a failed attempt that Temporal retried leaves no event, the last attempt's number says how many
    there were; `timed_out` counts the activities whose final attempt timed out (a heartbeat not heard)."""
    by_activity: Counter[str] = Counter()
    timed_out = 0
    for wf in [run_id, *await lane_ids(client, run_id, lanes)]:
        for span in activity_spans(await histories(client, wf)):
            if span.get("attempt", 1) > 1:
                by_activity[span["name"]] += span["attempt"] - 1
            timed_out += span["outcome"] == "timed_out"
    return {"total": sum(by_activity.values()), "by_activity": dict(by_activity), "timed_out": timed_out}


# --- the whole bench -----------------------------------------------------------------------------------------


def sandbox_state() -> tuple[dict[str, str], str]:
    """The workers' REPOSWARM_SANDBOX and what the results should say about it."""
    if not sandbox.enabled():
        return {"REPOSWARM_SANDBOX": "off"}, "off: REPOSWARM_SANDBOX=off was set for the bench"
    try:
        found = sandbox.bwrap()
    except sandbox.SandboxUnavailable as err:
        return {"REPOSWARM_SANDBOX": "off"}, f"off (REPOSWARM_SANDBOX=off for the workers): {err}"
    return {}, f"on: checks ran in bubblewrap ({found})"


async def run(args: argparse.Namespace) -> dict[str, Any]:
    require_taskset()
    usable = sorted(os.sched_getaffinity(0))
    if not all(c in usable for c in args.cores):
        raise SystemExit(f"bench_hosts: cores {args.cores} are not all usable here (this process may use {usable})")
    for knob in KNOBS:
        os.environ.pop(knob, None)
    sandbox_env, sandbox_note = sandbox_state()
    hide = can_hide()
    t_all = time.perf_counter()
    tmp = Path(tempfile.mkdtemp(prefix="reposwarm-bench-hosts-"))
    os.environ["REPOSWARM_HOME"] = str(tmp / "cli-home")  # the starter's home (the bench's): not a host's
    (tmp / "cli-home").mkdir()
    results: dict[str, Any] = {
        "mode": "quick" if args.quick else "full",
        "machine": {"cpus": os.cpu_count(), "usable_cpus": usable, "cpu_model": cpu_model(), **topology(),
                    "python": platform.python_version(), "platform": platform.platform(),
                    "load_average_before": [round(x, 2) for x in os.getloadavg()]},
        "emulation": (
            "a host is a `python worker.py` process with its own REPOSWARM_HOME (separate homes: no shared files"
            + ("; the other host's home and the bench's are also hidden from it by an empty tmpfs in a mount "
               "namespace of its own" if hide else "; unshare --mount is not available here, so the homes are "
               "separate but not hidden from each other") +
            f"), REPOSWARM_AFFINITY=host, started under `taskset -c <core>` so that each host has ONE core of its "
            f"own (host 1 = core {args.cores[0]}, host 2 = core {args.cores[1]}; the single-host run uses core "
            f"{args.cores[0]} only); the checks a lane runs are children of the worker and inherit the pinning. "
            "The Temporal dev server runs unpinned, as does the bench process (the starter's calls and the fake "
            "model server): they share the machine's cores with the hosts."),
        "sandbox": sandbox_note,
        "work": {"lanes": args.lanes, "max_parallel": args.lanes, "turns_per_lane": {
            "write_file": args.turns, "run_checks": 1, "finish": 1}, "model_delay_s": args.model_delay,
            "check_cpu_s": args.check_cpu_s, "check_nice": args.check_nice,
            "check": "a Python one-liner hashing (SHA-256) until it has used "
            "check_cpu_s of CPU; the validation profile, run by each lane's run_checks and by the validation "
            "gate on the merged result", "worker_concurrency": f"{DEFAULT_CONCURRENCY} (the default) per host",
            "repository": "a bare git remote by file:// URL; each host clones it into its own home",
            "sequence": args.sequence},
    }
    lanes = {f"lane{i:02d}": {"allowed_paths": [f"lane{i:02d}/"], "max_turns": args.turns + 6}
             for i in range(args.lanes)}
    replies = {lane: [turn((f"{lane}_w{t}", "write_file", {
        "path": f"{lane}/out{t}.py", "content": f"# {lane} turn {t}\nVALUE = {t}\n", "reason": "The lane's goal"}))
        for t in range(args.turns)] + [turn((f"{lane}_c", "run_checks", {}))] + [finish(f"{lane}_f")]
        for lane in lanes}
    profile = {"commands": [[sys.executable, "-c", BURN, str(args.check_cpu_s), str(args.check_nice)]],
               "timeout_s": 600}
    files = write_run_files(tmp, "hosts", lanes, {"max_parallel": args.lanes}, {},
                            extra={"validation": {"profiles": {"default": profile}}})
    _, url = bare_remote(tmp, args.lanes)
    runs: list[dict[str, Any]] = []
    env = await start_dev_server(["--db-filename", str(tmp / "bench-temporal.db"), *TRANSFER_READS])
    try:
        client = env.client
        address = client.service_client.config.target_host
        script = {"lanes": {lane: {1: r} for lane, r in replies.items()}}
        with FakeModelServer("openai", script, delay_s=args.model_delay) as fake:
            fake._httpd.handle_error = lambda *a: None  # type: ignore[method-assign]
            base_env = {"OPENAI_BASE_URL": fake.base_url, "OPENAI_API_KEY": FAKE_KEY, **sandbox_env}
            for i, n in enumerate(args.sequence):
                label = f"run{i + 1}-{n}host"
                log(f"{label}: {args.lanes} lanes on {n} host(s), cores {args.cores[:n]} (load average "
                    f"{os.getloadavg()[0]:.1f})")
                runs.append(await one_run(client, address, tmp, url, files, n, args.cores, label, base_env, hide,
                                          args))
            results["model_requests"] = len(fake.requests)
    finally:
        await env.shutdown()
        if not args.keep:
            shutil.rmtree(tmp, ignore_errors=True)
    results["runs"] = runs
    by_n = {n: [r["elapsed_s"] for r in runs if r["hosts"] == n] for n in sorted(set(args.sequence))}
    lanes_by_n = {n: [r["lanes_phase_s"] for r in runs if r["hosts"] == n and r["lanes_phase_s"]] for n in by_n}
    med = {n: statistics.median(v) for n, v in by_n.items()}
    med_lanes = {n: statistics.median(v) for n, v in lanes_by_n.items() if v}
    results["elapsed_s_by_hosts"] = {str(n): v for n, v in by_n.items()}
    results["elapsed_median_s"] = {str(n): _r(v) for n, v in med.items()}
    results["lanes_phase_median_s"] = {str(n): _r(v) for n, v in med_lanes.items()}
    if 1 in med and 2 in med:
        results["speedup"] = _r(med[1] / med[2])
        results["speedup_lanes_phase"] = _r(med_lanes[1] / med_lanes[2]) if 1 in med_lanes and 2 in med_lanes \
            else None
        ones = by_n[1]
        results["drift_1host"] = _r((ones[-1] - ones[0]) / ones[0], 3) if len(ones) > 1 else None
        two = [r for r in runs if r["hosts"] == 2]
        results["two_hosts_lane_share"] = [r["lane_share"] for r in two]
    notes = []
    unequal = [i + 1 for i, r in enumerate(runs) if r["lanes_not_done"] or r["retried_attempts"]["total"]]
    if unequal:
        notes.append(f"run(s) {unequal} did not do the same work as a clean run: lanes not done (their remaining "
                     "turns never ran) or activity attempts retried (their work done again); the speedup compares "
                     "unequal work there")
    noisy = [i + 1 for i, r in enumerate(runs) if (r["other_processes_cpu_s"] or 0) > 0.1 * r["elapsed_s"]]
    if noisy:
        notes.append(f"run(s) {noisy}: other processes on the machine used more than 10% of a core meanwhile "
                     "(other_processes_cpu_s)")
    results["notes"] = notes
    results["machine"]["load_average_after"] = [round(x, 2) for x in os.getloadavg()]
    results["total_s"] = round(time.perf_counter() - t_all, 1)
    return results


def table(r: dict[str, Any]) -> str:
    lines = [f"bench_hosts ({r['mode']}): {r['work']['lanes']} lanes x ({r['work']['turns_per_lane']['write_file']} "
             f"write_file + run_checks + finish), model {r['work']['model_delay_s']} s a turn, check "
             f"{r['work']['check_cpu_s']} s of CPU (nice {r['work']['check_nice']}); {r['machine']['cpus']} cores "
             f"({r['machine']['cpu_model']}); "
             f"sandbox {r['sandbox'].split(':')[0]}", "",
             "| run | hosts | elapsed to review (s) | lanes phase (s) | lanes per host | CPU s per host | "
             "lanes not done | activity retries (timed out) | dev server CPU s | other processes' CPU s | "
             "cores busy | delivered (s) |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for i, run in enumerate(r["runs"]):
        hosts = [h for h in run["lanes_by_host"]]
        lanes = " / ".join(str(run["lanes_by_host"][h]) for h in hosts)
        cpu = " / ".join(str(run["cpu_s"][h]) for h in hosts)
        busy = " / ".join(f"{v:.0%}" for v in run["core_busy"].values())
        delivered = run["delivery"].get("approved_to_delivered_s", "failed")
        retried = run["retried_attempts"]
        lines.append(f"| {i + 1} | {run['hosts']} | {run['elapsed_s']} | {run['lanes_phase_s']} | {lanes} | {cpu} | "
                     f"{len(run['lanes_not_done'])} | {retried['total']} ({retried['timed_out']}) | "
                     f"{run['cpu_s'].get('dev_server')} | {run['other_processes_cpu_s']} | {busy} | {delivered} |")
    lines.append("")
    if "speedup" in r:
        drift = r.get("drift_1host")
        lines.append(f"speedup (median elapsed, 1 host / 2 hosts): **{r['speedup']}x** to review, "
                     f"{r['speedup_lanes_phase']}x for the lanes phase"
                     + (f"; the 1-host runs drifted {drift:+.1%} (last against first)" if drift is not None else ""))
    for note in r.get("notes", []):
        lines.append(f"note: {note}")
    lines.append(f"CPU per host: {r['runs'][0]['cpu_s_from'].get('host1')}; bench wall time {r['total_s']} s")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", default=os.environ.get("CI") == "true",
                        help="8 lanes of 2 turns, a smoke run (the default when CI=true)")
    parser.add_argument("--lanes", type=int, help="lanes in each run, all at once (default 32; --quick: 8)")
    parser.add_argument("--turns", type=int, help="write_file turns per lane before its run_checks and finish "
                                                  "(default 3; --quick: 2)")
    parser.add_argument("--check-cpu-s", type=float, default=1.5, help="CPU seconds the check burns (default 1.5)")
    parser.add_argument("--check-nice", type=int, default=0,
                        help="the check lowers its own scheduling priority by this much first (default 0, as "
                             "checks run for users; with 19 a host's worker keeps most of its core however many "
                             "checks run)")
    parser.add_argument("--model-delay", type=float, default=1.0, help="seconds per fake model answer (default 1)")
    parser.add_argument("--sequence", type=lambda s: [int(x) for x in s.split(",")], default=[1, 2, 1],
                        help="hosts of each run, in order (default 1,2,1)")
    parser.add_argument("--cores", type=lambda s: [int(x) for x in s.split(",")], default=[0, 1],
                        help="the core of host 1, of host 2 (default 0,1)")
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds a run may take to reach review")
    parser.add_argument("--keep", action="store_true", help="keep the temporary folder (homes, worker logs)")
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results_hosts.json")
    args = parser.parse_args(argv)
    args.lanes = args.lanes or (8 if args.quick else 32)
    args.turns = args.turns or (2 if args.quick else 3)
    if max(args.sequence) > len(args.cores):
        parser.error(f"--sequence asks for {max(args.sequence)} hosts; --cores names {len(args.cores)}")
    if args.lanes > 100:
        parser.error("--lanes: at most 100 (folders lane00..lane99)")
    results = asyncio.run(run(args))
    print(table(results))
    args.out.write_text(json.dumps(results, indent=2) + "\n")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    code = main()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)  # as starter.py: skip interpreter finalization, which the Temporal runtime's threads can abort
