"""What of the host a check sees besides its tree: the system folders a toolchain needs, /etc without its
secrets, and the toolchains it runs (on PATH, the worker's Python, the tools its command names by absolute path,
first or after a prefix: `env X=1 /venv/bin/python`) wherever they live, with the sandbox's PATH (toolchain shims
resolved).

Nothing else of the host is there: not /root, /srv, /home, /work, /var, /run, nor the repository's git
directory, nor the worker's secrets (~/.ssh, ~/.aws, REPOSWARM_HOME...: `SECRETS`). A profile may name more
read-only paths (`read_only_paths`).

Shims: a PATH entry of rustup's proxies (~/.cargo/bin/cargo -> rustup) is resolved once per worker (`rustup which
rustc`, nothing installed) to its real toolchain, bound read-only with its bin first on the sandbox's PATH (unless
the tree names its own toolchain, rust-toolchain.toml: then the proxies choose, as on the host, among the installed
toolchains, bound read-only with rustup's settings). A `shims` folder (pyenv, asdf, rbenv, nodenv) is bound with its
manager's root and the manager's global version file of HOME (~/.tool-versions), so the shims resolve inside the
sandbox as on the host, with the tree's own .python-version or .tool-versions. nvm's node and npm are real files
under ~/.nvm, bound as any toolchain under HOME.
"""

from __future__ import annotations

import functools
import logging
import os
import re
import stat
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from reposwarm.checks.runners.prefixes import programs
from reposwarm.checks.sandbox import python
from reposwarm.checks.sandbox.environment import SandboxUnavailable, inside
from reposwarm.runs import objects

log = logging.getLogger(__name__)

# Bound read-only where they are folders; recreated as the same symlink where they are one (/bin -> usr/bin).
SYSTEM = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/opt")
# Secrets of /etc hidden by name, whatever their mode; besides them every entry of /etc that is not readable
# by everyone (the host's private keys, pg_hba.conf, ssl/private) is hidden too.
ETC_SECRETS = ("shadow", "gshadow", "shadow-", "gshadow-", "sudoers", "sudoers.d", "security/opasswd",
               "ssl/private", "ssh")
# Of /etc/ssh, what an ssh client reads (a network profile may clone over ssh); the host keys stay hidden.
SSH_CLIENT = ("ssh_config", "ssh_config.d", "ssh_known_hosts", "moduli")
# Files at the top of a toolchain folder under HOME (~/.cargo/credentials.toml) that stay hidden.
SECRET_FILE = re.compile(r"credential|token|secret|password|\.netrc|auth", re.I)
# The worker's secrets under HOME: never bound; hidden where a bound folder holds them; a tool named by absolute path
# whose environment holds one, or lies in one, is refused. (REPOSWARM_HOME too: the runs, the lanes' worktrees.)
HOME_SECRETS = (".ssh", ".aws", ".gnupg", ".config", ".docker", ".kube", ".azure", ".password-store", ".netrc",
                ".git-credentials", ".npmrc", ".pypirc", ".pgpass", ".vault-token", ".terraform.d",
                ".local/share/keyrings", ".cargo/credentials", ".cargo/credentials.toml", ".m2/settings.xml",
                ".gradle/gradle.properties")
# Variables naming where a toolchain manager keeps its toolchains, and their defaults under HOME: passed to the
# check by name when set to another folder. (pyenv's, rbenv's and nodenv's shims export their root themselves.)
TOOLCHAIN_ENV: dict[str, str | None] = {"RUSTUP_HOME": ".rustup", "ASDF_DATA_DIR": ".asdf", "ASDF_DIR": ".asdf",
                                        "ASDF_CONFIG_FILE": ".asdfrc", "GOROOT": None}
# A manager's global version files in HOME its shims read (pyenv's and rbenv's live in their roots).
SHIM_HOME_FILES = (".tool-versions", ".asdfrc")
RUST_TOOLCHAIN_FILES = ("rust-toolchain.toml", "rust-toolchain")


class ToolchainRefused(SandboxUnavailable):
    """A command names a tool that cannot be shown to the check without the worker's secrets."""


def system_mounts() -> list[str]:
    """bwrap arguments for the system folders."""
    args: list[str] = []
    for name in SYSTEM:
        path = Path(name)
        if path.is_symlink():
            args += ["--symlink", os.readlink(path), name]
        elif path.is_dir():
            args += ["--ro-bind", name, name]
    return args


@functools.lru_cache(maxsize=4)
def _etc_hidden(etc: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(files, folders) of /etc to hide. Worked out once per worker: /etc changes with packages, not checks."""
    files: list[str] = []
    folders: list[str] = []
    named = {os.path.join(etc, n) for n in ETC_SECRETS}
    for top, dirs, names in os.walk(etc):
        for name in list(dirs):
            path = os.path.join(top, name)
            if path in named or _private(path):
                folders.append(path)
                dirs.remove(name)  # its contents are hidden with it
        files += [p for p in (os.path.join(top, n) for n in names) if p in named or _private(p)]
    return tuple(files), tuple(folders)


def _private(path: str) -> bool:
    try:
        mode = os.lstat(path).st_mode
    except OSError:
        return False
    return not stat.S_ISLNK(mode) and not mode & stat.S_IROTH


def etc_mounts(network: bool) -> list[str]:
    args = ["--ro-bind", "/etc", "/etc"]
    files, folders = _etc_hidden("/etc")
    for folder in folders:
        # (an empty read-only tmpfs: the folder is there, with nothing in it)
        args += ["--size", str(64 * 1024), "--tmpfs", folder]
        if folder == "/etc/ssh":
            for name in SSH_CLIENT:
                client = os.path.join(folder, name)
                if os.path.exists(client) and not _private(client):
                    args += ["--ro-bind", client, client]
        args += ["--remount-ro", folder]
    args += [a for f in files for a in ("--ro-bind", "/dev/null", f)]
    if network:
        # a resolv.conf that is a symlink out of /etc (systemd-resolved's /run/...): its target, or no DNS
        resolv = Path("/etc/resolv.conf").resolve()
        if not inside(resolv, Path("/etc")) and resolv.is_file() and not inside(resolv, Path("/usr")):
            args += ["--ro-bind", str(resolv), str(resolv)]
    return args


def _visible(path: Path) -> bool:
    """Whether the system mounts show this path already."""
    return any(inside(path, Path(name)) for name in SYSTEM) or inside(path, Path("/etc"))


# --- the worker's secrets ---


def secrets(home: Path) -> list[Path]:
    """The worker's secret files and folders: HOME's (~/.ssh, ~/.aws...) and REPOSWARM_HOME."""
    return [*(home / name for name in HOME_SECRETS), objects.home()]


def _in_secret(path: Path, home: Path) -> Path | None:
    """The secret folder `path` (as named, or where its symlinks lead) is inside, if any."""
    for named in dict.fromkeys((path, Path(os.path.realpath(path)))):
        for secret in secrets(home):
            if inside(named, secret):
                return secret
    return None


def forbidden(folder: Path, home: Path) -> str | None:
    """Why `folder` (as named, and where its symlinks lead) may not be shown to a check; None: it may."""
    if (secret := _in_secret(folder, home)) is not None:
        return f"it is inside {secret}, which holds the worker's secrets"
    for path in dict.fromkeys((folder, Path(os.path.realpath(folder)))):
        if path == Path("/"):
            return "that is the root folder"
        if path == home:
            return "that is the whole of HOME"
        for secret in secrets(home):
            if secret != path and inside(secret, path) and os.path.lexists(secret):
                return f"it holds {secret}, the worker's secrets"
    return None


def _masks(folder: Path, home: Path) -> list[str]:
    """bwrap arguments hiding what a bound folder holds that a check must not see: the secret files at its top
    (~/.cargo/credentials.toml), the worker's secrets inside it, a repository's git directory at its top."""
    args: list[str] = []
    hidden = [*secret_files(folder), *(s for s in secrets(home) if s != folder and inside(s, folder)),
              folder / ".git"]
    for path in dict.fromkeys(hidden):
        if path == objects.home():
            args += _hide_state(path)
        elif path.is_dir() and not path.is_symlink():
            args += ["--size", str(64 * 1024), "--tmpfs", str(path), "--remount-ro", str(path)]
        elif os.path.lexists(path):
            args += ["--ro-bind", "/dev/null", str(path)]
    return args


def _hide_state(state: Path) -> list[str]:
    """REPOSWARM_HOME, where a bound folder would show it: an empty tmpfs in its place (left writable, and small:
    the check's own tree and caches, inside it, are bound there after)."""
    return ["--size", str(64 * 1024), "--tmpfs", str(state)] if state.is_dir() else []


# --- shims: rustup's proxies, pyenv's, asdf's ---


@dataclass(frozen=True)
class Rustup:
    home: Path  # RUSTUP_HOME
    toolchain: Path | None  # the default toolchain's folder, resolved on the worker (None: none could be chosen)


def _rustup_in(folder: Path) -> Path | None:
    """rustup, if `folder` holds it and its proxies (cargo, rustc: links to rustup, or the same file)."""
    rustup = folder / "rustup"
    if not rustup.is_file():
        return None
    for name in ("cargo", "rustc"):
        proxy = folder / name
        try:
            if proxy.exists() and (os.path.samefile(proxy, rustup)
                                   or Path(os.path.realpath(proxy)).name in ("rustup", "rustup-init")):
                return rustup
        except OSError:
            continue
    return None


@functools.lru_cache(maxsize=8)
def _rustup(rustup: str, rustup_home: str, home: str) -> Rustup:
    """The default toolchain as `rustup which rustc` names it, from a neutral folder (no rust-toolchain.toml, no
    override) and with RUSTUP_AUTO_INSTALL=0: nothing is downloaded. Once per worker (a `rustup default` made
    later is seen by a new worker)."""
    env = {"PATH": os.environ.get("PATH", ""), "HOME": home, "RUSTUP_HOME": rustup_home, "RUSTUP_AUTO_INSTALL": "0",
           **{k: os.environ[k] for k in ("CARGO_HOME", "RUSTUP_TOOLCHAIN") if k in os.environ}}
    try:
        done = subprocess.run([rustup, "which", "rustc"], cwd="/", env=env, capture_output=True, text=True,
                              timeout=60, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired) as err:
        log.warning("rustup which rustc failed (%s): checks use rustup's proxies", err)
        return Rustup(Path(rustup_home), None)
    rustc = Path(done.stdout.strip()) if done.returncode == 0 and done.stdout.strip() else None
    if rustc is None or not rustc.is_absolute() or not rustc.is_file() or rustc.parent.name != "bin":
        log.warning("rustup could not name its default toolchain (%s): checks use rustup's proxies",
                    (done.stderr.strip().splitlines() or [f"exit {done.returncode}"])[-1])
        return Rustup(Path(rustup_home), None)
    return Rustup(Path(rustup_home), rustc.parent.parent)


def rustup_of(folder: Path, home: Path) -> Rustup | None:
    rustup = _rustup_in(folder)
    if rustup is None:
        return None
    rustup_home = Path(os.environ.get("RUSTUP_HOME") or home / ".rustup")
    if not (rustup_home / "toolchains").is_dir():  # none installed (and rustup would make its settings there)
        return Rustup(rustup_home, None)
    return _rustup(str(rustup), str(rustup_home), str(home))


def _rustup_paths(found: Rustup) -> list[Path]:
    """What rustup's proxies need in the sandbox: its settings (the default toolchain) and its toolchains, the
    linked ones' folders too (`rustup toolchain link`); all read-only."""
    paths = [found.home / "settings.toml", found.home / "toolchains"]
    try:
        paths += [Path(os.path.realpath(t)) for t in (found.home / "toolchains").iterdir() if t.is_symlink()]
    except OSError:
        pass
    if found.toolchain is not None:
        paths.append(found.toolchain)
    return paths


def _shim_roots(folder: Path, home: Path) -> list[Path]:
    """A `shims` folder of a version manager (pyenv, asdf, rbenv, nodenv): its root, the root of the manager its
    shims exec (`exec "/root/.pyenv/libexec/pyenv" exec ...`), and the manager's global version file in HOME."""
    if folder.name != "shims" or not folder.is_dir():
        return []
    roots = [folder.parent]
    try:
        shims = sorted(p for p in folder.iterdir() if p.is_file())[:4]
    except OSError:
        shims = []
    for shim in shims:
        try:
            with shim.open("rb") as f:
                text = f.read(8192).decode("utf-8", errors="replace")
        except OSError:
            continue
        for target in re.findall(r'exec\s+"?(/[^"\s]+)"?', text):
            target_path = Path(os.path.normpath(target))
            if target_path.parent.name in ("bin", "libexec"):
                roots.append(target_path.parent.parent)
    roots += [home / name for name in SHIM_HOME_FILES]
    return roots


# --- a tool named by absolute path ---


def environment_of(exe: Path, home: Path) -> Path | None:
    """The folder a tool needs to run (None: the system mounts show it): a virtual environment's root (its
    pyvenv.cfg), else its bin folder's parent, else its own folder; never /, HOME or /tmp (then the bin folder, or
    the file itself)."""
    if _visible(exe):
        return None
    shared = (Path("/"), home, Path("/tmp"))
    for folder in list(exe.parents)[:3]:
        if folder in shared:
            break
        if (folder / "pyvenv.cfg").is_file():
            return folder
    folder = exe.parent
    if folder.name in ("bin", "sbin") and folder.parent not in shared:
        return folder.parent
    return folder if folder not in shared else exe


def _shebang(path: Path) -> Path | None:
    try:
        with path.open("rb") as f:
            line = f.readline(512)
    except OSError:
        return None
    if not line.startswith(b"#!"):
        return None
    words = line[2:].decode("utf-8", errors="replace").split()
    return Path(os.path.normpath(words[0])) if words and words[0].startswith("/") else None


def _needed_by(named: Path) -> list[Path]:
    """The tool, where its symlinks lead, its script's interpreter (#!/abs/python) and a venv's base Python."""
    tools = [named, Path(os.path.realpath(named))]
    interpreter = _shebang(tools[-1])
    if interpreter is not None:
        tools += [interpreter, Path(os.path.realpath(interpreter))]
    for tool in list(tools):
        for folder in list(tool.parents)[:3]:
            cfg = folder / "pyvenv.cfg"
            if cfg.is_file():
                for line in cfg.read_text(errors="replace").splitlines():
                    key, _, value = line.partition("=")
                    if key.strip() == "home" and value.strip().startswith("/"):
                        tools.append(Path(os.path.normpath(value.strip())) / "python")
                break
    return list(dict.fromkeys(tools))


def named_programs(argv: list[str] | tuple[str, ...]) -> list[Path]:
    """The programs a command runs that it names by absolute path: its first word, and each one a prefix runs
    (`env X=1 /venv/bin/python`, `timeout 60 /venv/bin/pytest`, `uv run /venv/bin/python`: runners/prefixes.py)."""
    return [Path(os.path.normpath(p)) for p in programs(argv) if p.startswith("/")]


def command_paths(argv: list[str] | tuple[str, ...], home: Path, root: Path | None) -> list[Path]:
    """What the programs the command names by absolute path (its argv[0], and those its prefixes run) need to run,
    bound read-only wherever they live (a venv in /tmp or beside the repository); ToolchainRefused when that would
    show the worker's secrets. A tool in the checked tree needs nothing (the tree is there; its symlinks, a lane's to
    make, are never followed here)."""
    found: list[Path] = []
    for named in named_programs(argv):
        if root is not None and inside(named, root):
            continue
        for tool in _needed_by(named):
            where = environment_of(tool, home)
            if where is None or where in found or not os.path.lexists(where):
                continue
            why = forbidden(where, home)
            if why is not None:
                raise ToolchainRefused(f"refused: the command {named} needs {where} in the sandbox (read-only), and "
                                       f"{why}; install the tool elsewhere, or name one the sandbox may show")
            found.append(where)
    return found


# --- all of it ---


def _path_entries() -> list[Path]:
    return [Path(os.path.normpath(p)) for p in os.environ.get("PATH", "").split(os.pathsep) if p.startswith("/")]


def _top(path: Path, home: Path) -> Path:
    """The folder standing for a PATH entry: its top folder under HOME (~/.pyenv, ~/.cargo); elsewhere the bin
    folder's environment (a virtual environment in /tmp or beside the repository: its lib and pyvenv.cfg)."""
    if home in path.parents:
        return home / path.relative_to(home).parts[0]
    return path.parent if path.name == "bin" and path.parent != Path("/") else path


def toolchains(home: Path, argv: list[str] | tuple[str, ...] = (), root: Path | None = None) -> list[Path]:
    """The host folders (and a few files) the commands need to run at all that the sandbox would not show: the
    toolchain of each PATH entry and of the Python the worker runs (tests and profiles name sys.executable),
    resolved shims (rustup's toolchains, a version manager's root), and what the programs the command names by
    absolute path need (argv[0], and those after its prefixes: `env X=1 /venv/bin/python`). A folder inside the
    worker's secrets is left out (one a program named by absolute path needs: refused)."""
    wanted = [_top(p, home) for p in _path_entries()]
    wanted += [_top(Path(os.path.normpath(p)), home) for p in
               (Path(sys.executable).resolve(), Path(sys.base_prefix).resolve(), Path(sys.prefix).resolve())]
    for entry in _path_entries():
        wanted += _shim_roots(entry, home)
        found = rustup_of(entry, home)
        if found is not None:
            wanted += _rustup_paths(found)
    for named in named_programs(argv):
        found = rustup_of(named.parent, home)
        if found is not None:
            wanted += _rustup_paths(found)
    paths: list[Path] = []
    for path in wanted:
        if _visible(path) or path in (Path("/"), home) or path in paths or not os.path.lexists(path):
            continue
        if _in_secret(path, home) is not None:  # (one that holds a secret is bound with it hidden: _masks)
            log.debug("%s is not bound into checks: it is in the worker's secrets", path)
            continue
        paths.append(path)
    paths += [p for p in command_paths(argv, home, root) if p not in paths]
    # a path inside another bound one needs no bind of its own
    return [p for p in paths if not any(o in p.parents for o in paths)]


def sandbox_path(home: Path, root: Path | None) -> str | None:
    """The sandbox's PATH: the worker's, with the real toolchain of rustup's proxies first (the default
    toolchain), unless the tree names its own toolchain (rust-toolchain.toml): then the proxies choose."""
    value = os.environ.get("PATH")
    if value is None:
        return None
    if root is not None and any((root / name).is_file() for name in RUST_TOOLCHAIN_FILES):
        return value
    first: list[str] = []
    for entry in _path_entries():
        found = rustup_of(entry, home)
        if found is not None and found.toolchain is not None and str(found.toolchain / "bin") not in first:
            first.append(str(found.toolchain / "bin"))
    return os.pathsep.join([*first, value]) if first else value


def sandbox_vars(home: Path) -> dict[str, str]:
    """Variables naming where the toolchain managers keep their toolchains, passed by name where the worker sets
    them to other than their default (RUSTUP_HOME=/usr/local/rustup: the proxies would look in ~/.rustup)."""
    env: dict[str, str] = {}
    for name, default in TOOLCHAIN_ENV.items():
        value = os.environ.get(name)
        if value and (default is None or os.path.normpath(value) != str(home / default)):
            env[name] = value
    return env


def secret_files(folder: Path) -> list[Path]:
    try:
        return [p for p in folder.iterdir() if p.is_file() and SECRET_FILE.search(p.name)]
    except OSError:
        return []


def toolchain_mounts(home: Path, extra: list[str], argv: list[str] | tuple[str, ...] = (),
                     root: Path | None = None) -> list[str]:
    """Read-only binds of the toolchains (with what they hold of the worker's secrets hidden), of what the
    programs the command names by absolute path need, and of the profile's read_only_paths (missing ones
    skipped); the .pth files of an editable install of the tree's own packages hidden (python.editable_masks);
    REPOSWARM_HOME hidden where a system folder would show it (REPOSWARM_HOME=/opt/reposwarm)."""
    args: list[str] = []
    bound = toolchains(home, argv, root)
    for path in bound:
        args += ["--ro-bind", str(path), str(path)]
        if path.is_dir():
            args += _masks(path, home)
    for named in extra:
        args += ["--ro-bind-try", named, named]
    if root is not None:  # an editable install of the tree's own packages, from the user's checkout: hidden
        shown = [*bound, *(Path(p) for p in extra if os.path.isabs(p))]
        args += [a for pth in python.editable_masks(shown, root) for a in ("--ro-bind", "/dev/null", str(pth))]
    if _visible(objects.home()):
        args += _hide_state(objects.home())
    return args
