"""Record the workflow histories that tests/test_replay.py replays (`make record-history`).

Runs one swarm with two lanes, a dependency, a rejection, a model-planned
second round and an approval on a fresh dev server, then saves the history of
the swarm and of every lane. Re-record only when a workflow change is meant to
be incompatible with runs already in flight (and say so in the commit).
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from reposwarm.contracts import Phase, ReviewDecision  # noqa: E402
from tests.helpers import finish, make_repo, start_dev_server, start_run, turn, wait_for_phase, write_yaml  # noqa: E402
from worker import make_worker  # noqa: E402
from workflows.swarm import SwarmWorkflow  # noqa: E402

OUT = ROOT / "tests" / "histories" / (sys.argv[1] if len(sys.argv) > 1 else "latest")


def scenario(tmp: Path) -> tuple[Path, Path, Path, Path]:
    repo = make_repo(tmp / "repo", {"api/app.py": "VERSION = 1\n", "web/client.js": "export const v = 1;\n"})
    lanes = write_yaml(tmp / "lanes.yaml", {
        "swarm": {"max_parallel": 2, "lanes": {
            "api": {"allowed_paths": ["api/"], "read_only_paths": ["web/"]},
            "web": {"allowed_paths": ["web/"], "read_only_paths": ["api/"], "depends_on": ["api"]}}},
        "validation": {"profiles": {"default": {"commands": [["python3", "-c", "import api.app"]]}}},
    })
    plan = write_yaml(tmp / "plan.yaml", {"interface_contract": "api/app.py exports NAME.", "lanes": [
        {"lane": "api", "goal": "Add NAME to api/app.py."}, {"lane": "web", "goal": "Use NAME in web/client.js."}]})
    round2 = {"interface_contract": "api/app.py exports OWNER.", "lanes": [{"lane": "api", "goal": "Add OWNER."}]}
    script = write_yaml(tmp / "replay.yaml", {"version": 1, "planner": {2: {"content": json.dumps(round2)}}, "lanes": {
        "api": {1: [turn(("a1", "read_file", {"path": "api/app.py"})),
                    turn(("a2", "write_file", {"path": "api/app.py", "content": "VERSION = 1\nNAME = 'x'\n",
                                               "reason": "Add NAME as the contract says"}),
                         ("a3", "write_file", {"path": "web/x.js", "content": "no"})),
                    finish("a4")],
                2: [turn(("b1", "edit_file", {"path": "api/app.py", "old": "NAME = 'x'\n",
                                              "new": "NAME = 'x'\nOWNER = 'y'\n", "reason": "Add OWNER as asked"})),
                    finish("b2")]},
        "web": {1: [turn(("w1", "write_file", {"path": "web/client.js", "content": "export const v = 2;\n",
                                               "reason": "Use NAME in the client"})), finish("w2")]},
    }})
    return repo, lanes, plan, script


async def main() -> None:
    os.environ["REPOSWARM_HOME"] = tempfile.mkdtemp(prefix="reposwarm-record-")
    env = await start_dev_server()
    try:
        client = env.client
        async with make_worker(client):
            repo, lanes, plan, script = scenario(Path(tempfile.mkdtemp(prefix="reposwarm-record-repo-")))
            run_id = await start_run(client, repo, lanes, script, plan=plan)
            handle = client.get_workflow_handle_for(SwarmWorkflow.run, run_id)
            await wait_for_phase(client, run_id, Phase.review)
            await handle.execute_update(SwarmWorkflow.review, ReviewDecision(approve=False, comment="add OWNER"))
            await wait_for_phase(client, run_id, Phase.review)
            await handle.execute_update(SwarmWorkflow.review, ReviewDecision(approve=True, reviewer="recorder"))
            await handle.result()
            OUT.mkdir(parents=True, exist_ok=True)
            for old in OUT.glob("*.json"):
                old.unlink()
            async for wf in client.list_workflows(f"WorkflowId STARTS_WITH '{run_id}'"):
                history = await client.get_workflow_handle(wf.id).fetch_history()
                name = "swarm" if wf.id == run_id else wf.id.removeprefix(run_id + ".")
                (OUT / f"{name}.json").write_text(history.to_json())
                print(f"recorded {wf.workflow_type} {wf.id} -> {OUT.relative_to(ROOT)}/{name}.json")
    finally:
        await env.shutdown()


if __name__ == "__main__":
    asyncio.run(main())
