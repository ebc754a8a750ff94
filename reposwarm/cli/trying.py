"""`reposwarm try --repo PATH [--commit SHA] [--lanes FILE] [--yes]`: one real commit of the user's own repository
(default HEAD) replayed through the whole swarm, offline and for free, with the commit-replay model
(`oracle:<repository>#<sha>`, reposwarm/models/oracle.py): the planner, the lanes in their slices, the checks in
the sandbox judged per test against the base, the merge, the review package and the delivered branch.

The user's checkout is never touched: the run works in a clone of its own under REPOSWARM_HOME/try/, holding the
commit's parent and its history and nothing after (activities/trials.py makes it, as for a trial), so no lane can
read the answer; only the oracle, in the worker, reads the commit from the user's repository. The lanes are the
user's lanes file, else the repository's own, else one proposed from the commit (reposwarm/intel/structure.py),
written beside the clone and printed. A Temporal dev server and a worker are started when none answers
(reposwarm/cli/local.py). At the end: the delivered branch, how to look at it, and whether it equals the commit.
With `--propose careful|structure` the run proposes its lanes itself, through its real proposal phase
(try_proposed, at the end of this module).
"""

from __future__ import annotations

import argparse
import os
import shlex
import subprocess
import sys
import uuid
from collections.abc import Callable
from pathlib import Path

import yaml

from reposwarm.cli.common import (
    LANES_FILE_NAMES,
    UserError,
    check_repo,
    git_out,
    load_config,
    repo_slug,
    resolve_model,
    ui_url,
)
from reposwarm.cli.local import Local, local_swarm, review_and_approve, say
from reposwarm.contracts import DeliveryConfig, LanesFile, ProposeOptions, SwarmConfig, SwarmRequest
from reposwarm.intel import structure
from reposwarm.runs.store import home
from reposwarm.vcs import gitcmd

BASE_BRANCH = "trial-base"  # the clone's one branch: the commit's parent (activities/trials.py BASE_REF)
REPLAYED = "replayed"  # the commit, fetched into the clone once the run is over: replayed/<sha12>


def commit_of(repo: Path, rev: str) -> tuple[str, str]:
    """The commit `rev` names and its parent; a clear error for one try cannot replay."""
    try:
        sha = git_out(repo, "rev-parse", "--verify", "--quiet", "--end-of-options", f"{rev}^{{commit}}")
    except subprocess.CalledProcessError:
        raise UserError(f"--commit {rev!r} is not a commit in {repo}") from None
    parents = git_out(repo, "rev-list", "--parents", "-n", "1", sha).split()[1:]
    if not parents:
        raise UserError(f"commit {sha[:12]} has no parent (it is the repository's first): try replays a commit's "
                        "change from its parent; pick a later one (--commit SHA)")
    if len(parents) > 1:
        raise UserError(f"commit {sha[:12]} is a merge ({len(parents)} parents): try replays one commit's change "
                        "from its parent; pick a commit that is not a merge (--commit SHA)")
    return sha, parents[0]


def changed_paths(repo: Path, parent: str, sha: str) -> list[str]:
    out = gitcmd.run(["-C", str(repo), "diff", "-z", "--name-only", "--no-renames", parent, sha],
                     capture_output=True, check=True).stdout.decode("utf-8", "surrogateescape")
    return [p for p in out.split("\0") if p]


def tree_files(repo: Path, rev: str) -> list[str]:
    out = gitcmd.run(["-C", str(repo), "ls-tree", "-r", "-z", "--name-only", rev], capture_output=True,
                     check=True).stdout.decode("utf-8", "surrogateescape")
    return [p for p in out.split("\0") if p]


def reader(repo: Path, rev: str) -> Callable[[str], str | None]:
    def read(path: str) -> str | None:
        return gitcmd.show(gitcmd.repo(repo), rev, path)
    return read


def propose_lanes(repo: Path, parent: str, changed: list[str], folder: Path) -> Path:
    """A lanes file for the commit, from its folders and the parent's tree, written into the try's folder and
    printed with why it says what it says."""
    files, read = tree_files(repo, parent), reader(repo, parent)
    # (the interpreter is looked for where the user keeps the project's dependencies: the checkout's .venv...)
    proposal = structure.propose(changed, files, read, python=lambda: structure.python_with_pytest(repo, files, read))
    path = folder / "lanes.yaml"
    folder.mkdir(parents=True, exist_ok=True)
    header = ["# Lanes proposed by `reposwarm try` for this commit (edit it, and pass it with --lanes FILE):"]
    header += [f"#   {note}" for note in proposal.notes]
    path.write_text("\n".join(header) + "\n" + yaml.safe_dump(proposal.lanes_file(), sort_keys=False))
    say(f"no lanes file given or in {repo}: proposed {path}")
    for note in proposal.notes:
        say(f"  {note}")
    return path


def lanes_for(args: argparse.Namespace, repo: Path, parent: str, changed: list[str],
              folder: Path) -> tuple[Path, LanesFile]:
    from reposwarm.lanes.loading import declares_lanes

    own = Path(args.lanes) if args.lanes else next((repo / n for n in LANES_FILE_NAMES if (repo / n).is_file()), None)
    if own is not None and declares_lanes(own):
        return load_config(repo, args.lanes, rev=parent)  # (the try starts from the parent: its files)
    path = propose_lanes(repo, parent, changed, folder)
    proposed = load_config(repo, str(path), rev=parent, warn=False)[1]  # (written here: its warnings would be noise)
    if own is None:
        return path, proposed
    # The repository's configuration without lanes (its profiles, prices, defaults: issue 45): the proposed lanes
    # go into it, and its own profile is the one the try checks with, never the detected one in its place.
    _, configured = load_config(repo, args.lanes, rev=parent, need_lanes=False)
    swarm = configured.swarm.model_copy(update={"lanes": proposed.swarm.lanes})
    validation = configured.validation if configured.validation.profiles else proposed.validation
    say(f"{own.name} holds no lanes: the proposed lanes run in its configuration"
        + (f" (its profile {validation.profile!r})" if configured.validation.profiles else " (the detected profile)"))
    return own, configured.model_copy(update={"swarm": swarm, "validation": validation})


def offline(config: LanesFile, path: Path) -> LanesFile:
    """The lanes file as a try runs it: every model the oracle, no delivery beyond the try's clone."""
    if config.swarm.model or any(role.model for role in config.swarm.lanes.values()):
        say(f"note: the models {path} names are not used: a try replays the commit with the oracle model")
    if config.delivery != DeliveryConfig():
        say(f"note: {path}'s delivery settings are not used: a try delivers only into its own clone")
    swarm = config.swarm.model_copy(update={
        "model": None, "lanes": {name: role.model_copy(update={"model": None})
                                 for name, role in config.swarm.lanes.items()}})
    return config.model_copy(update={"swarm": swarm, "delivery": DeliveryConfig()})


def uncovered(config: LanesFile, changed: list[str]) -> list[str]:
    from reposwarm.slices.policy import PathPolicy

    policies = [PathPolicy(".", role.allowed_paths) for role in config.swarm.lanes.values()]
    return [p for p in changed if not any(policy.writable(p) for policy in policies)]


def make_clone(repo: Path, parent: str, sha: str, folder: Path) -> Path:
    """The try's bare clone: the parent commit and its history alone, on branch trial-base (made as a trial's)."""
    from activities.trials import clone_base

    clone = folder / "repo.git"
    clone_base(str(repo), parent, sha, clone)
    return clone


def compare(repo: Path, clone: Path, sha: str, branch: str) -> list[str]:
    """How the delivered branch compares with the commit, and the commands that show it. The commit is fetched
    into the clone now that the run is over (as replayed/<sha12>), so those commands work there."""
    replayed = f"{REPLAYED}/{sha[:12]}"
    gitcmd.run(["-C", str(clone), "fetch", "--quiet", "--no-tags", "--no-write-fetch-head", "--", str(repo),
                f"+{sha}:refs/heads/{replayed}"], check=True, capture_output=True)
    c = shlex.quote(str(clone))
    lines = [f"look at it: git -C {c} log --stat {BASE_BRANCH}..{branch}",
             f"            git -C {c} diff {BASE_BRANCH} {branch}"]
    ours = git_out(clone, "rev-parse", f"{branch}^{{tree}}")
    if ours == git_out(clone, "rev-parse", f"{replayed}^{{tree}}"):
        lines.append(f"the swarm's result equals the commit {sha[:12]}: the same tree "
                     f"(git -C {c} diff {replayed} {branch} is empty)")
        return lines
    differ = git_out(clone, "diff", "--name-only", replayed, branch).splitlines()
    shown = ", ".join(differ[:10]) + (f" and {len(differ) - 10} more" if len(differ) > 10 else "")
    lines.append(f"the swarm's result differs from the commit {sha[:12]} in {len(differ)} file(s): {shown} "
                 f"(git -C {c} diff {replayed} {branch} shows how)")
    return lines


async def cmd_try(args: argparse.Namespace) -> int:
    from reposwarm.cli import doctor  # (its checks run on this host: the sandbox and git they need, said first)

    doctor.refuse_here()
    repo = check_repo(args.repo)
    sha, parent = commit_of(repo, args.commit or "HEAD")
    changed = changed_paths(repo, parent, sha)
    if not changed:
        raise UserError(f"commit {sha[:12]} changes no file: there is nothing to replay; pick another (--commit SHA)")
    if getattr(args, "propose", None):  # the run proposes its lanes through its proposal phase (try_proposed)
        from reposwarm.cli import preflight  # (the profile the proposal will detect: its toolchains, first)
        from reposwarm.intel.detected import detect_at

        preflight.refuse_missing(detect_at(repo, parent)[0], tree_files(repo, parent), reader(repo, parent))
        return await try_proposed(args, repo, sha, parent, changed)
    folder = home() / "try" / f"{repo_slug(repo)}-{sha[:12]}"
    lanes_path, config = lanes_for(args, repo, parent, changed, folder)
    config = offline(config, lanes_path)
    from reposwarm.cli import preflight  # (before a dev server, a worker or the clone: a missing toolchain)

    preflight.refuse_missing(preflight.profile_of(config), tree_files(repo, parent), reader(repo, parent))
    if missing := uncovered(config, changed):
        say(f"note: no lane may write {', '.join(missing[:5])}{' and more' if len(missing) > 5 else ''}: the "
            "result will differ from the commit there")
    model = resolve_model(f"oracle:{repo}#{sha}", where="the try's model")
    message = git_out(repo, "log", "-1", "--format=%B", sha).strip() or f"Make the change of commit {sha[:12]}"
    async with local_swarm() as local:
        client = local.client
        from reposwarm.cli.runs import start

        say(f"cloning commit {parent[:12]} (the commit's parent) and its history into {folder / 'repo.git'}, branch "
            f"{BASE_BRANCH}; {repo} is only read (a large history takes a while: git fetch, no time limit)")
        clone = make_clone(repo, parent, sha, folder)
        run_id = f"reposwarm-try-{repo_slug(repo)}-{uuid.uuid4().hex[:6]}"
        req = SwarmRequest(run_id=run_id, repo_path=str(clone), task=message, config=config, model=model,
                           base_ref=parent, test_profile=os.environ.get("TEST_PROFILE") or None,
                           ui_url=ui_url(run_id))
        await start(client, req)
        say(f"replaying commit {sha[:12]} ({len(changed)} file(s) changed) as run {run_id}, lanes "
            f"{', '.join(config.swarm.lanes)}; watch it at {ui_url(run_id)}")
        return await approve_and_compare(local, run_id, repo, clone, sha, yes=args.yes)


async def approve_and_compare(local: Local, run_id: str, repo: Path, clone: Path, sha: str, *, yes: bool) -> int:
    """The try's end: its review (approved with --yes), then the delivered branch against the commit."""
    from workflows.swarm import SwarmWorkflow

    code = await review_and_approve(local, run_id, yes=yes, comment=f"try of commit {sha[:12]}",
                                    accept_test_changes=yes)
    if code is not None:
        return code
    result = await local.client.get_workflow_handle_for(SwarmWorkflow.run, run_id).result()
    for line in compare(repo, clone, sha, result.delivered_branch):
        print(line)
    return 0


# `reposwarm try --propose careful|structure`
# `reposwarm try --propose careful|structure`: a try whose lanes the run itself proposes, through its real
# proposal phase (workflows/proposing.py: the repository surveyed, the planner asked, the guardrails, the
# confirmation), the planner being the commit-replay model as a careful planner would split the commit
# (`oracle:...?plan=careful`, reposwarm/models/careful.py) or as the structure alone suggests (`plan=structure`).
#
# It measures what a run with no lanes file does on real commits: the proposal accepted or refused (with the
# guardrails' reasons), the lanes, the checks, the delivered tree against the commit. The rest is a try's
# (reposwarm/cli/trying.py): the clone of the commit's parent, the local dev server and worker, the review.

PROPOSERS = ("careful", "structure")


async def try_proposed(args: argparse.Namespace, repo: Path, sha: str, parent: str, changed: list[str]) -> int:
    from reposwarm.cli.proposing import answer_hint, ask, proposal_of, show
    from reposwarm.cli.runs import start
    from reposwarm.lanes.loading import apply_env, declares_lanes

    if args.lanes:
        raise UserError("--propose has the run propose its lanes; --lanes gives them: pass one of the two")
    if args.propose not in PROPOSERS:
        raise UserError(f"--propose {args.propose}: give one of {', '.join(PROPOSERS)}")
    folder = home() / "try" / f"{repo_slug(repo)}-{sha[:12]}"
    model = resolve_model(f"oracle:{repo}#{sha}?plan={args.propose}", where="the try's model")
    message = git_out(repo, "log", "-1", "--format=%B", sha).strip() or f"Make the change of commit {sha[:12]}"
    config = apply_env(LanesFile(swarm=SwarmConfig()))
    own = next((repo / name for name in LANES_FILE_NAMES if (repo / name).is_file()), None)
    if own is not None and declares_lanes(own):
        say(f"note: {own}'s lanes are not used: with --propose the run proposes its lanes")
    elif own is not None:  # the repository's configuration without lanes (issue 45): the proposal runs in it
        _, configured = load_config(repo, None, rev=parent, need_lanes=False)
        config = offline(configured, own)
        say(f"{own.name} holds no lanes: the proposed lanes run in its configuration"
            + (f" (its profile {config.validation.profile!r})" if config.validation.profiles else ""))
    terminal = sys.stdin.isatty() and sys.stdout.isatty()
    async with local_swarm() as local:
        client = local.client
        say(f"cloning commit {parent[:12]} (the commit's parent) and its history into {folder / 'repo.git'}, branch "
            f"{BASE_BRANCH}; {repo} is only read")
        clone = make_clone(repo, parent, sha, folder)
        run_id = f"reposwarm-try-{repo_slug(repo)}-{uuid.uuid4().hex[:6]}"
        req = SwarmRequest(run_id=run_id, repo_path=str(clone), task=message, config=config, model=model,
                           base_ref=parent, test_profile=os.environ.get("TEST_PROFILE") or None, ui_url=ui_url(run_id),
                           propose=ProposeOptions(auto_accept=bool(args.yes)))
        await start(client, req)
        say(f"replaying commit {sha[:12]} ({len(changed)} file(s) changed) as run {run_id}, its lanes proposed by the "
            f"run ({args.propose} planner: {model}); watch it at {ui_url(run_id)}")
        v = await proposal_of(client, run_id, model)  # (refused by the guardrails: an error line with why)
        proposal = v.status.proposal
        assert proposal is not None
        show(proposal, model, terminal)
        if args.yes:
            say(f"accepted (--yes): {len(proposal.lanes)} lanes")
        elif not terminal:
            print(answer_hint(run_id))
            return 0
        elif not await ask(client, run_id, proposal, config, clone):
            return 0
        return await approve_and_compare(local, run_id, repo, clone, sha, yes=args.yes)
