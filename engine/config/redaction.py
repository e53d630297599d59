"""What of a company document a reader is shown (seed 002, "The single host": secret values are
the keyring's to keep; DESIGN.md, "Configuration").

`redact` hides secret literals in the document's text; a `${VAR}` reference is kept, since it
names no secret. GET /config, the admin's revision page and the dashboard's Company page all
show a document through it.
"""
from __future__ import annotations

import re

_SECRET_LINE = re.compile(r"^(\s*-?\s*(?:[A-Za-z_]*secret|[A-Za-z_]*token|api_key|password)\s*:\s*)(.+)$", re.M)


def redact(document: str) -> str:
    """The document with every secret literal replaced by "[redacted]"."""

    def hide(match: re.Match) -> str:
        value = match.group(2).strip().strip("\"'")
        return match.group(0) if value.startswith("${") else f"{match.group(1)}\"[redacted]\""

    return _SECRET_LINE.sub(hide, document)
