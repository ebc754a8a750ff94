"""The converger: a model call that resolves a lane's textual conflict with the integration branch.

It sees, per conflicted file, the common base, the integration side and the
lane's side, both lanes' goals and the interface contract. Its answer is taken
only if no conflict markers remain and every file still parses (for the
languages with a grammar here). Then two commits land on the integration
branch: the lane's merge (conflicted files as they were on the integration
side) and a resolution commit saying what was resolved and how, so `git blame`
shows which lane, or which resolution, wrote each line.
"""

from __future__ import annotations

import json
import os
import tempfile

import git
from pydantic import BaseModel, Field, ValidationError
from temporalio import activity

from activities.repo import synced
from reposwarm.agent.conversation import UserMessage
from reposwarm.agent.prompts import CONVERGER_SYSTEM, converger_message
from reposwarm.contracts import ConflictInput, Resolution, Usage
from reposwarm.models.calls import complete
from reposwarm.runs import ledger
from reposwarm.symbols.syntax import has_conflict_markers, parses
from reposwarm.text import inert
from reposwarm.vcs import gitcmd
from reposwarm.vcs.gitcmd import IDENTITY, rev, show, try_git


class _ResolvedFile(BaseModel):
    path: str
    content: str | None


class _Resolve(BaseModel):
    files: list[_ResolvedFile] = Field(min_length=1)
    explanation: str = Field(min_length=1)


RESOLVE_TOOL = {"name": "resolve", "description": "Submit the resolved files.",
                "parameters": {k: v for k, v in _Resolve.model_json_schema().items() if k != "title"}}


def _tree_with(g: git.Git, tree: str, files: dict[str, str | None]) -> str:
    """`tree` with some files replaced (or removed, for None), built in a throwaway index."""
    fd, index = tempfile.mkstemp(prefix="reposwarm-index-")
    os.close(fd)
    os.unlink(index)  # git wants to create it
    env = {"GIT_INDEX_FILE": index}
    try:
        g.execute(["git", "read-tree", tree], env=env)
        for path, content in files.items():
            if content is None:
                g.execute(["git", "update-index", "--force-remove", "--", path], env=env)
            else:
                blob = gitcmd.run(["hash-object", "-w", "--stdin"], cwd=str(g.working_dir),
                                      input=content.encode("utf-8"), capture_output=True, check=True).stdout.decode().strip()
                g.execute(["git", "update-index", "--add", "--cacheinfo", f"100644,{blob},{path}"], env=env)
        return g.execute(["git", "write-tree"], env=env)
    finally:
        if os.path.exists(index):
            os.unlink(index)


def _check(answer: _Resolve, conflicted: list[str]) -> dict[str, str | None]:
    files = {f.path: f.content for f in answer.files}
    missing = sorted(set(conflicted) - set(files))
    if missing:
        raise ValueError(f"no resolution for {', '.join(missing)}")
    extra = sorted(set(files) - set(conflicted))
    if extra:
        raise ValueError(f"resolved files that were not in conflict: {', '.join(extra)}")
    for path, content in files.items():
        if content is not None and has_conflict_markers(content):
            raise ValueError(f"{path} still has conflict markers")
        if content is not None and parses(path, content) is False:
            raise ValueError(f"{path} does not parse any more")
    return files


@activity.defn
async def resolve_conflict(req: ConflictInput) -> Resolution:
    """Ask the converger once; land its resolution, or say why it was refused (the lane is then redone)."""
    repo = synced(req.repo_path, req.run_id)
    repo.have(req.integration_sha, req.lane_sha)
    g = repo.git
    integ_ref = f"refs/heads/{req.integration_branch}"
    current = rev(g, integ_ref)
    if current != req.integration_sha and current is not None and rev(g, f"{current}^^2") == req.lane_sha:
        # Landed by an earlier attempt of this activity (the merge is the resolution commit's parent).
        return Resolution(lane=req.lane, resolved=True, integration_sha=current, files=req.files,
                          how="resolved by an earlier attempt")
    base = g.merge_base(req.integration_sha, req.lane_sha)
    sides = {p: {"base": show(g, base, p), "integration": show(g, req.integration_sha, p),
                 "lane": show(g, req.lane_sha, p)} for p in req.files}
    # req.attempt numbers the converger's calls within the round: it is the call's turn (what the replay
    # script plays back in order), and the ledger names the call by the lane it was for.
    reply = await complete(req.run_id, req.model, agent="converger", round_no=req.round, turn=req.attempt - 1,
                           system=CONVERGER_SYSTEM, messages=[UserMessage(content=converger_message(req, sides)).wire()],
                           tools=[RESOLVE_TOOL], price=req.price, record=req.record,
                           call_id=f"converger-r{req.round}-{req.lane}-{req.attempt}")
    usage: Usage = reply.usage
    calls = [c for c in reply.tool_calls if c.name == "resolve"]
    try:
        if not calls:
            raise ValueError("the converger did not call resolve")
        answer = _Resolve.model_validate_json(calls[0].raw_arguments)
        files = _check(answer, req.files)
    except (ValueError, ValidationError) as err:
        why = str(err).splitlines()[0]
        ledger.record_activity(req.run_id, "resolution", lane=req.lane, files=req.files, resolved=False, why=why)
        return Resolution(lane=req.lane, resolved=False, integration_sha=req.integration_sha, files=req.files,
                          how=f"converger answer refused: {why}", usage=usage)

    # The lane's merge, with the conflicted files as the integration side had them...
    status, out, _ = try_git(g, "merge-tree", "--write-tree", "--name-only", "--no-messages", req.integration_sha,
                             req.lane_sha)
    merged_tree = _tree_with(g, out.splitlines()[0].strip(), {p: sides[p]["integration"] for p in req.files})
    merge = g.execute(["git", *IDENTITY, "commit-tree", merged_tree, "-p", req.integration_sha, "-p", req.lane_sha,
                       "-m", inert(req.merge_message)])
    # ...then the resolution, as a commit of its own.
    resolved_tree = _tree_with(g, merged_tree, files)
    message = "\n".join([f"reposwarm converger: resolve {req.lane}'s conflict in {', '.join(req.files)}", "",
                         answer.explanation, "", json.dumps({"lane": req.lane, "files": req.files})])
    resolution = g.execute(["git", *IDENTITY, "commit-tree", resolved_tree, "-p", merge, "-m", inert(message)])
    g.update_ref(integ_ref, resolution, req.integration_sha)
    repo.push(integ_ref)
    ledger.record_activity(req.run_id, "resolution", lane=req.lane, files=req.files, resolved=True,
                           sha=resolution, how=answer.explanation[:500])
    return Resolution(lane=req.lane, resolved=True, integration_sha=resolution, files=req.files,
                      how=answer.explanation, usage=usage)
