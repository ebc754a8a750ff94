"""Fake prompt caches that count and cache as Anthropic and OpenAI document theirs, for tests/fake_models.py.

They are held to the providers' documents, not to reposwarm's code, so a test can check the swarm's
caching against them. Tokens come from a fake tokenizer: 1 token per 4 characters (rounded up) of each
unit's canonical JSON, with every `cache_control` removed.

Both caches work in two steps, as the real ones do: `usage_for` prices a request on its arrival against
what is cached by then, and `commit` stores what the request wrote once its response goes out. A
request that arrives before an earlier one's response misses what that one writes.
"""

from __future__ import annotations

import hashlib
import json
import math
import random
import re
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

CHARS_PER_TOKEN = 4
DIAGNOSTICS_BETA = "cache-diagnosis-2026-04-07"
PROPOSER_MARK = "no one has split the repository into lanes"  # reposwarm/agent/prompts.py PROPOSER_SYSTEM
PLANNER_MARK = "You are the planner"  # PLANNER_SYSTEM's start (the proposer's too: test for it first)
TTL_RANK = {"5m": 0, "1h": 1}  # the API's TTLs; a longer one may not follow a shorter one


def _stripped(obj: Any) -> Any:
    if isinstance(obj, dict):
        return {k: _stripped(v) for k, v in obj.items() if k != "cache_control"}
    if isinstance(obj, list):
        return [_stripped(v) for v in obj]
    return obj


def canonical(obj: Any) -> str:
    """The unit as the fake tokenizer reads it: sorted keys, no cache_control anywhere."""
    return json.dumps(_stripped(obj), sort_keys=True, ensure_ascii=False)


def tokens(obj: Any) -> int:
    return math.ceil(len(canonical(obj)) / CHARS_PER_TOKEN)


def text_tokens(text: str) -> int:
    return math.ceil(len(text) / CHARS_PER_TOKEN)


def text_of(content: Any) -> str:
    """A message's or system prompt's text: the string, or its text blocks joined by newlines."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(b["text"] for b in content if isinstance(b, dict) and isinstance(b.get("text"), str))
    return ""


def lane_of(system: str, messages: list[dict[str, Any]]) -> str | None:
    """Who asks: the proposer or the planner (by its system prompt), or the lane a message names."""
    if PROPOSER_MARK in system:
        return "proposer"
    if PLANNER_MARK in system:
        return "planner"
    for message in messages:
        match = re.search(r"Goal for lane (\S+):", text_of(message.get("content")))
        if match:
            return match.group(1)
    return None


def _content_blocks(content: Any) -> list[Any]:
    """A string counts as one text block, as the API reads it: making it a block to mark it changes no prefix."""
    if isinstance(content, str):
        return [{"type": "text", "text": content}] if content else []
    return list(content or [])


class CacheRequestError(ValueError):
    """A request the API refuses with 400 invalid_request_error; the message is the API's."""


@dataclass
class Breakpoint:
    position: int  # index of the block in the request's prompt (tools, then system, then messages)
    region: str  # "tools", "system" or "messages"
    ttl: str  # "5m" or "1h"
    prefix_tokens: int  # the tokens up to and including this block
    hash: str  # sha256 of the canonical blocks up to and including this one (a cache entry's key, with the model)


@dataclass
class CacheRecord:
    """One request as a cache saw it (in `records`, in the order the requests arrived)."""

    index: int
    message_id: str
    model: str
    lane: str | None
    usage: dict[str, Any]  # as sent in the reply
    prompt_tokens: int  # the whole prompt: uncached + read + written
    read_tokens: int
    written_tokens: int  # Anthropic's cache_creation_input_tokens; 0 for OpenAI (its writes are free, unreported)
    output_tokens: int
    breakpoints: list[Breakpoint] = field(default_factory=list)  # Anthropic
    read: list[str] = field(default_factory=list)  # hashes of the entries read (Anthropic: at most one)
    written: list[str] = field(default_factory=list)  # hashes of the prefixes written (on commit)
    diagnostics: dict[str, Any] | None = None
    machine: str | None = None  # OpenAI: the machine the request was routed to
    committed: bool = False  # its response went out and its writes became readable


@dataclass
class Charge:
    """What `usage_for` decided; unpacks as (usage, diagnostics). Pass it to `commit` when the response goes out."""

    usage: dict[str, Any]
    diagnostics: dict[str, Any] | None
    diagnosed: bool  # the request asked for diagnostics: the reply carries the field (maybe null)
    message_id: str
    record: CacheRecord
    writes: list[tuple[tuple[str, str], str]] = field(default_factory=list, repr=False)  # ((model, hash), ttl)
    remember: Any = field(default=None, repr=False)  # what commit stores (a fingerprint, a prompt)

    def __iter__(self) -> Iterator[Any]:
        return iter((self.usage, self.diagnostics))


class _Cache:
    def __init__(self, clock: Callable[[], float], min_tokens: int) -> None:
        self.clock = clock
        self.min_tokens = min_tokens
        self.records: list[CacheRecord] = []
        self._lock = threading.Lock()
        self._issued = 0

    def _next_id(self, prefix: str) -> tuple[int, str]:
        self._issued += 1
        return len(self.records), f"{prefix}{self._issued}"

    @property
    def read_tokens(self) -> int:
        with self._lock:
            return sum(r.read_tokens for r in self.records)

    @property
    def written_tokens(self) -> int:
        with self._lock:
            return sum(r.written_tokens for r in self.records)

    @property
    def uncached_tokens(self) -> int:
        with self._lock:
            return sum(r.prompt_tokens - r.read_tokens - r.written_tokens for r in self.records)

    def by_lane(self, lane: str) -> list[CacheRecord]:
        with self._lock:
            return [r for r in self.records if r.lane == lane]


@dataclass
class _Block:
    region: str
    key: str  # what the prefix hash reads: the block, its place, its message's role
    tokens: int
    cache_control: Any


@dataclass
class _Entry:
    ttl: str
    expires: float


@dataclass
class _Fingerprint:
    model: str
    tools: list[str]
    system: list[str]
    messages: list[str]  # one canonical string per message
    keys: list[str]
    block_tokens: list[int]


class AnthropicCache(_Cache):
    """Anthropic's prompt caching: breakpoints, a 20-block lookback, TTLs refreshed by reads, cache diagnostics.

    A string system prompt or message content counts as one text block, as the API reads it: turning a string
    into a block to put cache_control on it changes nothing in the prefix.
    """

    def __init__(self, *, min_tokens: int = 1024, ttl_s: dict[str, float] | None = None,
                 clock: Callable[[], float] = time.monotonic, lookback: int = 20, max_breakpoints: int = 4) -> None:
        super().__init__(clock, min_tokens)
        self.ttl_s = {"5m": 300.0, "1h": 3600.0, **(ttl_s or {})}
        self.lookback = lookback
        self.max_breakpoints = max_breakpoints
        self._entries: dict[tuple[str, str], _Entry] = {}
        self._fingerprints: dict[str, _Fingerprint] = {}

    # --- reading the request ---

    @staticmethod
    def _blocks(body: dict[str, Any]) -> list[_Block]:
        blocks: list[_Block] = []

        def add(region: str, unit: Any, where: dict[str, Any]) -> None:
            cc = unit.get("cache_control") if isinstance(unit, dict) else None
            blocks.append(_Block(region, canonical({**where, "unit": unit}), tokens(unit), cc))

        for tool in body.get("tools") or []:
            add("tools", tool, {"region": "tools"})
        for block in _content_blocks(body.get("system")):
            add("system", block, {"region": "system"})
        for i, message in enumerate(body.get("messages") or []):
            for block in _content_blocks(message.get("content")):
                add("messages", block, {"region": "messages", "message": i, "role": message.get("role")})
        return blocks

    def _marks(self, body: dict[str, Any], blocks: list[_Block]) -> list[tuple[int, str]]:
        """The breakpoints as (position, ttl), checked as the API checks them."""
        said = [(i, b.cache_control) for i, b in enumerate(blocks) if b.cache_control is not None]
        automatic = body.get("cache_control")
        if automatic is not None and blocks and (not said or said[-1][0] != len(blocks) - 1):
            said.append((len(blocks) - 1, automatic))  # automatic caching: a breakpoint on the last block
        if len(said) > self.max_breakpoints:
            raise CacheRequestError(f"A maximum of {self.max_breakpoints} blocks with cache_control may be "
                                    f"provided. Found {len(said)}.")
        marks: list[tuple[int, str]] = []
        for position, cc in said:
            if not isinstance(cc, dict) or cc.get("type") != "ephemeral":
                raise CacheRequestError(f"{blocks[position].region}: cache_control.type: Input should be 'ephemeral'")
            ttl = cc.get("ttl", "5m")
            if ttl not in TTL_RANK:
                raise CacheRequestError(f"{blocks[position].region}: cache_control.ttl: Input should be '5m' or '1h'")
            if marks and TTL_RANK[ttl] > TTL_RANK[marks[-1][1]]:
                raise CacheRequestError(f"a ttl='{ttl}' cache_control block must not come after a "
                                        f"ttl='{marks[-1][1]}' cache_control block. Note that blocks are processed "
                                        "in the following order: `tools`, `system`, `messages`.")
            marks.append((position, ttl))
        return marks

    @staticmethod
    def _diagnosis_asked(body: dict[str, Any], headers: dict[str, str]) -> tuple[bool, bool]:
        betas = next((v for k, v in headers.items() if k.lower() == "anthropic-beta"), "")
        beta = DIAGNOSTICS_BETA in [b.strip() for b in betas.split(",")]
        if "diagnostics" in body and not beta:
            raise CacheRequestError("diagnostics: Extra inputs are not permitted")
        return beta, beta and "diagnostics" in body

    # --- pricing ---

    def usage_for(self, body: dict[str, Any], headers: dict[str, str] | None = None,
                  output_tokens: int = 0) -> Charge:
        """Prices the request against what is committed now; raises CacheRequestError for the API's 400s."""
        beta, diagnosed = self._diagnosis_asked(body, headers or {})
        blocks = self._blocks(body)
        marks = self._marks(body, blocks)
        model = str(body.get("model", ""))
        digest, hashes, cum, total = hashlib.sha256(), [], [], 0
        for block in blocks:
            digest.update(block.key.encode() + b"\0")
            hashes.append(digest.hexdigest())
            total += block.tokens
            cum.append(total)
        fingerprint = self._fingerprint(body, blocks)
        with self._lock:
            now = self.clock()
            read = -1  # the longest cached prefix any breakpoint reaches within its lookback
            for position, _ in marks:
                for q in range(position, max(-1, position - self.lookback - 1), -1):
                    if q <= read:
                        break
                    entry = self._entries.get((model, hashes[q]))
                    if entry is not None and entry.expires > now:
                        read = q
                        break
            if read >= 0:
                entry = self._entries[(model, hashes[read])]
                entry.expires = now + self.ttl_s[entry.ttl]  # a read refreshes the entry
            read_tokens = cum[read] if read >= 0 else 0
            writes = [(p, ttl) for p, ttl in marks if p > read and cum[p] >= self.min_tokens]
            split = {"5m": 0, "1h": 0}
            before = read_tokens
            for position, ttl in writes:
                split[ttl] += cum[position] - before
                before = cum[position]
            written = before - read_tokens
            diagnostics = self._diagnose(body, fingerprint) if diagnosed else None
            index, message_id = self._next_id("msg_fake_")
            usage = {"input_tokens": total - read_tokens - written, "cache_creation_input_tokens": written,
                     "cache_read_input_tokens": read_tokens,
                     "cache_creation": {"ephemeral_5m_input_tokens": split["5m"],
                                        "ephemeral_1h_input_tokens": split["1h"]},
                     "output_tokens": output_tokens, "service_tier": "standard"}
            system = body.get("system") or ""
            record = CacheRecord(
                index=index, message_id=message_id, model=model, lane=lane_of(text_of(system), body["messages"]),
                usage=usage, prompt_tokens=total, read_tokens=read_tokens, written_tokens=written,
                output_tokens=output_tokens,
                breakpoints=[Breakpoint(p, blocks[p].region, ttl, cum[p], hashes[p]) for p, ttl in marks],
                read=[hashes[read]] if read >= 0 else [], diagnostics=diagnostics)
            self.records.append(record)
        return Charge(usage, diagnostics, diagnosed, message_id, record,
                      writes=[((model, hashes[p]), ttl) for p, ttl in writes], remember=fingerprint if beta else None)

    def commit(self, charge: Charge) -> None:
        """The response goes out: what the request wrote becomes readable, its id citable in diagnostics."""
        with self._lock:
            now = self.clock()
            for key, ttl in charge.writes:
                self._entries[key] = _Entry(ttl, now + self.ttl_s[ttl])
                charge.record.written.append(key[1])
            if charge.remember is not None:
                self._fingerprints[charge.message_id] = charge.remember
            charge.record.committed = True

    # --- diagnostics ---

    @staticmethod
    def _fingerprint(body: dict[str, Any], blocks: list[_Block]) -> _Fingerprint:
        return _Fingerprint(
            model=str(body.get("model", "")),
            tools=[b.key for b in blocks if b.region == "tools"],
            system=[b.key for b in blocks if b.region == "system"],
            messages=[canonical({"role": m.get("role"), "content": _content_blocks(m.get("content"))})
                      for m in body.get("messages") or []],
            keys=[b.key for b in blocks], block_tokens=[b.tokens for b in blocks])

    def _diagnose(self, body: dict[str, Any], now: _Fingerprint) -> dict[str, Any] | None:
        previous_id = (body.get("diagnostics") or {}).get("previous_message_id")
        if previous_id is None:
            return None
        before = self._fingerprints.get(str(previous_id))
        if before is None:
            return {"cache_miss_reason": {"type": "previous_message_not_found"}}
        if before.model != now.model:
            reason = "model_changed"
        elif before.tools != now.tools:
            reason = "tools_changed"
        elif before.system != now.system:
            reason = "system_changed"
        elif before.messages != now.messages[:len(before.messages)]:
            reason = "messages_changed"
        else:
            return None
        common = 0
        if reason != "model_changed":
            while common < min(len(before.keys), len(now.keys)) and before.keys[common] == now.keys[common]:
                common += 1
        # what the earlier request's prompt would have given this one from the cache, had nothing diverged
        missed = sum(before.block_tokens[common:])
        return {"cache_miss_reason": {"type": reason, "cache_missed_input_tokens": missed}}

    # --- for tests ---

    def writes_of(self, prefix_hash: str) -> int:
        """How many committed requests wrote this prefix."""
        with self._lock:
            return sum(r.written.count(prefix_hash) for r in self.records)

    def reads_of(self, prefix_hash: str) -> int:
        with self._lock:
            return sum(r.read.count(prefix_hash) for r in self.records)

    def is_cached(self, model: str, prefix_hash: str) -> bool:
        with self._lock:
            entry = self._entries.get((model, prefix_hash))
            return entry is not None and entry.expires > self.clock()


def _common_prefix(a: str, b: str) -> int:
    lo, hi = 0, min(len(a), len(b))
    if a[:hi] == b[:hi]:
        return hi
    while lo < hi:  # a[:lo] == b[:lo] and a[:hi + 1] != b[:hi + 1]
        mid = (lo + hi + 1) // 2
        if a[:mid] == b[:mid]:
            lo = mid
        else:
            hi = mid - 1
    return lo


class OpenAICache(_Cache):
    """OpenAI's automatic prompt caching: prompts of 1024 tokens and more, cached in steps of 128 tokens past the
    first 1024, per machine. Requests with the same prompt_cache_key reach the same machine; the rest are spread
    over `machines` machines at random (seeded), so a shared prefix without a key hits only by chance."""

    def __init__(self, *, min_tokens: int = 1024, step: int = 128, ttl_s: float = 600.0, machines: int = 4,
                 seed: int = 0, clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__(clock, min_tokens)
        self.step = step
        self.ttl_s = ttl_s
        self.machines = machines
        self._random = random.Random(seed)
        self._stores: dict[str, dict[str, float]] = {}  # machine -> prompt -> when last used

    @staticmethod
    def prompt_text(body: dict[str, Any]) -> str:
        """The prompt as the fake tokenizer reads it: each tool, then each message, canonical, concatenated."""
        return "".join(canonical(t) for t in body.get("tools") or []) + \
            "".join(canonical(m) for m in body.get("messages") or [])

    def _cacheable(self, matched: int) -> int:
        return 0 if matched < self.min_tokens else self.min_tokens + (matched - self.min_tokens) // self.step * \
            self.step

    def usage_for(self, body: dict[str, Any], headers: dict[str, str] | None = None,
                  output_tokens: int = 0) -> Charge:
        prompt = self.prompt_text(body)
        total = text_tokens(prompt)
        model = str(body.get("model", ""))
        key = body.get("prompt_cache_key")
        with self._lock:
            machine = f"key:{key}" if key else str(self._random.randrange(self.machines))
            store = self._stores.setdefault(machine, {})
            now = self.clock()
            for old in [p for p, used in store.items() if now - used >= self.ttl_s]:
                del store[old]
            best, best_prompt = 0, None
            if total >= self.min_tokens:
                for seen in store:
                    chars = _common_prefix(prompt, seen)
                    # token i is characters 4i..4i+3: a token matches when all of it does
                    matched = total if chars == len(prompt) == len(seen) else chars // CHARS_PER_TOKEN
                    if matched > best:
                        best, best_prompt = matched, seen
            cached = self._cacheable(best)
            if cached and best_prompt is not None:
                store[best_prompt] = now
            index, message_id = self._next_id("chatcmpl-fake-")
            usage = {"prompt_tokens": total, "completion_tokens": output_tokens, "total_tokens": total + output_tokens,
                     "prompt_tokens_details": {"cached_tokens": cached, "audio_tokens": 0},
                     "completion_tokens_details": {"reasoning_tokens": 0, "audio_tokens": 0,
                                                   "accepted_prediction_tokens": 0, "rejected_prediction_tokens": 0}}
            messages = body.get("messages") or []
            system = "\n".join(text_of(m.get("content")) for m in messages if m.get("role") in ("system", "developer"))
            record = CacheRecord(
                index=index, message_id=message_id, model=model,
                lane=lane_of(system, [m for m in messages if m.get("role") not in ("system", "developer")]),
                usage=usage, prompt_tokens=total, read_tokens=cached, written_tokens=0, output_tokens=output_tokens,
                machine=machine)
            self.records.append(record)
        return Charge(usage, None, False, message_id, record,
                      remember=(machine, prompt) if total >= self.min_tokens else None)

    def commit(self, charge: Charge) -> None:
        with self._lock:
            if charge.remember is not None:
                machine, prompt = charge.remember
                self._stores.setdefault(machine, {})[prompt] = self.clock()
            charge.record.committed = True
