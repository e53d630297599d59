"""The company's webhook secrets, held sealed under the node's keyring (seed 002, "The single
host": the keyring encrypts secret values; DESIGN.md, "Configuration": `integrations`).

A source's secret is read once from the company document (already `${VAR}`-expanded by the
node's environment), encrypted with the keyring (AES-GCM, the source's name as associated
data, so a sealed GitHub secret cannot be replayed as Slack's) and decrypted only for the
moment a signature is checked. Nothing here logs a secret or puts one in an error.
"""
from __future__ import annotations

from typing import Any, Mapping

from notify.sources import SOURCES


class Credentials:
    """One company's sealed secrets and users maps, by source name."""

    def __init__(self, keyring: Any, company: Any) -> None:
        self._keyring = keyring
        self._sealed: dict[str, str] = {}
        self._users: dict[str, dict[str, str]] = {}
        for name, block in company.integrations.configured().items():
            source = SOURCES.get(name)
            if source is None:
                continue
            secret = str(getattr(block, source.secret_field, "") or "")
            self._sealed[name] = keyring.encrypt(secret.encode("utf-8"), associated=name.encode())
            self._users[name] = dict(getattr(block, "users", {}) or {})

    def connected(self, name: str) -> bool:
        """Whether the company configures this source (an `integrations.<name>` block)."""
        return name in self._sealed

    def secret(self, name: str) -> bytes:
        """The source's secret, decrypted for one signature check. KeyError when not connected."""
        return self._keyring.decrypt(self._sealed[name], associated=name.encode())

    def users(self, name: str) -> Mapping[str, str]:
        """The source's users map: its own user id -> a seat handle or a role."""
        return self._users.get(name, {})


class CredentialCache:
    """One node's sealed credentials for the company it serves, built once per company object
    (a revision applied is a new object, so an applied revision reseals from the next delivery
    on). The node holds one and answers `NotifyNode.credentials` from it."""

    def __init__(self, keyring: Any) -> None:
        self._keyring = keyring
        self._built: tuple[Any, Credentials] | None = None

    def of(self, company: Any) -> Credentials | None:
        """The sealed credentials of `company`; None when there is no company yet."""
        if company is None:
            return None
        built = self._built
        if built is not None and built[0] is company:
            return built[1]
        credentials = Credentials(self._keyring, company)
        self._built = (company, credentials)
        return credentials
