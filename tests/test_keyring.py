"""The keyring (seed 002, "The single host", "Secret store"): signing and encryption that
survive a rotation, a dropped key that invalidates what it signed, a derived SECRET_KEY."""
from __future__ import annotations

import base64

import subprocess
import sys
from pathlib import Path

import pytest

from engine.config.keyring import Keyring, KeyringError, decode_material, generate_key_material

ROOT = Path(__file__).resolve().parent.parent
OLD, NEW = generate_key_material(), generate_key_material()


def ring(*pairs, active):
    return Keyring.from_pairs(list(pairs), active)


def test_a_signature_names_its_key_and_verifies_after_the_active_key_flips():
    before = ring(("2026-01", OLD), active="2026-01")
    signature = before.sign(b"record")
    assert signature.split(".")[1] == "2026-01"
    rotated = ring(("2026-01", OLD), ("2026-02", NEW), active="2026-02")
    assert rotated.verify(b"record", signature)
    assert rotated.sign(b"record").split(".")[1] == "2026-02"
    assert not rotated.verify(b"another record", signature)


def test_dropping_a_key_invalidates_what_it_signed_and_encrypted():
    old = ring(("2026-01", OLD), active="2026-01")
    signature, sealed = old.sign(b"record"), old.encrypt(b"webhook secret")
    dropped = ring(("2026-02", NEW), active="2026-02")
    assert not dropped.verify(b"record", signature)
    with pytest.raises(KeyringError, match="2026-01"):
        dropped.decrypt(sealed)


def test_an_encrypted_value_decrypts_under_any_key_still_in_the_ring_and_refuses_tampering():
    old = ring(("2026-01", OLD), active="2026-01")
    sealed = old.encrypt(b"webhook secret")
    assert b"webhook secret" not in sealed.encode()
    rotated = ring(("2026-01", OLD), ("2026-02", NEW), active="2026-02")
    assert rotated.decrypt(sealed) == b"webhook secret"
    tampered = sealed[:-2] + ("A" if sealed[-2] != "A" else "B") + sealed[-1]
    with pytest.raises(KeyringError, match="failed authentication"):
        rotated.decrypt(tampered)


def test_purposes_never_share_a_signature():
    keys = ring(("k", OLD), active="k")
    assert not keys.verify(b"x", keys.sign(b"x", purpose="company-revision"), purpose="session")


def test_material_shorter_than_32_bytes_is_refused_with_the_way_out():
    with pytest.raises(KeyringError, match="crewlet_secrets keygen"):
        decode_material("too-short")
    assert len(decode_material(generate_key_material())) == 32


def test_key_material_is_read_as_hex_then_base64url_then_plain_text():
    secret = bytes(range(32))
    # A 64-digit hex key is its 32 bytes, in either case -- never the 48 bytes the same text
    # spells in base64url, whose alphabet holds every hex digit.
    assert decode_material(secret.hex()) == secret
    assert decode_material(secret.hex().upper()) == secret
    # What keygen prints: 43 characters of unpadded base64url, odd, so never taken for hex.
    printed = base64.urlsafe_b64encode(secret).rstrip(b"=").decode()
    assert len(printed) == 43 and decode_material(printed) == secret
    # Anything else is a passphrase: its own UTF-8 bytes.
    phrase = "a plain passphrase of thirty-two bytes!"
    assert decode_material(phrase) == phrase.encode()
    # Hex too short to be a key is not padded out by another reading of the same digits.
    with pytest.raises(KeyringError, match="at least 32 bytes"):
        decode_material("00ff" * 4)


def test_a_keyring_needs_keys_and_an_active_key_it_holds():
    with pytest.raises(KeyringError, match="secrets.keys"):
        Keyring([], "k")
    with pytest.raises(KeyringError, match="secrets.active_key_id"):
        ring(("k", OLD), active="other")


def test_djangos_secret_key_is_derived_from_the_active_key_and_keeps_the_old_as_fallback():
    old = ring(("2026-01", OLD), active="2026-01")
    rotated = ring(("2026-01", OLD), ("2026-02", NEW), active="2026-02")
    assert old.django_secret_key() != rotated.django_secret_key()
    assert old.django_secret_key() in rotated.django_secret_key_fallbacks()
    assert OLD not in old.django_secret_key()


def test_the_running_settings_derive_secret_key_from_the_suite_keyring():
    from django.conf import settings

    from tests.settings import KEY_MATERIAL

    assert settings.SECRET_KEY == Keyring.from_pairs([("test", KEY_MATERIAL)], "test").django_secret_key()


def test_keygen_prints_the_export_line_and_the_secrets_block():
    env = {"PATH": "/usr/bin:/bin"}
    run = subprocess.run([sys.executable, "manage.py", "crewlet_secrets", "keygen", "--id", "2026-03"], cwd=ROOT,
                         capture_output=True, text=True, timeout=60, env=env)
    assert run.returncode == 0, run.stderr
    export = run.stdout.splitlines()[0]
    assert export.startswith("export CREWLET_SECRET_KEY_2026_03=")
    assert len(decode_material(export.split("=", 1)[1])) == 32
    assert 'active_key_id: "2026-03"' in run.stdout and "${CREWLET_SECRET_KEY_2026_03}" in run.stdout
    bad = subprocess.run([sys.executable, "manage.py", "crewlet_secrets", "keygen", "--id", "no spaces"], cwd=ROOT,
                         capture_output=True, text=True, timeout=60, env=env)
    assert bad.returncode != 0 and "--id" in bad.stderr and "Traceback" not in bad.stderr


def test_a_generated_token_never_begins_with_a_dash():
    # One base64url token in 64 would begin with "-", and `--token -x...` reads as a missing
    # value on every command line the README shows; 2,000 draws meet one all but surely.
    from engine.config.keyring import random_token

    tokens = [random_token() for _ in range(2000)]
    assert not [t for t in tokens if t.startswith("-")]
    assert len(set(tokens)) == 2000 and all(len(t) == 43 for t in tokens)
