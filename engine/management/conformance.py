"""Certifying an operator's own NATS deployment with the queue conformance suite (issue 15,
item 7: "so a user can certify their cluster before pointing a fleet at it").

`certify(target)` runs the cases of tests/queue that every backend runs (memory twin, embedded
JetStream) against the operator's URL, with the same dial settings a node uses (`stream.url`,
`token`, `credentials`, `tls`), in a pytest process of its own: the suite's conftest reads
CREWLET_CONFORMANCE_* and adds the `external` backend. Every case lays out its own streams
under a prefix (`{prefix}_{n}`, streams `{PREFIX}_{N}_CREWLET_*`) and deletes them when it
ends; whatever a failed case left is swept when the run ends. The result is a table: one row
per case, pass or fail, and its seconds.
"""
from __future__ import annotations

import os
import secrets
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SUITE = ROOT / "tests" / "queue"
NO_SERVER = 3  # the suite's exit status when the deployment could not be reached at all


class ConformanceError(Exception):
    """A flag that cannot be used, named; or a deployment that could not be reached."""


@dataclass(frozen=True)
class Target:
    """The deployment to certify, as a node would dial it."""

    url: str
    token: str | None = None
    credentials: str | None = None
    tls_ca: str | None = None
    tls_cert: str | None = None
    tls_key: str | None = None
    replicas: int = 1
    prefix: str = ""

    def check(self) -> None:
        """ConformanceError naming the flag of a file that cannot be opened, or half a keypair."""
        if not self.url:
            raise ConformanceError("--url: name the NATS server(s) to certify (a comma-separated list for a cluster)")
        for flag, path in (("--creds", self.credentials), ("--tls-ca", self.tls_ca), ("--tls-cert", self.tls_cert),
                           ("--tls-key", self.tls_key)):
            if path:
                try:
                    with open(path, "rb"):
                        pass
                except OSError as exc:
                    raise ConformanceError(f"{flag} {path}: {(exc.strerror or str(exc)).lower()}") from None
        if bool(self.tls_cert) != bool(self.tls_key):
            raise ConformanceError(f"{'--tls-key' if self.tls_cert else '--tls-cert'}: a client certificate needs both "
                                   "--tls-cert and --tls-key, or neither")
        if not 1 <= self.replicas <= 5:
            raise ConformanceError(f"--replicas: expected 1 to 5, got {self.replicas}")

    def environment(self) -> dict[str, str]:
        env = {"CREWLET_CONFORMANCE_URL": self.url, "CREWLET_CONFORMANCE_REPLICAS": str(self.replicas),
               "CREWLET_CONFORMANCE_PREFIX": self.prefix or f"conformance_{secrets.token_hex(3)}"}
        for name, value in (("TOKEN", self.token), ("CREDENTIALS", self.credentials), ("TLS_CA", self.tls_ca),
                            ("TLS_CERT", self.tls_cert), ("TLS_KEY", self.tls_key)):
            if value:
                env[f"CREWLET_CONFORMANCE_{name}"] = value
        return env


@dataclass(frozen=True)
class Case:
    name: str
    passed: bool
    seconds: float
    detail: str = ""


def certify(target: Target, select: str | None = None, timeout: float = 3600) -> tuple[list[Case], str]:
    """Run the suite against `target`; (the cases, the stream prefix the run used).
    ConformanceError when a flag is unusable or the deployment could not be reached."""
    target.check()
    env = {**os.environ, **target.environment()}
    env.pop("CREWLET_CONFIG", None)
    env["DJANGO_SETTINGS_MODULE"] = "tests.settings"
    with tempfile.TemporaryDirectory(prefix="crewlet-conformance-") as scratch:
        report = Path(scratch) / "report.xml"
        files = sorted(str(p) for p in SUITE.glob("test_conformance_*.py"))  # the cases every backend runs
        argv = [sys.executable, "-m", "pytest", *files, "-q", "-p", "no:cacheprovider", f"--junitxml={report}",
                "-o", "junit_family=xunit1"]
        if select:
            argv += ["-k", select]
        run = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)
        if run.returncode == NO_SERVER or not report.exists():
            said = (run.stdout + run.stderr).strip().splitlines()
            raise ConformanceError(f"--url: {said[-1] if said else 'the suite did not run'}")
        return _cases(report), env["CREWLET_CONFORMANCE_PREFIX"]


def _cases(report: Path) -> list[Case]:
    out = []
    for case in ET.parse(report).getroot().iter("testcase"):
        name = case.get("name", "").replace("[external]", "").removeprefix("test_")
        failure = case.find("failure")
        if failure is None:
            failure = case.find("error")
        detail = (failure.get("message") or "").splitlines()[0][:160] if failure is not None else ""
        out.append(Case(name=name, passed=failure is None and case.find("skipped") is None,
                        seconds=float(case.get("time") or 0), detail=detail))
    return out


def table(cases: list[Case], target: Target, prefix: str) -> str:
    """The pass/fail table, and one line of totals."""
    width = max([len(c.name) for c in cases] + [4])
    lines = [f"{'case':<{width}}  result  seconds"]
    for c in cases:
        lines.append(f"{c.name:<{width}}  {'pass' if c.passed else 'FAIL'}    {c.seconds:7.2f}" + (f"  {c.detail}" if c.detail else ""))
    passed = sum(c.passed for c in cases)
    from engine.queue.dial import redact_url

    lines.append(f"{passed} passed, {len(cases) - passed} failed against {redact_url(target.url)} "
                 f"(replicas {target.replicas}; streams {prefix.upper()}_*, removed after)")
    return "\n".join(lines) + "\n"
