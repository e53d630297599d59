"""The spans a test's code opened, as an exporter receives them: the OpenTelemetry SDK's own
in-memory exporter on the engine's tracer provider (attached once per test process; the
provider has no way to detach one), emptied for each test that reads it."""
from __future__ import annotations

import pytest
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from events import tracing

_exporter: InMemorySpanExporter | None = None


@pytest.fixture
def spans() -> InMemorySpanExporter:
    global _exporter
    if _exporter is None:
        _exporter = InMemorySpanExporter()
        tracing.tracer_provider().add_span_processor(SimpleSpanProcessor(_exporter))
    _exporter.clear()
    return _exporter
