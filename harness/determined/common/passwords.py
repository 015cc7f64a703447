"""The password a client sends: Determined's salted SHA-512 of what the user typed.

Determined's CLI and web UI never send a password as typed: they send
``sha512("GubPEmmotfiK9TMD6Zdw" + password)`` in hex (an empty password stays
empty) with ``is_hashed=true``, and the master keeps only a slow hash of that.
One definition for the CLI, the SDK and the gateway (which applies it to a
login sent with ``is_hashed=false``). Standard library only: the CLI imports it."""

import hashlib

SALT = "GubPEmmotfiK9TMD6Zdw"


def salted_hash(password: str) -> str:
    """The hex digest a client sends for `password`; "" (no password) stays ""."""
    if not password:
        return ""
    return hashlib.sha512((SALT + password).encode("utf-8")).hexdigest()
