"""Values that reach a git command line, checked as data: a branch name, a remote, a repository URL.

A value from a lanes file, a plan, a review decision or the environment that git reads as an option
(`--receive-pack=sh -c ...` as a remote, `-D` as a branch) runs code or does what nobody asked. Each check
here returns why a value is refused, in words that end a one-line error, or None; the callers say which key
it came from. Pure functions: the contracts' validators use them, and workflows may import the contracts.
"""

from __future__ import annotations

import re
from urllib.parse import urlsplit

_SCHEMES = ("https", "http", "ssh", "git", "file")
_URL = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*)://")
_SCP = re.compile(r"^(?:([A-Za-z0-9._-]+)@)?([A-Za-z0-9.-]+):(?!//)(\S+)$")  # git@github.com:org/repo.git
_REMOTE_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9._/-]*$")
_REF_BAD = re.compile(r"[\x00-\x20\x7f~^:?*\[\\]|\.\.|@\{|//")


def ref_problem(name: str) -> str | None:
    """Why `name` is no valid branch name (git check-ref-format --branch's rules), or None."""
    if not name:
        return "is empty"
    if name.startswith("-"):
        return "starts with '-' (git would read it as an option)"
    if _REF_BAD.search(name) or name == "@" or name == "HEAD":
        return "is not a valid branch name (no spaces, '..', '~^:?*[\\', '@{' or control characters)"
    if name.startswith("/") or name.endswith(("/", ".")) or any(
            part.startswith(".") or part.endswith(".lock") for part in name.split("/")):
        return "is not a valid branch name (no part may start with '.' or end with '.lock'; no '/' or '.' at an end)"
    return None


def url_credential(url: str) -> str | None:
    """What credential a repository URL carries (a password, a token or user name before '@', a query string),
    or None. A login name of ssh (ssh://git@host/x, git@host:x) is no credential: ssh's key is."""
    match = _URL.match(url)
    if match is None:
        return None  # a path, or scp-like user@host:path (whose user part holds no ':')
    try:
        parts = urlsplit(url)
        password, username = parts.password, parts.username
    except ValueError:
        return "a malformed address"
    if password is not None:
        return "a password"
    if username is not None and match.group(1).lower() not in ("ssh", "git+ssh", "ssh+git"):
        return "a user name or token before '@'"
    if "?" in url:
        return "a query string"
    return None


def url_problem(url: str) -> str | None:
    """Why `url` is no repository URL git may be given (its scheme, an option's shape, a credential), or None."""
    if url.startswith("-"):
        return "starts with '-' (git would read it as an option)"
    if any(c in url for c in "\x00\r\n"):
        return "holds a control character"
    match = _URL.match(url)
    if match is not None and match.group(1).lower() not in _SCHEMES:
        return f"has the scheme {match.group(1)!r}; allowed: {', '.join(_SCHEMES)}, or user@host:path"
    if match is None and "::" in url:
        return "names a transport helper (<transport>::<address>), which runs a command"
    if (what := url_credential(url)) is not None:
        return f"carries a credential ({what})"
    return None


def remote_problem(value: str) -> str | None:
    """Why `value` is neither a remote's name nor an allowed URL, or None."""
    if value.startswith("-"):
        return "starts with '-' (git would read it as an option)"
    if _URL.match(value) or _SCP.match(value) or "::" in value:
        return url_problem(value)
    if _REMOTE_NAME.fullmatch(value) and ".." not in value:
        return None
    return ("is neither a configured remote's name (letters, digits, '.', '_', '-', '/') nor a URL "
            f"({', '.join(_SCHEMES)}, or user@host:path)")
