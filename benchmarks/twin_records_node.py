"""`manage.py` with the fleet's records on the in-process twin, as every node kept them before
they moved to the broker's KV (engine/coord/factory.py): the same-run baseline that
benchmarks/node.py measures boot-to-ready against. Never a way to run a node -- a restart
forgets every pause, budget counter and revision generation.

Run as manage.py is: python benchmarks/twin_records_node.py crewlet_node --config ...
"""
from __future__ import annotations

import runpy
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[0] = str(ROOT)  # as manage.py would have it: benchmarks/queue.py must not shadow the stdlib

from engine.coord import factory  # noqa: E402
from engine.coord.local import LocalCoord  # noqa: E402


async def in_process(node_config, *, clock=time.time, **_ignored) -> factory.Coordination:
    """What `coordination.type: local` opened before: one twin for records and leases alike."""
    twin = LocalCoord(clock=clock)
    return factory.Coordination(records=twin, leases=twin)


factory.open_coordination = in_process

if __name__ == "__main__":
    sys.argv[0] = str(ROOT / "manage.py")
    runpy.run_path(str(ROOT / "manage.py"), run_name="__main__")
