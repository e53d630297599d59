"""Node roles (seed 002, "Running the Engine + API"): data, seats, ingress, workers."""
from __future__ import annotations

ROLES = ("data", "seats", "ingress", "workers")


class RoleError(ValueError):
    pass


def parse_roles(text: str | None) -> tuple[str, ...]:
    """`--roles data,seats` -> ("data", "seats"); default all four; RoleError naming the flag."""
    if text is None:
        return ROLES
    roles = tuple(dict.fromkeys(r.strip() for r in text.split(",") if r.strip()))
    unknown = [r for r in roles if r not in ROLES]
    if unknown:
        raise RoleError(f"--roles: {', '.join(unknown)} is not a role (one or more of {', '.join(ROLES)})")
    if not roles:
        raise RoleError(f"--roles: name at least one of {', '.join(ROLES)}")
    return roles
