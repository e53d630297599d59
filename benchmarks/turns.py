"""Tool-loop figures, printed (not a test).

    .venv/bin/python benchmarks/turns.py [--quick]

Turns of 10 rounds each: in rounds 1-9 the model asks for one tool call, in round 10 it answers.
The model is a local OpenAI-compatible server that answers at once (its own process, uvicorn),
and the tool is a local MCP server (the `mcp` SDK's FastMCP over stdio) whose `echo` answers at
once. The turn engine runs as a node runs it: the real provider chain through the `openai` SDK,
the node's tool servers, token budgets and conversation memory on the in-process coordination
store, and every event published to the embedded broker. Per round it prints p50 and p99 of
  - the engine's own time: the round less the model call and less the round of tools (the
    fence, stop and guard checks, the budget check and charge, the schema check, the records,
    the live progress events) -- target p50 under 2 ms;
  - the model call (the provider chain through the SDK, over local HTTP);
  - the MCP call through the engine (the toolbox: schema check, dispatch, the SDK call);
beside baselines measured in the same run: the same `echo` call made directly with the `mcp`
client on a session of its own -- target: through the engine within 1.3x of it -- and the same
chat-completions request as a raw httpx POST (what the SDK costs over the wire).
"""
from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

sys.path[0] = str(Path(__file__).resolve().parent.parent)
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "crewlet_site.settings")

import django  # noqa: E402

django.setup()

import yaml  # noqa: E402
from mcp import ClientSession, StdioServerParameters  # noqa: E402
from mcp.client.stdio import stdio_client  # noqa: E402

from engine.config.company import parse_company  # noqa: E402
from engine.coord.local import LocalCoord  # noqa: E402
from engine.queue import topics  # noqa: E402
from engine.queue.broker import EmbeddedBroker  # noqa: E402
from engine.queue.contract import Tuning  # noqa: E402
from engine.queue.jetstream import JetStreamQueue  # noqa: E402
from engine.server import loop_factory  # noqa: E402
from events.envelope import new  # noqa: E402
from events.tracing import trace_of  # noqa: E402
from events.types.notification import ExternalNotification  # noqa: E402
from seats.budgets import Budgets  # noqa: E402
from seats.memory import ConversationMemory  # noqa: E402
from seats.tools.servers import ToolServers  # noqa: E402
from seats.turn import TurnEngine, TurnRequest  # noqa: E402

ROUNDS = 10

TOOL_SERVER = '''
from mcp.server.fastmcp import FastMCP
server = FastMCP("bench", log_level="WARNING")

@server.tool()
def echo(text: str) -> str:
    """Returns its text."""
    return text

server.run()
'''

# An OpenAI-compatible endpoint that answers at once: a tool call until the conversation holds
# ROUNDS - 1 tool results, then a final answer.
MODEL_SERVER = '''
import json, sys
import uvicorn

ROUNDS = int(sys.argv[2])

def answer(body):
    done = sum(1 for m in body["messages"] if m["role"] == "tool")
    if done < ROUNDS - 1:
        message = {"role": "assistant", "content": None, "tool_calls": [{"id": f"call_{done}", "type": "function",
                   "function": {"name": "bench__echo", "arguments": json.dumps({"text": f"round {done + 1}"})}}]}
        finish = "tool_calls"
    else:
        message, finish = {"role": "assistant", "content": "done"}, "stop"
    return {"id": "c", "object": "chat.completion", "model": "bench", "choices": [{"index": 0,
            "message": message, "finish_reason": finish}], "usage": {"prompt_tokens": 50, "completion_tokens": 5}}

async def app(scope, receive, send):
    if scope["type"] != "http":
        return
    raw = b""
    while True:
        message = await receive()
        raw += message.get("body", b"")
        if not message.get("more_body"):
            break
    payload = json.dumps(answer(json.loads(raw))).encode()
    await send({"type": "http.response.start", "status": 200,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(payload)).encode())]})
    await send({"type": "http.response.body", "body": payload})

uvicorn.run(app, host="127.0.0.1", port=int(sys.argv[1]), log_level="error", access_log=False)
'''


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_port(port: int, proc: subprocess.Popen) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), 0.2).close()
            return
        except OSError:
            if proc.poll() is not None:
                raise RuntimeError("the model server exited") from None
            time.sleep(0.05)
    raise RuntimeError("the model server did not listen")


def company(base_url: str, tool_path: Path):
    return parse_company(yaml.safe_dump({
        "name": "bench",
        "providers": {"llm": [{"name": "local", "kind": "openai", "base_url": base_url, "model": "bench"}]},
        "tools": {"mcp": [{"name": "bench", "transport": "stdio", "command": [sys.executable, str(tool_path)]}]},
        "turns": {"max_iter": ROUNDS},
        "token_budget": {"day": 10_000_000_000},
        "org": {"seats": [{"handle": "alice", "kind": "agent", "role": "engineer"}]},
    }), env={})


def trigger(i: int):
    return new(ExternalNotification(agent_handle="alice", body=f"job {i}", sender="dana",
                                    conversation_identity=f"bench:{i}"), trace_of(), source="slack")


async def raw_posts(base_url: str, count: int) -> list[float]:
    """The baseline for the model call: a mid-turn chat-completions body as a raw httpx POST."""
    import httpx

    messages = [{"role": "system", "content": "You are alice."}, {"role": "user", "content": "job"}]
    for n in range(4):
        messages.append({"role": "assistant", "content": None, "tool_calls": [{"id": f"call_{n}", "type": "function",
                         "function": {"name": "bench__echo", "arguments": '{"text": "x"}'}}]})
        messages.append({"role": "tool", "tool_call_id": f"call_{n}", "content": "x"})
    out = []
    async with httpx.AsyncClient(timeout=30) as client:
        for _ in range(count):
            began = time.perf_counter()
            response = await client.post(base_url + "/chat/completions", json={"model": "bench", "messages": messages,
                                                                               "max_tokens": 4096})
            response.json()
            out.append(time.perf_counter() - began)
    return out


class Direct:
    """The baseline: `echo` called with the mcp client on a session of its own, measured between
    the engine's turns so both see the same machine."""

    def __init__(self, tool_path: Path) -> None:
        self.params = StdioServerParameters(command=sys.executable, args=[str(tool_path)])
        self.times: list[float] = []

    async def __aenter__(self) -> "Direct":
        self._stack = contextlib.AsyncExitStack()
        read, write = await self._stack.enter_async_context(stdio_client(self.params))
        self.session = await self._stack.enter_async_context(ClientSession(read, write))
        await self.session.initialize()
        await self.session.list_tools()
        return self

    async def __aexit__(self, *exc) -> None:
        await self._stack.aclose()

    async def calls(self, count: int, keep: bool = True) -> None:
        for i in range(count):
            began = time.perf_counter()
            await self.session.call_tool("echo", {"text": f"round {i + 1}"})
            if keep:
                self.times.append(time.perf_counter() - began)


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(int(len(ordered) * q), len(ordered) - 1)] * 1000 if ordered else float("nan")


def line(label: str, values: list[float]) -> str:
    return f"  {label:<44} p50 {pct(values, 0.5):7.2f} ms   p99 {pct(values, 0.99):7.2f} ms   (n={len(values)})"


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="5 turns (a smoke run)")
    args = parser.parse_args()
    logging.basicConfig(level=logging.CRITICAL)
    turns = 5 if args.quick else 40
    print(f"turns benchmark: {turns} turns of {ROUNDS} rounds (9 tool calls and an answer), a local model server "
          "and a local stdio MCP server answering at once, events to the embedded broker")
    with tempfile.TemporaryDirectory(prefix="crewlet-bench-") as home:
        tool_path = Path(home) / "bench_tools.py"
        tool_path.write_text(TOOL_SERVER)
        model_path = Path(home) / "bench_model.py"
        model_path.write_text(MODEL_SERVER)
        port = free_port()
        model = subprocess.Popen([sys.executable, str(model_path), str(port), str(ROUNDS)])
        broker = EmbeddedBroker(store_dir=str(Path(home) / "stream"), server_name="bench")
        servers = ToolServers(cwd=Path(home))
        try:
            wait_port(port, model)
            await broker.start()
            q = await JetStreamQueue.connect(broker.client_url, token=broker.token, node_id="bench", tuning=Tuning())
            the_company = company(f"http://127.0.0.1:{port}/v1", tool_path)
            await servers.on_company(the_company)

            async def publish(event):
                await q.publish(topics.event_subject(event.type), event)

            coord = LocalCoord()
            engine = TurnEngine(node_id="bench", publish=publish, budgets=Budgets(coord), tools=servers,
                                memory=ConversationMemory(coord))
            seat = the_company.seat_by_handle("alice")
            timings = []
            async with Direct(tool_path) as direct:
                for i in range(turns + 2):  # two turns to warm the connections up, not counted
                    event = trigger(i)
                    result = await engine.run(TurnRequest(seat=seat, company=the_company, trigger=event,
                                                          constituents=[event], turn_id=str(uuid.uuid4())))
                    assert result.outcome == "completed" and result.rounds == ROUNDS, result
                    if i >= 2:
                        timings.extend(result.timings)
                    await direct.calls(ROUNDS - 1, keep=i >= 2)
            raw = await raw_posts(f"http://127.0.0.1:{port}/v1", turns * ROUNDS)
            await engine.close()
            await q.close()
        finally:
            await servers.stop()
            await broker.stop()
            model.terminate()
            model.wait(10)
    engine_s = [t.engine_s for t in timings]
    tools_s = [t.tools_s for t in timings if t.tools_s]
    print("\n== per round")
    print(line("the engine's own time (target p50 < 2 ms)", engine_s))
    print(line("the model call (provider chain, openai SDK)", [t.provider_s for t in timings]))
    print(line("the MCP call through the engine", tools_s))
    print("\n== baseline, same run")
    print(line("the same MCP call, mcp client directly", direct.times))
    print(line("a chat-completions POST, raw httpx", raw))
    ratio = pct(tools_s, 0.5) / pct(direct.times, 0.5)
    print(f"\n  MCP call through the engine / directly, p50: {ratio:.2f}x (target within 1.3x)")


if __name__ == "__main__":
    with asyncio.Runner(loop_factory=loop_factory()) as runner:
        runner.run(main())
