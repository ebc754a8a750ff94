"""Benchmark checks at monorepo scale (issue 37, item 7): the whole suite, the tests a change affects, the same
split over two worker hosts; and whether the selected run still catches injected breaks.

    python bench/bench_checks.py [--quick] [--services 800] [--test-cost-ms N] [--repeats 5] [--full-repeats 1]
        [--cores 0,1] [--out bench/results_checks.json] [--results bench/results.json]   (see --help)

The repository: bench/gen_monorepo.py --tests, 800 services of 25 files of 200 lines (~4M lines; kept in
$TMPDIR/reposwarm-bench), a pytest file per Python service and a node --test file per TypeScript one, each
importing the service's code and 2 of 100 shared modules of its language, each spending --test-cost-ms of CPU.
The change: one commit touching the shared Python module most services import, the core of a Python service,
the lib of a JavaScript one and a module deep in a third service's import chain (real edits of code the tests
import; every test still passes). Each injected break is a commit of its own on top of it.

Every check goes through reposwarm's own path, as the test gate runs it: bench/checks_probe.py's workflow runs
plan_check, then each part's validate at once on the checks' queue (a host takes as many as its check slots: one
per core it may use), then merges the parts' reports. The activities run on `python worker.py` hosts on a local
Temporal dev server, each with a home of its own, cloning the repository from a file:// URL, pinned to ONE core
(`taskset`, as bench/bench_hosts.py: host 1 = core 0, host 2 = core 1; the checks are the workers' children and
inherit it; the workflow and the dev server unpinned). Checks are judged against no baseline: the base commit
passes every test (the warm-up's first run says so).

Measured, seconds from the workflow's start to its result, the median of --repeats runs after a warm-up on each
host (clone, checkouts, index): validation_full_s (scope all, one part, one host), validation_selected_s (scope
affected, one host, planning included), validation_sharded_1host_s and _2host_s (scope affected, `shards: 2` on
each command; the second host started, warmed by one uncounted check, and stopped around its runs, interleaved
with the one-host runs). A break is caught when the merged verdict is FAILED; each is also run directly (pytest,
node --test), to show it is real.
Writes bench/results_checks.json and merges the headline keys into bench/results.json (so it runs after
bench_swarm.py, which writes that file anew). --quick (the default when CI=true): 30 services, 50 ms tests.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import re
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
from temporalio.worker import Worker  # noqa: E402

from bench import bench_hosts as hb  # noqa: E402  (pinned workers, cgroups, the machine)
from bench.checks_probe import ChecksProbe, ProbeCheck  # noqa: E402
from bench.gen_monorepo import GIT_ENV, TestOptions, generate  # noqa: E402
from reposwarm.contracts import CheckProfile, Verdict  # noqa: E402
from tests.helpers import start_dev_server  # noqa: E402

PYTEST = ["python", "-m", "pytest", "-q", "-p", "no:cacheprovider"]
NODE = ["node", "--test"]
RUN_ID = "bench-checks"  # one run's checkouts and store for every check: a run's later checks find them warm
TARGETS = {"selected_speedup": 20.0, "sharded_speedup": 1.7}


def log(msg: str) -> None:
    print(f"[bench_checks {time.strftime('%H:%M:%S')}] {msg}", flush=True)


def bench_repo(args: argparse.Namespace) -> Path:
    opts = TestOptions(args.shared_modules, 2, args.test_cost_ms)
    repo = Path(args.cache_dir) / f"mono-tests-{args.services}-m{opts.shared_modules}-c{opts.cost_ms}-s{args.seed}"
    if not (repo / ".git").exists():
        shutil.rmtree(repo, ignore_errors=True)
        started = time.perf_counter()
        lines = generate(repo, args.services, 25, 200, args.seed, opts)
        log(f"generated {repo}: {lines:,} lines in {time.perf_counter() - started:.1f} s")
    else:
        log(f"reusing {repo}")
    return repo


def _git(repo: Path, *args: str, stdin: str | None = None, env: dict[str, str] | None = None) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], input=stdin, check=True, capture_output=True, text=True,
                          env={**os.environ, **GIT_ENV, **(env or {})}).stdout


PY_VALUE = "    return (x * SCALE + OFFSET) % 1009\n"
JS_VALUE = "  return (x * SCALE + OFFSET) % 1009;\n"


class Layout:
    """The generated tree as the bench needs it (read from the commit): the tested services, the shared modules each
    imports; the change, and a break of each kind on top of it, as {path: (old text, new text)}."""

    def __init__(self, repo: Path) -> None:
        self.repo = repo
        self.files = _git(repo, "ls-tree", "-r", "--name-only", "HEAD").splitlines()
        self.count = len({p.split("/")[1] for p in self.files if p.startswith("services/")})  # services
        self.py: dict[str, list[str]] = {}  # python service -> its shared modules
        self.js: dict[str, list[str]] = {}
        for path in self.files:
            parts = path.split("/")
            if len(parts) == 3 and parts[2] == "core.py":
                self.py[parts[1]] = re.findall(r"^from libs\.common\.common import (\w+), (\w+)$", self.show(path),
                                               re.M)[0]
            elif len(parts) == 3 and parts[2] == "lib.mjs":
                self.js[parts[1]] = re.findall(r'common-js/(\w+)\.mjs"', self.show(path))
        self.fan_in = {lang: Counter(m for mods in services.values() for m in set(mods))
                       for lang, services in (("py", self.py), ("js", self.js))}
        self._plan()

    def show(self, path: str, ref: str = "HEAD") -> str:
        return _git(self.repo, "show", f"{ref}:{path}")

    def importers(self, lang: str, module: str) -> list[str]:
        return sorted(s for s, mods in (self.py if lang == "py" else self.js).items() if module in mods)

    def chain(self, svc: str) -> list[str]:
        """A python service's generated modules, in their import order (mod_00 imports mod_01 ...)."""
        return sorted((p for p in self.files if p.startswith(f"services/{svc}/") and p.count("/") == 2
                       and re.search(r"_\d\d\.py$", p)), key=lambda p: p[-5:-3])

    def _plan(self) -> None:
        top = sorted(self.fan_in["py"], key=lambda m: (-self.fan_in["py"][m], m))
        shared, shared2 = top[0], top[1]
        # (services that do not import the changed module first: each adds a test to the selection)
        a, x, d, e = sorted(self.py, key=lambda s: (shared in self.py[s], shared2 in self.py[s], s))[:4]
        b, c = sorted(self.js)[:2]
        js_top = sorted(self.fan_in["js"], key=lambda m: (-self.fan_in["js"][m], m))[0]
        deep = self.chain(x)[len(self.chain(x)) // 2]
        self.change = {
            f"libs/common/common/{shared}.py": (PY_VALUE, "    scaled = x * SCALE  # (the change: the same figure in "
                                                          "two steps)\n    return (scaled + OFFSET) % 1009\n"),
            f"services/{a}/core.py": ("    return BASE + ", "    base = BASE  # (the change)\n    return base + "),
            f"services/{b}/lib.mjs": ("  return BASE + ", "  const base = BASE; // (the change)\n  return base + "),
            deep: ("", "\n\ndef bench_changed(item_id: int) -> int:\n    return item_id + 1\n"),
        }
        self.change_what = {
            "shared_module": f"libs/common/common/{shared}.py, imported by {self.fan_in['py'][shared]} services "
                             f"({100 * self.fan_in['py'][shared] / max(1, self.count):.1f}% of them)",
            "python_service": f"services/{a}/core.py", "js_service": f"services/{b}/lib.mjs",
            "third_service": f"{deep}: a module its test imports through {self.chain(x).index(deep)} others"}
        tests_py = {s: f"services/{s}/tests/test_{s}.py" for s in self.py}
        tests_js = {s: f"services/{s}/test/{s}.test.mjs" for s in self.js}
        k = len(self.chain(e)) // 2
        importer, renamed = self.chain(e)[k - 1], self.chain(e)[k]
        func = re.findall(rf"^from services\.{e}\.\w+ import \w+, (\w+)$", self.show(importer), re.M)[0]
        c3 = re.findall(r"assert core\.compute\(3\) == (\d+)", self.show(tests_py[d]))[0]
        # name -> (what it breaks, {path: (old, new)}, the test files it should fail)
        self.broken: dict[str, tuple[str, dict[str, tuple[str, str]], list[str]]] = {
            "shared_module": (f"libs/common/common/{shared2}.py: value() one too many (a shared module)",
                              {f"libs/common/common/{shared2}.py": (PY_VALUE, PY_VALUE[:-1] + " + 1\n")},
                              [tests_py[s] for s in self.importers("py", shared2)]),
            "shared_module_js": (f"libs/common-js/{js_top}.mjs: value() one too many (a shared module)",
                                 {f"libs/common-js/{js_top}.mjs": (JS_VALUE, JS_VALUE[:-2] + " + 1;\n")},
                                 [tests_js[s] for s in self.importers("js", js_top)]),
            "leaf_service": (f"services/{c}/lib.mjs: compute() one too many (a leaf service)",
                             {f"services/{c}/lib.mjs": ("  return BASE + ", "  return BASE + 1 + ")}, [tests_js[c]]),
            "test_file": (f"{tests_py[d]}: an expected value one too many (a test file)",
                          {tests_py[d]: (f"compute(3) == {c3}\n", f"compute(3) == {int(c3) + 1}\n")}, [tests_py[d]]),
            "import": (f"{renamed}: {func} renamed, which {importer} imports (an import broken deep in a service)",
                       {renamed: (f"\ndef {func}(", f"\ndef {func}_renamed(")}, [tests_py[e]]),
            "build_file": ("pytest.ini not valid (test configuration: the selection must run pytest whole)",
                           {"pytest.ini": ("[pytest]\n", "[pytest\n")}, []),
        }

    def stats(self) -> dict[str, Any]:
        counted = _git(self.repo, "grep", "-c", "", "HEAD").splitlines()
        return {"files": len(self.files), "lines": sum(int(line.rsplit(":", 1)[1]) for line in counted),
                "python_services": len(self.py), "js_services": len(self.js),
                "test_files": len(self.py) + len(self.js),
                "shared_fan_in_max": {k: max(v.values()) for k, v in self.fan_in.items()}}

    def commit(self, parent: str, edits: dict[str, tuple[str, str]], message: str) -> str:
        """A commit on `parent` with each file's `old` text made `new` ("" old: `new` appended), by plumbing: no
        checkout, no branch moved (the cached repository stays as generated)."""
        with tempfile.TemporaryDirectory() as tmp:
            index = {"GIT_INDEX_FILE": str(Path(tmp) / "index")}
            _git(self.repo, "read-tree", parent, env=index)
            infos = []
            for path, (old, new) in edits.items():
                text = self.show(path, parent)
                if old and old not in text:
                    raise SystemExit(f"bench_checks: {path} does not hold {old!r}: was the generator changed?")
                text = text.replace(old, new, 1) if old else text + new
                infos.append(f"100644 {_git(self.repo, 'hash-object', '-w', '--stdin', stdin=text).strip()}\t{path}")
            _git(self.repo, "update-index", "--index-info", stdin="\n".join(infos) + "\n", env=index)
            tree = _git(self.repo, "write-tree", env=index).strip()
        return _git(self.repo, "commit-tree", tree, "-p", parent, "-m", message).strip()

    def commits(self, run_id: str) -> dict[str, str]:
        """The base, the change and each break (on the change), under refs/reposwarm/<run_id>/bench/, which every
        host's clone fetches with the run's refs."""
        self.purge(run_id)
        shas = {"base": _git(self.repo, "rev-parse", "HEAD").strip()}
        shas["change"] = self.commit(shas["base"], self.change, "bench: a change to three services and a shared "
                                                                "module")
        for name, (_, edits, _) in self.broken.items():
            shas[f"break-{name}"] = self.commit(shas["change"], edits, f"bench: break ({name})")
        _git(self.repo, "update-ref", "--stdin", stdin="".join(
            f"update refs/reposwarm/{run_id}/bench/{name} {sha}\n" for name, sha in shas.items()))
        return shas

    def purge(self, run_id: str) -> None:
        """The run's refs (the bench's commits, the states validate keeps) gone from the cached repository."""
        refs = _git(self.repo, "for-each-ref", "--format=%(refname)", f"refs/reposwarm/{run_id}/").split()
        if refs:
            _git(self.repo, "update-ref", "--stdin", stdin="".join(f"delete {r}\n" for r in refs))


def verify(repo: Path, layout: Layout, shas: dict[str, str]) -> dict[str, bool]:
    """Whether each break is real, told without reposwarm: the test files it should fail pass on the change and fail
    on the break, run directly (pytest, node --test; unsandboxed) in a scratch worktree."""
    real: dict[str, bool] = {}
    some_py = next(p for p in layout.files if p.endswith(".py") and "/tests/test_" in p)
    with tempfile.TemporaryDirectory() as tmp:
        tree = Path(tmp) / "tree"
        _git(repo, "worktree", "add", "-q", "--detach", str(tree), shas["change"])
        try:
            def passes(ref: str, files: list[str]) -> bool:
                _git(tree, "checkout", "-q", "-f", "--detach", ref)
                py, js = [f for f in files if f.endswith(".py")], [f for f in files if f.endswith(".mjs")]
                return all(subprocess.run(cmd + names, cwd=tree, capture_output=True).returncode == 0
                           for cmd, names in ((PYTEST, py), (NODE, js)) if names)
            for name in layout.broken:
                files = layout.broken[name][2] or [some_py]
                real[name] = passes(shas["change"], files) and not passes(shas[f"break-{name}"], files)
        finally:
            _git(repo, "worktree", "remove", "--force", str(tree))
    return real


# --- the hosts and the checks ---------------------------------------------------------------------------------


class Hosts:
    """The worker hosts: `python worker.py` pinned to a core each, with homes that outlive their processes (a
    host stopped and started again finds its clone, checkouts and index as it left them)."""

    def __init__(self, address: str, queue: str, tmp: Path, cores: list[int], env: dict[str, str]) -> None:
        self.address, self.queue, self.tmp, self.cores, self.env = address, queue, tmp, cores, env
        self.running: dict[int, hb.PinnedWorker] = {}
        self.pids: dict[int, str] = {}  # pid -> "host N", for the histories' worker identities
        self.groups: dict[int, hb.CpuCgroup] = {}  # host -> the cgroup its worker and its checks are counted in

    async def serve(self, *hosts: int) -> bool:
        """Exactly these hosts (1-based) running, the others stopped; whether one had to be started."""
        for h in [h for h in self.running if h not in hosts]:
            self.running.pop(h).stop()
        new = [h for h in hosts if h not in self.running]
        for h in new:
            self.running[h] = w = hb.PinnedWorker(self.cores[h - 1], self.address, self.queue, self.tmp / f"host-{h}",
                                                  env=self.env).start()
            assert w.proc is not None
            group = self.groups.get(h)  # (CpuCgroup.make removes the empty groups of stopped hosts: made anew)
            group = group if group is not None and group.path.exists() else hb.CpuCgroup.make(f"{self.queue}-{h}")
            if group is not None:
                group.add(w.proc.pid)  # (before it has started anything)
                self.groups[h] = group
            self.pids[w.proc.pid] = f"host {h}"
        for w in self.running.values():
            await w.ready()
        return bool(new)

    def stop(self) -> None:
        for w in self.running.values():
            w.stop()
        self.running.clear()
        for group in self.groups.values():
            group.remove()

    def cpu_s(self) -> dict[int, float]:
        return {h: g.usage_s() or 0.0 for h, g in self.groups.items()}


class Checks:
    """Runs one check through the probe workflow and keeps what it says."""

    def __init__(self, client: Client, wf_queue: str, hosts: Hosts, url: str) -> None:
        self.client, self.wf_queue, self.hosts, self.url = client, wf_queue, hosts, url

    async def run(self, what: str, ref: str, since: str, scope: str, shards: int = 1,
                  label: str = "check") -> dict[str, Any]:
        commands = [PYTEST, NODE] if shards <= 1 else [{"run": c, "shards": shards} for c in (PYTEST, NODE)]
        req = ProbeCheck(run_id=RUN_ID, repo_path=self.url, ref=ref, since=since, scope=scope, label=label,
                         profile=CheckProfile.model_validate({"commands": commands, "timeout_s": 3600}),
                         queue=self.hosts.queue)
        wf_id = f"bench-checks-{what}-{uuid.uuid4().hex[:8]}"
        busy0, load0, cpu0 = hb.core_times(), os.getloadavg()[0], self.hosts.cpu_s()
        started = time.perf_counter()
        result = await self.client.execute_workflow(ChecksProbe.run, req, id=wf_id, task_queue=self.wf_queue)
        elapsed, busy1, cpu1 = time.perf_counter() - started, hb.core_times(), self.hosts.cpu_s()
        merged = result.merged
        where = await self.where(wf_id)
        row = {"what": what, "scope": scope, "shards": shards, "hosts": sorted(self.hosts.running),
               "elapsed_s": round(elapsed, 2), "plan_s": result.plan_s, "parts_s": result.parts_s,
               "parts": len(result.plan.parts), "verdict": merged.verdict_of.value, "selection": merged.selection,
               "fallback": result.plan.fallback, "skipped": merged.skipped, "tests_run": merged.tests_run,
               "changed": result.plan.changed_count, "failures": [f.name for f in merged.failures][:20],
               "problems": merged.problems[:5], "unsandboxed": merged.unsandboxed, "part_tests": [
                   {" ".join(c.argv[:4]) + " ...": c.tests_run for c in r.commands} for r in result.reports],
               "part_duration_s": [r.duration_s for r in result.reports], "ran_on": where,
               "load_average_1m": round(load0, 2),
               # each host's CPU seconds over the check (its worker and checks): near elapsed_s on a core of its own
               "host_cpu_s": {f"host {h}": round(cpu1[h] - cpu0.get(h, 0.0), 2) for h in cpu1},
               "core_busy": {c: round((busy1[c][0] - busy0[c][0]) / max(1, busy1[c][1] - busy0[c][1]), 2)
                             for c in busy1 if c in busy0}}
        log(f"{what}: {row['elapsed_s']} s, {row['verdict']}, {row['parts']} part(s) on {where}; "
            f"{merged.tests_run} tests; {merged.selection or 'whole profile'}")
        return row

    async def where(self, wf_id: str) -> dict[str, list[str]]:
        """Each activity of the check: the host that ran it (its ActivityTaskStarted identity, pid@host) and its
        seconds from that start to its completion ("host 1 9.2s")."""
        from temporalio.api.enums.v1 import EventType

        names, started, out = {}, {}, {}  # type: ignore[var-annotated]
        async for e in self.client.get_workflow_handle(wf_id).fetch_history_events():
            if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
                names[e.event_id] = e.activity_task_scheduled_event_attributes.activity_type.name
            elif e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED:
                a = e.activity_task_started_event_attributes
                pid = a.identity.split("@", 1)[0]
                started[a.scheduled_event_id] = (self.hosts.pids.get(int(pid) if pid.isdigit() else 0, a.identity),
                                                 e.event_time.ToDatetime())
            elif e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED:
                sid = e.activity_task_completed_event_attributes.scheduled_event_id
                host, t0 = started.get(sid, ("?", e.event_time.ToDatetime()))
                secs = (e.event_time.ToDatetime() - t0).total_seconds()
                out.setdefault(names.get(sid, "?"), []).append(f"{host} {secs:.1f}s")
        return out


async def measure(args: argparse.Namespace, repo: Path, layout: Layout, shas: dict[str, str]) -> dict[str, Any]:
    sandbox_env, sandbox_note = hb.sandbox_state()
    sandbox_env["REPOSWARM_CHECK_NICE"] = str(args.check_nice)
    tmp = Path(tempfile.mkdtemp(prefix="reposwarm-bench-checks-"))
    env = await start_dev_server(["--db-filename", str(tmp / "temporal.db")])
    hosts: Hosts | None = None
    try:
        client = env.client
        address = client.service_client.config.target_host
        hosts = Hosts(address, f"bench-checks-{uuid.uuid4().hex[:6]}", tmp, args.cores, sandbox_env)
        wf_queue = f"{hosts.queue}-probe"
        # (a result it cannot decode fails the check at once, instead of retrying its task for ever)
        async with Worker(client, task_queue=wf_queue, workflows=[ChecksProbe],
                          workflow_failure_exception_types=[Exception]):
            checks = Checks(client, wf_queue, hosts, f"file://{repo}")
            base, change = shas["base"], shas["change"]
            runs: dict[str, list[dict[str, Any]]] = {}
            log("warm-up on host 1: the whole profile on the base (as the gate's baseline), the change selected")
            await hosts.serve(1)
            warm = [await checks.run("warmup-base-full", base, "", "all", label="baseline") if args.full_repeats
                    else {"verdict": Verdict.passed.value, "what": "warmup-base-full skipped (--full-repeats 0)"}]
            warm += [await checks.run("warmup-selected", change, base, "affected"),
                    await checks.run("warmup-sharded", change, base, "affected", shards=2)]
            if warm[0]["verdict"] != Verdict.passed.value:
                raise SystemExit(f"bench_checks: the base commit does not pass its own tests: {warm[0]}")
            runs["full"] = [await checks.run(f"full-{i + 1}", change, base, "all") for i in range(args.full_repeats)]
            runs["selected"] = [await checks.run(f"selected-{i + 1}", change, base, "affected")
                                for i in range(args.repeats)]
            breaks = []
            for name in layout.broken if args.breaks else []:
                row = await checks.run(f"break-{name}", shas[f"break-{name}"], base, "affected")
                breaks.append({"break": name, "what": layout.broken[name][0], "caught": row["verdict"] == "FAILED",
                               "expected_failing": layout.broken[name][2] or ["every pytest test"],
                               **{k: row[k] for k in ("verdict", "selection", "fallback", "failures")}})
            log("warm-up on host 2 alone: its clone, checkouts and index")
            await hosts.serve(2)
            warm += [await checks.run("warmup-host2-selected", change, base, "affected"),
                     await checks.run("warmup-host2-sharded", change, base, "affected", shards=2)]
            for i in range(args.repeats):  # interleaved: the machine's drift falls on both alike
                for n in (1, 2):
                    if await hosts.serve(*range(1, n + 1)):  # (re)started: a check first, not counted (cold worker)
                        warm.append(await checks.run(f"warmup-sharded-{n}host-{i + 1}", change, base, "affected", 2))
                    runs.setdefault(f"sharded_{n}host", []).append(
                        await checks.run(f"sharded-{n}host-{i + 1}", change, base, "affected", 2))
            return {"sandbox": sandbox_note, "warmup": warm, "runs": runs, "breaks": breaks}
    finally:
        if hosts is not None:
            hosts.stop()
        await env.shutdown()
        if args.keep:
            log(f"kept {tmp}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)


def summarize(args: argparse.Namespace, repo: Path, layout: Layout, shas: dict[str, str],
              measured: dict[str, Any], real: dict[str, bool]) -> dict[str, Any]:
    runs = measured["runs"]
    med = {k: round(statistics.median(r["elapsed_s"] for r in v), 2) if v else None for k, v in runs.items()}
    breaks = [{**b, "real": real[b["break"]]} for b in measured["breaks"]]
    out: dict[str, Any] = {
        "mode": "quick" if args.quick else "full",
        "machine": {"cpus": os.cpu_count(), "cpu_model": hb.cpu_model(), "python": platform.python_version(),
                    "platform": platform.platform(), "cores": args.cores},
        "repository": {"path": str(repo), **layout.stats(), "services": args.services,
                       "shared_modules_per_language": args.shared_modules, "test_cost_ms": args.test_cost_ms},
        "change": {"commit": shas["change"], "files": layout.change, "what": layout.change_what},
        "profile": {"commands": [PYTEST, NODE], "sharded": "shards: 2 on each", "judged": "against no baseline"},
        "hosts": f"`python worker.py`, a home each, one core each (taskset): host 1 = core {args.cores[0]}, host 2 = "
                 f"core {args.cores[1]}; the dev server and the probe workflow's worker unpinned",
        "sandbox": measured["sandbox"], "check_nice": args.check_nice,
        "validation_full_s": med["full"], "validation_selected_s": med["selected"],
        "validation_sharded_1host_s": med["sharded_1host"], "validation_sharded_2host_s": med["sharded_2host"],
        "selected_speedup": round(med["full"] / med["selected"], 1) if med["full"] and med["selected"] else None,
        "sharded_speedup": round(med["sharded_1host"] / med["sharded_2host"], 2)
        if med["sharded_1host"] and med["sharded_2host"] else None,
        "injected_breaks": len(breaks), "injected_breaks_caught": sum(b["caught"] for b in breaks),
        "breaks": breaks, "runs": runs, "warmup": measured["warmup"],
        # a shard goes to whichever host's poll the server hands it: the runs whose two shards both went to one host
        "sharded_2host_on_one_host": sum(len({v.split()[1] for v in r["ran_on"]["validate"]}) < 2
                                         for r in runs["sharded_2host"]),
    }
    out["targets"] = {k: {"target": t, "measured": out[k], "met": out[k] is not None and out[k] >= t}
                      for k, t in {**TARGETS, "injected_breaks_caught": len(breaks)}.items()}
    return out


HEADLINE = ("validation_full_s", "validation_selected_s", "validation_sharded_1host_s", "validation_sharded_2host_s",
            "selected_speedup", "sharded_speedup", "injected_breaks", "injected_breaks_caught")


def merge_results(path: Path, out: dict[str, Any]) -> None:
    """The headline keys into bench/results.json, every other key kept."""
    results = json.loads(path.read_text()) if path.exists() else {}
    results.update({k: out[k] for k in HEADLINE})
    results["validation_mode"] = out["mode"]
    path.write_text(json.dumps(results, indent=2) + "\n")


def table(out: dict[str, Any]) -> str:
    r = out["repository"]
    lines = [f"bench_checks ({out['mode']}): {r['lines']:,} lines, {r['test_files']} test files "
             f"({r['test_cost_ms']} ms of CPU each); sandbox {out['sandbox'].split(':')[0]}", "",
             "| check | seconds (median) |", "|---|---|", *(f"| {k} | {out[k]} |" for k in HEADLINE[:4])]
    lines += ["", f"selected {out['selected_speedup']}x faster than the whole suite (target 20x); two hosts "
              f"{out['sharded_speedup']}x one (target 1.7x); breaks caught {out['injected_breaks_caught']} of "
              f"{out['injected_breaks']}"]
    lines += [f"  {b['break']}: {'caught' if b['caught'] else 'MISSED'} ({b['selection'] or 'whole'})"
              for b in out["breaks"]]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", default=os.environ.get("CI") == "true",
                        help="30 services, 50 ms tests, one run of each (the default when CI=true)")
    parser.add_argument("--services", type=int, help="default 800 (~4M lines); --quick: 30")
    parser.add_argument("--shared-modules", type=int, help="shared modules per language (default 100; --quick: 10)")
    parser.add_argument("--test-cost-ms", type=int, help="CPU time of each test file (default 400; --quick: 50)")
    parser.add_argument("--repeats", type=int, help="runs of each selected and sharded check (default 5)")
    parser.add_argument("--full-repeats", type=int, default=1, help="runs of the whole suite (default 1; 0: none, "
                        "and no warm-up of it)")
    parser.add_argument("--cores", type=lambda s: [int(x) for x in s.split(",")], default=[0, 1])
    parser.add_argument("--check-nice", type=int, default=0, help="the hosts' REPOSWARM_CHECK_NICE (default 0: on a "
                        "machine others share, the product's 10 leaves the checks what the others' processes do not "
                        "take; alone on a host it changes nothing)")
    parser.add_argument("--no-breaks", dest="breaks", action="store_false", help="skip the injected breaks")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--cache-dir", default=os.path.join(tempfile.gettempdir(), "reposwarm-bench"))
    parser.add_argument("--keep", action="store_true", help="keep the temporary folder (homes, worker logs)")
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results_checks.json")
    parser.add_argument("--results", type=Path, default=ROOT / "bench" / "results.json")
    args = parser.parse_args(argv)
    args.services = args.services or (30 if args.quick else 800)
    args.shared_modules = args.shared_modules or (10 if args.quick else 100)
    args.test_cost_ms = args.test_cost_ms if args.test_cost_ms is not None else (50 if args.quick else 400)
    args.repeats = args.repeats or (1 if args.quick else 5)
    hb.require_taskset()
    if not all(c in os.sched_getaffinity(0) for c in args.cores[:2]) or len(args.cores) < 2:
        parser.error(f"--cores {args.cores}: two cores this process may use are needed")
    repo = bench_repo(args)
    layout = Layout(repo)
    shas = layout.commits(RUN_ID)
    real = verify(repo, layout, shas)
    log(f"the breaks, run directly: {real}")
    try:
        measured = asyncio.run(measure(args, repo, layout, shas))
    finally:
        layout.purge(RUN_ID)
    out = summarize(args, repo, layout, shas, measured, real)
    print(table(out))
    args.out.write_text(json.dumps(out, indent=2) + "\n")
    merge_results(args.results, out)
    print(f"wrote {args.out} and {', '.join(HEADLINE)} into {args.results}")
    return 0


if __name__ == "__main__":
    code = main()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)  # as bench_hosts.py: skip interpreter finalization, which the Temporal runtime's threads can abort
