"""An OpenSSH public key line, as `det shell start` sends one: checked where it enters the
cluster and again where the shell's sshd lets it in (determined/exec/shell.py).

Only `<type> <base64 key> [comment]` on one line: no authorized_keys options
(`command="..."`, `environment=...`) can ride along.
"""

import base64
import binascii

from determined.common.limits import MAX_PUBLIC_KEY_BYTES

# The public key types an OpenSSH client logs in with.
KEY_TYPES = frozenset(
    {
        "ssh-ed25519",
        "ssh-rsa",
        "ecdsa-sha2-nistp256",
        "ecdsa-sha2-nistp384",
        "ecdsa-sha2-nistp521",
        "sk-ssh-ed25519@openssh.com",
        "sk-ecdsa-sha2-nistp256@openssh.com",
    }
)


def public_key_problem(line: str) -> str:
    """What is wrong with `line` (already stripped) as one public key line, in words that
    follow the field's name ("is empty", ...); "" when nothing is."""
    if not line:
        return "is empty"
    if len(line.encode()) > MAX_PUBLIC_KEY_BYTES:
        return f"is over {MAX_PUBLIC_KEY_BYTES} bytes"
    if any(c in line for c in "\r\n\x00"):
        return "is not one line"
    key_type, _, rest = line.partition(" ")
    if key_type not in KEY_TYPES:
        return (
            f"is not an OpenSSH public key line (ssh-ed25519 AAAA... [comment]): it starts {key_type[:40]!r}"
        )
    try:
        decoded = base64.b64decode(rest.split(" ", 1)[0], validate=True)
    except (binascii.Error, ValueError):
        decoded = b""
    return "" if decoded else "has no base64 key after its type"
