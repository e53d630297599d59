"""`manage.py crewlet_conformance`: the queue conformance suite run against an operator's own
NATS deployment, in streams of its own that it removes after, with a pass/fail table (issue
15, item 7). The suite's cases run in a pytest process of their own against a nats-server
this test starts beside a stream of a "live fleet", which the run must leave untouched."""
from __future__ import annotations

import asyncio
import subprocess
import sys

import nats
import pytest

from engine.management.conformance import ConformanceError, Target, certify, table
from tests.node.external import ExternalNats
from tests.node.harness import ROOT, clean_env
from tests.ports import PortHold

pytestmark = pytest.mark.timeout(300)

CASES = "publish_stamps_the_node or repeated_dedupe_id or mail_published_before_anyone_attaches"


async def _streams(server: ExternalNats) -> list[str]:
    nc = await nats.connect(server.url, token=server.token)
    try:
        return sorted(info.config.name for info in await nc.jetstream().streams_info())
    finally:
        await nc.close()


async def _live_fleet_stream(server: ExternalNats) -> None:
    nc = await nats.connect(server.url, token=server.token)
    try:
        await nc.jetstream().add_stream(name="CREWLET_AGENT", subjects=["crewlet.agent.>"])
    finally:
        await nc.close()


@pytest.fixture
def server(tmp_path):
    s = ExternalNats(tmp_path / "nats").start()
    yield s
    s.stop()


def test_the_suite_certifies_a_deployment_in_streams_of_its_own_and_leaves_none_behind(server):
    asyncio.run(_live_fleet_stream(server))  # a fleet already on this server: its stream must be left alone
    target = Target(url=server.url, token=server.token)
    cases, prefix = certify(target, select=CASES)
    assert sorted(c.name for c in cases) == ["a_repeated_dedupe_id_is_delivered_once",
                                             "mail_published_before_anyone_attaches_waits_for_the_attach",
                                             "publish_stamps_the_node_on_a_copy_and_returns_it"]
    assert all(c.passed for c in cases), [c.detail for c in cases if not c.passed]
    assert asyncio.run(_streams(server)) == ["CREWLET_AGENT"]  # the run's own streams removed, the fleet's kept
    printed = table(cases, target, prefix)
    assert printed.splitlines()[-1].startswith(f"3 passed, 0 failed against {server.url}")
    assert server.token not in printed


def test_the_command_prints_the_table_and_exits_0(server):
    run = subprocess.run([sys.executable, "manage.py", "crewlet_conformance", "--url", server.url, "--token", server.token,
                          "--select", "publish_stamps_the_node"], cwd=ROOT, env=clean_env(), capture_output=True, text=True,
                         timeout=240)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "publish_stamps_the_node_on_a_copy_and_returns_it  pass" in run.stdout
    assert server.token not in run.stdout + run.stderr


def test_a_file_that_cannot_be_opened_is_refused_naming_its_flag(tmp_path):
    with pytest.raises(ConformanceError, match="^--tls-ca .*nope.pem: no such file or directory"):
        certify(Target(url="nats://127.0.0.1:4222", tls_ca=str(tmp_path / "nope.pem")))
    cert = tmp_path / "client.pem"
    cert.write_text("x")
    with pytest.raises(ConformanceError, match="^--tls-key: a client certificate needs both"):
        certify(Target(url="nats://127.0.0.1:4222", tls_cert=str(cert)))


def test_a_deployment_nobody_answers_at_is_named_once_not_failed_case_by_case():
    hold = PortHold()  # held, nobody listening: nothing answers there
    url = f"nats://127.0.0.1:{hold.port}"
    with pytest.raises(ConformanceError, match=f"^--url: .*could not reach {url}"):
        certify(Target(url=url), select="publish")
