"""Issue 30 items 1, 2 and 8: nothing a repository or a lane wrote configures the worker's git, configuration is
data and never a command line, and no credential travels in a repository URL.

The git cases plant what an attacker would (a nested repository with a `filter.<name>.clean` command in its
own config, an empty one, one inside a tracked folder, a `.gitmodules` with `update = !cmd`), show that plain
git does run or die on it (so each test can fail), then that the worker's git neither runs it nor dies. The
full run drives the attack through a lane's run_checks, in the real sandbox, on a real worker whose
environment holds a planted secret.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from pydantic import ValidationError

from reposwarm.contracts import DeliveryConfig, Phase, ReviewDecision
from reposwarm.gitvalues import ref_problem, remote_problem, url_credential
from reposwarm.runs import ledger
from reposwarm.runs.store import Store
from reposwarm.slices.leftovers import changes, nested_git, revert_outside_slice, stage_slice
from reposwarm.slices.policy import PathPolicy
from reposwarm.vcs import gitcmd
from tests.helpers import WorkerProcess, finish, git, make_repo, start_run, turn, wait_for_phase, write_yaml
from workflows.swarm import SwarmWorkflow

ROOT = Path(__file__).resolve().parents[1]
ID = ["-c", "user.name=t", "-c", "user.email=t@localhost"]


def plain_git(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """git as anyone would run it: no overrides (the control that shows the plant works)."""
    return subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True)


def plant_filter_repo(path: Path, marker: Path) -> None:
    """A nested repository whose own config runs a command whenever git hashes its files."""
    path.mkdir(parents=True, exist_ok=True)
    plain_git(path, "init", "-q")
    plain_git(path, "config", "filter.x.clean", f"sh -c 'env >> {marker}; cat'")
    (path / ".gitattributes").write_text("* filter=x\n")
    (path / "data.txt").write_text("one\n")
    plain_git(path, *ID, "add", "-A")
    plain_git(path, *ID, "commit", "-q", "-m", "nested")
    # changed after the commit, to the same size: only its content tells, so any git that looks hashes it (through
    # the filter); a change of size is seen by the size alone, and made the plain-git control below a race
    (path / "data.txt").write_text("two\n")
    marker.unlink(missing_ok=True)  # (the nested repository's own add ran it: that was the planter's git)


def test_git_arguments_get_the_no_submodule_flags_after_their_subcommand():
    assert gitcmd.hardened(["-C", "x", "-c", "a=b", "status", "--porcelain"]) == [
        "-C", "x", "-c", "a=b", "status", "--ignore-submodules=all", "--porcelain"]
    assert gitcmd.hardened(["diff", "--name-only", "a", "b"])[:4] == [
        "diff", "--ignore-submodules=all", "--no-ext-diff", "--no-textconv"]
    assert gitcmd.hardened(["--git-dir=/x", "log", "-1"])[2] == "--ignore-submodules=all"
    assert gitcmd.hardened(["add", "-A"]) == ["add", "-A"]  # nothing to enter: left as it is


def test_a_planted_filter_in_a_submodule_never_runs_in_the_worker_s_git(tmp_path):
    repo = make_repo(tmp_path / "repo", {"services/a/app.py": "x = 1\n"})
    marker = tmp_path / "filter-ran"
    plant_filter_repo(repo / "services/a/vendor_sub", marker)
    assert not marker.exists()
    assert plain_git(repo, "add", "services/a/vendor_sub").returncode == 0  # what the old checkpoint did
    assert "160000" in git(repo, "ls-files", "-s")

    for run in (["status", "--porcelain"], ["diff", "HEAD"], ["diff", "--cached", "--stat"]):
        assert gitcmd.run(run, cwd=repo, capture_output=True).returncode == 0
    g = gitcmd.repo(repo)
    g.status("--porcelain")
    g.diff("--cached")
    changes(repo)
    assert not marker.exists(), "the worker's git ran the nested repository's filter"

    plain_git(repo, "status", "--porcelain")  # plain git does run it: the plant works, the test can fail
    assert marker.exists()


def test_a_hostile_gitmodules_neither_runs_nor_kills_the_worker_s_git(tmp_path):
    sub = make_repo(tmp_path / "sub", {"s.txt": "s\n"})
    repo = make_repo(tmp_path / "repo", {"app.py": "x = 1\n"})
    pwned = tmp_path / "pwned"
    (repo / ".gitmodules").write_text(f'[submodule "vendor/x"]\n\tpath = vendor/x\n\turl = ../sub\n'
                                      f"\tupdate = !touch {pwned}\n")
    git(repo, "update-index", "--add", "--cacheinfo", f"160000,{git(sub, 'rev-parse', 'HEAD')},vendor/x")
    git(repo, "add", ".gitmodules")
    git(repo, "commit", "-q", "-m", "a submodule with a command")
    assert plain_git(repo, "status").returncode == 128  # "invalid value for 'submodule.vendor/x.update'"
    assert plain_git(repo, "diff", "--stat", "HEAD~1", "HEAD").returncode == 128

    assert gitcmd.run(["status", "--porcelain"], cwd=repo, capture_output=True).returncode == 0
    g = gitcmd.repo(repo)
    assert g.diff("--name-only", "HEAD~1", "HEAD").split() == [".gitmodules"]
    assert changes(repo) == []
    assert stage_slice(PathPolicy(repo, ["**"])) == []
    assert not pwned.exists()


def test_nested_repositories_are_removed_said_and_never_staged_as_gitlinks(tmp_path):
    repo = make_repo(tmp_path / "repo", {"services/a/app.py": "x = 1\n", "services/a/lib/util.py": "y = 1\n",
                                         "services/b/other.py": "z = 1\n"})
    marker = tmp_path / "filter-ran"
    plant_filter_repo(repo / "services/a/vendor_sub", marker)  # committed, with a filter
    plain_git(repo / "services/a", "init", "-q", "empty_sub")  # empty: `git add` exits 128 on it
    plain_git(repo / "services/a/lib", "init", "-q")  # inside a tracked folder: git status does not show it
    gitdir = repo / "services/a/gd"
    plain_git(repo, "init", "-q", "--bare", str(gitdir))
    (repo / "services/a/linked").mkdir()
    (repo / "services/a/linked/.git").write_text("gitdir: ../gd\n")  # a .git file
    plain_git(repo / "services/b", "init", "-q", "nested")  # outside the slice
    assert plain_git(repo, "add", "-A", "services/a/empty_sub").returncode == 128  # the old crash

    refused = stage_slice(PathPolicy(repo, ["services/a/"]))

    said = "\n".join(refused)
    for rel in ("services/a/vendor_sub/.git", "services/a/empty_sub/.git", "services/a/lib/.git",
                "services/a/linked/.git", "services/b/nested/.git"):
        assert rel in said and "nested git repository" in said, said
    assert nested_git(repo) == []
    index = git(repo, "ls-files", "-s")
    assert "160000" not in index, index
    assert "services/a/vendor_sub/data.txt" in index  # its files stay, as files of the lane's change
    assert not (repo / "services/b/nested").exists()  # outside the slice: undone like any change there
    assert not marker.exists()
    assert revert_outside_slice(PathPolicy(repo, ["services/a/"])) == []  # nothing left to say


# --- configuration is data ---

FAKE_TOKEN = "ghp_" + "0123456789abcdefghij"  # (made at run time: no credential-shaped literal in the source)


@pytest.mark.parametrize("remote", ["--receive-pack=sh -c 'touch /tmp/x'", "-oProxyCommand=x", "ext::sh -c x",
                                    "fd::3", "../elsewhere", "/srv/git/x.git", f"https://{FAKE_TOKEN}@h/x",
                                    "https://h/x.git?private_token=abc", "gopher://h/x"])
def test_a_delivery_remote_is_a_remote_s_name_or_an_allowed_url(remote):
    with pytest.raises(ValidationError) as err:
        DeliveryConfig(remote=remote)
    assert "ghp_0123" not in str(err.value).split("input_value")[0]


@pytest.mark.parametrize("remote", ["origin", "up-stream", "team/fork", "https://github.com/o/r.git",
                                    "ssh://git@github.com/o/r.git", "git@github.com:o/r.git", "file:///srv/x.git"])
def test_remote_names_and_plain_urls_are_accepted(remote):
    assert DeliveryConfig(remote=remote).remote == remote and remote_problem(remote) is None


def test_branch_names_are_refs_never_options():
    for bad in ("-D", "--output=/tmp/x", "a..b", "x.lock", "a b", "a~1", ".hidden", "x/", "@{u}"):
        assert ref_problem(bad) is not None, bad
    for good in ("main", "feature/x-1", "release/2.0", "0123abcd"):
        assert ref_problem(good) is None


def run_starter(*args: str, cwd: Path = ROOT, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    full = {k: v for k, v in os.environ.items() if not k.startswith(("TEMPORAL_", "REPOSWARM_", "SWARM_", "BASE_"))}
    full |= {"TEMPORAL_ADDRESS": "127.0.0.1:1", **(env or {})}
    return subprocess.run([sys.executable, str(ROOT / "starter.py"), *args], cwd=cwd, env=full,
                          capture_output=True, text=True, timeout=60)


def error_of(proc: subprocess.CompletedProcess[str]) -> str:
    assert proc.returncode == 2, (proc.returncode, proc.stdout, proc.stderr)
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1 and "Traceback" not in proc.stderr, proc.stderr
    return errors[0]


LANES = {"swarm": {"lanes": {"a": {"allowed_paths": ["a/"]}}},
         "validation": {"profiles": {"default": {"commands": [["python3", "-c", "pass"]]}}}}


@pytest.mark.parametrize(("extra", "key"), [
    ({"delivery": {"remote": "origin"}}, "delivery.remote"),
    ({"delivery": {"pull_request": True, "github_repo": "o/r"}}, "delivery.github_repo"),
    ({"validation": {"profiles": {"default": {"commands": [["true"]], "network": True}}}},
     "validation.profiles.default.network"),
    ({"validation": {"profiles": {"default": {"commands": [["true"]], "env": {"X": "1"}}}}},
     "validation.profiles.default.env"),
    ({"validation": {"profiles": {"default": {"commands": [["true"]], "read_only_paths": ["/root"]}}}},
     "validation.profiles.default.read_only_paths"),
    # a model's shell on even where the worker runs checks unsandboxed: only the user may say so
    ({"swarm": {"lanes": {"a": {"allowed_paths": ["a/"], "shell": True}}}}, "swarm.lanes.a.shell"),
])
def test_the_repository_s_own_lanes_file_may_not_set_what_only_the_user_may(tmp_path, extra, key):
    repo = make_repo(tmp_path / "repo", {"a/x.py": "x = 1\n"})
    write_yaml(repo / "reposwarm.yaml", LANES | extra)
    proc = run_starter("run", "--repo", str(repo), "--task", "t", "--model", "openai:gpt-4.1")
    line = error_of(proc)
    assert key in line and "--lanes FILE" in line, line
    assert "using the repository's own reposwarm.yaml" in proc.stderr

    own = write_yaml(tmp_path / "mine.yaml", LANES | extra)  # the same settings from the user's own file
    proc = run_starter("run", "--repo", str(repo), "--task", "t", "--model", "openai:gpt-4.1", "--lanes", str(own))
    assert "using the repository's own" not in proc.stderr and key not in proc.stderr, proc.stderr
    assert "Temporal" in proc.stderr  # got as far as connecting: the settings were taken


def test_an_option_shaped_remote_in_a_lanes_file_is_one_line_naming_the_key(tmp_path):
    repo = make_repo(tmp_path / "repo", {"a/x.py": "x = 1\n"})
    lanes = write_yaml(tmp_path / "l.yaml", LANES | {"delivery": {"remote": "--receive-pack=sh -c 'id'"}})
    line = error_of(run_starter("run", "--repo", str(repo), "--task", "t", "--lanes", str(lanes)))
    assert "delivery.remote" in line and "starts with '-'" in line


@pytest.mark.parametrize(("key", "value"), [("SWARM_BRANCH", "-D"), ("BASE_BRANCH", "--output=/tmp/x"),
                                            ("SWARM_BRANCH", "a..b")])
def test_branch_names_from_the_environment_are_checked_with_one_line(tmp_path, key, value):
    repo = make_repo(tmp_path / "repo", {"a/x.py": "x = 1\n"})
    lanes = write_yaml(tmp_path / "l.yaml", LANES)
    line = error_of(run_starter("run", "--repo", str(repo), "--task", "t", "--lanes", str(lanes),
                                "--model", "openai:gpt-4.1", env={key: value}))
    assert line.startswith(f"error: {key}=")


# --- no credential in a repository URL ---


TOKEN = "ghp_" + "planted0123456789abcdefXYZ"  # fake


@pytest.mark.parametrize("url", [f"https://{TOKEN}@example.invalid/x.git", f"http://bob:{TOKEN}@example.invalid/x",
                                 f"https://example.invalid/x.git?private_token={TOKEN}",
                                 f"ssh://git:{TOKEN}@example.invalid/x.git", "https://bob@example.invalid/x.git"])
@pytest.mark.parametrize("command", ["run", "trial", "mcp"])
def test_a_url_with_a_credential_is_refused_everywhere_without_showing_it(tmp_path, url, command):
    lanes = write_yaml(tmp_path / "l.yaml", LANES)
    args = {"run": ["run", "--repo", url, "--task", "t", "--lanes", str(lanes)],
            "trial": ["trial", "--repo", url, "--commits", "HEAD", "--lanes", str(lanes)],
            "mcp": ["mcp", "--repo", url]}[command]
    proc = run_starter(*args)
    line = error_of(proc)
    assert line.startswith("error: --repo: the URL carries a credential ("), line
    assert "credential helper" in line
    assert TOKEN not in proc.stderr + proc.stdout and "bob" not in proc.stderr


def test_a_plain_ssh_login_is_no_credential():
    assert url_credential("ssh://git@github.com/o/r.git") is None
    assert url_credential("git@github.com:o/r.git") is None
    assert url_credential("https://github.com/o/r.git") is None


def test_redaction_takes_url_credentials_and_gitlab_tokens_by_shape():
    glpat = "glpat-" + "AbCdEf0123456789xyzW"  # fake
    text = ledger.redact(f"cloning https://oauth2:{glpat}@gitlab.example/x.git, http://{TOKEN}@h/x, "
                         f"https://h/x?private_token=s3cret-value&ref=main; {glpat} alone")
    for secret in (glpat, TOKEN, "s3cret-value", "oauth2"):
        assert secret not in text, text
    assert "gitlab.example/x.git" in text and "ref=main" in text


# --- the attack, through a lane's run_checks, on a real worker ---

SECRET = "postgres://app:side-door-planted-secret-42@db/x"
# The lane's "test": nested repositories with planted config, in the lane's own slice and in the base's
# submodule folder. It prints what it made and exits 0 (the gate must pass for the run to deliver).
ATTACK = r'''
import os, subprocess, sys
marker = sys.argv[1]
def git(*args, cwd="."):
    return subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@localhost", *args], cwd=cwd,
                          capture_output=True, text=True).returncode
for where in ("services/a/vendor_sub", "vendor/x"):
    os.makedirs(where, exist_ok=True)
    made = git("init", "-q", cwd=where)
    git("config", "filter.x.clean", f"sh -c 'env >> {marker}; cat'", cwd=where)
    open(os.path.join(where, ".gitattributes"), "w").write("* filter=x\n")
    open(os.path.join(where, "data.txt"), "a").write("more\n")
    git("add", "-A", cwd=where)
    git("commit", "-q", "-m", "planted", cwd=where)
    open(os.path.join(where, "data.txt"), "a").write("dirty after the commit\n")
    print(f"PLANTED {where} {made}")
os.makedirs("services/a/empty_sub", exist_ok=True)
print("PLANTED empty", git("init", "-q", "services/a/empty_sub"))
'''


async def test_the_nested_repository_attack_runs_nothing_outside_the_sandbox(client, temporal_address, tmp_path,
                                                                               monkeypatch):
    home = tmp_path / "home"
    queue = f"side-doors-{uuid.uuid4().hex[:6]}"
    monkeypatch.setenv("REPOSWARM_TASK_QUEUE", queue)
    monkeypatch.setenv("REPOSWARM_HOME", str(home))
    marker = tmp_path / "filter-ran"
    pwned = tmp_path / "gitmodules-ran"
    sub = make_repo(tmp_path / "sub", {"s.txt": "s\n"})
    repo = make_repo(tmp_path / "repo", {"services/a/app.py": "VERSION = 1\n", "README.md": "demo\n",
                                         "services/a/test_attack.py": ATTACK})
    # the repository itself is hostile too: a submodule whose update is a command
    (repo / ".gitmodules").write_text(f'[submodule "vendor/x"]\n\tpath = vendor/x\n\turl = {sub}\n'
                                      f"\tupdate = !touch {pwned}\n")
    git(repo, "update-index", "--add", "--cacheinfo", f"160000,{git(sub, 'rev-parse', 'HEAD')},vendor/x")
    git(repo, "add", ".gitmodules")
    git(repo, "commit", "-q", "-m", "a submodule with a command")
    lanes = write_yaml(tmp_path / "lanes.yaml", {
        "swarm": {"max_parallel": 1, "lanes": {"api": {"allowed_paths": ["services/a/", "vendor/"]}}},
        "validation": {"profiles": {"default": {
            "commands": [["python3", "services/a/test_attack.py", str(marker)]], "timeout_s": 120}}}})
    plan = write_yaml(tmp_path / "plan.yaml", {"interface_contract": "services/a/app.py exports VERSION.",
                                               "lanes": [{"lane": "api", "goal": "Set VERSION to 2."}]})
    script = write_yaml(tmp_path / "replay.yaml", {"version": 1, "lanes": {"api": {1: [
        turn(("c1", "run_checks", {})),
        turn(("e1", "edit_file", {"path": "services/a/app.py", "old": "VERSION = 1", "new": "VERSION = 2",
                                  "reason": "the goal"})),
        turn(("c2", "run_checks", {})),  # the old code's checkpoint had staged a gitlink: this status entered it
        turn(("e2", "edit_file", {"path": "services/a/app.py", "old": "VERSION = 2", "new": "VERSION = 2  # ok",
                                  "reason": "a second checkpoint over whatever the checks left"})),
        finish("f1", "VERSION is 2"),
    ]}}})

    worker = WorkerProcess(temporal_address, queue, home, env={"DB_CONN": SECRET}).start()
    try:
        await worker.ready()
        run_id = await start_run(client, repo, lanes, script, plan=plan)
        status = await wait_for_phase(client, run_id, Phase.review, timeout=600)
        handle = client.get_workflow_handle_for(SwarmWorkflow.run, run_id)
        await handle.execute_update(SwarmWorkflow.review, ReviewDecision(approve=True, reviewer="side-doors"))
        result = await asyncio.wait_for(handle.result(), timeout=300)
    finally:
        worker.stop()
        print(json.dumps({"worker_log": worker.log.read_text(errors="replace")[-3000:]}))

    assert not marker.exists(), f"a planted filter ran outside the sandbox:\n{marker.read_text()[:2000]}"
    assert not pwned.exists(), "the repository's submodule command ran"
    assert [lane.state.value for lane in status.lanes] != ["failed"], status.lanes
    lines = ledger.read(run_id)
    calls = {e["call_id"]: e for e in lines if e["event"] == "tool_call"}
    c1 = Store(run_id).get(calls["c1"]["output_ref"]).decode()
    log_ref = re.search(r"full log (sha256:[0-9a-f]{64})", c1)
    attack_log = Store(run_id).get(log_ref.group(1)).decode() if log_ref else c1
    assert "PLANTED services/a/vendor_sub 0" in attack_log and "PLANTED vendor/x 0" in attack_log, attack_log
    for rel in ("services/a/vendor_sub/.git", "services/a/empty_sub/.git", "vendor/x/.git"):
        assert rel in c1 and "nested git repository" in c1, c1[-2000:]
    refusals = [e for e in lines if e["event"] == "slice_refused" and e.get("at") == "run_checks"]
    assert {e["call_id"] for e in refusals} >= {"c1", "c2"}, refusals

    branch = result.delivered_branch
    tree = git(repo, "ls-tree", "-r", branch)
    gitlinks = [line.split("\t")[1] for line in tree.splitlines() if line.startswith("160000")]
    assert gitlinks == ["vendor/x"], gitlinks  # the base's own submodule, untouched; the lane added none
    assert "services/a/vendor_sub/data.txt" in tree  # the lane's files stay, as files
    # the lane went on after each attack, to its last edit and its finish
    assert git(repo, "show", f"{branch}:services/a/app.py") == "VERSION = 2  # ok"
    for path in Path(home).rglob("*"):
        if path.is_file() and not path.is_symlink() and path.suffix != ".log":
            assert SECRET.encode() not in path.read_bytes(), path
