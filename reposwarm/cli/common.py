"""What every reposwarm command shares: clear errors, repository checks, model names, the Temporal client."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

from temporalio.client import Client

from reposwarm import gitcmd
from reposwarm.client import connect
from reposwarm.config import apply_env, load_lanes_file
from reposwarm.contracts import LanesFile
from reposwarm.models import KNOWN_PROVIDERS

LANES_FILE_NAMES = ("reposwarm.yaml", "helpers.yaml", ".reposwarm.yaml")


class UserError(Exception):
    """Bad input, said in one line."""


def ui_url(run_id: str) -> str:
    base = os.environ.get("REPOSWARM_UI_URL")
    if not base:
        host, _, port = os.environ.get("TEMPORAL_ADDRESS", "localhost:7233").rpartition(":")
        base = f"http://{host or 'localhost'}:{int(port or 7233) + 1000}"
    namespace = os.environ.get("TEMPORAL_NAMESPACE", "default")
    return f"{base}/namespaces/{namespace}/workflows/{run_id}"


def git_out(repo: Path, *args: str) -> str:
    return gitcmd.run(["-C", str(repo), *args], capture_output=True, text=True, check=True).stdout.strip()


def check_repo(path: str) -> Path:
    repo = Path(path).expanduser().resolve()
    if not repo.exists():
        raise UserError(f"no such repository: {path}")
    if not repo.is_dir():
        raise UserError(f"not a folder: {path}")
    try:
        top = git_out(repo, "rev-parse", "--show-toplevel")
    except subprocess.CalledProcessError:
        raise UserError(f"not a git repository: {path}") from None
    if Path(top).resolve() != repo:
        raise UserError(f"{path} is inside the git repository {top}; give the repository's top folder")
    return repo


def repo_slug(repo: Path | str) -> str:
    """The repository's name as it goes into run and batch ids: lower case, dashes, at most 24 characters."""
    name = repo.name if isinstance(repo, Path) else re.sub(r"\.git$", "", repo.rstrip("/").rsplit("/", 1)[-1]
                                                              .rsplit(":", 1)[-1])
    return re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")[:24] or "repo"


class RemoteHeads:
    """What a remote repository (named by URL) has, asked once with `git ls-remote`: a clear error if it cannot
    be read. Nothing is cloned here: workers keep their own clones (reposwarm/remote.py)."""

    def __init__(self, url: str) -> None:
        from reposwarm.remote import shown

        if re.search(r"://[^/@\s]*:[^/@\s]*@", url):
            # the URL goes into the run's history, its search attributes and the Web UI
            raise UserError(f"the repository URL {shown(url)} carries a password or token: give it to git on the "
                            "worker hosts instead (a credential helper, an ssh key), never in the URL")

        done = gitcmd.run(["ls-remote", "--symref", "--", url], capture_output=True, text=True, timeout=120)
        if done.returncode != 0:
            last = done.stderr.strip().splitlines()[-1] if done.stderr.strip() else "git ls-remote failed"
            raise UserError(f"cannot read the repository {shown(url)}: {shown(last)}")
        self.url, self.refs, self.head_branch = url, {}, None
        for line in done.stdout.splitlines():
            left, _, name = line.partition("\t")
            if left.startswith("ref: ") and name == "HEAD":
                self.head_branch = left[5:].removeprefix("refs/heads/")
            elif not left.startswith("ref: "):
                self.refs[name] = left

    def commit(self, ref: str) -> str | None:
        """The commit a branch, tag, HEAD or full sha names on the remote (a sha is taken as given)."""
        if re.fullmatch(r"[0-9a-f]{40}", ref):
            return ref
        return next((self.refs[r] for r in (ref, f"refs/heads/{ref}", f"refs/tags/{ref}") if r in self.refs), None)


def resolve_model(name: str, relative_to: Path | None = None, where: str = "model") -> str:
    """Check a provider:model name; a replay script's path becomes absolute (the worker may run elsewhere)."""
    provider, sep, rest = name.partition(":")
    if not sep or not rest:
        raise UserError(f"{where} {name!r} must be named provider:model (for example openai:gpt-4.1)")
    if provider not in KNOWN_PROVIDERS:
        raise UserError(f"{where} {name!r}: unknown provider {provider!r} (known: {', '.join(KNOWN_PROVIDERS)})")
    if provider == "replay":
        script = Path(rest).expanduser()
        if not script.is_absolute() and relative_to is not None:
            script = relative_to / script
        if not script.resolve().is_file():
            raise UserError(f"{where}: replay script not found: {rest}")
        return f"replay:{script.resolve()}"
    return name


def run_model(cli: str | None, config: LanesFile, lanes_path: Path) -> str:
    """The run-wide default model: --model, then REPOSWARM_MODEL, then swarm.model in the lanes file."""
    if cli:
        return resolve_model(cli, Path.cwd(), "--model")
    if os.environ.get("REPOSWARM_MODEL"):
        return resolve_model(os.environ["REPOSWARM_MODEL"], Path.cwd(), "REPOSWARM_MODEL")
    if config.swarm.model:
        return resolve_model(config.swarm.model, lanes_path.parent.resolve(), f"{lanes_path}: swarm.model")
    if all(role.model for role in config.swarm.lanes.values()):
        return next(iter(config.swarm.lanes.values())).model  # type: ignore[return-value]
    raise UserError("no model: pass --model provider:name, set REPOSWARM_MODEL, or set swarm.model in the lanes file")


async def client_or_die() -> Client:
    try:
        return await connect()
    except RuntimeError as err:
        address = os.environ.get("TEMPORAL_ADDRESS", "localhost:7233")
        raise UserError(f"cannot reach Temporal at {address} ({err}); start one with ./temporal-dev") from None


def load_config(repo: Path, given: str | None) -> tuple[Path, LanesFile]:
    """The lanes file (given, or found at the repository's root), checked, with the environment's knobs applied."""
    path = Path(given) if given else next((repo / n for n in LANES_FILE_NAMES if (repo / n).is_file()), None)
    if path is None:
        raise UserError(f"no lanes file: pass --lanes FILE or add one of {', '.join(LANES_FILE_NAMES)} to {repo}")
    return path, apply_env(load_lanes_file(path))
