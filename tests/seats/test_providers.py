"""Model providers (DESIGN.md, deliberate difference 4): the scripted kind, and the openai kind
against a real OpenAI-compatible endpoint this module starts on 127.0.0.1.

The endpoint is `http.server` in a thread speaking /v1/chat/completions JSON, answering from a
script of replies, so every status, header and malformed body a case needs crosses a real
socket. Waits between retries go through an injected `sleep` that records them: a case sees
the Retry-After it was told to honour instead of sitting through it.
"""
from __future__ import annotations

import json
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
import yaml

from engine.config.company import Company, parse_company
from seats.providers import Completion, OpenAIProvider, ProviderError, ScriptedProvider, approx_tokens
from tests.ports import PortHold

pytestmark = pytest.mark.timeout(30)

API_KEY = "sk-test-key"


@dataclass
class Reply:
    """One scripted answer: a status, headers and a body (a dict is sent as JSON); `hang`
    holds the request open until the endpoint stops, so the client times out first."""

    status: int = 200
    body: Any = None
    headers: dict[str, str] = field(default_factory=dict)
    hang: bool = False


def chat_body(text: str = "Done.", *, prompt_tokens: int | None = 11, completion_tokens: int | None = 3,
              finish_reason: str = "stop", model: str = "test-model") -> dict:
    doc: dict[str, Any] = {
        "id": "chatcmpl-1", "object": "chat.completion", "model": model,
        "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": finish_reason}],
    }
    if prompt_tokens is not None:
        doc["usage"] = {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                        "total_tokens": prompt_tokens + (completion_tokens or 0)}
    return doc


class ChatEndpoint:
    """A real model endpoint (any path: OpenAI's chat completions, Anthropic's messages); replies
    are taken from `script` in order, then from `responder(request)` when one is set (a success
    once both run out), and every request is kept in `requests`."""

    def __init__(self) -> None:
        self.script: list[Reply] = []
        self.responder: Any = None
        self.requests: list[dict[str, Any]] = []
        self._release = threading.Event()
        self._lock = threading.Lock()
        endpoint = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args) -> None:  # keep the test output quiet
                pass

            def do_POST(self) -> None:
                raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                with endpoint._lock:
                    request = {"path": self.path, "headers": dict(self.headers), "body": json.loads(raw or b"null")}
                    endpoint.requests.append(request)
                    if endpoint.script:
                        reply = endpoint.script.pop(0)
                    elif endpoint.responder is not None:
                        reply = endpoint.responder(request)
                    else:
                        reply = Reply(body=chat_body())
                if reply.hang:
                    endpoint._release.wait(30)
                    return
                body = reply.body if isinstance(reply.body, (bytes, str)) else json.dumps(reply.body)
                body = body.encode() if isinstance(body, str) else body
                try:
                    self.send_response(reply.status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(body)))
                    for name, value in reply.headers.items():
                        self.send_header(name, value)
                    self.end_headers()
                    self.wfile.write(body)
                except OSError:
                    pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        # a short poll so stop() returns promptly rather than after serve_forever's default 0.5 s
        self._thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.02},
                                        name="chat-endpoint", daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/v1"

    def start(self) -> "ChatEndpoint":
        self._thread.start()
        return self

    def stop(self) -> None:
        self._release.set()
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def endpoint():
    server = ChatEndpoint().start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def closed_port_url():
    """A 127.0.0.1 URL nothing listens on, held so for the test: the port stays bound here and
    never listening, so a connection to it is refused whatever else runs on the host."""
    with PortHold() as hold:
        yield f"http://127.0.0.1:{hold.port}/v1"


def company_of(providers: list[dict], **extra) -> Company:
    """A company with these providers and one agent seat, alice (api keys from ${LLM_KEY})."""
    doc = {"name": "acme", "providers": {"llm": providers},
           "org": {"seats": [{"handle": "maya", "kind": "human"},
                             {"handle": "alice", "kind": "agent", "role": "engineer", "title": "Staff Engineer",
                              "reports_to": "maya"}]}}
    doc.update(extra)
    return parse_company(yaml.safe_dump(doc), env={"LLM_KEY": API_KEY})


def openai_entry(base_url: str, name: str = "main", **settings) -> dict:
    return {"name": name, "kind": "openai", "base_url": base_url, "model": "test-model",
            "api_key": "${LLM_KEY}", **settings}


class Waits:
    """An injected sleep that records what it was asked to wait, and waits for nothing."""

    def __init__(self) -> None:
        self.seconds: list[float] = []

    async def __call__(self, seconds: float) -> None:
        self.seconds.append(seconds)


def openai_provider(base_url: str, waits: Waits | None = None, **settings) -> OpenAIProvider:
    config = company_of([openai_entry(base_url, **settings)]).providers.llm[0]
    return OpenAIProvider(config, sleep=waits or Waits(), jitter=lambda: 0.0)


MESSAGES = [{"role": "system", "content": "You are alice."}, {"role": "user", "content": "Ship it."}]


# -- scripted ---------------------------------------------------------------------------------

async def test_the_scripted_provider_fills_its_template_and_counts_tokens_by_length():
    config = company_of([{"name": "demo", "kind": "scripted",
                          "reply": "{seat} ({role}) on {trigger_summary} in turn {turn}; {unknown} stays"}]).providers.llm[0]
    provider = ScriptedProvider(config, variables={"seat": "alice", "role": "engineer",
                                                   "trigger_summary": "a bug", "turn": "t-1"})
    done = await provider.complete(MESSAGES, max_tokens=1000)
    assert done.text == "alice (engineer) on a bug in turn t-1; {unknown} stays"
    assert done.tokens_out == approx_tokens(done.text) == -(-len(done.text) // 4)
    assert done.tokens_in == -(-len("You are alice.Ship it.") // 4)
    assert (done.stop_reason, done.model, provider.key) == ("end", "scripted", "demo")
    assert await provider.complete(MESSAGES, max_tokens=1000) == done  # deterministic


async def test_a_scripted_reply_longer_than_max_tokens_is_cut_with_stop_reason_max_tokens():
    config = company_of([{"name": "demo", "kind": "scripted", "reply": "x" * 100}]).providers.llm[0]
    done = await ScriptedProvider(config).complete(MESSAGES, max_tokens=5)
    assert (done.text, done.tokens_out, done.stop_reason) == ("x" * 20, 5, "max_tokens")


async def test_the_scripted_default_reply_names_the_trigger():
    config = company_of([{"name": "demo", "kind": "scripted"}]).providers.llm[0]
    done = await ScriptedProvider(config, variables={"trigger_summary": "octo opened #12"}).complete(MESSAGES, max_tokens=99)
    assert done.text == "On it. (octo opened #12)"


# -- openai -----------------------------------------------------------------------------------

async def test_a_completion_carries_the_text_usage_and_model_and_the_request_is_the_chat_shape(endpoint):
    endpoint.script = [Reply(body=chat_body("Shipped.", prompt_tokens=42, completion_tokens=7, model="m-2024"))]
    done = await openai_provider(endpoint.base_url).complete(MESSAGES, max_tokens=256)
    assert done == Completion(text="Shipped.", tokens_in=42, tokens_out=7, stop_reason="end", model="m-2024")
    [request] = endpoint.requests
    assert request["path"] == "/v1/chat/completions"
    assert request["headers"]["Authorization"] == f"Bearer {API_KEY}"
    assert request["body"] == {"model": "test-model", "messages": MESSAGES, "max_tokens": 256}


async def test_a_429_is_retried_after_the_servers_retry_after_then_succeeds(endpoint):
    waits = Waits()
    endpoint.script = [Reply(429, {"error": {"message": "slow down"}}, {"Retry-After": "7"}),
                       Reply(body=chat_body("Finally."))]
    done = await openai_provider(endpoint.base_url, waits).complete(MESSAGES, max_tokens=64)
    assert done.text == "Finally."
    assert len(endpoint.requests) == 2
    assert waits.seconds == [7.0]


async def test_a_500_is_retried_up_to_max_retries_with_growing_backoff_then_is_a_server_error(endpoint):
    waits = Waits()
    endpoint.script = [Reply(500, {"error": {"message": "boom"}})] * 4
    with pytest.raises(ProviderError) as info:
        await openai_provider(endpoint.base_url, waits, max_retries=2).complete(MESSAGES, max_tokens=64)
    assert (info.value.kind, info.value.status, info.value.retryable) == ("server", 500, True)
    assert "boom" in str(info.value) and info.value.provider_key == "main"
    assert len(endpoint.requests) == 3  # the first attempt and two retries
    assert len(waits.seconds) == 2 and waits.seconds[0] < waits.seconds[1]


async def test_a_401_is_not_retried_and_is_an_auth_error_that_never_shows_the_key(endpoint):
    waits = Waits()
    endpoint.script = [Reply(401, {"error": {"message": "Incorrect API key provided"}})]
    with pytest.raises(ProviderError) as info:
        await openai_provider(endpoint.base_url, waits).complete(MESSAGES, max_tokens=64)
    assert (info.value.kind, info.value.retryable, info.value.status) == ("auth", False, 401)
    assert len(endpoint.requests) == 1 and waits.seconds == []
    assert API_KEY not in str(info.value)


async def test_another_4xx_is_a_bad_request_and_not_retried(endpoint):
    endpoint.script = [Reply(400, {"error": {"message": "max_tokens is too large"}})]
    with pytest.raises(ProviderError) as info:
        await openai_provider(endpoint.base_url).complete(MESSAGES, max_tokens=64)
    assert info.value.kind == "bad_request" and "max_tokens is too large" in str(info.value)
    assert len(endpoint.requests) == 1


async def test_an_endpoint_that_does_not_answer_in_time_is_a_timeout_and_not_retried(endpoint):
    endpoint.script = [Reply(hang=True)]
    with pytest.raises(ProviderError) as info:
        await openai_provider(endpoint.base_url, timeout_seconds=0.2).complete(MESSAGES, max_tokens=64)
    assert info.value.kind == "timeout"
    assert len(endpoint.requests) == 1


@pytest.mark.parametrize("body", [b"{not json", {"choices": []}, {"choices": [{"message": {"content": 5}}]}])
async def test_a_body_that_is_no_chat_completion_is_a_bad_response(endpoint, body):
    endpoint.script = [Reply(200, body)]
    with pytest.raises(ProviderError) as info:
        await openai_provider(endpoint.base_url).complete(MESSAGES, max_tokens=64)
    assert (info.value.kind, info.value.retryable) == ("bad_response", False)
    assert len(endpoint.requests) == 1


async def test_an_endpoint_nobody_listens_on_is_retried_then_unreachable(closed_port_url):
    waits = Waits()
    with pytest.raises(ProviderError) as info:
        await openai_provider(closed_port_url, waits, max_retries=1).complete(MESSAGES, max_tokens=64)
    assert info.value.kind == "unreachable" and info.value.retryable
    assert len(waits.seconds) == 1


async def test_a_retry_after_longer_than_a_turn_should_wait_hands_off_at_once(endpoint):
    waits = Waits()
    endpoint.script = [Reply(429, {}, {"Retry-After": "3600"})]
    with pytest.raises(ProviderError) as info:
        await openai_provider(endpoint.base_url, waits).complete(MESSAGES, max_tokens=64)
    assert info.value.kind == "rate_limited"
    assert len(endpoint.requests) == 1 and waits.seconds == []


async def test_finish_reasons_read_as_the_seeds_stop_reasons_and_missing_usage_is_estimated(endpoint):
    endpoint.script = [Reply(body=chat_body("abcdefgh", prompt_tokens=None, finish_reason="length"))]
    done = await openai_provider(endpoint.base_url).complete(MESSAGES, max_tokens=2)
    assert done.stop_reason == "max_tokens"
    assert (done.tokens_in, done.tokens_out) == (approx_tokens("You are alice.Ship it."), 2)
