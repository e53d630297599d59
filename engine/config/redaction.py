"""What of a tool server's settings a reader of the company document is not shown (a read-only
token, a page: "no secret reaches a read-only reader, a page or a log").

`tools.mcp[].headers` carry credentials (`Authorization: Bearer ...`) and `tools.mcp[].env`
often does (`API_TOKEN: ...`). A value written as a `${VAR}` reference names no secret and is
kept; a literal header value is hidden, and so is a literal env value whose name says it is a
credential. Both YAML spellings are read: the flow mapping on one line
(`headers: {Authorization: "Bearer x"}`) and the block under the key.
"""
from __future__ import annotations

import re

HIDDEN = '"[redacted]"'
_SECRET_NAME = re.compile(r"(?i)(token|secret|password|passwd|key|auth|credential|cookie)")
_OPENER = re.compile(r"^(\s*-?\s*)(headers|env)\s*:\s*(.*)$")
_FLOW_PAIR = re.compile(r"""([A-Za-z0-9_\-."']+)\s*:\s*("(?:[^"\\]|\\.)*"|'[^']*'|[^,}]+)""")
_BLOCK_PAIR = re.compile(r"""^(\s*)([A-Za-z0-9_\-."']+)(\s*:\s*)(.+)$""")


def redact_tool_values(document: str) -> str:
    """The document with secret literals under `headers:` and `env:` replaced by [redacted]."""
    out: list[str] = []
    block: tuple[str, int] | None = None  # (headers|env, the indent of the key's line)
    for line in document.split("\n"):
        if block is not None:
            pair = _BLOCK_PAIR.match(line)
            if pair and len(pair.group(1)) > block[1] and not line.strip().startswith("#"):
                name, value = pair.group(2).strip("\"'"), pair.group(4)
                if _hidden(block[0], name, value):
                    line = f"{pair.group(1)}{pair.group(2)}{pair.group(3)}{HIDDEN}"
                out.append(line)
                continue
            if line.strip():
                block = None
        opener = _OPENER.match(line)
        if opener and not line.strip().startswith("#"):
            kind, rest = opener.group(2), opener.group(3)
            if rest.strip().startswith("{"):
                line = opener.group(1) + f"{kind}: " + _FLOW_PAIR.sub(
                    lambda m: f"{m.group(1)}: {HIDDEN}" if _hidden(kind, m.group(1).strip("\"'"), m.group(2))
                    else m.group(0), rest)
            elif not rest.strip() or rest.strip().startswith("#"):
                block = (kind, len(opener.group(1).replace("-", " ")))
        out.append(line)
    return "\n".join(out)


def _hidden(kind: str, name: str, value: str) -> bool:
    if "${" in value:
        return False
    return kind == "headers" or bool(_SECRET_NAME.search(name))
