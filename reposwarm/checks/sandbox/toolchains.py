"""What of the host a check sees besides its tree: the system folders a toolchain needs, /etc without its
secrets, and the toolchains it runs (on PATH, the worker's Python) wherever they live.

Nothing else of the host is there: not /root, /srv, /home, /work, /var, /run, nor the repository's git
directory. A profile may name more read-only paths (`read_only_paths`).
"""

from __future__ import annotations

import functools
import os
import re
import stat
import sys
from pathlib import Path

from reposwarm.checks.sandbox.environment import inside

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


def toolchains(home: Path) -> list[Path]:
    """Folders the commands need to run at all that the sandbox would not show: the top folder under HOME
    (~/.pyenv, ~/.cargo) of each PATH entry and of the Python the worker runs (tests and profiles name
    sys.executable); elsewhere (a virtual environment in /tmp or beside the repository) the environment
    itself, a bin folder standing for its environment (its lib and pyvenv.cfg are needed too)."""
    wanted = [Path(p) for p in os.environ.get("PATH", "").split(os.pathsep) if p.startswith("/")]
    wanted += [Path(sys.executable).resolve(), Path(sys.base_prefix).resolve(), Path(sys.prefix).resolve()]
    found: list[Path] = []
    for path in wanted:
        path = Path(os.path.normpath(path))
        if _visible(path) or path == Path("/"):
            continue
        if home in path.parents:
            top = home / path.relative_to(home).parts[0]
        else:
            top = path.parent if path.name == "bin" and path.parent != Path("/") else path
        if top.is_dir() and top not in found:
            found.append(top)
    # a folder inside another bound one needs no bind of its own
    return [f for f in found if not any(o in f.parents for o in found)]


def secret_files(folder: Path) -> list[Path]:
    try:
        return [p for p in folder.iterdir() if p.is_file() and SECRET_FILE.search(p.name)]
    except OSError:
        return []


def toolchain_mounts(home: Path, extra: list[str]) -> list[str]:
    """Read-only binds of the toolchains and of the profile's read_only_paths (missing ones skipped)."""
    args: list[str] = []
    for folder in toolchains(home):
        args += ["--ro-bind", str(folder), str(folder)]
        for secret in secret_files(folder):
            args += ["--ro-bind", "/dev/null", str(secret)]
    for path in extra:
        args += ["--ro-bind-try", path, path]
    return args
