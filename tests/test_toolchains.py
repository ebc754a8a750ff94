"""The toolchains a check runs, found in the real bubblewrap sandbox: rustup's proxies resolved (only ~/.cargo/bin on
PATH), pyenv's shims, a venv named by absolute path that is not on PATH, and the worker's secrets never shown."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from reposwarm.checks import sandbox
from reposwarm.checks.runner import common_git_dir, repo_key, run_profile
from reposwarm.checks.sandbox import caches, toolchains
from reposwarm.checks.sandbox.toolchains import ToolchainRefused
from reposwarm.contracts import CheckProfile
from tests.helpers import make_repo
from tests.test_caches import _sandboxed  # noqa: F401 (autouse: the test's own REPOSWARM_HOME, sandbox on)

REAL_HOME = Path(os.environ.get("HOME") or Path.home()).resolve()
PROXIES = REAL_HOME / ".cargo" / "bin"
HAS_RUSTUP = (PROXIES / "rustup").is_file() and any((REAL_HOME / ".rustup" / "toolchains").glob("*/bin/cargo"))
PYENV_SHIMS = REAL_HOME / ".pyenv" / "shims"
SYSTEM_PATH = "/usr/local/bin:/usr/bin:/bin"

CRATE = {
    "Cargo.toml": '[package]\nname = "found"\nversion = "0.1.0"\nedition = "2021"\n',
    "src/lib.rs": "pub fn add(a: i32, b: i32) -> i32 { a + b }\n",
    "tests/adds.rs": ("#[test]\nfn adds() { assert_eq!(found::add(1, 1), 2); }\n"
                      "#[test]\nfn fails() { assert_eq!(found::add(1, 1), 3); }\n"),
}




def _names(report) -> dict[str, str]:
    return {f.name: f.message for f in report.failures}


@pytest.mark.skipif(not HAS_RUSTUP, reason="rustup with an installed toolchain is not in ~/.cargo/bin")
async def test_cargo_runs_with_only_rustups_proxies_on_path(tmp_path, monkeypatch):
    # ~/.cargo/bin/cargo is rustup's proxy, which needs ~/.rustup: the sandbox's private HOME hides it, and the
    # check said "rustup could not choose a version of cargo to run"
    monkeypatch.setenv("PATH", f"{PROXIES}{os.pathsep}{SYSTEM_PATH}")
    repo = make_repo(tmp_path / "crate", CRATE)
    report = await run_profile(CheckProfile(commands=[["cargo", "test", "--offline"]], timeout_s=300,
                                            memory_mb=16384), repo, None, rerun=False, scope="base")
    out = report.commands[0].output_tail
    assert "rustup could not choose" not in out
    assert list(_names(report)) == ["fails"], out  # per-test results: the one failing test, by name
    assert report.tests_run == 2 and report.commands[0].runner == "cargo"
    # (with the host's language caches: cargo's target folder is the repository's seed, cargo still found)
    seed = caches.root() / repo_key(common_git_dir(repo), repo) / "base"
    assert any((seed / "cargo-target" / "debug" / "deps").glob("libfound-*.rlib"))
    # the sandbox's PATH starts with the real toolchain, resolved once on the worker
    first = toolchains.sandbox_path(REAL_HOME, repo).split(os.pathsep)[0]
    assert first.startswith(str(REAL_HOME / ".rustup" / "toolchains")) and (Path(first) / "cargo").is_file()


@pytest.mark.skipif(not HAS_RUSTUP, reason="rustup with an installed toolchain is not in ~/.cargo/bin")
async def test_the_proxy_named_by_path_chooses_the_trees_own_toolchain(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", f"{PROXIES}{os.pathsep}{SYSTEM_PATH}")
    installed = sorted(p.name for p in (REAL_HOME / ".rustup" / "toolchains").iterdir() if (p / "bin").is_dir())
    repo = make_repo(tmp_path / "crate", {**CRATE, "rust-toolchain.toml": f'[toolchain]\nchannel = "{installed[-1]}"\n'})
    # (the tree names a toolchain: the sandbox's PATH leaves the choice to rustup's proxies, as on the host)
    assert toolchains.sandbox_path(REAL_HOME, repo).split(os.pathsep)[0] == str(PROXIES)
    profile = CheckProfile(commands=[[str(PROXIES / "rustc"), "--version", "--verbose"]], timeout_s=120)
    report = await run_profile(profile, repo, None, rerun=False, scope="")
    assert report.commands[0].exit_code == 0, report.commands[0].output_tail
    assert "rustc " in report.commands[0].output_tail and "rustup could not" not in report.commands[0].output_tail


@pytest.mark.skipif(not PYENV_SHIMS.is_dir(), reason="pyenv is not installed in ~/.pyenv")
async def test_pyenv_shims_resolve_in_the_sandbox(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", f"{PYENV_SHIMS}{os.pathsep}{SYSTEM_PATH}")
    repo = make_repo(tmp_path / "repo", {"README.md": "x\n"})
    profile = CheckProfile(commands=[["python", "-c", "import sys; print('prefix', sys.prefix)"]], timeout_s=60)
    report = await run_profile(profile, repo, None, rerun=False)
    assert report.commands[0].exit_code == 0, report.commands[0].output_tail
    assert f"prefix {REAL_HOME / '.pyenv' / 'versions'}" in report.commands[0].output_tail


async def test_a_venv_named_by_absolute_path_runs_though_it_is_not_on_path(tmp_path, monkeypatch):
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    tool = venv / "bin" / "tool"  # a console script, as pip writes one: its shebang names the venv's python
    tool.write_text(f"#!{venv / 'bin' / 'python'}\nimport sys\nprint('tool in', sys.prefix)\n")
    tool.chmod(0o755)
    monkeypatch.setenv("PATH", SYSTEM_PATH)  # neither the venv nor the worker's Python on PATH
    repo = make_repo(tmp_path / "repo", {"README.md": "x\n"})
    profile = CheckProfile(commands=[[str(venv / "bin" / "python"), "-c", "print(1)"], [str(tool)]], timeout_s=60)
    report = await run_profile(profile, repo, None, rerun=False)
    assert [c.exit_code for c in report.commands] == [0, 0], [c.output_tail for c in report.commands]
    assert f"tool in {venv}" in report.commands[1].output_tail
    # bound read-only: its environment, not the test's folder around it
    assert toolchains.command_paths([str(tool)], REAL_HOME, repo)[0] == venv
    ran = await sandbox.run([str(venv / "bin" / "python"), "-c", f"open('{venv}/x', 'w')"],
                            sandbox.Tree(root=repo, git_dir=None), profile, 60)
    assert b"Read-only file system" in ran.output and not (venv / "x").exists()


async def test_a_tool_among_the_workers_secrets_is_refused(tmp_path, monkeypatch):
    home = tmp_path / "home"
    monkeypatch.setenv("HOME", str(home))
    ssh_bin = home / ".ssh" / "bin"
    ssh_bin.mkdir(parents=True)
    (home / ".ssh" / "id_ed25519").write_text("PRIVATE KEY\n")
    shutil.copy("/bin/true", ssh_bin / "tool")
    (tmp_path / "tools").mkdir()
    (tmp_path / "tools" / "keys").symlink_to(home / ".ssh")  # a path that only leads there
    repo = make_repo(tmp_path / "repo", {"README.md": "x\n"})
    for argv in ([str(ssh_bin / "tool")], [str(tmp_path / "tools" / "keys" / "bin" / "tool")],
                 [str(tmp_path / "rshome" / "runs" / "r" / "venv" / "bin" / "python")]):
        if "rshome" in argv[0]:
            Path(argv[0]).parent.mkdir(parents=True)
            shutil.copy("/bin/true", argv[0])
        with pytest.raises(ToolchainRefused, match="holds the worker's secrets"):
            await run_profile(CheckProfile(commands=[argv], timeout_s=60), repo, None, rerun=False)
    # the refusal is a SandboxUnavailable: validation and run_checks report it as they report a missing bwrap
    assert issubclass(ToolchainRefused, sandbox.SandboxUnavailable)
    # and never / nor the whole of HOME
    assert toolchains.forbidden(Path("/"), home) and toolchains.forbidden(home, home)
    assert toolchains.environment_of(home / "bin" / "tool", home) == home / "bin"


async def test_a_toolchain_folder_holding_a_secret_is_bound_without_it(tmp_path, monkeypatch):
    # ~/.local/bin on PATH binds ~/.local, which holds ~/.local/share/keyrings
    home = tmp_path / "home"
    monkeypatch.setenv("HOME", str(home))
    (home / ".local" / "bin").mkdir(parents=True)
    (home / ".local" / "share" / "keyrings").mkdir(parents=True)
    (home / ".local" / "share" / "keyrings" / "login.keyring").write_text("SECRET-KEYRING\n")
    (home / ".local" / "lib").mkdir()
    (home / ".local" / "lib" / "data.txt").write_text("library data\n")
    shutil.copy("/bin/cat", home / ".local" / "bin" / "mycat")
    monkeypatch.setenv("PATH", f"{home / '.local' / 'bin'}{os.pathsep}{SYSTEM_PATH}")
    repo = make_repo(tmp_path / "repo", {"README.md": "x\n"})
    profile = CheckProfile(commands=[["mycat", str(home / ".local" / "lib" / "data.txt")],
                                     ["mycat", str(home / ".local" / "share" / "keyrings" / "login.keyring")]],
                           timeout_s=60)
    report = await run_profile(profile, repo, None, rerun=False)
    assert report.commands[0].exit_code == 0 and "library data" in report.commands[0].output_tail
    assert report.commands[1].exit_code != 0 and "SECRET-KEYRING" not in report.commands[1].output_tail
