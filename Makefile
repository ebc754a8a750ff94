# reposwarm: two commands do all the set-up on a fresh machine.
#   make demo   the demo swarm on a local Temporal dev server and the bundled example repo
#   make test   the test suite (it starts its own dev server from the installed binary)

PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
# One home for every entry point (make, worker.py, starter.py, the reposwarm command, ./temporal-dev): runs,
# worktrees, the dev server's database and logs. REPOSWARM_HOME moves it.
export REPOSWARM_HOME ?= $(HOME)/.reposwarm
STATE  := $(REPOSWARM_HOME)
# The dev server's ports (./temporal-dev reads them), and the address every entry point connects to.
export TEMPORAL_PORT ?= 7233
export TEMPORAL_UI_PORT ?= 8233
export TEMPORAL_ADDRESS ?= localhost:$(TEMPORAL_PORT)

.PHONY: venv bubblewrap toolchains browser demo test typecheck docs dev-server stop-dev-server worker clean record-history bench bench-scale realrepos

venv: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[test,agents]'
	touch $@

# Every check command runs in a bubblewrap sandbox (reposwarm/checks/sandbox.py): install it when missing and we can.
bubblewrap:
	@command -v bwrap >/dev/null 2>&1 || [ "$$REPOSWARM_SANDBOX" = off ] || \
	{ [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1 && \
	  { apt-get install -y -qq bubblewrap >/dev/null 2>&1 || \
	    { apt-get update -qq >/dev/null 2>&1 && apt-get install -y -qq bubblewrap >/dev/null 2>&1; }; } && \
	  echo "installed bubblewrap: checks run sandboxed"; } || \
	echo "checks run in a bubblewrap sandbox: install it (sudo apt-get install bubblewrap), or set REPOSWARM_SANDBOX=off"

# The Go toolchain (Debian's golang-go), so the tests that play a gaming lane on a real Go module run: installed
# when missing and we can (as root, with apt-get); without it those tests are skipped and say so. And pnpm and yarn
# (pinned, from the npm registry), the package managers JavaScript projects' lock files name, for the detection
# tests (tests/test_detect_js.py): installed when missing and we can (as root, with npm); else those tests skip.
PNPM_VERSION ?= 9.15.9
YARN_VERSION ?= 1.22.22
toolchains:
	@command -v go >/dev/null 2>&1 || \
	{ [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1 && \
	  { apt-get install -y -qq golang-go >/dev/null 2>&1 || \
	    { apt-get update -qq >/dev/null 2>&1 && apt-get install -y -qq golang-go >/dev/null 2>&1; }; } && \
	  echo "installed golang-go: the Go gate tests run"; } || \
	echo "go is not installed: the Go gate tests are skipped (apt-get install golang-go)"
	@[ -d tests/fixtures/node/node_modules ] || ! command -v npm >/dev/null 2>&1 || \
	{ npm ci --prefix tests/fixtures/node --no-audit --no-fund --loglevel=error >/dev/null 2>&1 && \
	  echo "installed vitest, jest and mocha (tests/fixtures/node): the JavaScript runner tests run"; } || \
	echo "npm ci in tests/fixtures/node failed: the JavaScript runner tests are skipped"
	@for tool in pnpm@$(PNPM_VERSION) yarn@$(YARN_VERSION); do \
	  command -v $${tool%@*} >/dev/null 2>&1 || \
	  { [ "$$(id -u)" = 0 ] && command -v npm >/dev/null 2>&1 && \
	    npm i -g $$tool --no-audit --no-fund --loglevel=error >/dev/null 2>&1 && \
	    echo "installed $$tool (npm i -g): the JavaScript detection tests run with it"; } || \
	  echo "$${tool%@*} is not installed: the JavaScript detection tests that need it are skipped (npm i -g $$tool)"; \
	done

# Debian's Chromium, for the test that screenshots the Web UI (tests/test_webui.py, driven by Playwright with this
# browser: nothing downloads one): installed when missing and we can (as root, with apt-get); else that test skips.
browser:
	@command -v /usr/bin/chromium >/dev/null 2>&1 || \
	{ [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1 && \
	  { apt-get install -y -qq chromium >/dev/null 2>&1 || \
	    { apt-get update -qq >/dev/null 2>&1 && apt-get install -y -qq chromium >/dev/null 2>&1; }; } && \
	  echo "installed chromium: the Web UI screenshot test runs"; } || \
	echo "chromium is not installed: the Web UI screenshot test is skipped (sudo apt-get install chromium)"

dev-server: venv
	./temporal-dev --background

demo: venv bubblewrap dev-server
	@mkdir -p $(STATE)
	@echo "Web UI: http://localhost:$(TEMPORAL_UI_PORT) (the dev server keeps running after the demo; make stop-dev-server stops it)"
	@$(PY) worker.py > $(STATE)/worker.log 2>&1 & echo $$! > $(STATE)/worker.pid; \
	$(PY) starter.py demo --yes; rc=$$?; \
	kill `cat $(STATE)/worker.pid` 2>/dev/null; rm -f $(STATE)/worker.pid; \
	exit $$rc

worker: venv
	$(PY) worker.py

test: venv bubblewrap toolchains browser typecheck
	$(PY) -m pytest -q -n 3

# the type checker over the library, the workflows and the activities ([tool.mypy] in pyproject.toml)
typecheck: venv
	$(PY) -m mypy

# docs/configuration.md's reference (every key and environment variable), rewritten from the code
docs: venv
	$(PY) -m reposwarm.docs_reference

# the benchmarks (make bench; bench_checks.py and bench_evidence.py: make bench-scale), on generated monorepos
# kept in $TMPDIR/reposwarm-bench:
#   bench_index.py  the symbol index on 1M lines: bench/results_index.json
#   bench_warm.py   a repair on a warm lane against a cold re-dispatch: tokens and seconds: bench/results_warm.json
#   bench_swarm.py  the swarm on a local Temporal dev server (lane set-up on 4M lines, step overhead, parallel
#                   efficiency, recovery, history size): bench/results.json; --quick (the default when CI=true)
#   bench_caches.py a second check against the first through the language caches (Go, cargo): compile steps and
#                   seconds as ratios: bench/results_caches.json
#   bench_hosts.py  32 lanes on two worker hosts (processes pinned to a core each) against one: the speedup, each
#                   host's share of lanes and CPU: bench/results_hosts.json; --quick (the default when CI=true)
#   bench_cli.py    how fast the command line answers: --help, status --help and the read commands on a run at
#                   review, in seconds and against python -c pass: bench/results_cli.json
#   bench_propose.py what proposing lanes costs reposwarm itself on the 4M-line monorepo, index warm: the survey
#                   (packages, owners, imports, checks), the brief, the starting lanes and their check, the repo map:
#                   bench/results_propose.json
#   bench_cache.py  prompt caching: billed input cost with caching against without, per provider, on the demo and a
#                   replayed 4-lane attrs change: bench/results_cache.json, and cache_cost_ratio merged into
#                   bench/results.json (so it runs after bench_swarm.py, which writes that file anew)
#   bench_checks.py checks at scale on the 4M-line monorepo with tests (gen_monorepo.py --tests): the whole suite, the
#                   tests a three-service change affects, those in 2 shards on one host and on two (pinned to a core
#                   each), injected breaks caught: bench/results_checks.json, and validation_* merged into
#                   bench/results.json (after bench_swarm.py); --quick (the default when CI=true)
#   bench_evidence.py what the evidence of what a check loaded costs: attrs' suite (about 1,400 tests) through the
#                   sandbox with and without it, alternating: wall and CPU time ratios: bench/results_evidence.json.
#                   Needs a clone of python-attrs/attrs: ATTRS_REPO=DIR (skipped, and said, without one)
#   bench_gate.py   the gate's own time: a validation of a real attrs commit that changes a test file, against its
#                   command run directly and `reposwarm checks`: bench/results_gate.json. ATTRS_REPO=DIR as above
# `reposwarm try` on real commits of public repositories with their users' environments (bench/realrepos.yaml;
# docs/benchmarks.md "Real repositories"). Not part of bench or test: it needs the repositories' mirrors
# (REALREPOS_ARGS="--mirrors DIR"), or their URLs, and installs from PyPI and npm. REALREPOS_ARGS="--only NAME"
realrepos: venv
	$(PY) bench/realrepos.py $(REALREPOS_ARGS)

bench: venv
	$(PY) bench/bench_index.py $(BENCH_ARGS)
	$(PY) bench/bench_swarm.py $(BENCH_SWARM_ARGS)
	$(PY) bench/bench_warm.py
	$(PY) bench/bench_caches.py
	$(PY) bench/bench_hosts.py $(BENCH_HOSTS_ARGS)
	$(PY) bench/bench_cli.py
	$(PY) bench/bench_propose.py
	$(PY) bench/bench_cache.py
	$(if $(ATTRS_REPO),$(PY) bench/bench_gate.py $(ATTRS_REPO) $(BENCH_GATE_ARGS),@echo "bench_gate.py skipped: ATTRS_REPO=<a clone of https://github.com/python-attrs/attrs>")

# the long ones (about an hour): checks on the 4M-line monorepo with tests, the whole suite twice; and the cost of
# the evidence on attrs' suite, alternating pairs. `make bench` stays under 30 minutes without them.
bench-scale: venv
	$(PY) bench/bench_checks.py $(BENCH_CHECKS_ARGS)
	$(if $(ATTRS_REPO),$(PY) bench/bench_evidence.py $(ATTRS_REPO) $(BENCH_EVIDENCE_ARGS),@echo "bench_evidence.py skipped: ATTRS_REPO=<a clone of https://github.com/python-attrs/attrs>")

# record this version's workflow histories into tests/histories/$(VERSION)/ (keep the older folders)
record-history: venv
	$(PY) -m tests.record_history $(VERSION)

stop-dev-server:
	-test -f $(STATE)/temporal.pid && kill `cat $(STATE)/temporal.pid` && rm -f $(STATE)/temporal.pid

# stops the dev server; the runs under $(STATE) are kept (remove that folder yourself to forget them)
clean: stop-dev-server
	rm -rf $(VENV)/.installed
