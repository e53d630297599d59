"""Node roles (seed 002, "Running the Engine + API", "Separate processes"): data, seats,
ingress, workers, and the combinations a process may run.

- `data` holds the company's durable state: this node's event log (the event store writer).
- `seats` runs the agents; without `data` it is stateless, which is allowed.
- `ingress` serves webhooks, the REST API and the dashboard. Its history reads are asked of
  every live node (seed 000, "Reading the fleet's history": the question travels, not the data)
  and its own events are kept by a data node (custody), so it runs without `data`: the issue's
  ingress-only edge in front of a fleet.
- `workers` runs the singleton duties, which write the company's records: it needs `data`.

Every role prepares its own store (the node migrates it at boot, whatever the roles).
"""
from __future__ import annotations

ROLES = ("data", "seats", "ingress", "workers")

# What each role needs beside it, and why (the refusal's words).
NEEDS = {
    "workers": ("data", "the singleton duties keep the company's records in this node's own store"),
}


class RoleError(ValueError):
    pass


def parse_roles(text: str | None) -> tuple[str, ...]:
    """`--roles data,seats` -> ("data", "seats"); default all four; RoleError naming the flag
    and what a role lacks."""
    if text is None:
        return ROLES
    roles = tuple(dict.fromkeys(r.strip() for r in text.split(",") if r.strip()))
    unknown = [r for r in roles if r not in ROLES]
    if unknown:
        raise RoleError(f"--roles: {', '.join(unknown)} is not a role (one or more of {', '.join(ROLES)})")
    if not roles:
        raise RoleError(f"--roles: name at least one of {', '.join(ROLES)}")
    for role in roles:
        need = NEEDS.get(role)
        if need is not None and need[0] not in roles:
            wanted = ",".join(r for r in ROLES if r in roles or r == need[0])
            raise RoleError(f"--roles: {role} needs {need[0]} beside it ({need[1]}); run --roles {wanted}")
    return roles


def check_listener(roles: tuple[str, ...], api_port: int, public_port: int | None) -> None:
    """RoleError when an ingress node would bind a public listener with no api.port beside it:
    nothing would answer its probes (seed 002, "crewlet validate refuses a public listener
    beside api.port: 0 on a node with the ingress role")."""
    if "ingress" in roles and api_port == 0 and public_port:
        raise RoleError("api.port: 0 binds nothing, yet api.public is set on a node with the ingress role: no probe "
                        "would answer and no webhook would be served; give api.port (or --api-port) a port, or remove api.public")
