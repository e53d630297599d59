"""Finding 11: bad input answered 500 (each with a 3 KB traceback in the log): a 400-digit Slack
timestamp, 100,000-deep JSON to Mattermost, a time past the year 9999 in UTC (since, until, a
cursor, and the same over /ws/stream), `/dashboard/traces/?trace_id=../..`, and a deeply nested
/ws/stream frame, which dropped the socket without a close frame. Each now answers a 4xx naming
what was wrong, without a traceback, and the socket is kept or closed cleanly."""
from __future__ import annotations

import base64
import json
import uuid
from urllib.parse import quote

import pytest
from websockets.sync.client import connect as ws_connect

from tests.node.harness import READER
from tests.notify import deliveries as d
from tests.notify.http import post
from tests.security.conftest import Session, make_user, no_traceback, still_ready

pytestmark = pytest.mark.timeout(120)

FAR = "9999-12-31T23:59:59-14:00"  # the year 10000 in UTC


def test_a_four_hundred_digit_slack_timestamp_is_refused_401_naming_the_header(node):
    body = d.dumps(d.slack_message("<@U0ALICE> hi"))
    headers = d.slack_headers(body, stamp=int("9" * 400))
    status, answer, _ = post(node, "/webhooks/slack", body, headers)
    assert status == 401, answer
    assert answer["header"] == "X-Slack-Request-Timestamp" and "expected Unix seconds" in answer["detail"]


def test_hundred_thousand_deep_json_to_mattermost_is_refused_by_name(node):
    token = json.dumps(d.SECRETS["mattermost"])
    deep = ('{"token": ' + token + ', "x": ' + "[" * 100_000 + "]" * 100_000 + "}").encode()
    status, answer, _ = post(node, "/webhooks/mattermost", deep, d.mattermost_headers())
    assert status == 400, answer
    assert answer["detail"] == "body: JSON nested too deep to read (a delivery nests a few levels)"
    unsigned = ("[" * 100_000 + "]" * 100_000).encode()
    status, answer, _ = post(node, "/webhooks/mattermost", unsigned, d.mattermost_headers())
    assert status == 401 and answer["header"] == "token"


@pytest.mark.parametrize("param", ["since", "until"])
def test_a_time_past_the_year_9999_in_utc_is_a_422_naming_the_parameter(node, param):
    status, body, _ = node.get(f"/events?{param}={quote(FAR)}", token=READER)
    assert status == 422, body
    assert body["detail"].startswith(f"{param}: ") and "outside the years 1 to 9999" in body["detail"]


def test_a_cursor_holding_such_a_time_is_a_422_naming_the_cursor(node):
    cursor = base64.urlsafe_b64encode(f"{FAR}|{uuid.uuid4().hex}".encode()).rstrip(b"=").decode()
    status, body, _ = node.get(f"/events?cursor={cursor}", token=READER)
    assert status == 422 and body["detail"].startswith("cursor: ")


def _socket(node):
    return ws_connect(f"ws://127.0.0.1:{node.port}/ws/stream", subprotocols=["crewlet.bearer", READER],
                      max_size=None, open_timeout=10)


def _frame_of(socket, kind: str) -> dict:
    while True:
        message = json.loads(socket.recv(timeout=10))
        for frame in message if isinstance(message, list) else [message]:
            if frame.get("type") == kind:
                return frame


def test_the_same_times_over_the_socket_are_error_frames_and_the_socket_stays(node):
    with _socket(node) as socket:
        _frame_of(socket, "snapshot")
        for args in ({"since": FAR}, {"until": FAR}):
            socket.send(json.dumps({"id": 1, "query": "events_page", "args": args}))
            error = _frame_of(socket, "error")
            assert error["status"] == 422 and next(iter(args)) in error["detail"]
        socket.send(json.dumps({"id": 2, "query": "events_page", "args": {"limit": 1}}))
        assert _frame_of(socket, "answer")["id"] == 2


def test_a_deeply_nested_frame_is_answered_400_and_the_socket_closes_cleanly(node):
    with _socket(node) as socket:
        _frame_of(socket, "snapshot")
        socket.send("[" * 100_000 + "]" * 100_000)
        error = _frame_of(socket, "error")
        assert error["status"] == 400 and error["detail"].startswith("frame: nested too deep")
        socket.send(json.dumps({"id": 3, "query": "seats"}))
        assert _frame_of(socket, "answer")["id"] == 3
        socket.close()  # a clean close: the server answers the close frame
    assert socket.close_code == 1000


def test_a_pasted_trace_id_that_is_a_path_is_a_422_naming_it(node):
    make_user(node, "tracer", "a-tracer-password-0123")
    session = Session(node.base)
    assert session.sign_in("tracer", "a-tracer-password-0123")[0] == 302
    status, _, text = session.request("GET", "/dashboard/traces/?trace_id=../..")
    assert status == 422
    assert "q: expected a trace id, an event id or a task id" in text
    still_ready(node)
    no_traceback(node)


def test_each_refusal_above_logged_one_line_naming_it(node):
    said = {line.get("msg") for line in node.log_lines()}
    assert {"webhook_refused", "webhook_unreadable", "api_request_refused", "stream_query_refused",
            "stream_frame_refused", "dashboard_bad_input"} <= said
    no_traceback(node)
