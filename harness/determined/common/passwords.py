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


def weaknesses(password: str) -> list[str]:
    """What Determined's password rules find wrong with `password`: 8 characters or more,
    an uppercase and a lowercase letter and a digit ([] when it follows them all)."""
    return [
        what
        for what, missing in (
            ("is blank", not password),
            ("has fewer than 8 characters", 0 < len(password) < 8),
            ("has no uppercase letter", not any(c.isupper() for c in password)),
            ("has no lowercase letter", not any(c.islower() for c in password)),
            ("has no digit", not any(c.isdigit() for c in password)),
        )
        if missing
    ]
