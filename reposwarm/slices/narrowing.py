"""Whether one slice lies within another: a plan, a reviewer's plan and a server's options may only narrow.

A slice is a list of gitignore-style patterns as PathPolicy (reposwarm/slices/policy.py) reads them. Comparing
the fixed text before the first glob character is unsound (`services/a*/` is not within `services/a/`: it
reaches `services/admin/`), so the question is answered exactly instead: every pattern is compiled by
pathspec just as PathPolicy compiles it, each regular expression becomes an automaton over the classes of
characters the patterns tell apart, and the product of the automata is searched, breadth first, for a path
one side matches and the other may not write. Found, that path is the witness a refusal names. Whatever the
translation does not understand, or what would take too long to search, is refused: when in doubt, no.

Pure and deterministic (no I/O, no clock, no hashing of strings in any ordering decision), so workflow code
can call it: a review decision carrying a plan is checked here inside the run.
"""

from __future__ import annotations

import bisect
import importlib
import re
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any

from reposwarm.contracts.config import HelperRole
from reposwarm.contracts.plan import LanePlan, Plan
from reposwarm.slices.policy import slice_spec

# The parser `re` itself uses, so a character class means exactly what it means to `re` (private modules, read
# through Any: their names are re's own and stable since Python 3.11).
sre_c: Any = importlib.import_module("re._constants")
sre_p: Any = importlib.import_module("re._parser")

MAX_PATTERNS = 64  # per list: more is not a slice anyone writes, and bounds the search
MAX_PATTERN_CHARS = 256
MAX_STATES = 4_000  # product states searched before giving up (and refusing)
MAX_REPEAT = 32
UNICODE_END = 0x110000
# Characters every search tells apart, whatever the patterns say: the separator, the dot of "." and ".."
# components, the newline `$` lets through, and the two PathPolicy refuses in any path.
_ALWAYS = "/.\n\x00\\"
_NICE = "xyzabcdefghijklmnopqrstuvw0123456789_-"


class Undecided(Exception):
    """The question could not be answered; callers refuse."""


class _Nfa:
    """One pattern's regular expression under `re.search` semantics, as an automaton over symbol numbers."""

    def __init__(self, symbols: int) -> None:
        self.symbols = symbols
        self.eps: list[list[int]] = []
        self.edges: list[list[tuple[frozenset[int], int]]] = []
        self.accepting: set[int] = set()
        self.all = frozenset(range(symbols))
        self.accept = self.new()  # the expression matched: the rest of the path may be anything
        self.edge(self.accept, self.all, self.accept)
        self.accepting.add(self.accept)
        self.dollar = self.new()  # `$` matched: the path ends here, or after one final newline
        self.done = self.new()
        self.accepting.update((self.dollar, self.done))
        self._cache: dict[tuple[frozenset[int], int], frozenset[int]] = {}

    def new(self) -> int:
        self.eps.append([])
        self.edges.append([])
        return len(self.eps) - 1

    def edge(self, src: int, label: frozenset[int], dst: int) -> None:
        if label:
            self.edges[src].append((label, dst))

    def closure(self, states: Sequence[int]) -> frozenset[int]:
        seen, stack = set(states), list(states)
        while stack:
            for nxt in self.eps[stack.pop()]:
                if nxt not in seen:
                    seen.add(nxt)
                    stack.append(nxt)
        return frozenset(seen)

    def step(self, states: frozenset[int], symbol: int) -> frozenset[int]:
        key = (states, symbol)
        if (hit := self._cache.get(key)) is None:
            hit = self.closure(sorted({dst for s in states for label, dst in self.edges[s] if symbol in label}))
            self._cache[key] = hit
        return hit


class _Alphabet:
    """The characters cut into intervals no pattern tells apart; one symbol per interval."""

    def __init__(self, trees: list[Any], extra: str = "") -> None:
        cuts = {0, UNICODE_END}
        for ch in _ALWAYS + extra:
            cuts.update((ord(ch), ord(ch) + 1))
        for tree in trees:
            for lo, hi in _intervals(tree):
                cuts.update((lo, hi + 1))
        self.cuts = sorted(cuts)
        self.size = len(self.cuts) - 1
        self.reps = [self._rep(self.cuts[i], self.cuts[i + 1]) for i in range(self.size)]
        # Nice characters first, so the shortest witness found reads like a path ("services/ax/x").
        self.order = sorted(range(self.size), key=lambda i: (_NICE.find(self.reps[i]) % 1000, ord(self.reps[i])))

    @staticmethod
    def _rep(lo: int, hi: int) -> str:
        return next((c for c in _NICE if lo <= ord(c) < hi), chr(lo))

    def of(self, code: int) -> int:
        return bisect.bisect_right(self.cuts, code) - 1

    def members(self, test: Callable[[int], bool]) -> frozenset[int]:
        return frozenset(i for i in range(self.size) if test(self.cuts[i]))


def _intervals(tree: Any) -> list[tuple[int, int]]:
    """Every character interval a parsed expression names (inclusive ends)."""
    out: list[tuple[int, int]] = []
    for op, av in tree:
        if op in (sre_c.LITERAL, sre_c.NOT_LITERAL):
            out.append((av, av))
        elif op is sre_c.RANGE:
            out.append(av)
        elif op is sre_c.IN:
            out.extend(_intervals(av))
        elif op is sre_c.BRANCH:
            for branch in av[1]:
                out.extend(_intervals(branch))
        elif op is sre_c.SUBPATTERN:
            out.extend(_intervals(av[3]))
        elif op in (sre_c.MAX_REPEAT, sre_c.MIN_REPEAT):
            out.extend(_intervals(av[2]))
    return out


class _Builder:
    """Thompson's construction, built from the end backwards so each piece knows what follows it."""

    def __init__(self, nfa: _Nfa, alphabet: _Alphabet) -> None:
        self.nfa, self.ab = nfa, alphabet

    def seq(self, items: Sequence[tuple[Any, Any]], cont: int) -> int:
        for op, av in reversed(list(items)):
            cont = self.node(op, av, cont)
        return cont

    def _on(self, label: frozenset[int], cont: int) -> int:
        state = self.nfa.new()
        self.nfa.edge(state, label, cont)
        return state

    def node(self, op: Any, av: Any, cont: int) -> int:
        nfa, ab = self.nfa, self.ab
        if op is sre_c.LITERAL:
            return self._on(frozenset({ab.of(av)}), cont)
        if op is sre_c.NOT_LITERAL:
            return self._on(nfa.all - {ab.of(av)}, cont)
        if op is sre_c.ANY:  # no DOTALL (checked): every character but the newline
            return self._on(nfa.all - {ab.of(ord("\n"))}, cont)
        if op is sre_c.IN:
            return self._on(self._charset(av), cont)
        if op is sre_c.BRANCH:
            start = nfa.new()
            nfa.eps[start].extend(self.seq(branch, cont) for branch in av[1])
            return start
        if op is sre_c.SUBPATTERN:
            if av[1] or av[2]:
                raise Undecided("an inline flag in a pattern's expression")
            return self.seq(av[3], cont)
        if op in (sre_c.MAX_REPEAT, sre_c.MIN_REPEAT):  # greed changes which match, never whether one exists
            low, high, sub = av
            if low > MAX_REPEAT or (high is not sre_c.MAXREPEAT and high > MAX_REPEAT):
                raise Undecided("a repetition too long to check")
            if high is sre_c.MAXREPEAT:
                loop = nfa.new()
                nfa.eps[loop].extend((cont, self.seq(sub, loop)))
                cont = loop
            else:
                for _ in range(high - low):
                    optional = nfa.new()
                    nfa.eps[optional].extend((cont, self.seq(sub, cont)))
                    cont = optional
            for _ in range(low):
                cont = self.seq(sub, cont)
            return cont
        if op is sre_c.AT and av is sre_c.AT_END and cont == nfa.accept:
            return nfa.dollar
        raise Undecided(f"a construct the check does not read ({op})")

    def _charset(self, items: Sequence[tuple[Any, Any]]) -> frozenset[int]:
        negate, spans = False, []
        for op, av in items:
            if op is sre_c.NEGATE:
                negate = True
            elif op is sre_c.LITERAL:
                spans.append((av, av))
            elif op is sre_c.RANGE:
                spans.append(av)
            else:
                raise Undecided("a character class the check does not read")
        return self.ab.members(lambda code: any(lo <= code <= hi for lo, hi in spans) != negate)


def _compiled(patterns: list[str]) -> list[tuple[bool, str, int]]:
    """(include, expression, flags) per pattern that can match, as PathPolicy compiles them."""
    if len(patterns) > MAX_PATTERNS:
        raise Undecided(f"more than {MAX_PATTERNS} patterns")
    if long := [p for p in patterns if len(p) > MAX_PATTERN_CHARS]:
        raise Undecided(f"a pattern over {MAX_PATTERN_CHARS} characters ({long[0][:40]!r}...)")
    try:
        spec = slice_spec(list(patterns))
    except Exception as err:  # pathspec's own errors, and re.error for a class such as [z-a]
        raise Undecided(f"not a pattern PathPolicy can read ({err})") from None
    out = []
    for pattern in spec.patterns:
        regex = getattr(pattern, "regex", None)
        if pattern.include is None or regex is None:
            continue  # pathspec skips these: they match nothing
        if regex.flags != re.UNICODE:
            raise Undecided("an expression with flags the check does not read")
        out.append((bool(pattern.include), regex.pattern, regex.flags))
    return out


class _List:
    """A list of patterns under gitignore's rule: the last pattern that matches decides."""

    def __init__(self, compiled: list[tuple[bool, Any]], alphabet: _Alphabet) -> None:
        self.parts: list[tuple[bool, _Nfa, int]] = []
        for include, tree in compiled:
            nfa = _Nfa(alphabet.size)
            items = list(tree)
            build = _Builder(nfa, alphabet)
            if items and items[0] == (sre_c.AT, sre_c.AT_BEGINNING):
                start = build.seq(items[1:], nfa.accept)
            else:  # re.search: a match may begin anywhere
                start = nfa.new()
                nfa.edge(start, nfa.all, start)
                nfa.eps[start].append(build.seq(items, nfa.accept))
            self.parts.append((include, nfa, start))

    def matched(self, sets: Sequence[frozenset[int]]) -> bool:
        result = False
        for (include, nfa, _), states in zip(self.parts, sets, strict=True):
            if states & nfa.accepting:
                result = include
        return result


def _path_step(state: int, ch: str, printable: bool = False) -> int:
    """A normalised relative path, as PathPolicy hands one to writable(): no empty, "." or ".." part, no leading
    slash, no NUL or backslash (and, when `printable`, no control character). 0 start, 1 after a slash, 2 ".",
    3 "..", 4 inside a name; -1 refused."""
    if ch in "\x00\\" or (printable and _control(ch)):
        return -1
    if ch == "/":
        return 1 if state == 4 else -1
    if ch == ".":
        return {0: 2, 1: 2, 2: 3}.get(state, 4)
    return 4


def _control(ch: str) -> bool:
    return ord(ch) < 0x20 or 0x7F <= ord(ch) < 0xA0


# The cuts that keep control characters in intervals of their own, for searches over printable paths only.
_CONTROL_CUTS = " \x7f\xa0"


def _counterexample(lists: list[list[str]], bad: Callable[[list[bool]], bool], printable: bool = False,
                    need: Sequence[int] = ()) -> str | None:
    """The shortest path for which `bad` holds of whether each list matches it, or None when no path does;
    `printable`: among paths without control characters only (no file anyone means to write has one); `need`:
    lists `bad` holds only when they match, so a path no longer than a prefix no such list can ever match is not
    searched further (an automaton with no state left stays so: the answer is the same, found sooner)."""
    compiled = [_compiled(patterns) for patterns in lists]
    trees = []
    for entries in compiled:
        for _, expression, flags in entries:
            try:
                trees.append(sre_p.parse(expression, flags))
            except re.error as err:
                raise Undecided(f"an expression that does not parse ({err})") from None
    alphabet = _Alphabet(trees, _CONTROL_CUTS if printable else "")
    parsed = iter(trees)
    slices = [_List([(include, next(parsed)) for include, _, _ in entries], alphabet) for entries in compiled]
    nfas = [(nfa, start) for sl in slices for _, nfa, start in sl.parts]
    first = (0, tuple(nfa.closure([start]) for nfa, start in nfas))
    offsets = [0]
    for sl in slices:
        offsets.append(offsets[-1] + len(sl.parts))
    needed = [[offsets[i] + j for j, (include, _, _) in enumerate(slices[i].parts) if include] for i in need]
    parent: dict[Any, tuple[Any, str] | None] = {first: None}
    queue = deque([first])
    while queue:
        key = queue.popleft()
        path_state, sets = key
        if path_state == 4:
            results, offset = [], 0
            for sl in slices:
                results.append(sl.matched(sets[offset:offset + len(sl.parts)]))
                offset += len(sl.parts)
            if bad(results):
                return _spell(parent, key)
        for symbol in alphabet.order:
            ch = alphabet.reps[symbol]
            nxt_path = _path_step(path_state, ch, printable)
            if nxt_path < 0:
                continue
            nxt = (nxt_path, tuple(nfa.step(states, symbol) for (nfa, _), states in zip(nfas, sets, strict=True)))
            if any(not any(nxt[1][k] for k in parts) for parts in needed):
                continue  # (a list `bad` needs can match no path that starts so)
            if nxt not in parent:
                if len(parent) >= MAX_STATES:
                    raise Undecided("the patterns are too intricate to check")
                parent[nxt] = (key, ch)
                queue.append(nxt)
    return None


def _spell(parent: dict[Any, tuple[Any, str] | None], key: Any) -> str:
    chars = []
    while (link := parent[key]) is not None:
        key, ch = link
        chars.append(ch)
    return "".join(reversed(chars))


def pattern_problem(pattern: str) -> str | None:
    """Why a pattern cannot be part of a slice (None when it can): control characters, a ".." part (nothing
    inside the repository), or a pattern PathPolicy could not compile."""
    if not isinstance(pattern, str) or not pattern.strip():
        return "an empty pattern"
    if any(ord(c) < 32 or 0x7F <= ord(c) < 0xA0 for c in pattern):
        return f"{pattern!r} holds control characters"
    if ".." in pattern.strip().split("/"):
        return f"{pattern!r} has a '..' part: patterns are relative to the repository root and stay inside it"
    try:
        _counterexample([[pattern]], lambda _: False)
    except Undecided as why:
        return f"{pattern!r}: {why}"
    return None


def within(pattern: str, allowed: list[str], read_only: list[str]) -> bool:
    """Whether every path `pattern` can match is writable under PathPolicy(allowed, read_only)."""
    try:
        return _counterexample([[pattern], allowed, read_only], lambda m: m[0] and not (m[1] and not m[2])) is None
    except Undecided:
        return False


def escape(patterns: list[str], allowed: list[str], read_only: list[str]) -> str | None:
    """A path a lane narrowed to `patterns` (keeping its read-only paths) could write that the lane may not
    (PathPolicy(patterns, read_only) against PathPolicy(allowed, read_only)); None when there is none.
    Raises Undecided when that cannot be told."""
    return _counterexample([patterns, allowed, read_only], lambda m: m[0] and not m[2] and not m[1])


def shared(first: tuple[list[str], list[str]], second: tuple[list[str], list[str]],
           declared: Sequence[str] = ()) -> str | None:
    """The shortest path two slices, each (allowed, read_only) as PathPolicy reads them, may both write and no
    `declared` pattern covers; None when there is none (the slices are disjoint outside the declared overlaps).
    Raises Undecided when that cannot be told."""
    lists = [first[0], first[1], second[0], second[1], list(declared)]
    return _counterexample(lists, lambda m: m[0] and not m[1] and m[2] and not m[3] and not m[4], need=(0, 2))


def unwritable(pattern: str, allowed: list[str], read_only: list[str]) -> str | None:
    """When `pattern` (one of a lane's allowed paths) gives the lane nothing to write because read_only covers
    all of it: a path it matches that is read-only (the witness); None when some path it matches is writable,
    or read_only is not why none is. Raises Undecided when that cannot be told."""
    if _counterexample([[pattern], allowed, read_only], lambda m: m[0] and m[1] and not m[2], need=(0, 1)) is not None:
        return None
    return _counterexample([[pattern], read_only], lambda m: m[0] and m[1], need=(0, 1))


def everything(patterns: list[str]) -> bool:
    """Whether the patterns match every path (`**`, `*`, `**/*`...). Raises Undecided when that cannot be told."""
    return _counterexample([patterns], lambda m: not m[0], printable=True) is None


def narrowing_problem(patterns: list[str], allowed: list[str], read_only: list[str]) -> str | None:
    """Why `patterns` does not narrow the slice (allowed minus read_only), in one phrase; None when it does."""
    for pattern in patterns:
        if (why := pattern_problem(pattern)) is not None:
            return why
    try:
        witness = escape(patterns, allowed, read_only)
    except Undecided as why:
        return f"cannot be checked against the lane's slice ({why}), so it is refused"
    if witness is None:
        return None
    culprit = next((p for p in reversed(patterns) if slice_spec([p]).match_file(witness)), patterns[-1])
    return f"{culprit!r} reaches {witness!r}, which the lane may not write"


def plan_lane_problem(lane: LanePlan, role: HelperRole) -> str | None:
    """Why a planned lane's narrower slice is not within its role's (None when it is, or it names none)."""
    if not lane.allowed_paths:
        return None  # the lane keeps its role's slice (workflows/scheduler.py lane_task)
    why = narrowing_problem(lane.allowed_paths, role.allowed_paths, role.read_only_paths)
    if why is None:
        return None
    return f"{why}: not within lane {lane.lane!r}'s allowed paths ({', '.join(role.allowed_paths)})"


def plan_problem(plan: Plan, roles: dict[str, HelperRole]) -> str | None:
    """Why a plan may not run with these lanes (an unknown lane, a slice that widens); None when it may.
    The same check for a plan file, the planner's plan and a reviewer's (config.check_plan words it for files)."""
    known = ", ".join(sorted(roles))
    for i, lane in enumerate(plan.lanes):
        role = roles.get(lane.lane)
        if role is None:
            return f"lanes.{i}.lane: unknown lane {lane.lane!r} (the lanes file defines {known})"
        if (why := plan_lane_problem(lane, role)) is not None:
            return f"lanes.{i}.allowed_paths: {why}"
    return None
