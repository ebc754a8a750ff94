"""The command line's wiring: `reposwarm COMMAND` (or `python starter.py COMMAND`), each command's options, and
its exit code.

    run, watch, status, review, approve, reject, list         reposwarm/cli/runs.py: runs, through Temporal alone
    confirm                                                    reposwarm/cli/proposing.py: a run's proposed lanes
    budget                                                     reposwarm/cli/budget.py: a budget that paused
    lane-test                                                  reposwarm/cli/lanetest.py: one lane, its transcript
    demo, try                                                  reposwarm/cli/local.py, trying.py: on this machine,
                                                               starting a dev server and a worker when missing
    dev-server                                                 reposwarm/devserver.py: this home's local server
    report, explain, trial, mcp                                reposwarm/cli/host.py
    checks                                                     reposwarm/cli/checks.py: a profile on HEAD
    init                                                       reposwarm/cli/init.py: the repository's reposwarm.yaml
    doctor                                                     reposwarm/cli/doctor.py: what a run needs, checked
    lanes                                                      reposwarm/cli/lanes.py: lanes from the structure
    recording, gc                                              reposwarm/cli/host.py: [worker host]: they read
                                                               the runs' files under REPOSWARM_HOME
    worker                                                     worker.py: this host's worker

A UserError or ConfigError (bad input, said plainly: one line, or one per problem) is `error: ...` on stderr and
exit code 2. A closed pipe (`reposwarm status RUN | head`) ends the command quietly. A Ctrl-C is exit code 130,
saying what the interrupted wait leaves where the wait said it (common.if_interrupted: "the run goes on: ...").
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Coroutine
from importlib import import_module
from pathlib import Path
from typing import NoReturn

# Nothing here imports a command's module (nor Temporal, pydantic, rich): `--help` and a bad option answer at once,
# and each command imports only what it uses when it runs (handlers are "module:function", resolved in main()).
RUNS, HOST, CHECKS = "reposwarm.cli.runs", "reposwarm.cli.host", "reposwarm.cli.checks"

WORKER_HOST = "[worker host]"
WORKER_HOST_NOTE = ("reads the runs' files under REPOSWARM_HOME (default ~/.reposwarm): run it on the worker's host, "
                    "with the worker's REPOSWARM_HOME")
HOME_HELP = "read a worker host's files in this folder (its REPOSWARM_HOME) instead of the run's record on the server"


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("reposwarm")
    except PackageNotFoundError:
        return "(not installed)"


class _Version(argparse.Action):
    """--version, the installed package's, looked up only when asked (importlib.metadata takes a while)."""

    def __init__(self, option_strings: list[str], dest: str = argparse.SUPPRESS,
                 default: str = argparse.SUPPRESS, help: str = "show reposwarm's version and exit") -> None:
        super().__init__(option_strings=option_strings, dest=dest, default=default, nargs=0, help=help)

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: object,
                 option_string: str | None = None) -> None:
        print(f"reposwarm {_version()}")
        parser.exit()


def _prog() -> str:
    return Path(sys.argv[0]).name if Path(sys.argv[0]).name == "reposwarm" else "starter.py"


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=_prog(),
        description="Start, watch and review reposwarm runs. Every run command reaches the run through the "
                    "Temporal server alone: from any machine, with or without a worker, during and after the run.",
        epilog=f"Commands marked {WORKER_HOST} read the runs' files under REPOSWARM_HOME (default ~/.reposwarm), "
               "so run them on the worker's host, with the worker's REPOSWARM_HOME.")
    p.add_argument("--version", action=_Version)
    sub = p.add_subparsers(dest="command", required=True)

    def host_command(name: str, help: str) -> argparse.ArgumentParser:
        return sub.add_parser(name, help=f"{WORKER_HOST} {help}", description=f"{help[0].upper()}{help[1:]}. "
                              f"{WORKER_HOST}: {WORKER_HOST_NOTE}.")

    # the run commands: they reach the run through Temporal, from any machine
    run = sub.add_parser("run", help="start a swarm run on a repository")
    run.add_argument("--repo", required=True, help="the repository: its top folder, or a git remote URL (its lanes "
                     "file or configuration given here, or none: the run proposes its lanes on a worker)")
    run.add_argument("--task", required=True, help="what to change, in words: the planner splits it into the lanes' goals")
    run.add_argument("--lanes", help="lanes file (default: reposwarm.yaml, helpers.yaml or "
                     ".reposwarm.yaml in the repository)")
    run.add_argument("--config", metavar="FILE", help="the repository's configuration (check profiles, prices, "
                     "delivery, defaults, budgets) with no lanes: the run proposes them (default: the repository's "
                     "reposwarm.yaml when it has none); with lanes, it is the lanes file")
    run.add_argument("--plan", help="a Plan as YAML or JSON; skips the planning model in round 1")
    run.add_argument("--model", help="provider:name, e.g. replay:script.yaml (default: REPOSWARM_MODEL)")
    run.add_argument("--wait", action="store_true", help="show progress until the run waits for review")
    run.add_argument("--pin-base", action="store_true",
                     help="work from the commit the run starts on, even as its branch moves (default: follow it)")
    run.add_argument("--dry-run", action="store_true",
                     help="show the plan and each lane's estimated tokens and cost; dispatch nothing")
    run.add_argument("--record", action="store_true",
                     help="keep every model exchange, so `starter.py recording RUN` can make a replay script")
    # with no lanes file the run proposes its lanes first (reposwarm/cli/proposing.py, docs/lanes.md)
    run.add_argument("--yes", action="store_true",
                     help="no lanes file: accept the lanes the run proposes without asking (unattended too)")
    run.add_argument("--write-lanes", metavar="FILE",
                     help="no lanes file: write the proposed lanes to FILE (their plan beside it) and dispatch nothing")
    run.add_argument("--max-lanes", type=int, metavar="N",
                     help="no lanes file: propose at most N lanes (default 8)")
    run.set_defaults(handler=f"{RUNS}:cmd_run")
    conf = sub.add_parser("confirm", help="answer the lanes a run proposed (a run with no lanes file): accept them, "
                          "an edit of them, or stop the run")
    conf.add_argument("run", help="the run's id (as `run` printed it, or from `list`)")
    conf.add_argument("--lanes", metavar="FILE", help="accept this edit instead: a lanes file, with the round-1 plan "
                      "in a plan: section (docs/lanes.md)")
    conf.add_argument("--reject", action="store_true", help="stop the run: nothing is dispatched")
    conf.add_argument("--comment", help="a note kept with the answer")
    conf.set_defaults(handler="reposwarm.cli.proposing:cmd_confirm")
    lt = sub.add_parser("lane-test", help="one lane on your repository with a goal of yours, then its transcript "
                        "turn by turn (judge a prompt or tool change on your own code)")
    lt.add_argument("--repo", required=True, help="the repository's top folder")
    lt.add_argument("--lane", required=True, help="a lane of the lanes file")
    lt.add_argument("--goal", required=True, help="what the lane should do")
    lt.add_argument("--lanes", help="lanes file (default: reposwarm.yaml, helpers.yaml or "
                     ".reposwarm.yaml in the repository)")
    lt.add_argument("--model", help="provider:name (default: the lane's model, REPOSWARM_MODEL, swarm.model)")
    lt.add_argument("--agent", help="the lane's agent: builtin, claude-code, codex, or acp:COMMAND ARGS (default: "
                    "the lanes file's; docs/agents.md)")
    lt.add_argument("--task", help="the whole change, for context (default: the goal)")
    lt.add_argument("--contract", help="an interface contract to give the lane")
    lt.set_defaults(handler="reposwarm.cli.lanetest:cmd_lane_test")
    bud = sub.add_parser("budget", help="answer a lane (or the run) paused at its budget: raise it or stop it")
    bud.add_argument("run", help="the run's id (as `run` printed it, or from `list`)")
    bud.add_argument("--lane", help="the paused lane (default: the run's own cost budget)")
    bud.add_argument("--raise", dest="raise_by", metavar="FACTOR", help="multiply the budget, e.g. 2x")
    bud.add_argument("--add-usd", type=float, metavar="N", help="add N dollars to a cost budget")
    bud.add_argument("--add-tokens", type=int, metavar="N", help="add N billed tokens to a token budget")
    bud.add_argument("--stop", action="store_true", help="stop it: the lane ends as budget_exhausted, its work kept")
    bud.set_defaults(handler="reposwarm.cli.budget:cmd_budget")
    w = sub.add_parser("watch", help="a live view of a run until it waits for review or ends")
    w.add_argument("run", help="the run's id (as `run` printed it, or from `list`)")
    w.set_defaults(handler=f"{RUNS}:cmd_watch")
    def answer(name: str, help: str, handler: str, home: str | None = None) -> argparse.ArgumentParser:
        """A command that answers about one run, from anywhere (with --home: from a worker host's files)."""
        cmd = sub.add_parser(name, help=help)
        cmd.add_argument("run", help="the run's id (as `run` printed it, or from `list`)")
        cmd.add_argument("--json", action="store_true", help="the answer as JSON (notes go to stderr)")
        if home:
            cmd.add_argument("--home", metavar="DIR", help=f"{HOME_HELP} ({home})")
        cmd.set_defaults(handler=handler)
        return cmd

    answer("status", "show a run's status", f"{RUNS}:cmd_status")
    answer("review", "show a run's review package", f"{RUNS}:cmd_review", "a run gone from Temporal: its saved package")
    queue_help = ("with no worker running, leave the decision queued in Temporal (it applies when a worker runs) "
                  "instead of refusing it")
    approve = sub.add_parser("approve", help="approve a run waiting for review; waits for the delivered branch")
    approve.add_argument("run", help="the run's id")
    approve.add_argument("--comment", help="a note kept with the decision (in the run's history and ledger)")
    approve.add_argument("--no-wait", action="store_true", help="return once the approval is taken")
    approve.add_argument("--queue", action="store_true", help=queue_help)
    approve.add_argument("--accept-red", action="store_true",
                         help="deliver a round whose checks FAILED (refused without it, saying why they failed)")
    approve.add_argument("--accept-test-changes", action="store_true",
                         help="deliver a round that PASSED WITH TEST CHANGES (tests lost, rewritten or reconfigured)")
    approve.add_argument("--accept-unjudged", action="store_true",
                         help="deliver a round whose checks were NOT JUDGED (they ran another copy of the changed "
                              "code, not the tree's)")
    approve.set_defaults(handler=f"{RUNS}:cmd_decide")
    reject = sub.add_parser("reject", help="reject a run; the comment becomes the next plan's input")
    reject.add_argument("run", help="the run's id")
    reject.add_argument("--comment", required=True, help="what to change: the next round's plan is made from it")
    reject.add_argument("--plan", metavar="FILE", help="the next round's plan (YAML or JSON), instead of the "
                                                       "planning model's")
    reject.add_argument("--queue", action="store_true", help=queue_help)
    reject.set_defaults(handler=f"{RUNS}:cmd_decide")
    ls = sub.add_parser("list", help="list runs, newest first")
    ls.add_argument("--repo", help="only runs on this repository")
    ls.add_argument("--limit", type=int, default=20, help="at most this many runs (default 20)")
    ls.add_argument("--all", action="store_true", help="dry runs too (planned, nothing dispatched)")
    ls.set_defaults(handler=f"{RUNS}:cmd_list")
    demo = sub.add_parser("demo", help="run the bundled example end to end (starts a local dev server and a "
                          "worker when none answers)")
    demo.add_argument("--yes", action="store_true", help="approve without asking")
    demo.set_defaults(handler="reposwarm.cli.local:cmd_demo")
    dev = sub.add_parser("dev-server", help="start this home's local Temporal dev server (SQLite under "
                         "REPOSWARM_HOME, ports TEMPORAL_PORT and TEMPORAL_UI_PORT), or use the one that answers")
    how = dev.add_mutually_exclusive_group()  # the options of reposwarm/devserver.py add_options
    how.add_argument("--background", action="store_true", help="start it detached, wait until it answers, return")
    how.add_argument("--stop", action="store_true", help="stop the server this home started on the port")
    dev.set_defaults(handler="reposwarm.devserver:cmd_dev_server")
    tri = sub.add_parser("try", help="replay one commit of your repository through the whole swarm, offline and "
                         "free (the oracle model); your checkout is not touched",
                         description="Replay one real commit of your repository (default HEAD) through the whole "
                         "swarm with the commit-replay model (oracle:<repository>#<sha>): in a clone of its own under "
                         "REPOSWARM_HOME/try/ holding the commit's parent, with your lanes file or one proposed "
                         "from the commit; a local dev server and a worker are started when none answers. Ends with "
                         "the delivered branch and whether it equals the commit. See docs/trying.md.")
    tri.add_argument("--repo", required=True, help="the git repository's top folder (only read)")
    tri.add_argument("--commit", metavar="SHA", help="the commit to replay (default HEAD); not a merge, not the first")
    tri.add_argument("--lanes", metavar="FILE", help="lanes file (default: reposwarm.yaml, helpers.yaml or "
                     ".reposwarm.yaml in the repository, else one proposed from the commit and written into the "
                     "try's folder)")
    tri.add_argument("--yes", action="store_true", help="approve without asking (the commit's own test changes "
                     "included)")
    tri.add_argument("--propose", choices=("careful", "structure"), help="have the run propose its lanes (its "
                     "proposal phase and guardrails), the oracle answering as a careful planner would split the commit "
                     "or as the structure alone suggests; instead of a lanes file")
    tri.set_defaults(handler="reposwarm.cli.trying:cmd_try")

    tr = sub.add_parser("trial", help="replay a repository's own commits as swarm tasks and score the swarm")
    tr.add_argument("--repo", required=True, help="the git repository's top folder")
    tr.add_argument("--commits", nargs="+", required=True, metavar="REV-RANGE|SHA",
                    help="the commits to replay as tasks: each commit's message is the task, and the swarm's "
                         "result is scored against its diff")
    tr.add_argument("--lanes", help="lanes file (default: reposwarm.yaml, helpers.yaml or "
                     ".reposwarm.yaml in the repository)")
    tr.add_argument("--model", help="provider:name for the lanes and the planner (default: REPOSWARM_MODEL)")
    tr.add_argument("--max", type=int, help="at most this many trials")
    tr.add_argument("--parallel", type=int, default=2, help="trials at once (default 2)")
    tr.add_argument("--batch", help="a batch id; the same id resumes that batch")
    tr.add_argument("--json", action="store_true", help="the batch's scores as JSON")
    tr.add_argument("--oracle", nargs="?", const="", default=None, metavar="OPTIONS",
                    help=argparse.SUPPRESS)  # the harness's own proof: a model that knows the commit
    tr.set_defaults(handler=f"{HOST}:cmd_trial")
    chk = sub.add_parser("checks", help="run a check profile once on the repository's HEAD, as a run would, and "
                         "say per command what ran, the tests found and what to fix")
    chk.add_argument("--repo", required=True, help="the git repository's top folder (its checkout is only read)")
    chk.add_argument("--lanes", metavar="FILE", help="lanes file (default: reposwarm.yaml, helpers.yaml or "
                     ".reposwarm.yaml in the repository, as run finds it; with none, the profile a run with none "
                     "detects, and why)")
    chk.add_argument("--profile", help="the validation profile to run (default: the lanes file's validation.profile)")
    chk.set_defaults(handler=f"{CHECKS}:cmd_checks")
    ini = sub.add_parser("init", help="write the repository's reposwarm.yaml: the detected check profile, run once on "
                         "HEAD, the model and its price, delivery; then say the next commands")
    ini.add_argument("--repo", required=True, help="the git repository's top folder (only reposwarm.yaml is written)")
    ini.add_argument("--model", help="provider:name, the run's model, with its list price (default: REPOSWARM_MODEL)")
    ini.add_argument("--yes", action="store_true", help="write it without asking (off a terminal, it is only shown)")
    ini.add_argument("--force", action="store_true", help="replace an existing reposwarm.yaml (or write one beside a "
                     ".reposwarm.yaml or helpers.yaml)")
    ini.set_defaults(handler="reposwarm.cli.init:cmd_init")
    doc = sub.add_parser("doctor", help="check what a run needs (platform, sandbox, git, Temporal, credentials, "
                         "prices, toolchains, disk): one line each, with the fix for each problem; exit 1 on a FAIL")
    doc.add_argument("--repo", help="also the toolchains this repository's check profile needs, and its configuration")
    doc.add_argument("--config", metavar="FILE", help="the configuration or lanes file (default: the repository's own)")
    doc.add_argument("--model", help="provider:name, whose credential and price to check (default: REPOSWARM_MODEL)")
    doc.set_defaults(handler="reposwarm.cli.doctor:cmd_doctor")
    lns = sub.add_parser("lanes", help="write a starting lanes file from the repository's structure alone (packages, "
                         "CODEOWNERS, imports, the detected checks; no model, no task)",
                         description="Write a starting lanes file made from the repository's structure alone: a lane "
                         "per package or owner area (at most --max-lanes), a test lane where tests live apart, "
                         "depends_on from the import graph (imported lanes first), budgets from the files, the "
                         "detected checks; a comment header says how each part was derived. Reads the committed "
                         "tree at --rev, never the working tree; the same tree gives the same file. See docs/lanes.md.")
    lns.add_argument("--repo", required=True, help="the git repository's top folder (only read)")
    lns.add_argument("--out", metavar="FILE", help="write the lanes file here (default: standard output)")
    lns.add_argument("--max-lanes", type=int, metavar="N", help="at most this many lanes (default 8)")
    lns.add_argument("--rev", default="HEAD", help="the commit whose tree is read (default HEAD)")
    lns.set_defaults(handler="reposwarm.cli.lanes:cmd_lanes")
    mcp = sub.add_parser("mcp", help="serve the lanes' tools over one repository to an MCP client (stdio or HTTP)")
    mcp.add_argument("--repo", required=True, help="the git repository's top folder")
    mcp.add_argument("--allow", action="append", default=[], metavar="GLOB",
                     help="readable and writable paths; writes go straight to the working tree (repeatable)")
    mcp.add_argument("--read-only", action="append", default=[], metavar="GLOB",
                     help="readable paths (repeatable); with neither flag, the whole repository is read-only")
    mcp.add_argument("--lanes", metavar="FILE", help="lanes file whose validation.profiles run_checks may run")
    mcp.add_argument("--http", type=int, metavar="PORT",
                     help="serve streamable HTTP at http://127.0.0.1:PORT/mcp instead of stdio")
    mcp.set_defaults(handler=f"{HOST}:cmd_mcp")

    answer("report", "a run's figures: tokens, cost, parallel efficiency per round, checks", f"{HOST}:cmd_report",
           "its ledger: adds retries")
    exp = sub.add_parser("explain", help="which lane changed a file, in which round and turn, and why")
    exp.add_argument("run", help="the run's id")
    exp.add_argument("path", help="a file's path in the repository")
    exp.add_argument("--home", metavar="DIR", help=HOME_HELP + " (its ledger: adds refused attempts)")
    exp.set_defaults(handler=f"{HOST}:cmd_explain")
    # worker.py's own parser reads the worker's options, --help included (main() hands them over): importing
    # worker.py is the worker's start (Temporal's worker, every activity), which no other command waits for
    wk = sub.add_parser("worker", add_help=False, help="run a worker on this host (the same as python worker.py; "
                        "worker --help lists its options)")
    wk.add_argument("worker_args", nargs=argparse.REMAINDER, help="worker.py's options: --serve, --concurrency")

    # the worker host's commands: they read the run's files under REPOSWARM_HOME
    rec = host_command("recording", "the replay script of a run started with --record")
    rec.add_argument("run", help="the run's id")
    rec.add_argument("--out", help="write it to this file (default: standard output)")
    rec.set_defaults(handler=f"{HOST}:cmd_recording")
    gcp = host_command("gc", "remove worktrees whose work is safe on a branch (lists unless --yes)")
    gcp.add_argument("--yes", action="store_true", help="remove them (without it: only list what would go)")
    gcp.set_defaults(handler=f"{HOST}:cmd_gc")
    return p


def handler(spec: str) -> Callable[[argparse.Namespace], Coroutine[object, object, int]]:
    """A command's function, named "module:function", imported now that it runs."""
    module, _, name = spec.partition(":")
    function: Callable[[argparse.Namespace], Coroutine[object, object, int]] = getattr(import_module(module), name)
    return function


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["worker"]:  # its options are worker.py's, read by worker.py's parser
        from reposwarm.cli import worker

        return worker.run(argv[1:], prog=f"{_prog()} worker")
    args = parser().parse_args(argv)
    try:
        if getattr(args, "home", None):  # --home: read that worker host's files, where store.home() looks
            os.environ["REPOSWARM_HOME"] = str(Path(args.home).expanduser().resolve())
        import asyncio

        return asyncio.run(handler(args.handler)(args))
    except KeyboardInterrupt:
        # said where the wait was (common.if_interrupted): what the interrupted command leaves behind
        common = sys.modules.get("reposwarm.cli.common")
        if common is not None and (note := common.interrupted_note()):
            print(f"interrupted: {note}", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # the reader went away (`| head`): nothing more to say, and nothing to say it to
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141
    except Exception as err:
        from reposwarm.cli.common import UserError
        from reposwarm.contracts.errors import ConfigError

        if isinstance(err, (UserError, ConfigError)):  # bad input, said plainly
            print(f"error: {err}", file=sys.stderr)
            return 2
        raise


def entry() -> NoReturn:
    """The `reposwarm` console script."""
    exit_now(main())


def exit_now(code: int) -> NoReturn:
    """Leave without interpreter finalization: the Temporal client's native runtime threads can abort a normal
    exit ("PyGILState_Release ... finalizing"), which would turn a finished command into a crash."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":  # python -m reposwarm.cli.main (python -X importtime -m ... shows what a command imports)
    entry()
