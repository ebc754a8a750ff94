"""`run` with no lanes file: the run proposes its lanes, and a person confirms them (docs/lanes.md).

`run --repo R --task "..."` starts the run (its first phase `proposing`), follows it until the proposal is ready,
saying what it waits for, shows it as a table (lane, slice, goal, depends on, model, budget, estimated cost; the
predicted overlaps; warnings), then on a terminal asks: accept, edit (the proposal as a lanes file with a `plan:`
section, in $EDITOR, checked again on save) or stop. `--yes` accepts at once (the run does, unattended too);
`--write-lanes FILE` writes the proposal as a lanes file (and its plan beside it) and dispatches nothing. Off a
terminal without --yes, the proposal is printed with how to answer: `confirm RUN [--lanes FILE] [--reject]`,
from any machine that reaches the Temporal server.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shlex
import subprocess
import sys
import tempfile
from pathlib import Path

from temporalio.client import (
    Client,
    WorkflowFailureError,
)

from reposwarm.cli.common import UserError, client_or_die, git_out, if_interrupted, prog, said_if_slow, ui_url
from reposwarm.cli.live import proposal_ready
from reposwarm.cli.run_state import NoWorker, RunView, send_update, view, worker_polling
from reposwarm.contracts import LaneProposal, LanesDecision, LanesFile, Phase, ProposeOptions, SwarmConfig
from reposwarm.contracts.errors import ConfigError
from reposwarm.lanes.loading import apply_env, declares_lanes, read_configuration
from reposwarm.lanes.proposal_file import COLUMNS, notes, proposal_text, read_text, render_proposal, rows, write_lanes
from reposwarm.text import error_line, inert, inert_line
from workflows.failures import root_cause

TICK_S = 0.5
MOST_LANES = 64  # ProposeOptions.max_lanes's limit


def configuration_path(args: argparse.Namespace) -> Path | None:
    """The run's configuration file: --config FILE, else (a local repository) its own reposwarm.yaml,
    helpers.yaml or .reposwarm.yaml, as a lanes file is looked for. A URL's files are not read here."""
    from reposwarm.cli.common import LANES_FILE_NAMES
    from reposwarm.vcs.remote import is_url

    if getattr(args, "config", None):
        return Path(args.config)
    if is_url(args.repo):
        return None
    repo = Path(args.repo).expanduser()
    return next((repo / name for name in LANES_FILE_NAMES if (repo / name).is_file()), None)


def wants_proposal(args: argparse.Namespace) -> bool:
    """A run that proposes its lanes: no --lanes, and a configuration file with no lanes or none at all (a
    repository named by URL too: its proposal is made on a worker, from its clone). A --config FILE that has
    lanes is the run's lanes file, as --lanes FILE would be."""
    if args.lanes:
        if getattr(args, "config", None):
            raise UserError("--lanes and --config: a lanes file is the whole configuration (its check profiles, "
                            "prices and delivery too); give --lanes FILE alone, or --config FILE for the run to "
                            "propose its lanes")
        return False
    path = configuration_path(args)
    if path is not None and declares_lanes(path):
        if getattr(args, "config", None):
            args.lanes = args.config
        return False
    return True


def load_configuration(args: argparse.Namespace, repo: Path | None) -> tuple[Path | None, LanesFile]:
    """The configuration the run proposes its lanes in (configuration_path's file, read as a lanes file with no
    lanes; else the defaults), checked, its warnings said, the environment's knobs applied. The repository's
    own file is its author's, not the user's: said, and refused if it sets what only the user may."""
    from reposwarm.cli.common import REPOSITORY_MAY_SET, settings_only_the_user_makes, tracked_files

    path, given = configuration_path(args), bool(getattr(args, "config", None))
    if path is None:
        return None, apply_env(LanesFile(swarm=SwarmConfig()))
    if given and not path.is_file():
        raise UserError(f"--config {path}: no such file")
    files = tracked_files(repo) if repo is not None else None
    try:
        config, findings = read_configuration(path, files, root=repo, at=" at HEAD", tools_on_path=True)
    except ConfigError as err:
        raise UserError(str(err).replace(":\n  - ", ": ").replace("\n  - ", "; ")) from None
    if not given:
        print(f"note: using the repository's own {path.name} (untrusted: it may set {REPOSITORY_MAY_SET}; "
              "--config FILE gives a configuration of your own), proposing the lanes", file=sys.stderr)
        if keys := settings_only_the_user_makes(config):
            raise UserError(f"{path}: the repository's own configuration may not set {', '.join(keys)}; give "
                            f"them yourself, in a file of your own (--config FILE). It may set {REPOSITORY_MAY_SET}")
    for line in findings.warnings:
        print(f"warning: {path}: {line}", file=sys.stderr)
    return path, apply_env(config)


def refuse_proposal_flags(args: argparse.Namespace) -> None:
    """--yes, --write-lanes and --max-lanes are about proposed lanes: with a lanes file they would do nothing."""
    given = [flag for flag, value in (("--yes", args.yes), ("--write-lanes", args.write_lanes),
                                      ("--max-lanes", args.max_lanes is not None)) if value]
    if given:
        raise UserError(f"{given[0]} is for a run with no lanes file (the run proposes its lanes); this run has one")


async def cmd_run_proposing(args: argparse.Namespace) -> int:
    from reposwarm.cli.common import LANES_FILE_NAMES, check_repo, check_url
    from reposwarm.cli.runs import build_request, cmd_watch, render_dry_run, start, swarm_workflow
    from reposwarm.vcs.remote import is_url

    if is_url(args.repo):
        check_url(args.repo)
        repo: Path | None = None
    else:
        repo = check_repo(args.repo)  # (a missing or wrong folder is said first, as with a lanes file)
    config_path, base = load_configuration(args, repo)
    if not (args.model or os.environ.get("REPOSWARM_MODEL") or base.swarm.model):
        model = "name the planner model (--model provider:name, REPOSWARM_MODEL, or swarm.model in the configuration)"
        if repo is None:
            raise UserError(f"a repository named by URL with no lanes file and no model: pass --lanes FILE (read here, "
                            f"not from {args.repo}), or {model} and the run proposes its lanes on a worker")
        raise UserError(f"no lanes file and no model: pass --lanes FILE or add one of {', '.join(LANES_FILE_NAMES)} "
                        f"to {repo}, or {model} and the run proposes its lanes (`{prog()} try --repo {repo}` proposes "
                        "a lanes file from a commit of yours and replays it offline)")
    if args.plan:
        raise UserError("--plan needs a lanes file (--lanes FILE): with none, the run proposes its lanes and their "
                        "plan together")
    max_lanes = args.max_lanes if args.max_lanes is not None else ProposeOptions().max_lanes
    if not 1 <= max_lanes <= MOST_LANES:
        raise UserError(f"--max-lanes {max_lanes}: give 1 to {MOST_LANES} lanes")
    if args.write_lanes and Path(args.write_lanes).is_dir():
        raise UserError(f"--write-lanes {args.write_lanes}: is a folder; give the lanes file's path")
    req = build_request(args, config=base, config_path=config_path)
    if repo is not None:  # (a worker on this host needs the checks' toolchains: said before anything starts)
        from reposwarm.cli import preflight

        preflight.refuse_proposing(base, repo, req.base_ref)
    terminal = sys.stdin.isatty() and sys.stdout.isatty()
    written = bool(args.write_lanes)
    req.dry_run, req.record = bool(args.dry_run or written), args.record
    req.propose = ProposeOptions(max_lanes=max_lanes, auto_accept=bool(args.yes or args.dry_run), only=written)
    with if_interrupted("nothing was started"):
        client = await client_or_die()
        from reposwarm.client import task_queue

        queue = task_queue()
        polling = await worker_polling(client, queue)
        follows = terminal or written or args.dry_run or args.wait or not args.yes
        if not polling and follows:
            raise NoWorker(queue, "nothing was started (the run proposes its lanes, and this command shows them)")
    with if_interrupted(f"run {req.run_id} may have started: {prog()} status {req.run_id}"):
        await start(client, req)
    if not written and not args.dry_run:
        print(f"run: {req.run_id}")
        print(f"web ui: {ui_url(req.run_id)}")
    if not follows:  # --yes, not waiting: the run proposes and goes on by itself
        print(f"the run proposes its lanes and goes on with them (--yes): {prog()} watch {req.run_id}")
        return 0
    with if_interrupted(f"the run goes on, proposing its lanes: {prog()} watch {req.run_id}"):
        v = await proposal_of(client, req.run_id, req.model)
    proposal = v.status.proposal
    assert proposal is not None
    if written or args.dry_run:
        with if_interrupted(f"the run goes on (it dispatches nothing): {prog()} status {req.run_id}"):
            try:
                result = await said_if_slow(client.get_workflow_handle_for(swarm_workflow().run, req.run_id).result(),
                                            f"run {req.run_id}: waiting for it to end ...")
            except WorkflowFailureError as err:
                raise UserError(f"run {req.run_id} failed: {' '.join(root_cause(err).split())}") from None
        show(result.proposal or proposal, req.model, terminal)
        if args.dry_run:
            print(render_dry_run(result))
            return 0
        path = Path(args.write_lanes)
        plan_path = write_lanes(result.proposal or proposal, path, base)
        print(f"wrote {path} (the lanes) and {plan_path} (their round-1 plan); nothing was dispatched. Run them: "
              f"{prog()} run --repo {req.repo_path} --task TEXT --lanes {path} --plan {plan_path}")
        return 0
    show(proposal, req.model, terminal)
    if args.yes:
        print(f"accepted (--yes): {len(proposal.lanes)} lanes")
    elif not terminal:
        print(answer_hint(req.run_id))
        return 0
    elif not await ask(client, req.run_id, proposal, base, repo):
        return 0
    if args.wait:
        return int(await cmd_watch(argparse.Namespace(run=req.run_id)))
    print(f"{prog()} watch {req.run_id} follows it")
    return 0


def answer_hint(run_id: str) -> str:
    return (f"the run waits for its lanes to be confirmed: {prog()} confirm {run_id} accepts them; "
            f"{prog()} confirm {run_id} --lanes FILE accepts an edit of them (the file as `{prog()} status {run_id}` "
            f"describes: a lanes file and a plan: section); {prog()} confirm {run_id} --reject stops the run")


async def proposal_of(client: Client, run_id: str, model: str) -> RunView:
    """Follow the run until its proposal is there (waiting for a person, or taken at once), saying what it waits
    for as it begins and each step the run reports; a run that fails is one error line."""
    print(f"run {run_id}: waiting for its proposal of lanes (the repository surveyed, then the planner model "
          f"{model} asked) ...", file=sys.stderr, flush=True)
    said = ""
    from reposwarm.cli.live import progress_notes

    while True:
        v = await view(client, run_id)
        status = v.status
        if status.phase == Phase.failed or (v.closed and status.proposal is None):
            why = status.error or v.ending or "see the Web UI"
            raise UserError(f"run {run_id} failed while proposing its lanes: {error_line(why, 2000)}")
        if status.proposal is not None and (v.closed or status.phase != Phase.proposing or proposal_ready(status)):
            return v
        if not v.live and not await worker_polling(client, v.queue):
            raise NoWorker(v.queue, f"run {run_id} is not moving (it is proposing its lanes)")
        notes_now = "; ".join(await progress_notes(client, v.description))
        if notes_now and notes_now != said:
            print(f"  {inert_line(notes_now)[:200]}", file=sys.stderr, flush=True)
            said = notes_now
        await asyncio.sleep(TICK_S)


def show(proposal: LaneProposal, model: str, terminal: bool) -> None:
    """The proposal as a table: rich on a terminal, plain text otherwise."""
    if not terminal:
        print(inert(render_proposal(proposal, model)))
        return
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    table = Table(title=f"proposed lanes ({len(proposal.lanes)})", title_justify="left")
    for column in COLUMNS:
        table.add_column(column, overflow="fold")
    for row in rows(proposal, model):
        table.add_row(*(Text(inert_line(cell)) for cell in row))  # Text, not markup: the model wrote these
    console = Console()
    console.print(table)
    for line in notes(proposal):
        console.print(Text(inert_line(line), style="yellow" if line.startswith(("warning", "predicted")) else ""))


async def ask(client: Client, run_id: str, proposal: LaneProposal, base: LanesFile, repo: Path | None) -> bool:
    """accept / edit / stop, on the terminal; True once the lanes are accepted."""
    text: str | None = None
    while True:
        answer = input("accept, edit or stop? [a/e/s] ").strip().lower()[:1]
        if answer == "a":
            receipt = await confirm(client, run_id, LanesDecision(accept=True, reviewer=reviewer()))
            print(receipt)
            return True
        if answer == "s":
            print(await confirm(client, run_id, LanesDecision(accept=False, reviewer=reviewer())))
            return False
        if answer != "e":
            continue
        text = edit(text or proposal_text(proposal, base, header=edit_header(run_id)))
        problems = local_problems(text, repo)
        if problems:
            print("the edited lanes have problems (edit again, accept the proposal as it was, or stop):")
            print("\n".join(f"  - {p}" for p in problems))
            continue
        try:
            print(await confirm(client, run_id, LanesDecision(accept=True, lanes_yaml=text, reviewer=reviewer())))
            return True
        except UserError as err:  # the run's own checks refused it: it keeps waiting
            print(f"{err} (edit again, accept the proposal as it was, or stop)")


def edit_header(run_id: str) -> str:
    return (f"The lanes proposed for run {run_id}, as a lanes file (docs/configuration.md), with their round-1\n"
            "plan in the plan: section (a goal per lane). Edit, save and quit: it is checked again, then sent to\n"
            "the run. Lanes' writable slices must be disjoint unless declared in swarm.overlaps.")


def edit(text: str) -> str:
    """The text after $EDITOR (default vi) edited it in a temporary file."""
    editor = shlex.split(os.environ.get("VISUAL") or os.environ.get("EDITOR") or "vi")
    with tempfile.NamedTemporaryFile("w", suffix=".lanes.yaml", delete=False, encoding="utf-8") as f:
        f.write(text)
    try:
        done = subprocess.run([*editor, f.name])
        if done.returncode != 0:
            print(f"note: the editor exited with {done.returncode}; its file is read as it was saved", file=sys.stderr)
        return Path(f.name).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise UserError(f"the editor {editor[0]!r} was not found: set EDITOR") from None
    finally:
        Path(f.name).unlink(missing_ok=True)


def local_problems(text: str, repo: Path | None) -> list[str]:
    """What is wrong with an edit, checked here as the run will check it: the loader, then the lanes' checks
    against the repository's tracked files when it is on this machine."""
    try:
        config, _ = read_text(text)
    except ConfigError as err:
        return [line.strip().removeprefix("- ") for line in str(err).splitlines()
                if not line.endswith("problems:")] or [str(err)]
    from reposwarm.lanes.checking import check_lanes

    files = None
    if repo is not None and repo.is_dir():
        try:
            files = git_out(repo, "ls-files").splitlines()
        except subprocess.CalledProcessError:
            files = None
    return list(check_lanes(config, files, which="edited lanes").errors)


def reviewer() -> str:
    from reposwarm.cli.runs import reviewer_name

    return reviewer_name()


async def confirm(client: Client, run_id: str, decision: LanesDecision) -> str:
    """Send the answer as the run's `confirm_lanes` Update; what became of it, in one line."""
    from reposwarm.cli.runs import swarm_workflow

    wf = swarm_workflow()
    word = "acceptance" if decision.accept else "stop"
    receipt = await send_update(client.get_workflow_handle_for(wf.run, run_id), wf.confirm_lanes, decision,
                                word=f"the {word} of the lanes",
                                taken="waiting for the run to act on it" + (
                                    " (an edit is checked against the repository first) ..."
                                    if decision.lanes_yaml else " ..."))
    if not receipt.accepted:
        return f"stopped run {run_id} at its proposed lanes: nothing was dispatched"
    return f"accepted {len(receipt.lanes)} lanes ({', '.join(receipt.lanes)}) of run {run_id}; it is {receipt.phase.value}"


async def cmd_confirm(args: argparse.Namespace) -> int:
    """`confirm RUN [--lanes FILE] [--reject]`: answer a run's proposed lanes, from anywhere."""
    if args.reject and args.lanes:
        raise UserError("--reject stops the run; --lanes accepts an edit: give one of them")
    text = ""
    if args.lanes:
        path = Path(args.lanes)
        if not path.is_file():
            raise UserError(f"--lanes {args.lanes}: no such file")
        text = path.read_text(encoding="utf-8")
        try:
            read_text(text, str(path))
        except ConfigError as err:  # every problem, on one line
            raise UserError(str(err).replace(":\n  - ", ": ").replace("\n  - ", "; ")) from None
    client = await client_or_die()
    v = await view(client, args.run, live=False)
    if v.closed:
        raise UserError(f"run {args.run} has ended ({v.ending}): there is nothing to confirm")
    if not proposal_ready(v.status):
        raise UserError(f"run {args.run} is not waiting for its lanes to be confirmed (phase: {v.status.phase.value}); "
                        f"{prog()} watch {args.run} follows it")
    if not await worker_polling(client, v.queue):
        raise NoWorker(v.queue, "the answer was not sent")
    decision = LanesDecision(accept=not args.reject, lanes_yaml=text, reviewer=reviewer(), comment=args.comment or "")
    print(await confirm(client, args.run, decision))
    return 0

