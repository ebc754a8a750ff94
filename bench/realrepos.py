"""The harness of real repositories: `reposwarm try` on real commits of public repositories, each with its users'
usual environment active, as a new user would run it (no lanes file, no hand-written profile).

For each entry of bench/realrepos.yaml (or --only NAME,...): a checkout of the repository on branch `main` at the
commit's parent, as a user would have it; the user's environment made there as the entry says (a venv and an
install, pnpm install, uv sync...; cached between runs); then, with that environment active (PATH and VIRTUAL_ENV
as an activated venv gives them, the checkout as the current folder), the public surface:

  commit     reposwarm try --repo CHECKOUT --commit SHA --yes            want: PASSED, the tree equal to the commit
  probe      the same on the break probe: a commit on top of the parent (branch realrepos-probe/NAME; no other
             branch is touched) holding the real commit plus one line that breaks one changed source file at
             import                                                     want: FAILED, or NOT JUDGED with the reason
  careful    reposwarm try ... --propose careful   (the run's own proposal phase; the oracle as a careful planner)
  structure  reposwarm try ... --propose structure (the oracle proposing a lane per top-level folder)

Each try starts its own dev-server-backed worker (a task queue of its own, so no worker of another entry or of
another helper is reused): the worker inherits the entry's environment, and the worker runs the checks. One
Temporal dev server serves them all (started once, with its own port and home under the work folder).

Per try it records the lanes, the verdict (from `reposwarm status RUN --json`), the tests that ran, the changed
source files the checks exercised, whether the delivered tree equals the commit, the proposal's acceptance and
refusals, the time, and the first line of a failure. Results go to bench/results_realrepos.json (per entry, with
the date and reposwarm's commit; a rerun of some entries keeps the others) and to the "Real repositories" table
of docs/benchmarks.md.

    python bench/realrepos.py [--only NAME,...] [--modes commit,probe,careful,structure] [--mirrors DIR]
                              [--work DIR] [--timeout S] [--no-docs]
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import re
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
from realrepos_setup import TOOLS, base_env, git, make_checkout, make_probe, source_of, user_env  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
LIST = ROOT / "bench" / "realrepos.yaml"
RESULTS = ROOT / "bench" / "results_realrepos.json"
DOCS = ROOT / "docs" / "benchmarks.md"
REPOSWARM = ROOT / ".venv" / "bin" / "reposwarm"
MODES = ("commit", "probe", "careful", "structure")
PORT = 7833  # the harness's own dev server (TEMPORAL_PORT; the UI on PORT + 1000)
POLL_S = 15  # how often a running try's status is read (a lane paused at its budget is answered)
REQUIRED = ("name", "repo", "commit", "language", "layout", "environment", "probe", "why")
LANGUAGES = ("python", "javascript", "go", "rust")
KINDS = ("plain", "venv-release", "venv-editable", "uv", "pnpm", "yarn", "npm", "go", "cargo")
TABLE_START = "<!-- realrepos:start -->"
TABLE_END = "<!-- realrepos:end -->"


# --- the list ---

def load_entries(path: Path = LIST) -> list[dict[str, Any]]:
    data = yaml.safe_load(path.read_text())
    return list(data["entries"])


def entry_problems(entry: dict[str, Any]) -> list[str]:
    """What an entry lacks for the harness (an empty list: it can run)."""
    name = entry.get("name", "?")
    problems = [f"{name}: no {key}" for key in REQUIRED if not entry.get(key)]
    if problems:
        return problems
    if not re.fullmatch(r"github:[\w.-]+/[\w.-]+", entry["repo"]):
        problems.append(f"{name}: repo {entry['repo']!r} is not github:owner/name")
    if not re.fullmatch(r"[0-9a-f]{40}", entry["commit"]):
        problems.append(f"{name}: commit must be a full sha")
    if entry["language"] not in LANGUAGES:
        problems.append(f"{name}: language {entry['language']!r} is not one of {LANGUAGES}")
    env = entry["environment"]
    if env.get("kind") not in KINDS:
        problems.append(f"{name}: environment kind {env.get('kind')!r} is not one of {KINDS}")
    if not isinstance(env.get("setup"), list) or not all(isinstance(c, str) for c in env["setup"]):
        problems.append(f"{name}: environment setup must be a list of commands")
    if not isinstance(env.get("activate"), str):
        problems.append(f"{name}: environment activate must be $VENV, a folder of the checkout, or none")
    for tool in env.get("tools") or []:
        if tool not in TOOLS:
            problems.append(f"{name}: unknown tool {tool!r}")
    probe = entry["probe"]
    if not isinstance(probe.get("file"), str) or not isinstance(probe.get("line"), int) or probe["line"] < 0:
        problems.append(f"{name}: probe needs a file and a line (0: the end)")
    return problems


# --- a try and what it said ---

def server_env(work: Path) -> dict[str, str]:
    return {"REPOSWARM_HOME": str(work / "home"), "TEMPORAL_ADDRESS": f"localhost:{PORT}",
            "TEMPORAL_PORT": str(PORT), "TEMPORAL_UI_PORT": str(PORT + 1000)}


def ensure_server(work: Path) -> None:
    subprocess.run([str(ROOT / "temporal-dev"), "--background"], env={**base_env(), **server_env(work)},
                   check=True, stdin=subprocess.DEVNULL, timeout=120)


def status_json(run_id: str, env: dict[str, str]) -> dict[str, Any] | None:
    done = subprocess.run([str(REPOSWARM), "status", run_id, "--json"], env=env, capture_output=True, text=True,
                          timeout=120, stdin=subprocess.DEVNULL)
    try:
        return dict(json.loads(done.stdout)) if done.returncode == 0 else None
    except json.JSONDecodeError:
        return None


def first_line(text: str) -> str:
    return next((line.strip() for line in text.splitlines() if line.strip()), "")[:300]


def summarize(out: str, err: str, code: int, status: dict[str, Any] | None) -> dict[str, Any]:
    """What a try said, from its output and its run's status."""
    result: dict[str, Any] = {"exit": code}
    if m := re.search(r"the swarm's result equals the commit", out):
        result["tree"] = "equal"
    elif m := re.search(r"the swarm's result differs from the commit \S+ in (\d+) file\(s\): (.*?) \(git", out):
        result["tree"] = f"differs in {m.group(1)}: {m.group(2)}"
    else:
        result["tree"] = "not delivered"
    if m := re.search(r"^no lanes file given or in .*: proposed (\S+)$", out, re.M):
        try:
            lanes = yaml.safe_load(Path(m.group(1)).read_text())["swarm"]["lanes"]
            result["lanes"] = {name: role.get("allowed_paths", []) for name, role in lanes.items()}
        except (OSError, KeyError, TypeError, yaml.YAMLError):
            pass
    if "lanes" not in result and (m := re.search(r" as run \S+, lanes (.*?); watch it at", out)):
        result["lanes"] = {name: [] for name in m.group(1).split(", ")}
    if m := re.search(r"^Verdict: (.*)$", out, re.M):
        result["verdict_line"] = m.group(1)[:300]
    errors = [line for line in err.splitlines() if line.startswith("error: ")]
    if errors:
        result["error"] = errors[-1][:500]
    if status is None:
        return result
    result["phase"] = status.get("phase")
    proposal = status.get("proposal")
    if proposal:
        result["proposal"] = {"lanes": {name: role.get("allowed_paths", []) for name, role in proposal["lanes"].items()},
                              "depends_on": {name: role["depends_on"] for name, role in proposal["lanes"].items()
                                             if role.get("depends_on")},
                              "overlaps": proposal.get("overlaps", []), "problems": proposal.get("problems", []),
                              "warnings": proposal.get("warnings", []), "attempts": proposal.get("attempts"),
                              "decided": proposal.get("decided", "")}
        result["lanes"] = result["proposal"]["lanes"]
    report = status.get("test_report")
    if report:
        result["verdict"] = report.get("verdict") or ("PASSED" if report.get("passed") else "FAILED")
        result["tests_run"], result["base_tests_run"] = report.get("tests_run"), report.get("base_tests_run")
        result["pre_existing"] = len(report.get("pre_existing") or [])
        result["check_problems"] = [p[:300] for p in report.get("problems") or []][:5]
        if report.get("setup"):
            result["setup"] = [line[:300] for line in report["setup"]][:4]
        exercise = report.get("exercise")
        if exercise:
            judged = len(exercise.get("loaded", [])) + len(exercise.get("not_loaded", [])) + len(exercise.get("outside", {}))
            result["exercised"] = f"{len(exercise.get('loaded', []))} of {judged}"
            result["outside"] = dict(list((exercise.get("outside") or {}).items())[:5])
        failures = report.get("failures") or []
        if failures:
            f = failures[0]
            result["first_failure"] = f"{f.get('name')}: {first_line(f.get('message') or '')}"[:300]
        commands = report.get("commands") or []
        result["commands"] = [{"argv": " ".join(c.get("argv", []))[:200], "exit": c.get("exit_code"),
                               "reason": c.get("reason", ""), "tests_run": c.get("tests_run")} for c in commands][:6]
    result["rounds"] = len(status.get("rounds") or [])
    result["validations"] = [v[:300] for v in status.get("validations") or []][-6:]
    if status.get("error"):
        result["run_error"] = first_line(status["error"])
    return result


def run_try(entry: dict[str, Any], mode: str, sha: str, checkout: Path, env: dict[str, str], work: Path,
            timeout: float) -> dict[str, Any]:
    """One `reposwarm try`, followed as a user would: a lane paused at its budget (the run waits for a person) is
    recorded and stopped (`reposwarm budget RUN --lane L --stop`) so the run reaches its review."""
    queue = f"realrepos-{entry['name']}-{mode}-{uuid.uuid4().hex[:6]}"
    full = {**env, **server_env(work), "REPOSWARM_TASK_QUEUE": queue}
    argv = [str(REPOSWARM), "try", "--repo", str(checkout), "--commit", sha, "--yes"]
    if mode in ("careful", "structure"):
        argv += ["--propose", mode]
    logs = work / entry["name"] / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    out_path, err_path = logs / f"{mode}.stdout", logs / f"{mode}.stderr"
    started = time.monotonic()
    pauses: list[str] = []
    with out_path.open("w") as out, err_path.open("w") as err:
        proc = subprocess.Popen(argv, cwd=checkout, env=full, stdout=out, stderr=err, stdin=subprocess.DEVNULL)
        run_id = None
        while proc.poll() is None:
            time.sleep(POLL_S)
            if time.monotonic() - started > timeout:
                proc.send_signal(signal.SIGINT)  # (try stops the worker it started when interrupted)
                try:
                    proc.wait(timeout=60)
                except subprocess.TimeoutExpired:
                    proc.kill()
                pauses.append(f"the try did not end within {timeout:g} s")
                break
            text = out_path.read_text(errors="replace") + err_path.read_text(errors="replace")
            run_id = run_id or (m.group(1) if (m := re.search(r"\b(reposwarm-try-[\w.-]+)", text)) else None)
            status = status_json(run_id, full) if run_id else None
            for pause in (status or {}).get("paused") or []:
                lane = pause.get("lane") or ""
                said = (f"{'lane ' + lane if lane else 'the run'} paused at its {pause.get('what')} budget "
                        f"({pause.get('spent', 0):,.0f} of {pause.get('budget', 0):,.0f}; it would wait "
                        f"{pause.get('wait_s', 0):g} s for a person): stopped with reposwarm budget --stop")
                if pause.get("cleared") or said in pauses:
                    continue
                pauses.append(said)
                subprocess.run([str(REPOSWARM), "budget", run_id or "", *(["--lane", lane] if lane else []), "--stop"],
                               env=full, capture_output=True, timeout=120, stdin=subprocess.DEVNULL)
    code = proc.returncode if proc.returncode is not None else -1
    seconds = round(time.monotonic() - started, 1)
    out_text, err_text = out_path.read_text(errors="replace"), err_path.read_text(errors="replace")
    (logs / f"{mode}.log").write_text(f"$ {' '.join(argv)}\n--- stdout\n{out_text}\n--- stderr\n{err_text}\n")
    run_id = m.group(1) if (m := re.search(r"\b(reposwarm-try-[\w.-]+)", out_text + err_text)) else None
    status = status_json(run_id, full) if run_id else None
    if status is not None:
        (logs / f"{mode}.status.json").write_text(json.dumps(status, indent=1))
    result = summarize(out_text, err_text, code, status)
    result.update({"run": run_id, "seconds": seconds, "sha": sha})
    if pauses:
        result["paused"] = pauses[:5]
    result["ok"] = judged_ok(mode, result)
    return result


def judged_ok(mode: str, r: dict[str, Any]) -> bool:
    """Whether the try gave what is wanted of it."""
    if mode == "probe":
        return r.get("verdict") in ("FAILED", "NOT JUDGED") and r.get("tree") != "equal"
    # (a commit that removes or rewrites its tests is honestly PASSED WITH TEST CHANGES, which try --yes accepts)
    return r.get("verdict") in ("PASSED", "PASSED WITH TEST CHANGES") and r.get("tree") == "equal" \
        and r.get("exit") == 0


# --- one entry, the results, the table ---

def run_entry(entry: dict[str, Any], modes: list[str], mirrors: Path | None, work: Path, timeout: float,
              save: Callable[[str, dict[str, Any]], None]) -> None:
    """The entry's checkout, environment and probe, then its tries, each saved as it ends."""
    folder = work / entry["name"]
    record: dict[str, Any] = {"repo": entry["repo"], "sha": entry["commit"], "language": entry["language"],
                              "environment": entry["environment"]["kind"], "probe_at": entry["probe"]}
    try:
        checkout, parent = make_checkout(entry, folder, source_of(entry, mirrors))
        started = time.monotonic()
        env = user_env(entry, folder, checkout, work)
        record["setup_s"] = round(time.monotonic() - started, 1)
        probe = make_probe(entry, checkout, parent) if "probe" in modes else None
    except (RuntimeError, subprocess.SubprocessError, OSError) as err:
        record["setup_error"] = str(err)[:500]
        save(entry["name"], record)
        return
    for mode in modes:
        sha = probe if mode == "probe" and probe else entry["commit"]
        print(f"[{entry['name']}] {mode}: reposwarm try --commit {sha[:12]} ...", flush=True)
        record[mode] = run_try(entry, mode, sha, checkout, env, work, timeout)
        r = record[mode]
        print(f"[{entry['name']}] {mode}: {'ok' if r['ok'] else 'NOT OK'} verdict={r.get('verdict')} "
              f"tree={r.get('tree')} tests={r.get('tests_run')} exercised={r.get('exercised')} {r['seconds']} s "
              f"{r.get('error') or r.get('run_error') or ''}", flush=True)
        save(entry["name"], {**record, mode: r})


def reposwarm_commit() -> str:
    """HEAD, and "+uncommitted" when the code a try runs has uncommitted changes (other work in progress)."""
    dirty = git(ROOT, "status", "--porcelain", "--untracked-files=no", "--", "reposwarm", "activities", "workflows",
                "worker.py")
    return git(ROOT, "rev-parse", "--short=12", "HEAD") + ("+uncommitted" if dirty else "")


def cell(mode: str, r: dict[str, Any] | None, checked: dict[str, Any] | None = None) -> str:
    if r is None and checked:  # not run: the proposal through the guardrails alone (--check-proposals)
        lanes = ", ".join(checked["lanes"])
        return (f"accepted (checked, not run): {lanes}" if checked["accepted"]
                else f"refused (checked, not run): {checked['problems'][0][:110]}")
    if r is None:
        return "—"
    if mode in ("careful", "structure") and r.get("proposal") and r["proposal"].get("problems"):
        return f"refused: {r['proposal']['problems'][0][:90]}"
    verdict = r.get("verdict") or (r.get("phase") or "no run")
    bits = [verdict]
    if r.get("tests_run") is not None:
        bits.append(f"{r['tests_run']} tests")
    if r.get("exercised"):
        bits.append(f"{r['exercised']} exercised")
    if mode != "probe":
        bits.append("tree =" if r.get("tree") == "equal" else ("not delivered" if r.get("tree") == "not delivered"
                                                               else "tree differs"))
    bits.append(f"{r.get('seconds', 0):.0f} s")
    if r.get("paused"):
        bits.append(f"{len(r['paused'])} budget pause(s)")
    why = (r.get("check_problems") or [None])[0] or r.get("first_failure") or r.get("error") or r.get("run_error")
    if why and (mode == "probe" or not r.get("ok")):  # (a probe's reason is what it is judged by)
        why = re.sub(r"^`[^`]*`: |^(error: )?", "", why)  # (the command line is in the results file)
        bits.append(f"— {why[:110]}")
    return ("✓ " if r.get("ok") else "✗ ") + ", ".join(bits)


def table(results: dict[str, Any]) -> str:
    head = ["| entry | environment | commit | probe | careful proposal | structure proposal |",
            "|---|---|---|---|---|---|"]
    rows = []
    for name, rec in results["entries"].items():
        if "setup_error" in rec:
            rows.append(f"| {name} | {rec.get('environment', '')} | setup failed: {rec['setup_error'][:120]} | | | |")
            continue
        cells = [cell(mode, rec.get(mode), (rec.get("proposals_checked") or {}).get(mode)).replace("|", "\\|")
                 for mode in MODES]
        sha = rec.get("sha") or (rec.get("commit") or {}).get("sha", "")  # (the entry's commit; "commit" is a try)
        rows.append(f"| {name} ({sha[:8]}) | {rec.get('environment', '')} | " + " | ".join(cells) + " |")
    return "\n".join(head + rows)


def write_docs(results: dict[str, Any]) -> None:
    for record in results["entries"].values():  # (judged again: what is wanted may have been said better since)
        for mode in MODES:
            if isinstance(record.get(mode), dict):
                record[mode]["ok"] = judged_ok(mode, record[mode])
    text = DOCS.read_text()
    block = (f"{TABLE_START}\nMeasured {results['date']} at reposwarm {results['reposwarm']} "
             f"({sum(1 for r in results['entries'].values() for m in MODES if isinstance(r.get(m), dict) and r[m].get('ok'))}"
             f" of {sum(1 for r in results['entries'].values() for m in MODES if isinstance(r.get(m), dict))} tries as "
             f"wanted; ✓ as wanted, ✗ not):\n\n{table(results)}\n{TABLE_END}")
    if TABLE_START in text:
        text = re.sub(re.escape(TABLE_START) + ".*?" + re.escape(TABLE_END), lambda _: block, text, flags=re.S)
    else:
        text = text.rstrip("\n") + "\n\n" + block + "\n"
    DOCS.write_text(text)


def check_proposals(entries: list[dict[str, Any]], mirrors: Path | None, work: Path,
                    save: Callable[[str, dict[str, Any]], None]) -> int:
    """Each entry's careful and structure proposals through the guardrails as the proposal phase checks them (the
    base commit's import graph), with no run: seconds, where the tries take hours."""
    import asyncio

    sys.path.insert(0, str(ROOT))
    from activities.proposing import checked, import_graph, proposal_of
    from reposwarm.agent.specs import SubmitLanesArgs
    from reposwarm.contracts import ProposeOptions
    from reposwarm.contracts.model import ModelRequest
    from reposwarm.intel.layout import survey
    from reposwarm.models.oracle import OracleProvider

    most = ProposeOptions().max_lanes
    ask = ModelRequest(model="oracle", agent="proposer", system="", tools=[], round=0, turn=0,
                       messages=[{"role": "user", "content": f"Propose at most {most} lanes.\n"}])
    refused = 0
    for entry in entries:
        found: dict[str, Any] = {}
        checkout, parent = make_checkout(entry, work / entry["name"], source_of(entry, mirrors))
        files = git(checkout, "ls-tree", "-r", "--name-only", parent).splitlines()
        graph, unread = import_graph(str(checkout), parent)
        layout = survey(checkout, parent)
        for plan in ("careful", "structure"):
            oracle = OracleProvider(f"{checkout}#{entry['commit']}?plan={plan}")
            reply = asyncio.run(oracle.complete(ask))
            args = SubmitLanesArgs.model_validate_json(reply.tool_calls[0].raw_arguments)
            proposal = checked(proposal_of(args, "oracle", layout), files, graph, most, unread)
            refused += bool(proposal.problems)
            lanes = ", ".join(f"{name} ({len(role.allowed_paths)})" for name, role in proposal.lanes.items())
            print(f"{entry['name']} {plan}: {'REFUSED' if proposal.problems else 'accepted'}: {lanes}")
            for line in proposal.problems:
                print(f"    problem: {line[:300]}")
            found[plan] = {"accepted": not proposal.problems, "problems": proposal.problems[:5],
                           "lanes": {name: role.allowed_paths for name, role in proposal.lanes.items()},
                           "depends_on": {name: role.depends_on for name, role in proposal.lanes.items()
                                          if role.depends_on}, "overlaps": proposal.overlaps,
                           "warnings": proposal.warnings[:5], "date": dt.date.today().isoformat(),
                           "reposwarm": reposwarm_commit()}
        save(entry["name"], {"proposals_checked": found, "repo": entry["repo"], "sha": entry["commit"],
                             "environment": entry["environment"]["kind"]})
    return 1 if refused else 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--only", help="entries to run, by name, comma-separated, in that order (default: all)")
    p.add_argument("--modes", default=",".join(MODES), help=f"which tries, comma-separated (default {','.join(MODES)})")
    p.add_argument("--mirrors", type=Path, help="a folder of mirrors (owner+name/repo, or owner/name[.git])")
    p.add_argument("--work", type=Path, default=Path("/work/realrepos"), help="checkouts, environments, logs, the "
                   "dev server's home (default /work/realrepos)")
    p.add_argument("--timeout", type=float, default=1800, help="seconds a try may take (default 1800)")
    p.add_argument("--list", type=Path, default=LIST, help="the list of entries (default bench/realrepos.yaml)")
    p.add_argument("--out", type=Path, default=RESULTS)
    p.add_argument("--no-docs", action="store_true", help="do not rewrite the table in docs/benchmarks.md")
    p.add_argument("--check-proposals", action="store_true", help="only check each entry's careful and structure "
                   "proposals against the guardrails (no run)")
    p.add_argument("--table-only", action="store_true", help="rewrite the docs' table from the results file; run nothing")
    args = p.parse_args(argv)
    if args.table_only:
        write_docs(json.loads(args.out.read_text()))
        return 0
    entries = load_entries(args.list)
    problems = [line for e in entries for line in entry_problems(e)]
    if problems:
        print("\n".join(problems), file=sys.stderr)
        return 2
    wanted = [name for name in args.only.split(",") if name] if args.only else None
    if wanted and (unknown := set(wanted) - {e["name"] for e in entries}):
        print(f"unknown entries: {', '.join(sorted(unknown))}", file=sys.stderr)
        return 2
    modes = [m for m in args.modes.split(",") if m]
    if bad := [m for m in modes if m not in MODES]:
        print(f"unknown modes: {', '.join(bad)} (known: {', '.join(MODES)})", file=sys.stderr)
        return 2
    args.work.mkdir(parents=True, exist_ok=True)
    if not args.check_proposals:
        ensure_server(args.work)
    results = json.loads(args.out.read_text()) if args.out.is_file() else {"entries": {}}
    order = [e["name"] for e in entries]

    def save(name: str, record: dict[str, Any]) -> None:
        """One more result in the file (and the table): the entry's other tries keep their last results."""
        stamp = {"date": dt.date.today().isoformat(), "reposwarm": reposwarm_commit()}
        for mode in MODES:
            if isinstance(record.get(mode), dict):
                record[mode].update(stamp)
        merged = {**results["entries"].get(name, {}), **record, **stamp}
        if "setup_error" not in record:  # (set up this time: an earlier failure is history)
            merged.pop("setup_error", None)
        results["entries"][name] = merged
        results.update(stamp)
        results["entries"] = dict(sorted(results["entries"].items(),
                                         key=lambda kv: order.index(kv[0]) if kv[0] in order else len(order)))
        args.out.write_text(json.dumps(results, indent=1, ensure_ascii=False) + "\n")
        if not args.no_docs:
            write_docs(results)

    if args.check_proposals:
        return check_proposals([e for e in entries if not wanted or e["name"] in wanted], args.mirrors,
                               args.work.resolve(), save)
    # the verdicts first (every entry's commit and probe), then the proposals
    for group in ([m for m in modes if m in ("commit", "probe")], [m for m in modes if m in ("careful", "structure")]):
        by_name = {e["name"]: e for e in entries}
        for entry in [by_name[name] for name in wanted] if wanted else entries:  # (--only: in its order)
            if group:
                run_entry(entry, group, args.mirrors, args.work.resolve(), args.timeout, save)
    return 0


if __name__ == "__main__":
    sys.exit(main())
