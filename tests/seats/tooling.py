"""What the tool tests share: the real MCP tool server (`toolserver.py`, written with the `mcp`
SDK) started over stdio by the engine or over streamable HTTP by the test, the record of the
calls it received, model answers in both wire formats, and companies that declare tools."""
from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import yaml

from engine.config.company import Company, parse_company
from tests.ports import PortHold

ROOT = Path(__file__).resolve().parents[2]
TOOLSERVER = ROOT / "tests" / "seats" / "toolserver.py"


def stdio_entry(name: str, calls_file: Path, *, mode: str = "", **settings: Any) -> dict:
    """A `tools.mcp` entry that starts the test server over stdio."""
    env = {"CALLS_FILE": str(calls_file)}
    if mode:
        env["MODE"] = mode
    return {"name": name, "transport": "stdio", "command": [sys.executable, str(TOOLSERVER), "stdio"],
            "env": env, **settings}


class HttpToolServer:
    """The test server over streamable HTTP, in a process of its own on 127.0.0.1."""

    def __init__(self, calls_file: Path) -> None:
        self.calls_file = calls_file
        self.hold = PortHold()  # kept from every other process while this server owns the number
        self.port = self.hold.port
        self.proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/mcp"

    def start(self) -> "HttpToolServer":
        self.proc = subprocess.Popen([sys.executable, str(TOOLSERVER), "http", str(self.port)],
                                     env={**os.environ, "CALLS_FILE": str(self.calls_file)},
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", self.port), 0.2).close()
                return self
            except OSError:
                if self.proc.poll() is not None:
                    raise AssertionError(f"the HTTP tool server exited {self.proc.returncode}") from None
                time.sleep(0.05)
        raise AssertionError("the HTTP tool server did not listen within 30 s")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)


def calls(calls_file: Path) -> list[dict]:
    """What the server says it was called with, in order."""
    if not calls_file.exists():
        return []
    return [json.loads(line) for line in calls_file.read_text().splitlines() if line.strip()]


def tool_company(providers: list[dict], servers: list[dict], *, turns: dict | None = None,
                 alice: dict | None = None, env: dict | None = None) -> Company:
    """A company with these providers and tool servers; seats maya (human), alice and bob
    (engineers) and carol (pm)."""
    doc: dict[str, Any] = {
        "name": "acme", "providers": {"llm": providers}, "tools": {"mcp": servers},
        "org": {"seats": [{"handle": "maya", "kind": "human", "role": "founder"},
                          {"handle": "alice", "kind": "agent", "role": "engineer", "reports_to": "maya", **(alice or {})},
                          {"handle": "bob", "kind": "agent", "role": "engineer"},
                          {"handle": "carol", "kind": "agent", "role": "pm"}]}}
    if turns:
        doc["turns"] = turns
    return parse_company(yaml.safe_dump(doc), env={"LLM_KEY": "sk-test-key", **(env or {})})


# -- model answers, in both wire formats ---------------------------------------------------

def openai_calls(*calls: tuple[str, str, Any], text: str = "", finish_reason: str = "tool_calls",
                 usage: dict | None = None) -> dict:
    """A chat completion asking for tool calls: each (id, name, arguments); arguments that are
    not a str are sent as JSON."""
    return {"id": "chatcmpl-t", "object": "chat.completion", "model": "test-model",
            "choices": [{"index": 0, "finish_reason": finish_reason, "message": {
                "role": "assistant", "content": text or None,
                "tool_calls": [{"id": i, "type": "function",
                                "function": {"name": n, "arguments": a if isinstance(a, str) else json.dumps(a)}}
                               for i, n, a in calls]}}],
            "usage": usage or {"prompt_tokens": 20, "completion_tokens": 5, "total_tokens": 25}}


def anthropic_answer(*blocks: dict, stop_reason: str = "end_turn", usage: dict | None = None) -> dict:
    return {"id": "msg_1", "type": "message", "role": "assistant", "model": "claude-test", "content": list(blocks),
            "stop_reason": stop_reason, "stop_sequence": None,
            "usage": usage or {"input_tokens": 30, "output_tokens": 6}}


def text_block(text: str) -> dict:
    return {"type": "text", "text": text}


def tool_use(call_id: str, name: str, arguments: dict) -> dict:
    return {"type": "tool_use", "id": call_id, "name": name, "input": arguments}


def headers_of(request: dict) -> dict:
    """A recorded request's headers, names lowercased."""
    return {k.lower(): v for k, v in request["headers"].items()}
