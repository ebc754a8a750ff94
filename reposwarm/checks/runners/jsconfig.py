"""A JavaScript runner's configuration file (jest.config.js, vitest.config.ts...) read as data: the literal values of
the properties asked for, and whether the file may hold more than its literals say. Nothing of it runs.

`read(text, keys)` tokenizes the file (strings, template literals, comments, regex literals, punctuation) and walks
its object and array literals, keeping each property's path (the keys of the containers that hold it; "" for an
object no key names: `module.exports = {`, `defineConfig({`). A value is a string, a number, true/false/null, or an
array of them; anything else (a variable, a call, a condition, a template with `${}`) is UNKNOWN. A spread in an
array of `configDefaults.exclude` (vitest's own defaults, also `defaultExclude`, `defaultInclude`) is kept as a
`Spread`; any other spread, a relative import, `module.exports = require(...)`, or merging helpers make the file
`opaque`: its values may come from elsewhere.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

UNKNOWN = object()  # a value that is no literal
MAX_TEXT = 256 * 1024  # a configuration file larger than this is not read
MAX_REGEX_LITERAL = 256  # how far a regex literal is looked for (a hostile file makes every `/` start one)


@dataclass(frozen=True)
class Spread:
    name: str  # configDefaults.exclude, defaultInclude...


@dataclass
class Found:
    values: list[tuple[tuple[str, ...], str, Any]] = field(default_factory=list)  # (path, key, value)
    opaque: str = ""  # why its values may come from elsewhere ("" when they cannot)

    def at(self, path: tuple[str, ...], key: str) -> list[Any]:
        return [v for p, k, v in self.values if p == path and k == key]


_TOKEN = re.compile(r"""
    (?P<space>\s+)
  | (?P<line>//[^\n]*)
  | (?P<block>/\*.*?(?:\*/|\Z))
  | (?P<str>"(?:[^"\\\n]|\\.)*"|'(?:[^'\\\n]|\\.)*')
  | (?P<tpl>`(?:[^`\\]|\\.)*`)
  | (?P<spread>\.\.\.)
  | (?P<num>\d[\w.]*)
  | (?P<ident>[A-Za-z_$][\w$]*)
  | (?P<punct>.)
""", re.S | re.X)
_REGEX = re.compile(r"/(?:[^/\\\[\n]|\\.|\[(?:[^\]\\\n]|\\.)*\])+/[a-z]*")
_EXPR_BEFORE = set("(,=:[!&|?{};+-*%<>~^") | {"return", "typeof", "case", "in", "of", "delete", "void", ""}
_MERGING = re.compile(r"\b(mergeConfig|mergeProject|Object\.assign|deepmerge|merge|defineWorkspace|"
                      r"defineProject)\s*\(")
_RELATIVE_IMPORT = re.compile(r"""(\brequire\s*\(\s*|\bimport\s*\(\s*|\bfrom\s+|\bimport\s+)['"]\.{1,2}/""")
_REEXPORT = re.compile(r"module\.exports\s*=\s*require\s*\(|export\s+\*\s+from|export\s*\{[^}]*\bdefault\b")
_SPREADS = ("configDefaults.exclude", "configDefaults.include", "defaultExclude", "defaultInclude",
            "configDefaults.typecheck.include", "configDefaults.typecheck.exclude")


def _tokens(text: str) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    i = 0
    while i < len(text):
        if text[i] == "/" and text[i + 1:i + 2] not in ("/", "*") and (out[-1][1] if out else "") in _EXPR_BEFORE:
            found = _REGEX.match(text, i, min(len(text), i + MAX_REGEX_LITERAL))
            if found:
                out.append(("regex", found.group(0)))
                i = found.end()
                continue
        m = _TOKEN.match(text, i)
        if m is None:  # (unreachable: `.` takes any character but a newline, which `space` takes)
            break
        kind = m.lastgroup or "punct"
        if kind not in ("space", "line", "block"):
            out.append((kind, m.group(0)))
        i = m.end()
    return out


def _string(token: tuple[str, str]) -> str | None:
    kind, text = token
    if kind == "str":
        body = text[1:-1]
    elif kind == "tpl" and "${" not in text:
        body = text[1:-1]
    else:
        return None
    return re.sub(r"\\(.)", lambda m: {"n": "\n", "t": "\t"}.get(m.group(1), m.group(1)), body)


def _scalar(token: tuple[str, str]) -> Any:
    text = _string(token)
    if text is not None:
        return text
    kind, word = token
    if kind == "ident" and word in ("true", "false", "null"):
        return {"true": True, "false": False, "null": None}[word]
    if kind == "num":
        try:
            return float(word) if "." in word else int(word, 0)
        except ValueError:
            return UNKNOWN
    return UNKNOWN


def _dotted(tokens: list[tuple[str, str]], i: int) -> tuple[str, int]:
    """`a.b.c` from tokens[i]: the name and where it ends."""
    parts = []
    while i < len(tokens) and tokens[i][0] == "ident":
        parts.append(tokens[i][1])
        if i + 2 < len(tokens) and tokens[i + 1][1] == "." and tokens[i + 2][0] == "ident":
            i += 2
            continue
        i += 1
        break
    return ".".join(parts), i


def _value(tokens: list[tuple[str, str]], i: int) -> tuple[Any, int]:
    """The literal at tokens[i] and the index after it; UNKNOWN when it is none (then the index is i)."""
    if i >= len(tokens):
        return UNKNOWN, i
    if tokens[i][1] == "[" and tokens[i][0] == "punct":
        items: list[Any] = []
        j = i + 1
        while j < len(tokens) and tokens[j][1] != "]":
            if tokens[j][0] == "spread":
                name, j = _dotted(tokens, j + 1)
                if name not in _SPREADS:
                    return UNKNOWN, i
                items.append(Spread(name))
            else:
                item = _scalar(tokens[j])  # (no arrays in arrays: a file nesting them deeply reads as no literal)
                if item is UNKNOWN:
                    return UNKNOWN, i
                items.append(item)
                j += 1
            if j < len(tokens) and tokens[j][1] == ",":
                j += 1
            elif j >= len(tokens) or tokens[j][1] != "]":
                return UNKNOWN, i
        return items, j + 1
    value = _scalar(tokens[i])
    return (value, i + 1) if value is not UNKNOWN else (UNKNOWN, i)


def read(text: str, keys: set[str]) -> Found:
    """The properties named `keys` anywhere in the file, each with its path and literal value (or UNKNOWN)."""
    found = Found()
    if len(text) > MAX_TEXT:
        found.opaque = "it is larger than reposwarm reads"
        return found
    if m := (_REEXPORT.search(text) or _RELATIVE_IMPORT.search(text) or _MERGING.search(text)):
        found.opaque = f"it takes settings from elsewhere ({m.group(0).strip()[:60]})"
    tokens = _tokens(text)
    stack: list[tuple[str, str]] = []  # (container: "{" or "[", the key that holds it)
    for i, (kind, tok) in enumerate(tokens):
        prev = tokens[i - 1][1] if i else ""
        if kind == "spread":
            name, _ = _dotted(tokens, i + 1)
            if not (stack and stack[-1][0] == "[" and name in _SPREADS) and not found.opaque:
                found.opaque = f"it spreads {name or 'a value'} into its settings"
            continue
        if kind == "punct" and tok in "{[":
            holder = tokens[i - 2][1] if prev == ":" and i >= 2 and _is_key(tokens, i - 2, stack) else ""
            stack.append((tok, _key_text(tokens[i - 2]) if holder else ""))
            continue
        if kind == "punct" and tok in "}]":
            if stack:
                stack.pop()
            continue
        if not (stack and stack[-1][0] == "{" and _is_key(tokens, i, stack)):
            continue
        key = _key_text(tokens[i])
        if key not in keys:
            continue
        path = tuple(holder for _, holder in stack)
        nxt = tokens[i + 1][1] if i + 1 < len(tokens) else ""
        if nxt != ":":  # a shorthand property (`{ include }`): a variable's value
            found.values.append((path, key, UNKNOWN))
            continue
        value, after = _value(tokens, i + 2)
        if value is not UNKNOWN and after < len(tokens) and tokens[after][1] not in (",", "}"):
            value = UNKNOWN  # (`[...].concat(x)`, `a || b`: more than the literal)
        if value is UNKNOWN and i + 2 < len(tokens) and tokens[i + 2][1] == "{":
            value = {}  # an object: its own properties are read with their path
        found.values.append((path, key, value))
    return found


def _key_text(token: tuple[str, str]) -> str:
    return _string(token) if token[0] in ("str", "tpl") else token[1]  # type: ignore[return-value]


def _is_key(tokens: list[tuple[str, str]], i: int, stack: list[tuple[str, str]]) -> bool:
    """Whether tokens[i] is a property's key in an object literal: after `{` or `,`, followed by `:` (or a
    shorthand's `,` / `}`)."""
    kind, _ = tokens[i]
    if kind not in ("ident", "str") or i == 0:
        return False
    if tokens[i - 1][1] not in ("{", ","):
        return False
    nxt = tokens[i + 1][1] if i + 1 < len(tokens) else ""
    return nxt == ":" or (kind == "ident" and nxt in (",", "}"))
