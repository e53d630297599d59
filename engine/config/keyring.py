"""The keyring and the secret store's cryptography.

Seed 002, "The single host" and "Secret store": every node holds the same keyring
(`secrets.keys`, one active key named by `secrets.active_key_id`). The keyring signs
(HMAC-SHA256 under the active key, naming the key id so verification can pick the key),
encrypts secret values (AES-GCM, the key id in the ciphertext), and derives per-purpose
keys (HKDF) such as Django's SECRET_KEY, which is therefore never a literal in settings.

Rotation, as the seed's runbook says: add a key and flip `active_key_id` -- everything
signed or encrypted under the old key still verifies and decrypts, because verification
and decryption pick the key the token names. Dropping a key invalidates what it signed.
"""
from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import os
import re
import secrets as _secrets
from dataclasses import dataclass

from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

MIN_KEY_BYTES = 32
_HEX = re.compile(r"[0-9a-fA-F]+")
_SIGNATURE_PREFIX = "v1"
_CIPHER_PREFIX = "enc1"


class KeyringError(Exception):
    """A keyring problem; the message names the field or the key id."""

    def __init__(self, message: str) -> None:
        super().__init__(f"keyring: {message}")


def generate_key_material() -> str:
    """Return fresh key material: 32 random bytes, base64url without padding."""
    return base64.urlsafe_b64encode(os.urandom(MIN_KEY_BYTES)).rstrip(b"=").decode()


def decode_material(material: str) -> bytes:
    """Decode key material: hex, base64url (as keygen prints it), else its UTF-8 bytes.

    Returns the raw key bytes; raises KeyringError when shorter than 32 bytes.

    The order is what makes each reading reachable. Hex is tried first, and only on text that
    is nothing but hex digits in pairs: every such text is also valid base64url (hex's
    alphabet is a subset of it), so base64url first would read a 64-digit hex key as 48
    other bytes. The converse cannot happen to a key keygen printed: 32 bytes in unpadded
    base64url are 43 characters, an odd count, which is never read as hex.
    """
    text = material.strip()
    for decode in (_from_hex, _from_base64url):
        raw = decode(text)
        if raw is not None and len(raw) >= MIN_KEY_BYTES:
            return raw
    raw = text.encode()
    if len(raw) < MIN_KEY_BYTES:
        raise KeyringError(f"key material must carry at least {MIN_KEY_BYTES} bytes; run `python manage.py crewlet_secrets keygen`")
    return raw


def _from_hex(text: str) -> bytes | None:
    return bytes.fromhex(text) if len(text) % 2 == 0 and _HEX.fullmatch(text) else None


def _from_base64url(text: str) -> bytes | None:
    try:
        raw = base64.urlsafe_b64decode((text + "=" * (-len(text) % 4)).encode())
    except (binascii.Error, ValueError):
        return None
    # Only text that is exactly base64url (it re-encodes to itself), never a passphrase that
    # merely decodes.
    return raw if base64.urlsafe_b64encode(raw).rstrip(b"=").decode() == text.rstrip("=") else None


@dataclass(frozen=True)
class Key:
    id: str
    secret: bytes


class Keyring:
    """An ordered set of keys with one active key. Immutable; build a new one to rotate."""

    def __init__(self, keys: list[Key], active_key_id: str) -> None:
        if not keys:
            raise KeyringError("secrets.keys: a node needs a keyring; run `python manage.py crewlet_secrets keygen`")
        self._keys = {k.id: k for k in keys}
        self._derived: dict[tuple[str, int, str], bytes] = {}
        if len(self._keys) != len(keys):
            raise KeyringError("secrets.keys: two keys share one id")
        if active_key_id not in self._keys:
            raise KeyringError(f"secrets.active_key_id: {active_key_id!r} names no key in secrets.keys")
        self.active_key_id = active_key_id

    @classmethod
    def from_pairs(cls, pairs: list[tuple[str, str]], active_key_id: str) -> "Keyring":
        """Build from (id, material) pairs as Tier A lists them."""
        return cls([Key(kid, decode_material(material)) for kid, material in pairs], active_key_id)

    @classmethod
    def from_config(cls, secrets_block) -> "Keyring":
        """Build from a NodeConfig's `secrets` block."""
        return cls.from_pairs([(k.id, k.material) for k in secrets_block.keys], secrets_block.active_key_id)

    @property
    def key_ids(self) -> list[str]:
        return list(self._keys)

    def _key(self, kid: str) -> Key | None:
        return self._keys.get(kid)

    def derive(self, purpose: str, length: int = 32, key_id: str | None = None) -> bytes:
        """Return a key for one purpose, derived with HKDF-SHA256 from a keyring key.

        Purposes never share bytes: `django.secret_key` and `webhook.dedupe` get unrelated keys.
        """
        kid = key_id or self.active_key_id
        memo = (purpose, length, kid)
        found = self._derived.get(memo)
        if found is None:
            key = self._keys[kid]
            found = HKDF(algorithm=hashes.SHA256(), length=length, salt=b"crewlet", info=purpose.encode()).derive(key.secret)
            # Remembered: a derived key is no more secret than the key it came from, which the
            # ring holds for its whole life, and a webhook's signature check asks for it each time.
            self._derived[memo] = found
        return found

    # -- signing -------------------------------------------------------------------------
    def sign(self, data: bytes, purpose: str = "sign") -> str:
        """Return `v1.<key id>.<hex HMAC-SHA256>` over data, under the active key."""
        mac = hmac.new(self.derive(f"hmac:{purpose}"), data, hashlib.sha256).hexdigest()
        return f"{_SIGNATURE_PREFIX}.{self.active_key_id}.{mac}"

    def verify(self, data: bytes, signature: str, purpose: str = "sign") -> bool:
        """True when signature was made over data by any key still in the ring (constant time)."""
        try:
            prefix, kid, mac = signature.split(".", 2)
        except ValueError:
            return False
        if prefix != _SIGNATURE_PREFIX or self._key(kid) is None:
            return False
        expected = hmac.new(self.derive(f"hmac:{purpose}", key_id=kid), data, hashlib.sha256).hexdigest()
        return hmac.compare_digest(expected, mac)

    # -- encryption ----------------------------------------------------------------------
    def encrypt(self, plaintext: bytes, associated: bytes = b"") -> str:
        """Return `enc1.<key id>.<base64url nonce+ciphertext>` (AES-256-GCM under the active key)."""
        nonce = os.urandom(12)
        sealed = AESGCM(self.derive("aead")).encrypt(nonce, plaintext, associated)
        body = base64.urlsafe_b64encode(nonce + sealed).rstrip(b"=").decode()
        return f"{_CIPHER_PREFIX}.{self.active_key_id}.{body}"

    def decrypt(self, token: str, associated: bytes = b"") -> bytes:
        """Return the plaintext; KeyringError when the key is gone or the token was altered."""
        try:
            prefix, kid, body = token.split(".", 2)
        except ValueError:
            raise KeyringError("not an encrypted value") from None
        if prefix != _CIPHER_PREFIX:
            raise KeyringError("not an encrypted value")
        if self._key(kid) is None:
            raise KeyringError(f"the value was encrypted under key {kid!r}, which is no longer in secrets.keys")
        raw = base64.urlsafe_b64decode(body + "=" * (-len(body) % 4))
        try:
            return AESGCM(self.derive("aead", key_id=kid)).decrypt(raw[:12], raw[12:], associated)
        except Exception:
            raise KeyringError(f"the value under key {kid!r} failed authentication") from None

    def django_secret_key(self) -> str:
        """Django's SECRET_KEY, derived from the active key (sessions and CSRF sign with it).

        Derived from the active key: rotating the active key signs people out, which is the
        runbook's cost of flipping; SECRET_KEY_FALLBACKS carries the other keys so it does not.
        """
        return self.derive("django.secret_key", 50).hex()

    def django_secret_key_fallbacks(self) -> list[str]:
        return [self.derive("django.secret_key", 50, key_id=k).hex() for k in self._keys if k != self.active_key_id]


def random_token(nbytes: int = 32) -> str:
    """A URL-safe random token (API tokens, per-boot broker tokens), never beginning with `-`: a
    token a command line reads as an option (`--token -x...`) would be refused as a missing value."""
    while True:
        token = _secrets.token_urlsafe(nbytes)
        if not token.startswith("-"):
            return token
