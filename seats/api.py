"""The seats over REST: `GET /seats`, `GET /seats/{handle}`, pause/resume, tasks, `GET /budgets`."""
from __future__ import annotations

from ninja import Router

router = Router(tags=["seats"])
