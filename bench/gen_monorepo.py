"""Generate a synthetic monorepo (Go, Python and TypeScript services) as a git repository, deterministically.

Why: the symbol index and the repo map have speed targets on repositories of a
million lines and more; this makes one of any size, the same for a given seed,
with code shaped like real services (types with methods, functions calling
functions of other files of the service and of a shared library, imports).

    python bench/gen_monorepo.py OUT --lines 1000000            # ~200 services
    python bench/gen_monorepo.py OUT --services 800 --files-per-service 25 --lines-per-file 200   # ~4M lines

With --tests (bench/bench_checks.py), also a shared library of small modules in Python (libs/common/common/) and
JavaScript (libs/common-js/), each Python and TypeScript service importing --shared-imports of them at random,
and a real test file per service asserting on their return values: pytest (services/<svc>/tests/, importing the
service's core.py, its shared modules and its generated code) and node --test (services/<svc>/test/, importing
services/<svc>/lib.mjs: node 20 runs no .ts). Each test file also spends --test-cost-ms of CPU time, so that a
suite's time is its tests'. Go services get none (compiling hundreds of packages would dominate). Without
--tests the tree is byte for byte what it was before --tests existed.
"""

from __future__ import annotations

import argparse
import hashlib
import math
import os
import random
import re
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

NOUNS = ("account invoice order ledger payment customer report session token cache queue event metric user "
         "profile address shipment stock price quote tenant policy claim route schedule batch record budget "
         "channel message thread upload export import audit alert rule limit quota region zone node cluster "
         "volume snapshot backup job task worker signal tracker catalog product review rating coupon cart "
         "refund dispute carrier vendor contract asset license device sensor reading").split()
VERBS = ("get load save build compute apply validate render parse format sync fetch merge split update create "
         "delete find resolve check refresh encode decode publish consume schedule cancel").split()
LANGS = ("go", "python", "typescript")
GIT_ENV = {"GIT_AUTHOR_NAME": "bench", "GIT_AUTHOR_EMAIL": "bench@localhost", "GIT_COMMITTER_NAME": "bench",
           "GIT_COMMITTER_EMAIL": "bench@localhost", "GIT_AUTHOR_DATE": "2024-01-01T00:00:00Z",
           "GIT_COMMITTER_DATE": "2024-01-01T00:00:00Z"}


def _camel(words: list[str], upper: bool) -> str:
    text = "".join(w.capitalize() for w in words)
    return text if upper else text[0].lower() + text[1:]


class Names:
    """Identifiers of one file: types and functions, in the language's casing."""

    def __init__(self, rng: random.Random, lang: str, service: str, count: int) -> None:
        self.types = [_camel([rng.choice(NOUNS), rng.choice(NOUNS), rng.choice(("service", "store", "client",
                      "handler", "model"))], True) for _ in range(max(1, count // 3))]
        words = [[rng.choice(VERBS), rng.choice(NOUNS), rng.choice(NOUNS)] for _ in range(count)]
        if lang == "python":
            self.funcs = ["_".join(w) for w in words]
        else:
            self.funcs = [_camel(w, lang == "go" and i % 2 == 0) for i, w in enumerate(words)]
        # keep names unique within a file
        self.types = list(dict.fromkeys(self.types))
        self.funcs = list(dict.fromkeys(self.funcs))


class _Units:
    """Numbered names for a file's classes and functions (names repeat with a suffix once used up)."""

    def __init__(self, names: Names) -> None:
        self.names, self.fi, self.ti = names, 0, 0

    def type_name(self) -> str:
        types, i = self.names.types, self.ti
        self.ti += 1
        return types[i % len(types)] + (str(i // len(types)) if i >= len(types) else "")

    def func_name(self) -> tuple[str, str]:
        """A new function's name, and the function it calls (the previous one of the file)."""
        funcs, i = self.names.funcs, self.fi
        self.fi += 1
        name = funcs[i % len(funcs)] + (str(i // len(funcs)) if i >= len(funcs) else "")
        return name, funcs[(i - 1) % len(funcs)] if i else ""

    def callee(self, rng: random.Random, fallback: str) -> str:
        return rng.choice(self.names.funcs[:max(1, self.fi)] + [fallback])


def _fill(rng: random.Random, out: list[str], lines: int, make_class: Callable[[], list[str]],
          make_func: Callable[[], list[str]]) -> str:
    """Whole units (a class with methods, or a function) while they fit, then blank lines: exactly `lines`."""
    while True:
        unit = make_class() if rng.random() < 0.3 else make_func()
        if len(out) + len(unit) > lines:
            unit = make_func()
            if len(out) + len(unit) > lines:
                break
        out += unit
    return "\n".join((out + [""] * lines)[:lines]) + "\n"


def _py_file(rng: random.Random, svc: str, mod: str, names: Names, other: tuple[str, Names], lines: int) -> str:
    other_mod, peer = other
    u = _Units(names)
    out = [f'"""{svc} {mod}: generated for the symbol index benchmark."""', "",
           "from __future__ import annotations", "",
           "from libs.common.util import log_event, retry_call",
           f"from services.{svc}.{other_mod} import {peer.types[0]}, {peer.funcs[0]}", "", ""]

    def make_class() -> list[str]:
        name = u.type_name()
        unit = [f"class {name}:", f'    """A {svc} {name}."""', "",
                f"    def __init__(self, peer: {peer.types[0]} | None = None) -> None:",
                "        self.peer = peer", "        self.count = 0", ""]
        for m in range(rng.randint(2, 4)):
            unit += [f"    def {rng.choice(VERBS)}_{rng.choice(NOUNS)}_{m}(self, item_id: int) -> int:",
                     f"        value = {u.callee(rng, peer.funcs[0])}(item_id + self.count)",
                     f'        log_event("{svc}", value)', "        self.count += 1", "        return value", ""]
        return unit + [""]

    def make_func() -> list[str]:
        name, callee = u.func_name()
        callee = callee or peer.funcs[0]
        return [f"def {name}(item_id: int) -> int:", "    total = 0", "    for step in range(item_id % 7):",
                f"        total += retry_call(lambda: {callee}(step))" if rng.random() < 0.5 else
                f"        total += {callee}(step) if step else step",
                f'    log_event("{name}", total)', "    return total", "", ""]

    return _fill(rng, out, lines, make_class, make_func)


def _go_file(rng: random.Random, svc: str, mod: str, names: Names, other: tuple[str, Names], lines: int) -> str:
    _, peer = other
    u = _Units(names)
    out = [f"// Package {svc}: {mod}, generated for the symbol index benchmark.", f"package {svc}", "",
           "import (", '\t"fmt"', "", '\t"example.com/mono/libs/common"', ")", ""]

    def make_class() -> list[str]:
        name = u.type_name()
        unit = [f"// {name} is a {svc} record.", f"type {name} struct {{", "\tID    int", "\tCount int",
                f"\tPeer  *{peer.types[0]}", "}", ""]
        for m in range(rng.randint(2, 4)):
            method = _camel([rng.choice(VERBS), rng.choice(NOUNS)], True)
            unit += [f"func (x *{name}) {method}{m}(id int) (int, error) {{",
                     f"\tv := {u.callee(rng, peer.funcs[0])}(id + x.Count)", f'\tcommon.LogEvent("{svc}", v)',
                     "\tif v < 0 {", f'\t\treturn 0, fmt.Errorf("{name}: negative %d", v)', "\t}",
                     "\treturn v, nil", "}", ""]
        return unit

    def make_func() -> list[str]:
        name, callee = u.func_name()
        callee = callee or peer.funcs[0]
        return [f"func {name}(id int) int {{", "\ttotal := 0", "\tfor step := 0; step < id%7; step++ {",
                f"\t\ttotal += common.Retry(func() int {{ return {callee}(step) }})" if rng.random() < 0.5 else
                f"\t\ttotal += {callee}(step)", "\t}", "\treturn total", "}", ""]

    return _fill(rng, out, lines, make_class, make_func)


def _ts_file(rng: random.Random, svc: str, mod: str, names: Names, other: tuple[str, Names], lines: int) -> str:
    other_mod, peer = other
    u = _Units(names)
    out = [f"// {svc} {mod}: generated for the symbol index benchmark.",
           'import { logEvent, retryCall } from "../../../libs/common/util";',
           f'import {{ {peer.types[0]}, {peer.funcs[0]} }} from "./{other_mod}";', ""]

    def make_class() -> list[str]:
        name = u.type_name()
        unit = [f"export interface {name}Options {{", "  id: number;", f"  peer?: {peer.types[0]};", "}", "",
                f"export class {name} {{", "  private count = 0;", "",
                f"  constructor(private readonly options: {name}Options) {{}}", ""]
        for m in range(rng.randint(2, 4)):
            unit += [f"  {_camel([rng.choice(VERBS), rng.choice(NOUNS)], False)}{m}(id: number): number {{",
                     f"    const value = {u.callee(rng, peer.funcs[0])}(id + this.count);",
                     f'    logEvent("{svc}", value);', "    this.count += 1;", "    return value;", "  }", ""]
        return unit + ["}", ""]

    def make_func() -> list[str]:
        name, callee = u.func_name()
        callee = callee or peer.funcs[0]
        return [f"export function {name}(id: number): number {{", "  let total = 0;",
                "  for (let step = 0; step < id % 7; step++) {",
                f"    total += retryCall(() => {callee}(step));" if rng.random() < 0.5 else
                f"    total += {callee}(step);", "  }", "  return total;", "}", ""]

    return _fill(rng, out, lines, make_class, make_func)


LIBS = {
    "libs/common/util.py": 'def log_event(source: str, value: int) -> None:\n    print(source, value)\n\n\n'
                           'def retry_call(fn, attempts: int = 3) -> int:\n    for _ in range(attempts - 1):\n'
                           '        try:\n            return fn()\n        except OSError:\n            pass\n'
                           '    return fn()\n',
    "libs/common/common.go": 'package common\n\nimport "fmt"\n\n// LogEvent prints an event.\n'
                             'func LogEvent(source string, value int) {\n\tfmt.Println(source, value)\n}\n\n'
                             '// Retry calls fn.\nfunc Retry(fn func() int) int {\n\treturn fn()\n}\n',
    "libs/common/util.ts": 'export function logEvent(source: string, value: number): void {\n'
                           '  console.log(source, value);\n}\n\nexport function retryCall(fn: () => number): number {\n'
                           '  return fn();\n}\n',
    "go.mod": "module example.com/mono\n\ngo 1.21\n",
    "README.md": "# mono\n\nA generated monorepo for the reposwarm symbol index benchmark.\n",
}
RENDER = {"python": _py_file, "go": _go_file, "typescript": _ts_file}


def generate(out: Path, services: int, files_per_service: int, lines_per_file: int, seed: int = 7,
             tests: TestOptions | None = None) -> int:
    """Write the tree under `out` and commit it; returns the number of lines written. With `tests`, the same tree
    (its Python modules made importable) plus a shared library and a test file per Python and TypeScript service."""
    rng = random.Random(seed)
    out.mkdir(parents=True, exist_ok=True)
    total = 0
    for path, text in LIBS.items():
        (out / path).parent.mkdir(parents=True, exist_ok=True)
        (out / path).write_text(text)
        total += text.count("\n")
    tested: list[tuple[str, str, str, str]] = []  # (service, language, its first module, that module's function)
    for s in range(services):
        lang = LANGS[s % len(LANGS)]
        svc = f"{rng.choice(NOUNS)}{rng.choice(NOUNS)}{s:04d}"
        folder = out / "services" / svc / {"python": "", "go": "", "typescript": "src"}[lang]
        folder.mkdir(parents=True, exist_ok=True)
        mods = [f"{rng.choice(NOUNS)}_{i:02d}" if lang == "python" else f"{rng.choice(NOUNS)}{i:02d}"
                for i in range(files_per_service)]
        names = [Names(rng, lang, svc, max(3, lines_per_file // 12)) for _ in mods]
        ext = {"python": ".py", "go": ".go", "typescript": ".ts"}[lang]
        for i, mod in enumerate(mods):
            j = (i + 1) % len(mods)
            if tests is not None and lang == "python" and j == 0:
                j = i  # (the last module imports none: the service's import cycle would fail at import time)
            text = RENDER[lang](rng, svc, mod, names[i], (mods[j], names[j]), lines_per_file)
            if tests is not None and lang == "python":
                text = _importable(text, svc, mod, names[i])
            (folder / f"{mod}{ext}").write_text(text)
            total += text.count("\n")
        if lang == "python":
            (folder / "__init__.py").write_text("")
        if tests is not None and lang != "go":
            tested.append((svc, lang, mods[0], names[0].funcs[0]))
    if tests is not None:
        total += _write_tests(out, tested, tests, seed)
    env = {**os.environ, **GIT_ENV}
    subprocess.run(["git", "init", "-q", "-b", "main", str(out)], check=True, env=env)
    subprocess.run(["git", "-C", str(out), "add", "-A"], check=True, env=env)
    subprocess.run(["git", "-C", str(out), "-c", "commit.gpgsign=false", "commit", "-q", "-m", "generated monorepo"],
                   check=True, env=env)
    return total


# --- tests (--tests) -----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class TestOptions:
    """What --tests adds: shared modules per language, how many of them each service imports, and the CPU time
    each test file spends (so that a suite's time is its tests', not the runners' start-up)."""

    __test__ = False  # (not a pytest test class)
    shared_modules: int = 100
    imports: int = 2
    cost_ms: int = 400


def _importable(text: str, svc: str, mod: str, names: Names) -> str:
    """A generated Python module importable as its service's other modules import it: the self-import of the
    cycle's last module made a comment (same line count), and the first class and function the previous module
    imports defined, should the file have none (a file of few units may lack a class)."""
    text = text.replace(f"from services.{svc}.{mod} import {names.types[0]}, {names.funcs[0]}\n",
                        "# (the last module of the service: it imports none of the others)\n")
    if not re.search(rf"^class {names.types[0]}\b", text, re.M):
        text += f'\n\nclass {names.types[0]}:\n    """(imported by the service\'s other module)"""\n'
    if not re.search(rf"^def {names.funcs[0]}\(", text, re.M):
        text += f"\n\ndef {names.funcs[0]}(item_id: int) -> int:\n    return 0\n"
    return text


def _digest(svc: str, rounds: int = 1000) -> str:
    """What a test's workload checks: `rounds` SHA-256 of the service's name, chained."""
    h = svc.encode()
    for _ in range(rounds):
        h = hashlib.sha256(h).digest()
    return h.hex()


PY_SHARED = '''"""Shared helpers: {noun} (generated for the checks benchmark)."""

from __future__ import annotations

SCALE = {scale}
OFFSET = {offset}


def value(x: int) -> int:
    """The {noun} figure of x."""
    return (x * SCALE + OFFSET) % 1009


def label(x: int) -> str:
    return f"{noun}-{{value(x)}}"
'''
JS_SHARED = '''// Shared helpers: {noun} (generated for the checks benchmark).
export const SCALE = {scale};
export const OFFSET = {offset};

export function value(x) {{
  return (x * SCALE + OFFSET) % 1009;
}}

export function label(x) {{
  return `{noun}-${{value(x)}}`;
}}
'''
PY_CORE = '''"""{svc} core: what the service computes from its shared helpers (generated for the checks benchmark)."""

from __future__ import annotations

from libs.common.common import {a}, {b}
from services.{svc}.{mod} import {func}

BASE = {base}


def compute(x: int) -> int:
    """The service's figure for x: its base and what its shared helpers make of x."""
    return BASE + {a}.value(x) + 2 * {b}.value(x + 1) + {func}(x % 7)


def describe(x: int) -> str:
    return f"{svc}:{{compute(x)}}"
'''
PY_TEST = '''"""Tests of {svc}: its core, the shared helpers it uses and the generated code under them."""

from __future__ import annotations

import hashlib
import time

from libs.common.common import {a}, {b}
from services.{svc} import core
from services.{svc}.{mod} import {func}

COST_S = {cost}  # this file's fixed share of CPU time (gen_monorepo.py --test-cost-ms)


def test_compute() -> None:
    assert core.compute(3) == {c3}
    assert core.describe(10) == "{svc}:{c10}"


def test_shared_helpers() -> None:
    assert {a}.value(5) == {a5}
    assert {b}.label(2) == "{b_label}"


def test_generated_code() -> None:
    assert {func}(6) == 0


def test_workload() -> None:
    """A hash chain checked against its known end, again and again until COST_S of CPU time is used."""
    started, rounds = time.process_time(), 0
    while rounds == 0 or time.process_time() - started < COST_S:
        digest = b"{svc}"
        for _ in range(1000):
            digest = hashlib.sha256(digest).digest()
        assert digest.hex() == "{digest}"
        rounds += 1
'''
JS_LIB = '''// {svc}: what the service computes from its shared helpers, in plain JavaScript beside its TypeScript
// (node 20 runs no .ts). Generated for the checks benchmark.
import * as {ja} from "../../libs/common-js/{a}.mjs";
import * as {jb} from "../../libs/common-js/{b}.mjs";

export const BASE = {base};

export function compute(x) {{
  return BASE + {ja}.value(x) + 2 * {jb}.value(x + 1);
}}

export function describe(x) {{
  return `{svc}:${{compute(x)}}`;
}}
'''
JS_TEST = '''// Tests of {svc}: its lib and the shared helpers it uses.
import test from "node:test";
import assert from "node:assert/strict";
import {{ createHash }} from "node:crypto";

import {{ compute, describe }} from "../lib.mjs";
import * as {ja} from "../../../libs/common-js/{a}.mjs";
import * as {jb} from "../../../libs/common-js/{b}.mjs";

const COST_MS = {cost_ms}; // this file's fixed share of CPU time (gen_monorepo.py --test-cost-ms)

test("compute", () => {{
  assert.equal(compute(3), {c3});
  assert.equal(describe(10), "{svc}:{c10}");
}});

test("shared helpers", () => {{
  assert.equal({ja}.value(5), {a5});
  assert.equal({jb}.label(2), "{b_label}");
}});

test("workload", () => {{
  // a hash chain checked against its known end, again and again until COST_MS of CPU time is used
  const start = process.cpuUsage();
  const used = () => {{ const u = process.cpuUsage(start); return (u.user + u.system) / 1000; }};
  let rounds = 0;
  while (rounds === 0 || used() < COST_MS) {{
    let digest = Buffer.from("{svc}");
    for (let i = 0; i < 1000; i++) digest = createHash("sha256").update(digest).digest();
    assert.equal(digest.toString("hex"), "{digest}");
    rounds++;
  }}
}});
'''
TEST_ROOT = {
    "pytest.ini": "[pytest]\npythonpath = .\ntestpaths = services\n",
    "package.json": '{\n  "name": "mono",\n  "private": true,\n  "scripts": {"test": "node --test"}\n}\n',
    "libs/__init__.py": "", "libs/common/__init__.py": "", "libs/common/common/__init__.py": "",
}


def _write_tests(out: Path, tested: list[tuple[str, str, str, str]], opts: TestOptions, seed: int) -> int:
    """The shared library (Python and JavaScript), each tested service's code importing `opts.imports` of its
    modules at random, and its test file; returns the lines written."""
    rng = random.Random(f"tests-{seed}")  # (its own sequence: the services' names and code stay as without tests)
    files = dict(TEST_ROOT)
    shared: dict[str, dict[str, tuple[int, int]]] = {"python": {}, "typescript": {}}
    for lang, folder, template in (("python", "libs/common/common", PY_SHARED),
                                   ("typescript", "libs/common-js", JS_SHARED)):
        for i in range(opts.shared_modules):
            noun, scale, offset = rng.choice(NOUNS), rng.randint(3, 97), rng.randint(0, 999)
            shared[lang][f"{noun}_{i:03d}"] = (scale, offset)
            files[f"{folder}/{noun}_{i:03d}{'.py' if lang == 'python' else '.mjs'}"] = template.format(
                noun=noun, scale=scale, offset=offset)
    for svc, lang, mod, func in tested:
        pool = sorted(shared[lang])
        a, b = rng.sample(pool, 2) if opts.imports >= 2 and len(pool) > 1 else [rng.choice(pool)] * 2
        base = rng.randint(100, 999)

        def value(m: str, x: int, lang: str = lang) -> int:
            scale, offset = shared[lang][m]
            return (x * scale + offset) % 1009

        def compute(x: int, a: str = a, b: str = b, base: int = base, lang: str = lang) -> int:
            return base + value(a, x, lang) + 2 * value(b, x + 1, lang)

        fields = dict(svc=svc, a=a, b=b, mod=mod, func=func, base=base, c3=compute(3), c10=compute(10),
                      a5=value(a, 5), b_label=f"{b.rsplit('_', 1)[0]}-{value(b, 2)}", digest=_digest(svc),
                      cost=opts.cost_ms / 1000, cost_ms=opts.cost_ms, ja=_camel(a.split("_"), False),
                      jb=_camel(b.split("_"), False))
        if lang == "python":
            files[f"services/{svc}/core.py"] = PY_CORE.format(**fields)
            files[f"services/{svc}/tests/test_{svc}.py"] = PY_TEST.format(**fields)
        else:
            files[f"services/{svc}/lib.mjs"] = JS_LIB.format(**fields)
            files[f"services/{svc}/test/{svc}.test.mjs"] = JS_TEST.format(**fields)
    for path, text in files.items():
        (out / path).parent.mkdir(parents=True, exist_ok=True)
        (out / path).write_text(text)
    return sum(text.count("\n") for text in files.values())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", type=Path, help="folder to create (must not exist)")
    parser.add_argument("--lines", type=int, help="target total lines (sets --services)")
    parser.add_argument("--services", type=int, default=10)
    parser.add_argument("--files-per-service", type=int, default=25)
    parser.add_argument("--lines-per-file", type=int, default=200)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--tests", action="store_true", help="a shared library and tests (pytest, node --test)")
    parser.add_argument("--shared-modules", type=int, default=TestOptions.shared_modules, help="per language")
    parser.add_argument("--shared-imports", type=int, default=TestOptions.imports, help="per service (1 or 2)")
    parser.add_argument("--test-cost-ms", type=int, default=TestOptions.cost_ms, help="CPU time of each test file")
    args = parser.parse_args(argv)
    if args.out.exists() and any(args.out.iterdir()):
        print(f"error: {args.out} exists and is not empty", file=sys.stderr)
        return 2
    services = args.services
    if args.lines:
        services = max(1, math.ceil(args.lines / (args.files_per_service * args.lines_per_file)))
    started = time.perf_counter()
    tests = TestOptions(args.shared_modules, args.shared_imports, args.test_cost_ms) if args.tests else None
    lines = generate(args.out, services, args.files_per_service, args.lines_per_file, args.seed, tests)
    print(f"{args.out}: {services} services, {services * args.files_per_service} files, {lines} lines "
          f"in {time.perf_counter() - started:.1f}s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
