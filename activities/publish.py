"""Publishing the review package: Markdown for people and JSON for tools, kept after the run ends (as files of the
run: with a shared object store, a CLI on any machine reads them)."""

from __future__ import annotations

import json

from temporalio import activity

from reposwarm import gitcmd
from reposwarm.contracts import Published, PublishInput
from reposwarm.runs import ledger, objects
from reposwarm.runs.review_package import render_review
from reposwarm.runs.store import Store, run_dir


@activity.defn
def publish_review(req: PublishInput) -> Published:
    package = req.package
    since = ""
    if req.previous_sha and req.previous_sha != package.integration_sha:
        since = gitcmd.repo(req.repo_path).diff("--stat", req.previous_sha, package.integration_sha)
    package = package.model_copy(update={"since_last_round": since})
    markdown = ledger.redact(render_review(package, package.ui_url))
    as_json = ledger.redact(json.dumps(package.model_dump(mode="json"), indent=2))
    store = Store(req.run_id)
    folder = run_dir(req.run_id) / "review"
    for name in (f"round-{package.round}", "latest"):
        objects.put(req.run_id, f"review/{name}.md", markdown.encode("utf-8"))
        objects.put(req.run_id, f"review/{name}.json", as_json.encode("utf-8"))
    ledger.record_activity(req.run_id, "review_package", round=package.round, path=str(folder / "latest.md"))
    return Published(markdown_ref=store.put(markdown), json_ref=store.put(as_json), path=str(folder / "latest.md"),
                     since_last_round=since)
