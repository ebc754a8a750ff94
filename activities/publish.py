"""Publishing the review package: Markdown for people and JSON for tools, kept after the run ends (as files of the
run: with a shared object store, a CLI on any machine reads them). The git it needs is read here: the change as a
bounded diff, what changed since the last round, and which lanes' work the merged tree holds."""

from __future__ import annotations

import json

import git
from temporalio import activity
from temporalio.exceptions import ApplicationError

from activities.repo import synced
from reposwarm.contracts import Published, PublishInput, ReviewPackage
from reposwarm.review.package import bounded_diff, render_review, with_published
from reposwarm.runs import ledger, objects
from reposwarm.runs.store import Store, run_dir
from reposwarm.vcs.gitcmd import is_ancestor


def _from_git(req: PublishInput, package: ReviewPackage) -> Published:
    """What the review needs from git; a git that fails here leaves it out rather than hold up the review."""
    found = Published(markdown_ref="", json_ref="", path="")
    try:
        g = synced(req.repo_path, req.run_id).git
        if req.previous_sha and req.previous_sha != package.integration_sha:
            found.since_last_round = g.diff("--stat", req.previous_sha, package.integration_sha)
        diff, found.diff_lines, found.diff_truncated = bounded_diff(
            g.diff("--no-color", "--no-ext-diff", package.base_sha, package.integration_sha))
        found.diff = ledger.redact(diff)
        found.not_in_tree = [f"{lane.lane}@{lane.round}" for lane in package.lanes
                             if lane.head_sha and not is_ancestor(g, lane.head_sha, package.integration_sha)]
        found.tree_checked = True
    except (git.GitCommandError, OSError, ApplicationError) as err:  # (ApplicationError: the repository is gone)
        activity.logger.warning("review package: git left out: %s", err)
    return found


@activity.defn
def publish_review(req: PublishInput) -> Published:
    found = _from_git(req, req.package)
    package = with_published(req.package, found)
    markdown = ledger.redact(render_review(package, package.ui_url))
    as_json = ledger.redact(json.dumps(package.model_dump(mode="json"), indent=2))
    store = Store(req.run_id)
    folder = run_dir(req.run_id) / "review"
    for name in (f"round-{package.round}", "latest"):
        objects.put(req.run_id, f"review/{name}.md", markdown.encode("utf-8"))
        objects.put(req.run_id, f"review/{name}.json", as_json.encode("utf-8"))
    ledger.record_activity(req.run_id, "review_package", round=package.round, path=str(folder / "latest.md"))
    return found.model_copy(update={"markdown_ref": store.put(markdown), "json_ref": store.put(as_json),
                                    "path": str(folder / "latest.md")})
