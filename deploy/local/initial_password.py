"""The password a new cluster's built-in users `admin` and `determined` get.

cluster-up keeps it in <data dir>/initial-user-password (mode 0600, never in a
log or in run/cluster.json) from before the cluster starts until it has
logged the operator in as `admin`: the supervisor hands it to the gateway
(DET_INITIAL_USER_PASSWORD), which applies it when it finds no user, so a
gateway restarted before then still has it. Once the login worked, the users
exist and the file is removed."""

import json
import os
import secrets
import string
from dataclasses import dataclass
from pathlib import Path

FILE_NAME = "initial-user-password"
GENERATED_LENGTH = 16


@dataclass(frozen=True)
class InitialPassword:
    password: str
    # Made by cluster-up (to be shown once), not given by the operator.
    generated: bool


def path(data_dir: Path) -> Path:
    return data_dir / FILE_NAME


def generate() -> str:
    """16 letters and digits, with at least one uppercase letter, one lowercase and one digit."""
    alphabet = string.ascii_letters + string.digits
    while True:
        password = "".join(secrets.choice(alphabet) for _ in range(GENERATED_LENGTH))
        if (
            any(c.isupper() for c in password)
            and any(c.islower() for c in password)
            and any(c.isdigit() for c in password)
        ):
            return password


def save(data_dir: Path, initial: InitialPassword) -> None:
    """Writes the file, readable by its owner only from the moment it exists."""
    data_dir.mkdir(parents=True, exist_ok=True)
    target = path(data_dir)
    target.unlink(missing_ok=True)
    fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as out:
        json.dump({"password": initial.password, "generated": initial.generated}, out)


def load(data_dir: Path) -> InitialPassword | None:
    try:
        document = json.loads(path(data_dir).read_text())
        return InitialPassword(str(document["password"]), bool(document["generated"]))
    except (OSError, ValueError, KeyError, TypeError):
        return None


def forget(data_dir: Path) -> None:
    path(data_dir).unlink(missing_ok=True)


def gateway_environment(data_dir: Path) -> dict[str, str]:
    """DET_INITIAL_USER_PASSWORD for the gateway while the file exists."""
    initial = load(data_dir)
    return {} if initial is None else {"DET_INITIAL_USER_PASSWORD": initial.password}
