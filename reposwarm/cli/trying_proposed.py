"""`reposwarm try --propose careful|structure`: a try whose lanes the run itself proposes, through its real
proposal phase (workflows/proposing.py: the repository surveyed, the planner asked, the guardrails, the
confirmation), the planner being the commit-replay model as a careful planner would split the commit
(`oracle:...?plan=careful`, reposwarm/models/careful.py) or as the structure alone suggests (`plan=structure`).

It measures what a run with no lanes file does on real commits: the proposal accepted or refused (with the
guardrails' reasons), the lanes, the checks, the delivered tree against the commit. The rest is a try's
(reposwarm/cli/trying.py): the clone of the commit's parent, the local dev server and worker, the review.
"""

from __future__ import annotations

import argparse
import os
import sys
import uuid
from pathlib import Path

from reposwarm.cli.common import LANES_FILE_NAMES, UserError, git_out, load_config, repo_slug, resolve_model, ui_url
from reposwarm.cli.local import local_swarm, say
from reposwarm.contracts import LanesFile, ProposeOptions, SwarmConfig, SwarmRequest
from reposwarm.runs.store import home

PROPOSERS = ("careful", "structure")


async def try_proposed(args: argparse.Namespace, repo: Path, sha: str, parent: str, changed: list[str]) -> int:
    from reposwarm.cli.proposing import answer_hint, ask, proposal_of, show
    from reposwarm.cli.runs import start
    from reposwarm.cli.trying import BASE_BRANCH, approve_and_compare, make_clone, offline
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
