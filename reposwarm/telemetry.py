"""OpenTelemetry for reposwarm: traces through temporalio's tracing interceptor, Temporal's runtime metrics.

Configured by the standard variables: OTEL_EXPORTER_OTLP_ENDPOINT (or
OTEL_EXPORTER_OTLP_TRACES_ENDPOINT) exports traces over OTLP/HTTP, and the
runtime's metrics too; OTEL_TRACES_EXPORTER=console prints spans; OTEL_SERVICE_NAME
names the service. REPOSWARM_PROMETHEUS=HOST:PORT serves Temporal's metrics for scraping.
With none of them set, nothing is exported and nothing is slowed down: OpenTelemetry is not even imported (a
tenth of a second of every command's start).
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from opentelemetry.sdk.trace.export import SpanExporter
    from temporalio.contrib.opentelemetry import TracingInterceptor
    from temporalio.runtime import Runtime

_configured = False


def _exporter() -> tuple[SpanExporter, bool] | None:
    if os.environ.get("OTEL_TRACES_EXPORTER", "").lower() == "console":
        from opentelemetry.sdk.trace.export import ConsoleSpanExporter

        return ConsoleSpanExporter(), True
    if os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT") or os.environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"):
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        return OTLPSpanExporter(), False  # endpoint, headers and timeout from the OTEL_* variables
    return None


def setup_tracing(service: str, exporter: SpanExporter | None = None) -> list[TracingInterceptor]:
    """Install a tracer provider if one is configured; returns the interceptors for client and worker."""
    global _configured
    chosen = (exporter, True) if exporter is not None else _exporter()
    if chosen is None:
        return []
    from opentelemetry import trace
    from opentelemetry.sdk.resources import SERVICE_NAME, Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor
    from temporalio.contrib.opentelemetry import TracingInterceptor

    if not _configured:
        provider = TracerProvider(resource=Resource.create({SERVICE_NAME: os.environ.get("OTEL_SERVICE_NAME", service)}))
        span_exporter, simple = chosen
        provider.add_span_processor(SimpleSpanProcessor(span_exporter) if simple else BatchSpanProcessor(span_exporter))
        trace.set_tracer_provider(provider)
        _configured = True
    return [TracingInterceptor()]


def runtime() -> Runtime | None:
    """A Temporal runtime exporting its own metrics, when asked to."""
    endpoint = os.environ.get("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT") or os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT")
    prometheus = os.environ.get("REPOSWARM_PROMETHEUS")
    from temporalio.runtime import OpenTelemetryConfig, PrometheusConfig, Runtime, TelemetryConfig

    if prometheus:
        return Runtime(telemetry=TelemetryConfig(metrics=PrometheusConfig(bind_address=prometheus)))
    if endpoint:
        return Runtime(telemetry=TelemetryConfig(metrics=OpenTelemetryConfig(url=endpoint, http=True)))
    return None
