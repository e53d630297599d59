"""A tiny MCP tool server for the example company: a seat's notebook.

Written with the `mcp` SDK's FastMCP and started by the node over stdio (`tools.mcp` in
examples/company.yaml). `append` adds a line to NOTES_DIR/notes.md; `read` returns the file.
Run it by hand with `.venv/bin/python examples/tools/notes.py` (it speaks MCP on stdin/stdout).
"""
from __future__ import annotations

import os
from datetime import datetime, timezone
from pathlib import Path

from mcp.server.fastmcp import FastMCP

READ_LIMIT = 20_000  # characters `read` returns: the newest notes, when the file is longer

server = FastMCP("notes", log_level="WARNING")


def notes_file() -> Path:
    folder = Path(os.environ.get("NOTES_DIR") or "notes")
    folder.mkdir(parents=True, exist_ok=True)
    return folder / "notes.md"


@server.tool()
def append(text: str) -> str:
    """Append one note (a line of text) to the notebook; returns the line as written."""
    line = f"- {datetime.now(timezone.utc):%Y-%m-%d %H:%M:%S} UTC: {' '.join(text.split())}"
    with notes_file().open("a", encoding="utf-8") as f:
        f.write(line + "\n")
    return line


@server.tool()
def read() -> str:
    """The notebook's newest notes (empty when there are none)."""
    path = notes_file()
    text = path.read_text(encoding="utf-8") if path.exists() else ""
    return text[-READ_LIMIT:]


if __name__ == "__main__":
    server.run()  # stdio
