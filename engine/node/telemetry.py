"""Exporting the engine's spans over OTLP (seed 002, "Tracing", "OTLP Export").

The standard variables, read by the OpenTelemetry SDK's own OTLP/HTTP exporter:
`OTEL_EXPORTER_OTLP_ENDPOINT` (the collector's base URL: `/v1/traces` is appended) or
`OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` (the full URL), with `..._HEADERS`, `..._TIMEOUT`,
`..._COMPRESSION`, `..._CERTIFICATE` and the client certificate pair, the service name
(`OTEL_SERVICE_NAME`, "crewlet" unless set) and the sampler (`OTEL_TRACES_SAMPLER[_ARG]`).
"When either is set the engine installs a batching exporter at startup and flushes it during
shutdown, after the drain, so the spans a shutdown itself produces are exported rather than
dropped." Without them spans are still made and their ids still reach every event; nothing
ships them anywhere.

The protocol is HTTP/protobuf: `OTEL_EXPORTER_OTLP_[TRACES_]PROTOCOL` set to anything else
is refused by name at boot rather than silently sending another. `OTEL_SDK_DISABLED=true` and
`OTEL_TRACES_EXPORTER=none` leave the exporter off, as the SDK's own conventions say.

Django's own instrumentation (opentelemetry-instrumentation-django) spans the HTTP surface
Django serves -- the REST routes, the dashboard, the admin -- under the same provider; it
must be attached before the ASGI application loads its middleware, which the node's command
does first thing.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping
from urllib.parse import urlsplit

from opentelemetry.sdk.trace import ReadableSpan, Span, SpanProcessor
from opentelemetry.sdk.trace.export import BatchSpanProcessor

from events import tracing

ENDPOINTS = ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT")
PROTOCOLS = ("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL")
SUPPORTED_PROTOCOL = "http/protobuf"
NODE_ATTRIBUTE = "crewlet.node"
FLUSH_SECONDS = 5.0  # the shutdown's flush: a collector that does not answer is not waited on longer


class TelemetryRefused(ValueError):
    """An OTEL_* variable this build cannot honour; the message names it and the fix."""


class NodeStamp(SpanProcessor):
    """Stamps every span with the node that made it, so a trace across the fleet says where
    each of its spans ran."""

    def __init__(self, node_id: str) -> None:
        self.node_id = node_id

    def on_start(self, span: Span, parent_context=None) -> None:
        span.set_attribute(NODE_ATTRIBUTE, self.node_id)

    def on_end(self, span: ReadableSpan) -> None:
        pass


@dataclass
class Exporting:
    """The attached exporter: `flush()` once the node has drained."""

    processor: BatchSpanProcessor
    endpoint: str

    def flush(self, seconds: float = FLUSH_SECONDS) -> bool:
        done = self.processor.force_flush(int(seconds * 1000))
        self.processor.shutdown()
        return bool(done)


def wanted(env: Mapping[str, str]) -> bool:
    """Whether the variables ask for an OTLP exporter."""
    if env.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    exporters = [e.strip().lower() for e in env.get("OTEL_TRACES_EXPORTER", "otlp").split(",") if e.strip()]
    if "otlp" not in exporters:
        return False
    return any(env.get(name, "").strip() for name in ENDPOINTS)


def check(env: Mapping[str, str]) -> None:
    """TelemetryRefused naming a protocol variable this build does not speak."""
    for name in PROTOCOLS:
        value = env.get(name, "").strip().lower()
        if value and value != SUPPORTED_PROTOCOL:
            raise TelemetryRefused(f"{name}: {value!r} is not supported; this build exports OTLP over "
                                   f"{SUPPORTED_PROTOCOL} (unset it, or set {SUPPORTED_PROTOCOL})")


def attach(env: Mapping[str, str], node_id: str, *, django: bool = True) -> Exporting | None:
    """Attach the OTLP exporter and Django's instrumentation to the engine's tracer provider
    when the variables ask for it; None when they do not. TelemetryRefused for a variable this
    build cannot honour. Call it once per process, before the ASGI application is built."""
    if not wanted(env):
        return None
    check(env)
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

    provider = tracing.tracer_provider()
    exporter = OTLPSpanExporter()  # endpoint, headers, timeout, compression, TLS: from the variables
    processor = BatchSpanProcessor(exporter)
    provider.add_span_processor(NodeStamp(node_id))
    provider.add_span_processor(processor)
    if django:
        from opentelemetry.instrumentation.django import DjangoInstrumentor

        DjangoInstrumentor().instrument(tracer_provider=provider)
    return Exporting(processor, endpoint_of(env))


def endpoint_of(env: Mapping[str, str]) -> str:
    """Where spans go, as a log line may name it: scheme, host, port and path, no userinfo."""
    full = env.get(ENDPOINTS[0], "").strip()
    url = full or env.get(ENDPOINTS[1], "").strip().rstrip("/") + "/v1/traces"
    parts = urlsplit(url)
    host = parts.hostname or ""
    port = f":{parts.port}" if parts.port else ""
    return f"{parts.scheme}://{host}{port}{parts.path}"
