"""What every reposwarm command shares: clear errors, repository checks, model names, the Temporal client, and
how a wait is said (at once when it is long, and what a Ctrl-C in it leaves).

Every command imports this, so it imports next to nothing itself: git (GitPython), the lanes file's loader and the
Temporal client are imported where they are used, and a command that needs none of them does not wait for them.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import subprocess
import sys
from collections.abc import Awaitable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

if TYPE_CHECKING:
    from temporalio.client import Client

    from reposwarm.contracts import LanesFile

T = TypeVar("T")

LANES_FILE_NAMES = ("reposwarm.yaml", "helpers.yaml", ".reposwarm.yaml")


class UserError(Exception):
    """Bad input, said in one line."""


def ui_url(run_id: str) -> str:
    base = os.environ.get("REPOSWARM_UI_URL")
    if not base:
        host, _, port = os.environ.get("TEMPORAL_ADDRESS", "localhost:7233").rpartition(":")
        ui = os.environ.get("TEMPORAL_UI_PORT", "").strip()
        base = f"http://{host or 'localhost'}:{ui if ui.isdigit() else int(port or 7233) + 1000}"
    namespace = os.environ.get("TEMPORAL_NAMESPACE", "default")
    return f"{base}/namespaces/{namespace}/workflows/{run_id}"


def git_out(repo: Path, *args: str) -> str:
    from reposwarm.vcs import gitcmd

    return gitcmd.run(["-C", str(repo), *args], capture_output=True, text=True, check=True).stdout.strip()


def check_url(url: str, key: str = "--repo") -> None:
    """A repository URL fit to start a run with: the URL goes into the run's history, memo, search attributes,
    Web UI details and every worker's clone config, so it may carry no credential, and git must read it as an
    address, never an option or a transport helper."""
    from reposwarm.gitvalues import url_credential, url_problem
    from reposwarm.vcs.remote import shown

    if (what := url_credential(url)) is not None:
        raise UserError(f"{key}: the URL carries a credential ({what}); give it to git instead: a credential "
                        "helper or an ssh key on the worker hosts (and this one), never a password or token in "
                        "the URL")
    if (why := url_problem(url)) is not None:
        raise UserError(f"{key}: {shown(url)!r} {why}")


def check_repo(path: str) -> Path:
    if re.match(r"^[A-Za-z][A-Za-z0-9+.-]*://", path):
        check_url(path)  # (a URL where a folder is wanted: said without echoing its credential)
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
    be read. Nothing is cloned here: workers keep their own clones (reposwarm/vcs/remote.py)."""

    def __init__(self, url: str) -> None:
        from reposwarm.vcs import gitcmd
        from reposwarm.vcs.remote import shown

        check_url(url)

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
    from reposwarm.models import KNOWN_PROVIDERS

    provider, sep, rest = name.partition(":")
    if not sep or not rest:
        raise UserError(f"{where} {name!r} must be named provider:model (for example openai:gpt-4.1)")
    if provider not in KNOWN_PROVIDERS:
        raise UserError(f"{where} {name!r}: unknown provider {provider!r} (known: {', '.join(KNOWN_PROVIDERS)})")
    if provider == "oracle":  # a real commit, replayed: its repository and commit must be there (models/oracle.py)
        from reposwarm.models import ModelError
        from reposwarm.models.oracle import checked

        try:
            return f"oracle:{checked(rest, relative_to)}"
        except ModelError as err:
            raise UserError(f"{where} {name!r}: {err}") from None
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


def unreachable(err: BaseException) -> UserError:
    """The Temporal server does not answer: where it was looked for, why not (the SDK's innermost message, not its
    Rust debug dump: "Connection refused"), and how to start one here."""
    address = os.environ.get("TEMPORAL_ADDRESS", "localhost:7233")
    text = str(err)
    why = found[-1] if (found := re.findall(r'message: "([^"]+)"', text)) else text.removeprefix("Failed client connect: ")
    return UserError(f"cannot reach Temporal at {address}: {why} (start it: reposwarm dev-server --background; in a "
                     "checkout, ./temporal-dev --background or make dev-server)")


async def client_or_die() -> Client:
    from reposwarm.client import connect

    address = os.environ.get("TEMPORAL_ADDRESS", "localhost:7233")
    try:
        return await said_if_slow(connect(), f"waiting for the Temporal server at {address} to answer ...")
    except RuntimeError as err:
        raise unreachable(err) from None


SAY_AFTER_S = 1.0  # a wait longer than this is said, with what it waits for (no command is silent for 2 s)


async def said_if_slow(waiting: Awaitable[T], line: str, after_s: float = SAY_AFTER_S, *,
                       timeout_s: float | None = None) -> T:
    """`waiting`'s result; if it takes longer than `after_s`, `line` (what it waits for, for how long at most) is
    said on stderr first. A quick answer says nothing. Past `timeout_s`, TimeoutError."""
    task = asyncio.ensure_future(waiting)
    # What becomes of it once given up on (the timeout, a Ctrl-C) is nobody's news: taken here, or asyncio would
    # print it as a traceback ("Task exception was never retrieved") on the way out.
    task.add_done_callback(lambda done: done.cancelled() or done.exception())
    try:
        first = after_s if timeout_s is None else min(after_s, timeout_s)
        finished, _ = await asyncio.wait({task}, timeout=first)
        if not finished:
            print(line, file=sys.stderr, flush=True)
            finished, _ = await asyncio.wait({task}, timeout=None if timeout_s is None else timeout_s - first)
            if not finished:
                raise TimeoutError
        return task.result()
    finally:
        task.cancel()  # (a no-op once it is done: an abandoned wait leaves nothing running)


_LEAVING: list[str] = []  # what a Ctrl-C in the waits now under way leaves: the innermost last


@contextlib.contextmanager
def if_interrupted(note: str) -> Iterator[None]:
    """A Ctrl-C within this block ends the command (exit 130) saying `note`: the state the interrupted wait leaves
    ("the run goes on: reposwarm watch RUN"). Only the wait knows it; main.py, where the interrupt ends up, says it."""
    _LEAVING.append(note)
    interrupted = False
    try:
        yield
    except (KeyboardInterrupt, asyncio.CancelledError):
        interrupted = True  # (kept for interrupted_note)
        raise
    finally:
        if not interrupted:
            _LEAVING.pop()


def interrupted_note() -> str | None:
    """What the interrupted wait left, if one said (if_interrupted)."""
    return _LEAVING[-1] if _LEAVING else None


# What a check profile read from the repository itself may set: its commands and their limits. Anything else
# (its env, network, and whatever a profile may name later) widens what a check reaches, so only the user sets it.
UNTRUSTED_PROFILE_KEYS = frozenset({"commands", "timeout_s", "memory_mb", "max_processes", "max_file_mb",
                                    "max_output_mb", "tmp_mb", "max_tree_mb"})
# What a repository's own file may set, said with every refusal and in docs/configuration.md.
REPOSITORY_MAY_SET = ("its lanes (not a lane's shell: true), swarm settings, prices, and of a check profile only its "
                      "commands (argv lists, without when: or shards:) and "
                      + ", ".join(sorted(UNTRUSTED_PROFILE_KEYS - {"commands"})))


def settings_only_the_user_makes(config: LanesFile) -> list[str]:
    """The keys a lanes file found in the repository sets that only the user may: delivery (remotes, forge
    settings), a check profile's environment, network or more, and a lane's shell forced on. The repository's
    author wrote that file."""
    from reposwarm.contracts import DeliveryConfig

    keys = [f"delivery.{name}" for name in sorted(config.delivery.model_fields_set)
            if getattr(config.delivery, name) != DeliveryConfig.model_fields[name].default]
    # a lane's shell on even where checks run unsandboxed: commands a model picks, run on the worker's host
    keys += [f"swarm.lanes.{name}.shell" for name, role in sorted(config.swarm.lanes.items()) if role.shell is True]
    for profile_name, profile in config.validation.profiles.items():
        where = f"validation.profiles.{profile_name}"
        for name in sorted(profile.model_fields_set):
            if name in UNTRUSTED_PROFILE_KEYS \
                    or getattr(profile, name) == type(profile).model_fields[name].get_default(call_default_factory=True):
                continue
            if name != "rules":
                keys.append(f"{where}.{name}")
                continue
            # `rules` is what a `commands` entry's when: and shards: become (CheckProfile): said as the user wrote it
            lines = [" ".join(argv) for argv in profile.commands]
            keys += [f"{where}.commands.{lines.index(line)}.{key}" if line in lines else f"{where}.rules"
                     for line, rule in profile.rules.items() for key in sorted(rule.model_fields_set)
                     if getattr(rule, key) != type(rule).model_fields[key].get_default(call_default_factory=True)]
    return list(dict.fromkeys(keys))


def tracked_files(repo: Path, rev: str = "HEAD") -> list[str] | None:
    """The files of commit `rev` in the repository (what a run starting there has); None when there is none (not
    a repository, no commit yet)."""
    from reposwarm.vcs import gitcmd

    done = gitcmd.run(["-C", str(repo), "ls-tree", "-r", "-z", "--name-only", "--full-tree", "--end-of-options",
                       f"{rev}^{{tree}}"], capture_output=True, timeout=120)
    if done.returncode != 0:
        return None
    return [name.decode("utf-8", "surrogateescape") for name in done.stdout.split(b"\0") if name]


def load_config(repo: Path, given: str | None, *, rev: str = "HEAD", warn: bool = True,
                need_lanes: bool = True) -> tuple[Path, LanesFile]:
    """The lanes file (given, or found at the repository's root), checked, with the environment's knobs applied.

    Every problem is one ConfigError (reposwarm/lanes/loading.py read_lanes_file: the schema's, unknown lanes, lanes
    that may write the same path, a path both writable and read-only); the warnings (a slice matching no file of
    commit `rev`, a check command not installed here) are said on stderr unless `warn` is false (a lanes file the
    command wrote itself). `need_lanes=False`: the repository's configuration may hold no lanes (its profiles,
    prices, delivery and defaults: reposwarm/lanes/loading.py read_configuration), as `checks` and `try` take it.

    One found in the repository is its author's, not the user's: said on stderr, and refused if it sets what
    only the user may (settings_only_the_user_makes)."""
    from reposwarm.lanes.loading import apply_env, read_configuration, read_lanes_file

    path = Path(given) if given else next((repo / n for n in LANES_FILE_NAMES if (repo / n).is_file()), None)
    if path is None:
        raise UserError(f"no lanes file: pass --lanes FILE or add one of {', '.join(LANES_FILE_NAMES)} to {repo} "
                        f"(`{prog()} try --repo {repo}` proposes one from a commit of yours and replays it offline)")
    files = tracked_files(repo, rev)
    at = f" at {rev[:12] if re.fullmatch(r'[0-9a-f]{40}', rev) else rev}"
    read = read_lanes_file if need_lanes else read_configuration
    config, findings = read(path, files, root=repo, at=at, tools_on_path=warn)
    if not given:
        print(f"note: using the repository's own {path.name} (untrusted: it may set {REPOSITORY_MAY_SET}; "
              "--lanes FILE gives a lanes file of your own)", file=sys.stderr)
        if keys := settings_only_the_user_makes(config):
            raise UserError(f"{path}: the repository's own lanes file may not set {', '.join(keys)}; give "
                            f"them yourself, in a lanes file of your own (--lanes FILE). It may set {REPOSITORY_MAY_SET}")
    if warn:
        for line in findings.warnings:
            print(f"warning: {path}: {line}", file=sys.stderr)
        for line in findings.notes:
            print(f"note: {path}: {line}", file=sys.stderr)
    return path, apply_env(config)


def prog() -> str:
    """How to run reposwarm again, as this very command was run: `reposwarm`, or this interpreter and the script
    as it was typed (`.venv/bin/python starter.py`), so a hint works when pasted."""
    if Path(sys.argv[0]).name == "reposwarm":
        return "reposwarm"
    return f"{_python()} {sys.argv[0]}"


def _python() -> str:
    try:
        relative = os.path.relpath(sys.executable)
    except ValueError:  # another drive
        return sys.executable
    return sys.executable if relative.startswith("..") else relative


def worker_hint() -> str:
    if prog() == "reposwarm":
        return "reposwarm worker"
    return f"{_python()} {Path(sys.argv[0]).with_name('worker.py')}"
