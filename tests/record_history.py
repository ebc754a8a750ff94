"""Record the workflow histories that tests/test_replay.py replays (`make record-history VERSION=name`).

One invocation runs several scenarios, each a real run on a fresh dev server with an in-process worker, and
saves the history of its swarm and of every lane into tests/histories/<version>/ as
`<scenario>.<workflow>.json` (`<scenario>.swarm.json`, `<scenario>.api.json`, ...); a workflow that
continued as new has one file per run, oldest first: `<scenario>.<workflow>.run1.json`, `.run2.json`, ...
With warm lanes (the default, `swarm.warm_lanes`) a lane is one workflow for the whole run, `<run>.<lane>`
(`api`), sent each later dispatch as an `assign` Signal and retired at the run's end; with cold lanes (the `cold`
scenario) each dispatch is a workflow of its own (`api.r1`, `api.r1.a2`, `api.r2`).

    happy     two lanes, a dependency, a rejection, a model-planned round 2, an approval
    repair    a red check caused by one lane's change goes back to that lane (a second dispatch), then green
    converge  two lanes edit the same lines; the converger resolves the conflict
    can       a lane continues as new mid-lane, the swarm continues as new between review rounds (a dev server
              of its own that suggests continue-as-new early); a warm lane outlives the swarm's continue-as-new
              and continues as new again between its two assignments
    expire    no review decision within swarm.review_timeout_s: the run expires
    moving    commits land on main while the lane works and after the review: the run refreshes from its
              base before the review and before delivery
    replan    a rejection whose planning fails: back to review; a rejection with the reviewer's plan; an approval
    proposal  no lanes file: the run proposes its lanes (the replay model's `proposer:` reply), a person's edit of
              them is checked and accepted by the confirm_lanes Update; round 1 runs the proposal's plan (no
              planning call), then an approval
    budget    two lanes on the Anthropic wire (a fake server): one call writes their shared prompt prefix first;
              a lane pauses at its token budget and the `budget` Update raises it; it finishes; an approval
    selected  only the tests a lane's change affects run (red, repaired, green), then the remainder as two
              shards in parallel; the whole profile at review; an approval (tests/record_checks.py)
    cold      the happy path with `swarm.warm_lanes: false`: each dispatch a child LaneWorkflow of its own

Beside them, one trial batch (tests/record_trials.py) into tests/trial_histories/<version>.json: a good task vetted,
cloned at its base and scored, a bad task vetted and scored with no swarm run.

Re-record when a workflow change is meant to be incompatible with the recorded histories: a patch guarding it
(the new folder beside the old ones, while runs of the old version may be open), or a patch folded once no open
run predates it (the old folders removed); docs/internals.md, "Changing a workflow".
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from temporalio.api.enums.v1 import EventType  # noqa: E402
from temporalio.client import Client, WorkflowFailureError, WorkflowHistory  # noqa: E402

from reposwarm.cli.worker import make_worker  # noqa: E402
from reposwarm.client import task_queue  # noqa: E402
from reposwarm.contracts import LanePlan, Phase, Plan, ReviewDecision, ReviewPackage, SwarmResult  # noqa: E402
from tests.helpers import (  # noqa: E402
    finish,
    git,
    lane_starts,
    make_repo,
    start_dev_server,
    start_run,
    turn,
    wait_for_phase,
    write_yaml,
)
from tests.record_checks import selected  # noqa: E402
from tests.record_trials import trial_batch  # noqa: E402
from workflows.swarm import SwarmWorkflow  # noqa: E402

VERSION = sys.argv[1] if len(sys.argv) > 1 else "latest"
OUT = ROOT / "tests" / "histories" / VERSION
TRIAL_OUT = ROOT / "tests" / "trial_histories" / f"{VERSION}.json"
PY = sys.executable
# The dev server of the continue-as-new scenario suggests it after this many events (a real one: 4K+ events):
# a lane of a few turns and a swarm after one round both pass it.
SUGGEST_CAN_AFTER = 40
LANE_CLOSE_TIMEOUT_S = 60  # how long a lane may stay open after its run has ended
# Round 1 of the `can` lane: this many turns of reads, then a write and finish. With 8 (at SUGGEST_CAN_AFTER=40)
# the warm lane continues as new mid-assignment, then again between its assignments (the next round's `assign`
# arrives past 40 events): both paths are recorded. Re-check after a change to a lane's events (5 before a turn ran
# its reads itself, patch "tools-in-turn": each read was a marker event then). Each turn ends with a search, which
# runs as an activity of its own: else the turns would go on in one activity (patch "turns-in-activity"), and the
# lane would end before its history grew past the limit.
CAN_READ_TURNS = 8
# A check that fails, naming api/app.py, while that file says BROKEN (the base commit passes it).
BROKEN_FAILS = "import sys; sys.exit('api/app.py is BROKEN' if 'BROKEN' in open('api/app.py').read() else 0)"

Scenario = Callable[[Client, Path], Awaitable[str]]  # drives one run to its end; returns its run id


def _check_profile(*commands: list[str], **profiles: dict) -> dict:
    return {"profiles": {"default": {"commands": list(commands), "timeout_s": 60}, **profiles}}


async def _decide(client: Client, run_id: str, decision: ReviewDecision, *, round_no: int | None = None) -> None:
    """Wait for the run's review (of round `round_no`), then send the decision as the review Update."""
    status = await wait_for_phase(client, run_id, Phase.review, timeout=180)
    if round_no is not None and status.round != round_no:
        raise AssertionError(f"{run_id}: review of round {status.round}, expected round {round_no}")
    handle = client.get_workflow_handle_for(SwarmWorkflow.run, run_id)
    await handle.execute_update(SwarmWorkflow.review, decision)


async def _result(client: Client, run_id: str) -> SwarmResult:
    return await asyncio.wait_for(client.get_workflow_handle_for(SwarmWorkflow.run, run_id).result(), 300)


# --- the scenarios ---


async def happy(client: Client, tmp: Path, warm: bool = True) -> str:
    repo = make_repo(tmp / "repo", {"api/app.py": "VERSION = 1\n", "web/client.js": "export const v = 1;\n"})
    lanes = write_yaml(tmp / "lanes.yaml", {
        "swarm": {"max_parallel": 2, "warm_lanes": warm, "lanes": {
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
    run_id = await start_run(client, repo, lanes, script, plan=plan)
    await _decide(client, run_id, ReviewDecision(approve=False, comment="add OWNER"), round_no=1)
    await _decide(client, run_id, ReviewDecision(approve=True, reviewer="recorder"), round_no=2)
    await _result(client, run_id)
    return run_id


async def cold(client: Client, tmp: Path) -> str:
    """The happy path with cold lanes (`warm_lanes: false`): a child LaneWorkflow per dispatch."""
    return await happy(client, tmp, warm=False)


async def repair(client: Client, tmp: Path) -> str:
    """api breaks the check (its output names api/app.py, so api alone is blamed); its second dispatch fixes it."""
    repo = make_repo(tmp / "repo", {"api/app.py": "VERSION = 1\n", "web/client.js": "export const v = 1;\n"})
    lanes = write_yaml(tmp / "lanes.yaml", {
        "swarm": {"max_parallel": 2, "lanes": {"api": {"allowed_paths": ["api/"]}, "web": {"allowed_paths": ["web/"]}}},
        "validation": _check_profile([PY, "-c", BROKEN_FAILS])})
    plan = write_yaml(tmp / "plan.yaml", {"interface_contract": "api/app.py exports VERSION.", "lanes": [
        {"lane": "api", "goal": "Set VERSION to 2."}, {"lane": "web", "goal": "Set the client's v to 2."}]})
    script = write_yaml(tmp / "replay.yaml", {"version": 1, "lanes": {
        "api": {1: [turn(("a1", "write_file", {"path": "api/app.py", "content": "VERSION = 'BROKEN'\n",
                                               "reason": "A first try at the new version"})), finish("a2")],
                "1.2": [turn(("r1", "write_file", {"path": "api/app.py", "content": "VERSION = 2\n",
                                                   "reason": "Set VERSION to 2, fixing the failing check"})),
                        finish("r2", "VERSION is 2")]},
        "web": {1: [turn(("w1", "write_file", {"path": "web/client.js", "content": "export const v = 2;\n",
                                               "reason": "Set v to 2"})), finish("w2")]},
    }})
    run_id = await start_run(client, repo, lanes, script, plan=plan)
    status = await wait_for_phase(client, run_id, Phase.review, timeout=180)
    assert isinstance(status.review, ReviewPackage)
    if not (status.review.test_report and status.review.test_report.passed) or \
            not any(s.lane == "api" and s.attempt == 2 for s in status.lanes):
        raise AssertionError(f"repair: no green repair by api: {status.review.validations}")
    await _decide(client, run_id, ReviewDecision(approve=True, reviewer="recorder"), round_no=1)
    await _result(client, run_id)
    return run_id


GREET = 'def greet(name):\n    return "hello " + name\n'
GREET_BOTH = 'def greet(name):\n    return "hello, " + name.title() + "!"\n'


async def converge(client: Client, tmp: Path) -> str:
    """Both lanes edit greet's return line; b (reading first) finishes second, conflicts, and the converger
    resolves it (tests/test_converge.py)."""
    def edit(call_id: str, old: str, new: str, reason: str) -> dict:
        return turn((call_id, "edit_file", {"path": "app/greet.py", "old": old, "new": new, "reason": reason}))

    repo = make_repo(tmp / "repo", {"app/greet.py": GREET})
    lanes = write_yaml(tmp / "lanes.yaml", {"swarm": {"max_parallel": 2, "overlaps": ["app/"], "lanes": {
        "a": {"allowed_paths": ["app/"]}, "b": {"allowed_paths": ["app/"]}}},
        "validation": _check_profile(["python3", "-c", "import app.greet"])})
    plan = write_yaml(tmp / "plan.yaml", {"interface_contract": "app/greet.py keeps greet(name) -> str.", "lanes": [
        {"lane": "a", "goal": "Greet with a comma and title case."},
        {"lane": "b", "goal": "End the greeting with an exclamation mark."}]})
    resolve = {"tool_calls": [{"id": "c1", "name": "resolve", "arguments": {
        "files": [{"path": "app/greet.py", "content": GREET_BOTH}],
        "explanation": "Kept a's comma and title case and b's exclamation mark."}}]}
    reads = [turn((f"b_read{i}", "read_file", {"path": "app/greet.py"})) for i in range(4)]
    script = write_yaml(tmp / "replay.yaml", {"version": 1, "converger": {1: [resolve]}, "lanes": {
        "a": {1: [edit("a1", '"hello " + name\n', '"hello, " + name.title()\n', "Greet with a comma, in title case"),
                  finish("a2", "comma and title case")]},
        "b": {1: [*reads, edit("b1", '"hello " + name\n', '"hello " + name + "!"\n', "End the greeting with a bang"),
                  finish("b2", "exclamation mark")]}}})
    run_id = await start_run(client, repo, lanes, script, plan=plan)
    status = await wait_for_phase(client, run_id, Phase.review, timeout=180)
    if not any("converger resolved" in r for r in status.resolutions):
        raise AssertionError(f"converge: the converger resolved nothing: {status.resolutions}")
    await _decide(client, run_id, ReviewDecision(approve=True, reviewer="recorder"), round_no=1)
    await _result(client, run_id)
    return run_id


async def can(client: Client, tmp: Path) -> str:
    """On the dev server that suggests continue-as-new early: round 1's lane of many turns continues as new
    mid-lane; the rejection continues the swarm as new; round 2 (model-planned) runs in the new history, and its
    `assign` reaches the warm lane past the limit: the lane continues as new between assignments."""
    repo = make_repo(tmp / "repo", {f"api/f{i}.py": f"X{i} = {i}\n" for i in range(4)})
    lanes = write_yaml(tmp / "lanes.yaml", {"swarm": {"lanes": {"api": {"allowed_paths": ["api/"]}}},
                                            "validation": _check_profile([PY, "-c", "import api.f0"])})
    plan = write_yaml(tmp / "plan.yaml", {"interface_contract": "api/f0.py exports X0.",
                                          "lanes": [{"lane": "api", "goal": "Read the api files, then mark them."}]})
    round2 = {"interface_contract": "api/f0.py exports X0.", "lanes": [{"lane": "api", "goal": "Mark it again."}]}
    reads = [turn(*[(f"r{t}_{i}", "read_file", {"path": f"api/f{i}.py"}) for i in range(4)],
                  (f"s{t}", "search", {"pattern": f"X{t % 4}"}))
             for t in range(CAN_READ_TURNS)]
    script = write_yaml(tmp / "replay.yaml", {"version": 1, "planner": {2: {"content": json.dumps(round2)}}, "lanes": {
        # the last turn writes, searches six times (an activity each) and finishes: the lane's run is past the
        # limit at its end however few events it had when it last continued as new, so round 2's `assign` finds it
        # there and it continues as new between assignments
        "api": {1: [*reads, turn(("w1", "write_file", {"path": "api/done.txt", "content": "read\n",
                                                       "reason": "Mark the reading as done"}),
                                 *[(f"e{i}", "search", {"pattern": f"X{i % 4}"}) for i in range(6)],
                                 ("f1", "finish", {"summary": "read them all"}))],
                2: [turn(("w2", "write_file", {"path": "api/done.txt", "content": "again\n",
                                               "reason": "Mark it again"})), finish("f2")]}}})
    run_id = await start_run(client, repo, lanes, script, plan=plan)
    await _decide(client, run_id, ReviewDecision(approve=False, comment="mark it again"), round_no=1)
    await _decide(client, run_id, ReviewDecision(approve=True, reviewer="recorder"), round_no=2)
    await _result(client, run_id)
    return run_id


async def expire(client: Client, tmp: Path) -> str:
    repo = make_repo(tmp / "repo", {"api/app.py": "VERSION = 1\n"})
    lanes = write_yaml(tmp / "lanes.yaml", {
        "swarm": {"review_timeout_s": 2, "lanes": {"api": {"allowed_paths": ["api/"]}}},
        "validation": _check_profile([PY, "-c", "import api.app"])})
    plan = write_yaml(tmp / "plan.yaml", {"interface_contract": "-",
                                          "lanes": [{"lane": "api", "goal": "Set VERSION to 2."}]})
    script = write_yaml(tmp / "replay.yaml", {"version": 1, "lanes": {"api": {1: [
        turn(("w1", "write_file", {"path": "api/app.py", "content": "VERSION = 2\n", "reason": "Set VERSION to 2"})),
        finish("f1")]}}})
    run_id = await start_run(client, repo, lanes, script, plan=plan)
    result = await _result(client, run_id)
    if not result.expired:
        raise AssertionError(f"expire: the run did not expire: {result}")
    return run_id


def _team_commit(repo: Path, path: str, text: str, message: str) -> None:
    (repo / path).write_text(text)
    git(repo, "add", path)
    git(repo, "commit", "-q", "-m", message)


async def moving(client: Client, tmp: Path) -> str:
    """A teammate commits to main while the lane runs a slow check (refreshed before the review), and again
    after the review (refreshed before delivery) (tests/test_moving_base.py)."""
    repo = make_repo(tmp / "repo", {"api/__init__.py": "", "api/app.py": "VERSION = 1\n",
                                    "api/util.py": "def helper():\n    return 1\n", "README.md": "x\n"})
    lanes = write_yaml(tmp / "lanes.yaml", {"swarm": {"lanes": {"api": {"allowed_paths": ["api/"]}}},
                                            "validation": _check_profile([PY, "-c", "import api.app, api.util"], slow={
                                                "commands": [[PY, "-c", "import time; time.sleep(4)"]],
                                                "timeout_s": 60})})
    plan = write_yaml(tmp / "plan.yaml", {"interface_contract": "api/app.py exports NAME.",
                                          "lanes": [{"lane": "api", "goal": "Add NAME to api/app.py."}]})
    script = write_yaml(tmp / "replay.yaml", {"version": 1, "lanes": {"api": {1: [
        turn(("a1", "edit_file", {"path": "api/app.py", "old": "VERSION = 1\n", "new": "VERSION = 1\nNAME = 'swarm'\n",
                                  "reason": "Add NAME as the contract says"})),
        turn(("a2", "run_checks", {"profile": "slow"})),  # the lane works a while: the team commits meanwhile
        finish("a3", "added NAME")]}}})
    run_id = await start_run(client, repo, lanes, script, plan=plan)
    await wait_for_phase(client, run_id, Phase.running_lanes, timeout=120)
    await asyncio.sleep(1)
    _team_commit(repo, "api/app.py", "# owned by the api team\nVERSION = 1\n", "team: header")
    status = await wait_for_phase(client, run_id, Phase.review, timeout=180)
    assert isinstance(status.review, ReviewPackage)
    if "refreshed at" not in status.review.base_moved:
        raise AssertionError(f"moving: not refreshed before the review: {status.review.base_moved!r}")
    _team_commit(repo, "api/util.py", "def helper():\n    return 2\n", "team: helper returns 2")
    await _decide(client, run_id, ReviewDecision(approve=True, reviewer="recorder"), round_no=1)
    await _result(client, run_id)
    final = await client.get_workflow_handle_for(SwarmWorkflow.run, run_id).query(SwarmWorkflow.status)
    if "moved by 2 commit(s)" not in final.base_moved:
        raise AssertionError(f"moving: not refreshed before delivery: {final.base_moved!r}")
    return run_id


async def replan(client: Client, tmp: Path) -> str:
    """No planner reply for round 2: the planning fails and round 1 is back at review; the reviewer rejects
    with a plan of their own; round 3 runs it and is approved (tests/test_anywhere.py)."""
    repo = make_repo(tmp / "repo", {"api/app.py": "VERSION = 1\n"})
    lanes = write_yaml(tmp / "lanes.yaml", {"swarm": {"lanes": {"api": {"allowed_paths": ["api/"]}}},
                                            "validation": _check_profile([PY, "-c", "import api.app"])})
    plan = write_yaml(tmp / "plan.yaml", {"interface_contract": "api/app.py exports NAME.",
                                          "lanes": [{"lane": "api", "goal": "Add NAME to api/app.py."}]})
    script = write_yaml(tmp / "replay.yaml", {"version": 1, "lanes": {"api": {r: [
        turn(("a1", "edit_file", {"path": "api/app.py", "old": "VERSION = 1\n", "new": f"VERSION = 1\nNAME = 'r{r}'\n",
                                  "reason": f"Add NAME, as round {r} asks"})),
        finish("a2", "added NAME")] for r in (1, 3)}}})
    run_id = await start_run(client, repo, lanes, script, plan=plan)
    print("replan: round 2's planning fails on purpose (the worker logs its traceback)", flush=True)
    await _decide(client, run_id, ReviewDecision(approve=False, comment="Name it better.", reviewer="recorder"),
                  round_no=1)
    status = await wait_for_phase(client, run_id, Phase.review, timeout=180)
    assert isinstance(status.review, ReviewPackage)
    if status.round != 2 or "planning round 2 failed" not in status.review.planning_error:
        raise AssertionError(f"replan: round 2's planning did not fail back to review: {status.review.planning_error}")
    given = Plan(interface_contract="api/app.py exports NAME = 'r3'.",
                 lanes=[LanePlan(lane="api", goal="Set NAME in api/app.py to the round's name.")])
    await _decide(client, run_id, ReviewDecision(approve=False, comment="Use my plan.", reviewer="recorder",
                                                 plan=given), round_no=2)
    await _decide(client, run_id, ReviewDecision(approve=True, reviewer="recorder"), round_no=3)
    await _result(client, run_id)
    return run_id


async def proposal(client: Client, tmp: Path) -> str:
    """A task and a repository, no lanes file: the run proposes two lanes, a person narrows one in an edit (checked
    by check_proposal_edit), the run goes on with the proposal's plan (tests/test_proposing.py)."""
    import argparse

    import yaml

    from reposwarm.cli.runs import build_request, start
    from reposwarm.contracts import LanesDecision, LanesFile, ProposeOptions, SwarmConfig
    from reposwarm.lanes.loading import apply_env
    from reposwarm.lanes.proposal_file import lanes_data, plan_data

    repo = make_repo(tmp / "repo", {"pyproject.toml": '[project]\nname = "p"\nversion = "0"\n', "api/__init__.py": "",
                                    "api/app.py": "VERSION = 1\n", "web/__init__.py": "",
                                    "web/client.py": "from api.app import VERSION\n",
                                    "tests/test_app.py": "from api.app import VERSION\n\n\ndef test_version():\n"
                                                         "    assert VERSION == 1\n"})
    proposed = {"interface_contract": "api/app.py exports NAME.", "summary": "NAME, end to end", "lanes": [
        {"name": "api", "goal": "Add NAME to api/app.py.", "allowed_paths": ["api/**"]},
        {"name": "web", "goal": "Use NAME in web/client.py.", "allowed_paths": ["web/**"],
         "read_only_paths": ["api/**"], "depends_on": ["api"]}]}
    script = write_yaml(tmp / "replay.yaml", {"version": 1, "proposer": [turn(("p1", "submit_lanes", proposed))],
                                              "lanes": {
        "api": {1: [turn(("a1", "write_file", {"path": "api/app.py", "content": "VERSION = 1\nNAME = 'x'\n",
                                               "reason": "Add NAME as the contract says"})), finish("a2")]},
        "web": {1: [turn(("w1", "write_file", {"path": "web/client.py",
                                               "content": "from api.app import NAME, VERSION\n",
                                               "reason": "Use NAME in the client"})), finish("w2")]}}})
    ns = argparse.Namespace(repo=str(repo), task="Add NAME and use it", lanes=None, plan=None, model=f"replay:{script}")
    req = build_request(ns, config=apply_env(LanesFile(swarm=SwarmConfig())))
    req.propose = ProposeOptions()
    await start(client, req)
    handle = client.get_workflow_handle_for(SwarmWorkflow.run, req.run_id)
    status = await wait_for_phase(client, req.run_id, Phase.proposing, timeout=120)
    while status.proposal is None:
        await asyncio.sleep(0.2)
        status = await handle.query(SwarmWorkflow.status)
    edit = {**lanes_data(status.proposal), "plan": plan_data(status.proposal.plan)}
    edit["swarm"]["lanes"]["web"]["allowed_paths"] = ["web/client.py"]
    await handle.execute_update(SwarmWorkflow.confirm_lanes, LanesDecision(
        accept=True, lanes_yaml=yaml.safe_dump(edit), reviewer="recorder"))
    await _decide(client, req.run_id, ReviewDecision(approve=True, reviewer="recorder"), round_no=1)
    await _result(client, req.run_id)
    return req.run_id


async def budget(client: Client, tmp: Path) -> str:
    """Two lanes start together on the Anthropic wire (a fake server): one call writes their shared prompt prefix
    first (warm_prefix); api reaches its token budget, pauses (lane_paused), and the `budget` Update raises it;
    api goes on where it stopped and finishes; an approval."""
    from reposwarm.cli.runs import build_request, start
    from reposwarm.contracts import BudgetChange
    from tests.fake_models import FakeModelServer

    repo = make_repo(tmp / "repo", {"api/app.py": "VERSION = 1\n", "web/client.js": "export const v = 1;\n"})
    usage = {"input_tokens": 1200, "output_tokens": 80}  # billed 1,600 a call (Anthropic's output ratio: 5)

    def write(call_id: str, path: str, text: str) -> dict:
        return {**turn((call_id, "write_file", {"path": path, "content": text, "reason": f"Set {path} as asked"})),
                "usage": usage}
    script = {"lanes": {"api": {1: [write("a1", "api/app.py", "VERSION = 2\n"), write("a2", "api/b.py", "B = 2\n"),
                                    write("a3", "api/c.py", "C = 2\n"), {**finish("a4"), "usage": usage}]},
                        "web": {1: [write("w1", "web/client.js", "export const v = 2;\n"),
                                    {**finish("w2"), "usage": usage}]}}}
    with FakeModelServer(wire="anthropic", script=script) as server:
        os.environ["ANTHROPIC_BASE_URL"], os.environ["ANTHROPIC_API_KEY"] = server.base_url, "sk-ant-fake-recorder"
        lanes = write_yaml(tmp / "lanes.yaml", {"swarm": {"max_parallel": 2, "budget_wait_s": 600, "lanes": {
            "api": {"allowed_paths": ["api/"], "token_budget": 5000}, "web": {"allowed_paths": ["web/"]}}}})
        plan = write_yaml(tmp / "plan.yaml", {"interface_contract": "VERSION is 2 everywhere. " * 20, "lanes": [
            {"lane": "api", "goal": "Set VERSION, B and C to 2."}, {"lane": "web", "goal": "Set v to 2."}]})
        ns = argparse.Namespace(repo=str(repo), task="Version 2", lanes=str(lanes), plan=str(plan),
                                model="anthropic:claude-sonnet-4-5")
        req = build_request(ns)
        await start(client, req)
        handle = client.get_workflow_handle_for(SwarmWorkflow.run, req.run_id)
        while not (await handle.query(SwarmWorkflow.status)).paused:
            await asyncio.sleep(0.2)
        await handle.execute_update(SwarmWorkflow.budget, BudgetChange(lane="api", raise_factor=2, by="recorder"))
        await _decide(client, req.run_id, ReviewDecision(approve=True, reviewer="recorder"), round_no=1)
        await _result(client, req.run_id)
    return req.run_id


# On the shared dev server, run side by side; `can` on a dev server of its own.
SCENARIOS: dict[str, Scenario] = {"happy": happy, "repair": repair, "converge": converge, "expire": expire,
                                  "moving": moving, "replan": replan, "proposal": proposal, "budget": budget,
                                  "selected": selected, "cold": cold}
CAN_SCENARIOS: dict[str, Scenario] = {"can": can}


# --- saving the histories ---


async def runs_of(client: Client, workflow_id: str) -> list[WorkflowHistory]:
    """Every run of a workflow id, oldest first: the latest run, then back along its continued-as-new chain."""
    chain: list[WorkflowHistory] = []
    run_id: str | None = None
    while True:
        history = await client.get_workflow_handle(workflow_id, run_id=run_id).fetch_history()
        chain.append(history)
        run_id = history.events[0].workflow_execution_started_event_attributes.continued_execution_run_id
        if not run_id:
            return chain[::-1]


async def closed(client: Client, workflow_id: str, run_id: str) -> None:
    """Wait until a workflow, and the runs it continued as new into, has closed (a warm lane completes only after
    its run's `retire` Signal, a moment after the swarm itself)."""
    handle = client.get_workflow_handle(workflow_id, run_id=run_id)
    try:
        await asyncio.wait_for(handle.result(follow_runs=True), LANE_CLOSE_TIMEOUT_S)
    except WorkflowFailureError:
        pass  # closed all the same: a failed lane is recorded as it is
    except TimeoutError:
        raise AssertionError(f"{workflow_id} still open {LANE_CLOSE_TIMEOUT_S}s after its run ended "
                             "(a warm lane never retired?)") from None


async def histories(client: Client, run_id: str) -> dict[str, list[WorkflowHistory]]:
    """The swarm's runs and each of its lanes' runs (the lanes its histories started), by name."""
    swarm = await runs_of(client, run_id)
    started: dict[str, list[str | None]] = {}  # lane workflow id -> the runs the swarm started of it
    for h in swarm:
        for e in h.events:
            if e.event_type == EventType.EVENT_TYPE_CHILD_WORKFLOW_EXECUTION_STARTED:
                execution = e.child_workflow_execution_started_event_attributes.workflow_execution
                started.setdefault(execution.workflow_id, []).append(execution.run_id)
            for lane_id in lane_starts(e):
                started.setdefault(lane_id, []).append(None)  # started by the client: its latest run
    found = {"swarm": swarm}
    for child, run_ids in started.items():
        await asyncio.gather(*(closed(client, child, r) for r in run_ids))
        chain = await runs_of(client, child)
        # one execution per lane id (a chain of runs): a lane started afresh under the same id would be lost here
        recorded = {h.events[0].workflow_execution_started_event_attributes.original_execution_run_id for h in chain}
        if {r for r in run_ids if r} - recorded or run_ids.count(None) > 1:
            raise AssertionError(f"{child}: started more than once ({run_ids}); the recorder keeps one execution")
        found[child.removeprefix(run_id + ".")] = chain
    return found


async def record(client: Client, name: str, scenario: Scenario, tmp: Path) -> dict[str, str]:
    """Run one scenario (its repository and files under tmp/name); its files' names and texts."""
    began = time.monotonic()
    run_id = await scenario(client, tmp / name)
    files = {}
    for workflow, chain in (await histories(client, run_id)).items():
        for i, history in enumerate(chain, start=1):
            suffix = f".run{i}" if len(chain) > 1 else ""
            files[f"{name}.{workflow}{suffix}.json"] = history.to_json()
    print(f"{name}: run {run_id} in {time.monotonic() - began:.0f}s, {len(files)} histories", flush=True)
    return files


async def record_trial(client: Client, tmp: Path) -> str:
    """The trial batch (tests/record_trials.py): its history's text."""
    began = time.monotonic()
    batch_id = await trial_batch(client, tmp / "trial", task_queue())
    history = await client.get_workflow_handle(batch_id).fetch_history()
    print(f"trial: batch {batch_id} in {time.monotonic() - began:.0f}s", flush=True)
    return history.to_json()


async def on_server(scenarios: dict[str, Scenario], tmp: Path, extra_args: list[str] | None = None, *,
                    trial: bool = False) -> tuple[dict[str, str], str | None]:
    """The scenarios' files (and the trial batch's history, with `trial`), recorded on a dev server of their own."""
    env = await start_dev_server(extra_args)
    try:
        async with make_worker(env.client):
            recorded, batch = await asyncio.gather(
                asyncio.gather(*(record(env.client, n, s, tmp) for n, s in scenarios.items())),
                record_trial(env.client, tmp) if trial else asyncio.sleep(0, None))
        return {name: text for files in recorded for name, text in files.items()}, batch
    finally:
        await env.shutdown()


async def main() -> None:
    suggest = ["--dynamic-config-value", f"limit.historyCount.suggestContinueAsNew={SUGGEST_CAN_AFTER}"]
    with tempfile.TemporaryDirectory(prefix="reposwarm-record-") as name:
        tmp = Path(name)
        os.environ["REPOSWARM_HOME"] = str(tmp / "home")
        (shared, batch), (continued, _) = await asyncio.gather(on_server(SCENARIOS, tmp, trial=True),
                                                               on_server(CAN_SCENARIOS, tmp, suggest))
    # written only once every scenario is recorded: a failed recording leaves the folder as it was
    OUT.mkdir(parents=True, exist_ok=True)
    for old in OUT.glob("*.json"):
        old.unlink()
    for name, text in sorted({**shared, **continued}.items()):
        (OUT / name).write_text(text)
        print(f"recorded {OUT.relative_to(ROOT)}/{name} ({len(text)} bytes)")
    assert batch is not None
    TRIAL_OUT.write_text(batch)
    print(f"recorded {TRIAL_OUT.relative_to(ROOT)} ({len(batch)} bytes)")


if __name__ == "__main__":
    asyncio.run(main())
