"""OTLP export's switches (seed 002, "OTLP Export"): the standard variables decide whether the
exporter is attached, a protocol this build does not speak is refused by name before the node
binds anything, and what a log line names of the endpoint carries no credentials. The export
itself is received from real node processes in test_fleet_history.py."""
from __future__ import annotations

import pytest

from engine.node import telemetry
from tests.node.harness import NodeProcess

pytestmark = pytest.mark.timeout(60)


@pytest.mark.parametrize(("env", "wanted"), [
    ({}, False),
    ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318"}, True),
    ({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://collector:4318/v1/traces"}, True),
    ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318", "OTEL_SDK_DISABLED": "true"}, False),
    ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318", "OTEL_TRACES_EXPORTER": "none"}, False),
    ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318", "OTEL_TRACES_EXPORTER": "console,otlp"}, True),
    ({"OTEL_EXPORTER_OTLP_ENDPOINT": "  "}, False),
])
def test_the_standard_variables_decide_whether_spans_are_exported(env, wanted):
    assert telemetry.wanted(env) is wanted


def test_only_http_protobuf_is_accepted_and_the_refusal_names_the_variable():
    telemetry.check({"OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf"})
    with pytest.raises(telemetry.TelemetryRefused) as refused:
        telemetry.check({"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "grpc"})
    assert str(refused.value).startswith("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL: 'grpc' is not supported")


def test_the_endpoint_a_log_line_names_carries_no_credentials():
    assert telemetry.endpoint_of({"OTEL_EXPORTER_OTLP_ENDPOINT": "https://user:secret@collector:4318/"}) == \
        "https://collector:4318/v1/traces"
    assert telemetry.endpoint_of({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://c:1/custom"}) == "http://c:1/custom"


def test_a_node_asked_for_another_protocol_exits_2_naming_it(tmp_path):
    node = NodeProcess(home=tmp_path / "node-1")
    node.start(env={"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:9", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"})
    try:
        assert node.wait_exit(30) == 2
        assert "crewlet: OTEL_EXPORTER_OTLP_PROTOCOL: 'grpc' is not supported" in node.log_text()
    finally:
        node.stop()
