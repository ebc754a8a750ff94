"""The oracle as a careful planner (`oracle:REPO#SHA?plan=careful`, reposwarm/models/careful.py): vertical lanes,
the docs apart, a shared file declared as an overlap, depends_on from the commit's own imports; and the list of
real repositories the harness replays (bench/realrepos.yaml) holds what bench/realrepos.py needs."""

from __future__ import annotations

import asyncio
import json
import re
import sys
from pathlib import Path

import pytest

from reposwarm.contracts.model import ModelRequest
from reposwarm.models import ModelError
from reposwarm.models.careful import careful_lanes, kind
from reposwarm.models.oracle import OracleProvider, checked
from tests.helpers import ROOT, git, make_repo
from tests.test_try import cli

sys.path.insert(0, str(ROOT / "bench"))
import realrepos  # noqa: E402
import realrepos_setup  # noqa: E402

INIT = "from pkg.fmt import show\n"
FMT = "def show(x):\n    return str(x)\n"
PARSE = "def parse(text):\n    return int(text)\n"
TEST_SHOW = "from pkg.fmt import show\n\n\ndef test_show():\n    assert show(1) == '1'\n"
TEST_PARSE = "from pkg.parse import parse\n\n\ndef test_parse():\n    assert parse('2') == 2\n"


def shop_repo(tmp_path: Path, config: str | None = None) -> tuple[Path, str]:
    """A package whose commit adds a function to two modules (each with its own test), re-exports both from the
    package's __init__, makes one module use the other, and notes it in the changelog and docs."""
    repo = make_repo(tmp_path / "shop", {
        "pyproject.toml": "[project]\nname = \"pkg\"\nversion = \"1\"\n", "CHANGES.md": "# changes\n",
        "docs/api.md": "# api\n", "src/pkg/__init__.py": INIT, "src/pkg/fmt.py": FMT, "src/pkg/parse.py": PARSE,
        "tests/test_fmt.py": TEST_SHOW, "tests/test_parse.py": TEST_PARSE,
        **({"reposwarm.yaml": config} if config else {})})
    files = {
        "src/pkg/__init__.py": INIT + "from pkg.fmt import shout\nfrom pkg.parse import parse_many\n",
        "src/pkg/fmt.py": FMT + "\n\ndef shout(x):\n    return show(x).upper()\n",
        "src/pkg/parse.py": "from pkg.fmt import show\n\n\n" + PARSE + "\n\ndef parse_many(t):\n    return [show(x) for x in t]\n",
        "tests/test_fmt.py": TEST_SHOW + "\n\ndef test_shout():\n    from pkg.fmt import shout\n    assert shout('a') == 'A'\n",
        "tests/test_parse.py": TEST_PARSE + "\n\ndef test_many():\n    from pkg.parse import parse_many\n    assert parse_many([1])\n",
        "CHANGES.md": "# changes\n- shout, parse_many\n", "docs/api.md": "# api\nshout, parse_many\n",
    }
    for path, text in files.items():
        (repo / path).write_text(text)
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "shout and parse_many")
    return repo, git(repo, "rev-parse", "HEAD")


def proposer_request(most: int = 8) -> ModelRequest:
    return ModelRequest(model="oracle", agent="proposer", system="", tools=[], round=0, turn=0, messages=[
        {"role": "user", "content": f"Task:\nx\n\nPropose at most {most} lanes.\n\nRepository files:\nREADME.md"}])


def test_the_careful_planner_splits_a_commit_as_an_engineer_would(tmp_path):
    repo, sha = shop_repo(tmp_path)
    reply = asyncio.run(OracleProvider(f"{repo}#{sha}?plan=careful").complete(proposer_request()))
    (call,) = reply.tool_calls
    assert call.name == "submit_lanes"
    args = json.loads(call.raw_arguments)
    lanes = {lane["name"]: lane for lane in args["lanes"]}
    # vertical lanes: each module with its own test; the re-exporting __init__ in both, declared; the docs apart
    assert {name: lane["allowed_paths"] for name, lane in lanes.items()} == {
        "parse": ["src/pkg/__init__.py", "src/pkg/parse.py", "tests/test_parse.py"],
        "fmt": ["src/pkg/__init__.py", "src/pkg/fmt.py", "tests/test_fmt.py"],
        "docs": ["CHANGES.md", "docs/api.md"]}
    assert args["overlaps"] == ["src/pkg/__init__.py"]
    # parse.py imports fmt (the commit's own import): parse's lane builds on fmt's, and may read it
    assert lanes["parse"]["depends_on"] == ["fmt"] and lanes["fmt"]["depends_on"] == []
    assert "src/pkg/fmt.py" in lanes["parse"]["read_only_paths"]
    assert lanes["docs"]["depends_on"] == []

    # the structure's answer is what it was: a lane per top-level folder (and none for tests' own modules)
    plain = json.loads(asyncio.run(OracleProvider(f"{repo}#{sha}").complete(proposer_request())).tool_calls[0]
                       .raw_arguments)
    assert {lane["name"] for lane in plain["lanes"]} != set(lanes)

    # at most N lanes: the smallest code lane folds into the largest, the docs stay apart
    two = json.loads(asyncio.run(OracleProvider(f"{repo}#{sha}?plan=careful").complete(proposer_request(2)))
                     .tool_calls[0].raw_arguments)
    assert [lane["name"] for lane in two["lanes"]] == ["parse", "docs"]
    assert "src/pkg/fmt.py" in two["lanes"][0]["allowed_paths"] and two["overlaps"] == []


def test_modules_that_import_each_other_are_one_lane_and_a_test_follows_its_module_by_name():
    texts = {"a/x.py": "from a.y import f\n", "a/y.py": "from a.x import g\n", "a/z.py": "",
             "tests/test_x.py": "import a\n", "tests/test_y.py": "", "tests/test_z.py": "", "README.md": ""}
    plan = careful_lanes([("M", p) for p in texts], texts.get, {"a/x.py": 10, "a/y.py": 3}, 8)
    lanes = {lane["name"]: lane for lane in plan["lanes"]}  # type: ignore[union-attr]
    assert set(lanes) == {"x", "z", "docs"}
    assert lanes["x"]["allowed_paths"] == ["a/x.py", "a/y.py", "tests/test_x.py", "tests/test_y.py"]
    assert all(not lane["depends_on"] for lane in lanes.values())  # no cycle left to hold
    assert (kind(".gitignore"), kind("changelog.d/1.change.md"), kind("src/p/__init__.pyi"), kind("uv.lock"),
            kind("test/join.test.ts"), kind("flag_test.go")) == ("doc", "doc", "code", "config", "test", "test")


def test_an_unknown_plan_is_refused_when_the_model_is_named(tmp_path):
    repo, sha = shop_repo(tmp_path)
    assert checked(f"{repo}#{sha}?plan=careful").endswith("?plan=careful")
    with pytest.raises(ModelError, match="plan='bogus'"):
        checked(f"{repo}#{sha}?plan=bogus")


@pytest.mark.usefixtures("worker")
async def test_try_propose_goes_through_the_run_s_proposal_phase_and_delivers_the_commit(temporal_address, tmp_path):
    # the repository's configuration without lanes: its profile checks the proposed lanes
    repo, sha = shop_repo(tmp_path, config="validation:\n  profile: mine\n  profiles:\n    mine:\n      commands:\n"
                                           "        - [python3, -m, pytest, -q, tests/test_fmt.py]\n")
    env = {"TEMPORAL_ADDRESS": temporal_address}
    done = await asyncio.to_thread(cli, "try", "--repo", str(repo), "--commit", sha, "--yes", "--propose", "careful",
                                   env=env)
    assert done.returncode == 0, f"stdout:\n{done.stdout}\nstderr:\n{done.stderr}"
    out = done.stdout
    assert "reposwarm.yaml holds no lanes: the proposed lanes run in its configuration (its profile 'mine')" in out
    assert re.search(r"^  checks: python3 -m pytest -q tests/test_fmt\.py$", out, re.M), out
    assert f"its lanes proposed by the run (careful planner: oracle:{repo}#{sha}?plan=careful)" in out
    assert re.search(r"^proposed lanes \(3; planner replies: 1\)", out, re.M), out
    assert "decided: accepted at once (run --yes)" in out and "accepted (--yes): 3 lanes" in out
    assert f"the swarm's result equals the commit {sha[:12]}" in out

    refused = await asyncio.to_thread(cli, "try", "--repo", str(repo), "--commit", sha, "--propose", "careful",
                                      "--lanes", str(repo / "CHANGES.md"), env={"TEMPORAL_ADDRESS": "127.0.0.1:1"})
    assert refused.returncode == 2 and "--propose has the run propose its lanes; --lanes gives them" in refused.stderr


def test_the_list_of_real_repositories_holds_what_the_harness_needs():
    entries = realrepos.load_entries()
    assert len(entries) >= 14
    assert [line for entry in entries for line in realrepos.entry_problems(entry)] == []
    assert len({e["name"] for e in entries}) == len(entries)
    kinds = {e["environment"]["kind"] for e in entries}
    assert {"plain", "venv-release", "venv-editable", "uv", "pnpm", "yarn", "npm", "go", "cargo"} <= kinds
    assert {e["language"] for e in entries} == {"python", "javascript", "go", "rust"}
    assert any("flat" in e["layout"] for e in entries) and sum("src" in e["layout"] for e in entries) >= 4
    # an entry missing a part is said, by name
    broken = dict(entries[0], probe={"file": "x.py"}, commit="abc")
    assert realrepos.entry_problems(broken) == [f"{broken['name']}: commit must be a full sha",
                                                f"{broken['name']}: probe needs a file and a line (0: the end)"]


def test_the_break_probe_goes_after_a_module_s_docstring_and_future_imports():
    text = '"""Doc\n\nmore."""\n\nfrom __future__ import annotations\n\nimport os\n'
    line = realrepos_setup.probe_line("python", text)
    assert line == 6
    broken = realrepos_setup.with_probe(text, line, realrepos_setup.probe_statement("python"))
    assert broken.splitlines()[5] == 'raise ImportError("reposwarm break probe")'
    assert compile(broken, "m.py", "exec")  # still a module: it raises when imported
    assert realrepos_setup.probe_line("javascript", "#!/usr/bin/env node\nx()\n") == 2
    assert realrepos_setup.with_probe("package p\n", 0, realrepos_setup.probe_statement("go")).endswith(
        'func init() { panic("reposwarm break probe") }\n')
