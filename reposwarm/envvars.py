"""Every environment variable reposwarm reads, with its default and meaning: the one list.

docs/configuration.md's table of variables is generated from it (`python -m reposwarm.docs_reference`, `make docs`),
and tests/test_config_reference.py scans the code (reposwarm/, workflows/, activities/, worker.py, starter.py) for
every read of os.environ and fails on a variable read there that is not listed here, or listed here as read by
reposwarm and read nowhere. Variables read by a library reposwarm uses (Temporal's env config, boto3, OpenTelemetry)
or by the checkout's scripts (make, ./temporal-dev) are listed with `owner` saying who reads them.

Data only: nothing here reads the environment.
"""

from __future__ import annotations

from dataclasses import dataclass

REPOSWARM = "reposwarm"


@dataclass(frozen=True)
class EnvVar:
    name: str  # a name, or a family (`TEMPORAL_GRPC_META_*`)
    read_by: str  # which processes: worker, starter (run and the commands that start one), CLI, ...
    default: str  # what holds when it is unset ("" for nothing)
    meaning: str  # one line
    owner: str = REPOSWARM  # who reads it: reposwarm's code, or the library or script named


@dataclass(frozen=True)
class Group:
    title: str
    variables: tuple[EnvVar, ...]


_TEMPORAL_CONFIG = "Temporal's env config"
_BOTO3 = "boto3"
_OTEL = "OpenTelemetry SDK"
_CHECKOUT = "make, ./temporal-dev"

GROUPS: tuple[Group, ...] = (
    Group("Temporal", (
        EnvVar("TEMPORAL_ADDRESS", "worker, starter, CLI", "`localhost:7233`",
               "the Temporal server's gRPC address (host:port); Temporal Cloud: `<namespace>.<account>.tmprl.cloud:7233` "
               "or the API-key endpoint"),
        EnvVar("TEMPORAL_NAMESPACE", "worker, starter, CLI", "`default`", "the Temporal namespace; also in Web UI links"),
        EnvVar("TEMPORAL_API_KEY", "worker, starter, CLI", "",
               "an API key (Temporal Cloud); turns TLS on", _TEMPORAL_CONFIG),
        EnvVar("TEMPORAL_TLS", "worker, starter, CLI", "off (on with an API key)", "`true`: connect with TLS",
               _TEMPORAL_CONFIG),
        EnvVar("TEMPORAL_TLS_CLIENT_CERT_PATH", "worker, starter, CLI", "",
               "mTLS client certificate (or `_DATA` with the PEM itself)", _TEMPORAL_CONFIG),
        EnvVar("TEMPORAL_TLS_CLIENT_KEY_PATH", "worker, starter, CLI", "",
               "mTLS client key (or `_DATA` with the PEM itself)", _TEMPORAL_CONFIG),
        EnvVar("TEMPORAL_TLS_SERVER_CA_CERT_PATH", "worker, starter, CLI", "the system's CAs",
               "the server's CA certificate (or `_DATA`)", _TEMPORAL_CONFIG),
        EnvVar("TEMPORAL_TLS_SERVER_NAME", "worker, starter, CLI", "the address's host", "the TLS server name (SNI)",
               _TEMPORAL_CONFIG),
        EnvVar("TEMPORAL_TLS_DISABLE_HOST_VERIFICATION", "worker, starter, CLI", "`false`",
               "`true`: do not verify the server's host name", _TEMPORAL_CONFIG),
        EnvVar("TEMPORAL_PROFILE", "worker, starter, CLI", "`default`",
               "the profile of Temporal's configuration file (temporal.toml) to connect with", _TEMPORAL_CONFIG),
        EnvVar("TEMPORAL_CONFIG_FILE", "worker, starter, CLI", "`~/.config/temporalio/temporal.toml`",
               "Temporal's configuration file", _TEMPORAL_CONFIG),
        EnvVar("TEMPORAL_GRPC_META_*", "worker, starter, CLI", "",
               "gRPC headers sent with every call (`TEMPORAL_GRPC_META_X_FOO` sends `x-foo`)", _TEMPORAL_CONFIG),
        EnvVar("TEMPORAL_UI_PORT", "`dev-server`, CLI, make", "`8233`",
               "the dev server's Web UI port; the CLI's Web UI links use it"),
        EnvVar("TEMPORAL_PORT", "`dev-server`, make", "`7233`",
               "the dev server's gRPC port (make sets `TEMPORAL_ADDRESS=localhost:$TEMPORAL_PORT` to match)"),
        EnvVar("REPOSWARM_UI_URL", "starter, CLI", "`http://<TEMPORAL_ADDRESS's host>:<TEMPORAL_UI_PORT, else its port + 1000>`",
               "the Web UI's address in links; Temporal Cloud: `https://cloud.temporal.io`"),
        EnvVar("REPOSWARM_TASK_QUEUE", "worker, starter, CLI", "`reposwarm`",
               "the task queue; worker and starter must agree"),
    )),
    Group("Models (the worker's: credentials never enter a run's inputs or history)", (
        EnvVar("ANTHROPIC_API_KEY", "worker", "", "the key for `anthropic:` models"),
        EnvVar("ANTHROPIC_BASE_URL", "worker", "`https://api.anthropic.com`",
               "another Messages API endpoint (a gateway); a key is then optional"),
        EnvVar("OPENAI_API_KEY", "worker", "", "the key for `openai:` models"),
        EnvVar("OPENAI_BASE_URL", "worker", "`https://api.openai.com/v1`",
               "another Chat Completions endpoint (vLLM, Ollama, llama.cpp, a gateway); a key is then optional"),
        EnvVar("REPOSWARM_MODEL", "starter", "`swarm.model`",
               "the run's model (`provider:name`) when `--model` is not given"),
        EnvVar("REPOSWARM_MODEL_TIMEOUT_S", "worker", "300 s, or the request's output limit at 50 tokens/s, at most "
               "570 s (570 s for Claude Sonnet 4.5's 64,000)", "a model call's read timeout, outright"),
        EnvVar("REPOSWARM_MAX_OUTPUT_TOKENS", "worker", "the model's own limit (64,000 for claude-sonnet-4-5)",
               "Anthropic's `max_tokens` where the lane sets no `max_output_tokens`"),
        EnvVar("REPOSWARM_CACHE_DIAGNOSTICS", "worker", "on against api.anthropic.com, off with ANTHROPIC_BASE_URL",
               "`1`/`0`: ask Anthropic why a prompt-cache prefix missed"),
    )),
    Group("Runs (the starter's knobs over the lanes file, recorded in the run's configuration)", (
        EnvVar("MAX_PARALLEL_HELPERS", "starter", "`swarm.max_parallel`", "lanes running at once"),
        EnvVar("MAX_HELPER_LOOPS", "starter", "`swarm.max_helper_loops`", "dispatches per lane and run"),
        EnvVar("MAX_CONSECUTIVE_TEST_FAILS", "starter", "`swarm.max_consecutive_test_fails`",
               "failed checks in a row before the run stops repairing"),
        EnvVar("TEST_PROFILE", "starter", "`validation.profile`", "the check profile the run uses"),
        EnvVar("VALIDATION_TIMEOUT_S", "starter", "",
               "the `timeout_s` of every check profile that sets none of its own (a profile's own `timeout_s` wins)"),
        EnvVar("BASE_BRANCH", "starter", "`HEAD`", "the commit (branch, tag, sha) the swarm starts from"),
        EnvVar("SWARM_BRANCH", "starter", "`swarm/<run>`", "the delivered branch; must not exist yet"),
        EnvVar("REPOSWARM_REVIEWER", "CLI", "your login", "the name kept with your review decisions"),
        EnvVar("REPOSWARM_DECISION_WAIT_S", "CLI", "20", "how long an approve or reject waits for a worker to take it"),
        EnvVar("REPOSWARM_QUERY_TIMEOUT_S", "CLI", "8", "how long a command waits for a worker to answer a query"),
        EnvVar("VISUAL", "CLI", "`EDITOR`, else `vi`", "the editor a proposal's lanes are edited in"),
        EnvVar("EDITOR", "CLI", "`vi`", "the editor, where VISUAL is unset"),
    )),
    Group("Home, worker and hosts", (
        EnvVar("REPOSWARM_HOME", "every entry point", "`~/.reposwarm`",
               "the one home: worktrees, the content store, ledgers, review packages, the dev server's database and log"),
        EnvVar("REPOSWARM_STATE_DIR", "`dev-server`", "", "the older name of REPOSWARM_HOME, read first"),
        EnvVar("PYTHON", "make, ./temporal-dev", "`python3`; ./temporal-dev: `.venv/bin/python`",
               "the interpreter that makes `.venv`, and that ./temporal-dev runs", _CHECKOUT),
        EnvVar("REPOSWARM_WORKER_CONCURRENCY", "worker", "128", "a worker's activities at once (`worker --concurrency`)"),
        EnvVar("REPOSWARM_CHECK_SLOTS", "worker", "the CPUs the worker may use", "checks this host runs at once"),
        EnvVar("REPOSWARM_WORKER_WAIT_S", "`demo`, `try`, `lane-test`", "90",
               "how long a worker they start is waited for"),
        EnvVar("REPOSWARM_AFFINITY", "worker", "`auto`",
               "`auto`, `shared` or `host`: where lane worktree activities go (docs/deployment.md)"),
        EnvVar("REPOSWARM_HOST_ID", "worker", "the machine's name and a hash of REPOSWARM_HOME",
               "names this worker's host for host affinity"),
        EnvVar("REPOSWARM_OBJECT_STORE", "worker, starter, CLI", "the local folder",
               "`s3://bucket/prefix`: large payloads and the runs' files in an object store hosts share"),
        EnvVar("REPOSWARM_PAYLOAD_THRESHOLD", "worker, starter, CLI", "131072",
               "payloads of this many bytes or more go to the object store"),
        EnvVar("AWS_ENDPOINT_URL", "worker, starter, CLI", "AWS", "the object store's endpoint (MinIO, R2...)", _BOTO3),
        EnvVar("AWS_ENDPOINT_URL_S3", "worker, starter, CLI", "AWS_ENDPOINT_URL", "the same, for S3 only", _BOTO3),
        EnvVar("AWS_DEFAULT_REGION", "worker, starter, CLI", "", "the object store's region", _BOTO3),
        EnvVar("AWS_REGION", "worker, starter, CLI", "", "the same (boto3 reads either)", _BOTO3),
        EnvVar("AWS_PROFILE", "worker, starter, CLI", "", "the AWS profile whose credentials to use", _BOTO3),
        EnvVar("AWS_ACCESS_KEY_ID", "worker, starter, CLI", "", "object store credentials (redacted from the ledger, "
               "never seen by checks)", _BOTO3),
        EnvVar("AWS_SECRET_ACCESS_KEY", "worker, starter, CLI", "", "the same", _BOTO3),
        EnvVar("AWS_SESSION_TOKEN", "worker, starter, CLI", "", "the same, for temporary credentials", _BOTO3),
    )),
    Group("Checks (the worker's)", (
        EnvVar("REPOSWARM_SANDBOX", "worker", "`on`",
               "`off` runs checks without the sandbox (said in status, review and the Web UI)"),
        EnvVar("REPOSWARM_BWRAP", "worker", "`bwrap` on PATH", "the bubblewrap binary"),
        EnvVar("REPOSWARM_CHECK_ENV_PASS", "worker", "",
               "variables (comma-separated) check commands may see, by name"),
        EnvVar("REPOSWARM_CHECK_NICE", "worker", "10",
               "how far below the worker check commands run (0-19), so heavy checks do not starve its heartbeats"),
        EnvVar("REPOSWARM_EVIDENCE", "worker", "`on`",
               "`off`: take no evidence of which files the checks loaded (a benchmark's switch; docs/checks.md)"),
        EnvVar("PATH", "worker", "", "where check programs are found; checks see it (rustup's proxies resolved)"),
        EnvVar("LANG", "worker", "", "passed to checks by name"),
        EnvVar("TZ", "worker", "", "passed to checks by name"),
        EnvVar("TERM", "worker", "", "passed to checks by name"),
        EnvVar("HOME", "worker", "the user's home", "where the worker's toolchains are (checks get a private HOME)"),
        EnvVar("LC_ALL", "worker", "", "passed to checks only with REPOSWARM_SANDBOX=off, or named in "
               "REPOSWARM_CHECK_ENV_PASS"),
        EnvVar("LC_CTYPE", "worker", "", "the same"),
        EnvVar("TMPDIR", "worker", "", "passed to checks only with REPOSWARM_SANDBOX=off"),
        EnvVar("USER", "worker", "", "passed to checks only with REPOSWARM_SANDBOX=off"),
        EnvVar("VIRTUAL_ENV", "worker, `try`, `checks`, `lanes`", "",
               "the active virtual environment: a Python a detected check profile may use"),
        EnvVar("CARGO_HOME", "worker", "`~/.cargo`", "where cargo keeps its registry and tools; checks read it"),
        EnvVar("RUSTUP_HOME", "worker", "`~/.rustup`", "where rustup keeps its toolchains; checks read it"),
        EnvVar("RUSTUP_TOOLCHAIN", "worker", "", "the Rust toolchain rustup picks"),
        EnvVar("GOPATH", "worker", "`~/go`", "where Go keeps its modules (with no GOMODCACHE)"),
        EnvVar("GOMODCACHE", "worker", "`$GOPATH/pkg/mod`",
               "the worker's Go module downloads: Go checks read modules from them, read-only"),
        EnvVar("GOFLAGS", "worker", "", "kept for Go checks when named in REPOSWARM_CHECK_ENV_PASS"),
        EnvVar("GOPROXY", "worker", "`https://proxy.golang.org,direct`",
               "where a Go check with `network: true` downloads modules the worker's downloads lack"),
        EnvVar("GOROOT", "worker", "", "the Go toolchain, passed to checks where set"),
        EnvVar("ASDF_DATA_DIR", "worker", "`~/.asdf`", "asdf's toolchains, passed to checks where not the default"),
        EnvVar("ASDF_DIR", "worker", "`~/.asdf`", "the same"),
        EnvVar("ASDF_CONFIG_FILE", "worker", "`~/.asdfrc`", "the same"),
        EnvVar("REPOSWARM_SUPERVISOR_NICE", "a check's supervisor", "",
               "internal: set by the worker for the process that runs a check; not for users"),
    )),
    Group("Delivery and telemetry", (
        EnvVar("GITHUB_TOKEN", "worker", "", "the token that opens a pull request (`delivery.pull_request`)"),
        EnvVar("GH_TOKEN", "worker", "", "the same, where GITHUB_TOKEN is unset"),
        EnvVar("GITHUB_API_URL", "worker", "`https://api.github.com`", "GitHub Enterprise's API"),
        EnvVar("OTEL_EXPORTER_OTLP_ENDPOINT", "worker, starter", "", "traces and metrics to this OTLP endpoint"),
        EnvVar("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "worker, starter", "OTEL_EXPORTER_OTLP_ENDPOINT",
               "traces only"),
        EnvVar("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT", "worker, starter", "OTEL_EXPORTER_OTLP_ENDPOINT",
               "metrics only"),
        EnvVar("OTEL_TRACES_EXPORTER", "worker, starter", "", "`console`: print spans"),
        EnvVar("OTEL_SERVICE_NAME", "worker, starter", "`reposwarm-worker` (worker), `reposwarm` (the others)",
               "the service name on traces"),
        EnvVar("REPOSWARM_PROMETHEUS", "worker, starter", "", "`host:port`: serve Temporal's metrics for Prometheus"),
        EnvVar("REPOSWARM_SCREENSHOTS", "tests/test_webui.py", "", "`update`: rewrite the docs' Web UI screenshots",
               "tests"),
    )),
)

VARIABLES: tuple[EnvVar, ...] = tuple(v for group in GROUPS for v in group.variables)


def by_name() -> dict[str, EnvVar]:
    return {v.name: v for v in VARIABLES}
