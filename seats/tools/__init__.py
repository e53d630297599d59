"""The tools a turn's model may call (DESIGN.md, deliberate difference 4): MCP tool servers the
company declares (`mcp.py`, one server's connection; `servers.py`, the node's set of them), the
engine's built-in tools (`builtins.py`), the names the model sees (`names.py`) and one turn's
toolbox (`toolbox.py`: what is offered, and running what the model asked for)."""
