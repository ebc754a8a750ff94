"""The Temporal Web UI as a reviewer sees it (issue 33.6): headless Chromium on the session's dev server, its list
through the README's saved views with the columns the README names, and a run waiting for review on its own page.

Two runs wait for review (one green, one red), beside a dry run and the runs' lanes: the reviewer's view lists the
two, with their task and verdict in the row, and neither view lists the dry run or a lane. The screenshots go to
docs/img/ with REPOSWARM_SCREENSHOTS=update (the README shows those), else under the test's tmp_path.

Chromium is Debian's (`make browser` installs it), driven by Playwright with that executable: nothing downloads a
browser. The flags keep it off the network but for the UI (its own background connections are refused here).
A server registered before the new attributes still runs a run to review (the second test).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import Client
from temporalio.common import SearchAttributeKey
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.testing import WorkflowEnvironment

from reposwarm.cli.runs import build_request, start
from reposwarm.contracts import Phase
from reposwarm.review import webui
from reposwarm.review.webui import KIND_ATTR, REPO_ATTR, STATUS_ATTR, TASK_ATTR, VERDICT_ATTR
from tests.helpers import (
    ROOT,
    WorkerProcess,
    finish,
    make_repo,
    start_run,
    temporal_binary,
    turn,
    wait_for_phase,
    write_yaml,
)
from workflows.swarm import SwarmWorkflow

CHROMIUM = Path("/usr/bin/chromium")
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync"]
GREEN_TASK = "Document what calc.add returns, so a reader of the module knows it adds its two arguments"
RED_TASK = "Rename calc.add to calc.plus for the new API (the check still imports add)"
DRY_TASK = "Plan only: document calc"
# The UI keeps its list's columns and saved views in the browser (found by using Configure Columns and Save as
# New in this UI, then reading localStorage): a reviewer sets them once, by hand, as the README says.
COLUMNS_KEY, VIEWS_KEY = "namespace-workflow-table-columns", "saved-workflow-queries"


def screenshots(tmp_path: Path) -> Path:
    return ROOT / "docs" / "img" if os.environ.get("REPOSWARM_SCREENSHOTS") == "update" else tmp_path


def setup(tmp_path: Path) -> tuple[Path, Path]:
    repo = make_repo(tmp_path / "calc", {"calc/__init__.py": "def add(a, b):\n    return a + b\n"})
    check = [sys.executable, "-c", "import calc; calc.add"]  # red once add is gone
    lanes = write_yaml(tmp_path / "lanes.yaml", {
        "swarm": {"max_helper_loops": 1, "lanes": {"core": {"allowed_paths": ["calc/"]}}},
        "validation": {"profiles": {"default": {"commands": [check], "timeout_s": 60}}}})
    return repo, lanes


def one_lane(tmp_path: Path, name: str, goal: str, content: str) -> tuple[Path, Path]:
    plan = write_yaml(tmp_path / f"{name}-plan.yaml", {"interface_contract": "calc is one module.",
                                                       "lanes": [{"lane": "core", "goal": goal}]})
    script = write_yaml(tmp_path / f"{name}-replay.yaml", {"version": 1, "lanes": {"core": {1: [
        turn(("c1", "write_file", {"path": "calc/__init__.py", "reason": goal, "content": content})),
        finish("c2", goal)]}}})
    return plan, script


def local_storage(namespace: str) -> str:
    """A script setting the columns and saved views as a reviewer does once (README), before the UI reads them."""
    columns = {namespace: [{"label": label} for label in webui.COLUMNS]}
    views = {namespace: [{"id": str(i), "name": name, "query": query, "type": "user"}
                         for i, (name, query) in enumerate(webui.SAVED_VIEWS.items(), 1)]}
    return "".join(f"localStorage.setItem({json.dumps(key)}, {json.dumps(json.dumps(value))});"
                   for key, value in ((COLUMNS_KEY, columns), (VIEWS_KEY, views)))


async def listed(client: Client, query: str) -> set[str]:
    return {wf.id async for wf in client.list_workflows(query)}


async def show_view(page: Any, name: str, run_id: str) -> Any:
    """Pick a saved view from the list's Saved Views menu, as a reviewer does; the row of `run_id` once shown."""
    await page.get_by_test_id("saved-views-button").click()
    await page.get_by_role("menuitem", name=name).or_(page.get_by_role("option", name=name)).first.click()
    await page.keyboard.press("Escape")
    row = page.get_by_role("row").filter(has_text=run_id)
    await row.first.wait_for(timeout=30_000)
    return row.first


async def rendered(page: Any, text: str, error: type[Exception]) -> str:
    """The rendered Markdown (the UI shows a run's summary and details each in a frame of its own) that says
    `text`, once shown."""
    deadline = asyncio.get_running_loop().time() + 30
    while True:
        for frame in page.frames[1:]:
            try:
                shown = await frame.locator("body").inner_text(timeout=1000)
            except error:
                continue  # (a frame replaced while read: the details are kept up to date)
            if text in shown:
                return " ".join(shown.split())
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"no frame of {page.url} shows {text!r}")
        await asyncio.sleep(0.2)


@pytest.mark.usefixtures("worker")
@pytest.mark.skipif(not CHROMIUM.exists(), reason="chromium is not installed: `make browser` installs it")
async def test_a_reviewer_finds_the_runs_waiting_for_review_with_their_task_and_verdict(
        client: Client, ui_port: int, tmp_path: Path) -> None:
    playwright = pytest.importorskip("playwright.async_api", reason="playwright is missing: make venv installs it")
    repo, lanes = setup(tmp_path)
    green_plan, green_script = one_lane(tmp_path, "green", "Document add.",
                                        'def add(a, b):\n    """a + b: the sum of its two arguments."""\n    return a + b\n')
    red_plan, red_script = one_lane(tmp_path, "red", "Rename add to plus.", "def plus(a, b):\n    return a + b\n")
    green = await start_run(client, repo, lanes, green_script, plan=green_plan, task=GREEN_TASK)
    red = await start_run(client, repo, lanes, red_script, plan=red_plan, task=RED_TASK)
    dry = build_request(argparse.Namespace(repo=str(repo), task=DRY_TASK, lanes=str(lanes), plan=str(green_plan),
                                           model=f"replay:{green_script}"))
    dry.dry_run = True
    await start(client, dry)
    await client.get_workflow_handle_for(SwarmWorkflow.run, dry.run_id).result()
    runs = [client.get_workflow_handle_for(SwarmWorkflow.run, r) for r in (green, red)]
    try:
        await wait_for_phase(client, green, Phase.review, timeout=180)
        red_status = await wait_for_phase(client, red, Phase.review, timeout=180)
        assert red_status.review is not None and red_status.review.test_report is not None
        assert not red_status.review.test_report.passed
        lanes_ids = {f"{green}.core", f"{red}.core"}

        # What the server has: each kind said, and the task and verdict of the runs at review.
        for handle, task, verdict in ((runs[0], GREEN_TASK, "passed"), (runs[1], RED_TASK, "failed")):
            attrs = (await handle.describe()).typed_search_attributes
            assert (attrs.get(KIND_ATTR), attrs.get(TASK_ATTR), attrs.get(VERDICT_ATTR)) == ("run", task, verdict)
        described = await client.get_workflow_handle(dry.run_id).describe()
        assert described.typed_search_attributes.get(KIND_ATTR) == "dry_run"
        for lane in lanes_ids:
            assert (await client.get_workflow_handle(lane).describe()).typed_search_attributes.get(KIND_ATTR) == "lane"
        # The saved views, as the server answers them.
        waiting = await listed(client, webui.SAVED_VIEWS[webui.REVIEW_VIEW])
        every = await listed(client, webui.SAVED_VIEWS[webui.RUNS_VIEW])
        assert {green, red} <= waiting and {green, red} <= every
        assert not ({dry.run_id} | lanes_ids) & (waiting | every)
        readme = (ROOT / "README.md").read_text()
        assert "docs/observability.md#saved-views" in readme, "the README no longer points at the saved views"
        views = (ROOT / "docs" / "observability.md").read_text()
        for name, query in webui.SAVED_VIEWS.items():
            assert name in readme, f"README does not name the saved view {name!r}"
            assert name in views and query in views, f"docs/observability.md does not show the saved view {name!r}"

        base, namespace = f"http://127.0.0.1:{ui_port}", client.namespace
        shots = screenshots(tmp_path)
        shots.mkdir(parents=True, exist_ok=True)
        async with playwright.async_playwright() as pw:
            browser = await pw.chromium.launch_persistent_context(
                str(tmp_path / "chromium-profile"), executable_path=str(CHROMIUM), headless=True, args=ARGS,
                viewport={"width": 1600, "height": 760})
            try:
                await browser.add_init_script(local_storage(namespace))
                page = browser.pages[0] if browser.pages else await browser.new_page()
                await page.goto(f"{base}/namespaces/{namespace}/workflows")
                await page.get_by_title("Collapse Navigation").click()  # room for the task column

                every_row = await show_view(page, webui.RUNS_VIEW, green)
                text = await page.locator("main").inner_text()
                assert dry.run_id not in text and not any(lane in text for lane in lanes_ids), text
                assert await every_row.is_visible()

                row = await show_view(page, webui.REVIEW_VIEW, green)
                shown = " ".join((await row.inner_text()).split())
                assert "review" in shown and "passed" in shown and GREEN_TASK[:60] in shown, shown
                red_row = " ".join((await page.get_by_role("row").filter(has_text=red).first.inner_text()).split())
                assert "failed" in red_row and RED_TASK[:60] in red_row, red_row
                text = await page.locator("main").inner_text()
                assert dry.run_id not in text and not any(lane in text for lane in lanes_ids), text
                await page.mouse.move(0, 0)  # no row hovered (its hover shows buttons over the columns)
                await page.set_viewport_size({"width": 1600, "height": 500})
                await page.screenshot(path=str(shots / "webui-runs.png"))

                await page.set_viewport_size({"width": 1600, "height": 760})
                await row.get_by_role("link", name=green).click()
                await page.get_by_test_id("user-metadata-tab").click()
                details = await rendered(page, "WAITING FOR YOUR REVIEW", playwright.Error)
                assert f"reposwarm approve {green}" in details and "checks PASSED" in details, details
                await page.screenshot(path=str(shots / "webui-review.png"))
            finally:
                await browser.close()
    finally:
        for handle in runs:
            await handle.terminate("test done")


async def test_a_server_without_the_new_attributes_still_runs_to_review(tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """A server registered before RepoSwarmKind, RepoSwarmTask and RepoSwarmVerdict, that will not take them
    (its namespace is full, as on Temporal Cloud the worker may not add any): a run neither sets nor upserts
    them (the server would refuse it), and reaches review with its phase in RepoSwarmStatus."""
    fillers = [SearchAttributeKey.for_keyword(f"Filler{i}") for i in range(8)]  # (the dev server holds ten)
    old = await WorkflowEnvironment.start_local(data_converter=pydantic_data_converter,
                                                dev_server_existing_path=temporal_binary(),
                                                search_attributes=[REPO_ATTR, STATUS_ATTR, *fillers])
    queue = f"old-server-{uuid.uuid4().hex[:6]}"
    monkeypatch.setenv("REPOSWARM_TASK_QUEUE", queue)
    worker = WorkerProcess(old.client.service_client.config.target_host, queue, tmp_path / "home").start()
    try:
        await worker.ready()
        repo, lanes = setup(tmp_path)
        plan, script = one_lane(tmp_path, "green", "Document add.",
                                'def add(a, b):\n    """a + b"""\n    return a + b\n')
        run_id = await start_run(old.client, repo, lanes, script, plan=plan, task=GREEN_TASK)
        status = await wait_for_phase(old.client, run_id, Phase.review, timeout=180)
        assert status.review is not None and status.review.test_report is not None
        attrs = (await old.client.get_workflow_handle(run_id).describe()).typed_search_attributes
        assert (attrs.get(REPO_ATTR), attrs.get(STATUS_ATTR)) == (str(repo), "review")
        assert [attrs.get(key) for key in (KIND_ATTR, TASK_ATTR, VERDICT_ATTR)] == [None, None, None]
        await old.client.get_workflow_handle(run_id).terminate("test done")
    finally:
        worker.stop()
        await old.shutdown()
