"""Globs as JavaScript test runners match them (picomatch and fast-glob: jest's testMatch, vitest's include and
exclude), and JavaScript regular expressions as Python reads them (jest's testRegex and testPathIgnorePatterns).

`glob` turns a glob into a Python regex: `**` as a whole segment spans folders (none too), `*` and `?` stay in
one, `[...]` classes, `{a,b}` braces (nested), and the extglobs `?(..)`, `*(..)`, `+(..)`, `@(..)`; dot files
match (both runners ask for `dot: true`). What it does not translate (`!(..)`, numeric ranges `{1..3}`) raises
`Unreadable`, and the caller then does not claim to know what the runner collects.
"""

from __future__ import annotations

import functools
import re


class Unreadable(ValueError):
    """A pattern reposwarm cannot translate faithfully."""


_EXT = {"?": "?", "*": "*", "+": "+", "@": ""}
MAX_REGEX = 2000
MAX_WILDCARDS = 4  # `*` (and `**/`) in one glob: the test file patterns people write have one or two
_ANY_NAME, _ANY_FOLDERS = "[^/]*", "(?:[^/]*/)*"
# a group holding a quantifier, itself quantified (`(a+)+`, `(.*x)*`): what backtracks exponentially on a miss
_NESTED = re.compile(r"\((?:[^()\\]|\\.)*(?<!\\)[*+}](?:[^()\\]|\\.)*\)[*+{]")


def _class(glob: str, i: int) -> tuple[str, int]:
    """A `[...]` class from glob[i] ('['), as a regex class, and where it ends; a lone '[' is literal."""
    j = i + 1
    if j < len(glob) and glob[j] in "!^":
        j += 1
    if j < len(glob) and glob[j] == "]":
        j += 1
    while j < len(glob) and glob[j] != "]":
        j += 1
    if j >= len(glob):
        return re.escape("["), i + 1
    body = glob[i + 1:j]
    negated = body[:1] in ("!", "^")
    body = body[1:] if negated else body
    body = body.replace("\\", "\\\\").replace("[", "\\[")
    if "[:" in body:
        raise Unreadable(f"a POSIX class in {glob!r}")
    return (f"[^/{body}]" if negated else f"[{body}]"), j + 1


def _closing(glob: str, i: int, open_: str, close: str) -> int:
    """Where the bracket opened at glob[i] closes (nesting counted, escapes skipped); -1 when it does not."""
    depth = 0
    j = i
    while j < len(glob):
        ch = glob[j]
        if ch == "\\":
            j += 2
            continue
        if ch == open_:
            depth += 1
        elif ch == close:
            depth -= 1
            if depth == 0:
                return j
        j += 1
    return -1


def _split(body: str, sep: str) -> list[str]:
    """`body` split at `sep` outside brackets and escapes."""
    out, depth, start, j = [], 0, 0, 0
    while j < len(body):
        ch = body[j]
        if ch == "\\":
            j += 2
            continue
        if ch in "({[":
            depth += 1
        elif ch in ")}]":
            depth -= 1
        elif ch == sep and depth == 0:
            out.append(body[start:j])
            start = j + 1
        j += 1
    out.append(body[start:])
    return out


def _translate(glob: str) -> str:
    out: list[str] = []
    i = 0
    n = len(glob)
    while i < n:
        ch = glob[i]
        if ch == "\\" and i + 1 < n:
            out.append(re.escape(glob[i + 1]))
            i += 2
        elif ch in _EXT and i + 1 < n and glob[i + 1] == "(":
            end = _closing(glob, i + 1, "(", ")")
            if end < 0:
                raise Unreadable(f"an unclosed extglob in {glob!r}")
            inner = "|".join(_translate(p) for p in _split(glob[i + 2:end], "|"))
            if ch in "*+" and re.search(r"(?<!\\)[*+?{]", inner):
                raise Unreadable(f"a repeated extglob of a repeated part in {glob!r} (it may take exponential time)")
            out.append(f"(?:{inner}){_EXT[ch]}")
            i = end + 1
        elif ch == "!" and i + 1 < n and glob[i + 1] == "(":
            raise Unreadable(f"a negated extglob in {glob!r}")
        elif ch == "*":
            j = i
            while j < n and glob[j] == "*":
                j += 1
            whole = (i == 0 or glob[i - 1] == "/") and (j == n or glob[j] == "/")
            if j - i >= 2 and whole:
                if j == n:  # `a/**`: the folder's files, at any depth
                    out.append(".*")
                    i = j
                else:  # `**/`: any folders, or none
                    out.append(_ANY_FOLDERS)
                    i = j + 1
            else:
                out.append(_ANY_NAME)
                i = j
        elif ch == "?":
            out.append("[^/]")
            i += 1
        elif ch == "[":
            part, i = _class(glob, i)
            out.append(part)
        elif ch == "{":
            end = _closing(glob, i, "{", "}")
            if end < 0:
                out.append(re.escape(ch))
                i += 1
                continue
            options = _split(glob[i + 1:end], ",")
            if len(options) == 1:
                if re.fullmatch(r"-?\w+\.\.-?\w+(\.\.\d+)?", options[0]):
                    raise Unreadable(f"a range in {glob!r}")
                out.append(re.escape("{") + _translate(options[0]) + re.escape("}"))
            else:
                out.append("(?:" + "|".join(_translate(o) for o in options) + ")")
            i = end + 1
        else:
            out.append(re.escape(ch))
            i += 1
    return "".join(out)


@functools.lru_cache(maxsize=1024)
def glob(pattern: str) -> re.Pattern[str]:
    """The regex of a glob, matched against a whole path ('/'-separated); raises Unreadable."""
    if len(pattern) > MAX_REGEX:
        raise Unreadable(f"the glob {pattern[:80]!r}... is too long")
    try:
        text = _translate(pattern)
        deep = text.count(_ANY_FOLDERS)
        if deep > MAX_WILDCARDS or text.count(_ANY_NAME) - deep > MAX_WILDCARDS:
            # (`*a*a*a*...b` against a long name backtracks through every way to place its stars)
            raise Unreadable(f"the glob {pattern[:80]!r} has more wildcards than a test file pattern needs")
        return re.compile(f"(?s:{text})\\Z")
    except (re.error, RecursionError) as err:  # (braces nested a thousand deep)
        raise Unreadable(f"{pattern[:80]!r}: {err or 'nested too deep'}") from None


@functools.lru_cache(maxsize=1024)
def js_regex(source: str) -> re.Pattern[str]:
    """A JavaScript regular expression's source as Python reads it (a named group `(?<name>` as `(?P<name>`);
    raises Unreadable where Python would read it otherwise (`\\p{..}`, `\\u{..}`, `\\cX`) or not at all."""
    text = re.sub(r"\(\?<(?=[A-Za-z_])", "(?P<", source)  # (lookbehinds, `(?<=` and `(?<!`, read alike)
    if re.search(r"\\[pPu]\{|\\c[A-Za-z]", text):
        raise Unreadable(f"the regular expression {source!r} uses JavaScript syntax Python reads otherwise")
    if len(text) > MAX_REGEX or _NESTED.search(text):
        raise Unreadable(f"the regular expression {source[:80]!r} repeats a repeated part (it may take "
                         "exponential time) or is too long")
    try:
        return re.compile(text)
    except re.error as err:
        raise Unreadable(f"the regular expression {source!r}: {err}") from None
