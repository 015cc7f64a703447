"""Users through the real CLI against a real cluster: cluster-up logged the
operator in as admin (its generated password shown once, never logged); other
people log in with `det user login` in a CLI config of their own; what only
an admin or an experiment's owner may do is refused to others; a changed
password ends the user's other sessions; a deactivated user cannot log in."""

import ipaddress
import stat
import textwrap
import uuid
from pathlib import Path

import pytest
from support.e2e_cluster import Cluster, created_id, det, wait_for

pytestmark = pytest.mark.e2e

CONFIG = textwrap.dedent(
    """
    name: users
    entrypoint: python3 -c "print('never runs')"
    searcher:
      name: single
      metric: loss
      max_length:
        batches: 1
    """
)


class Person:
    """Someone at another terminal: the same master, a CLI config folder of their own."""

    def __init__(self, cluster: Cluster, folder: Path) -> None:
        self.env = dict(cluster.env, DET_CONFIG_DIR=str(folder))

    def det(self, *args: str, stdin: str = "", ok: bool = True) -> str:
        result = det(self.env, *args, stdin=stdin)
        if ok:
            assert result.returncode == 0, f"det {' '.join(args)}:\n{result.stdout}\n{result.stderr}"
            return result.stdout
        assert result.returncode == 1, f"det {' '.join(args)} did not fail:\n{result.stdout}"
        return result.stderr


def new_user(cluster: Cluster, password: str, *flags: str) -> str:
    name = f"u{uuid.uuid4().hex[:8]}"
    created = cluster.det("user", "create", name, "--password", password, *flags)
    assert f"Created user '{name}'" in created.stdout
    return name


def logged_in(cluster: Cluster, folder: Path, name: str, password: str) -> Person:
    person = Person(cluster, folder)
    person.det("user", "login", name, stdin=f"{password}\n")
    assert person.det("user", "whoami") == f"You are logged in as user '{name}'\n"
    return person


def test_cluster_up_logged_the_operator_in_as_admin_with_a_private_cache(cluster: Cluster) -> None:
    assert cluster.det("user", "whoami").stdout == "You are logged in as user 'admin'\n"
    assert cluster.password, "cluster-up showed the generated password"
    cache = cluster.cli_config / "auth.json"
    assert stat.S_IMODE(cache.stat().st_mode) == 0o600
    assert stat.S_IMODE(cluster.cli_config.stat().st_mode) == 0o700
    logged = [
        path
        for path in (cluster.data_dir / "logs").iterdir()
        if cluster.password in path.read_text(errors="replace")
    ]
    assert logged == [], "the initial password is in a log"
    assert not (cluster.data_dir / "initial-user-password").exists()
    users = {u["username"]: u for u in cluster.json("user", "list")}
    assert users["admin"]["admin"] and not users["determined"].get("admin", False)


def listening_addresses(port: int) -> set[str]:
    """The addresses something listens on at `port`, from /proc/net/tcp and tcp6 (hex, each
    32-bit word in host order; state 0A); an IPv4-mapped IPv6 address as the IPv4 one
    (gRPC listens on dual-stack sockets)."""
    found = set()
    for table in ("tcp", "tcp6"):
        for line in Path("/proc/net", table).read_text().splitlines()[1:]:
            local, state = line.split()[1], line.split()[3]
            hex_address, _, hex_port = local.partition(":")
            if state != "0A" or int(hex_port, 16) != port:
                continue
            raw = b"".join(bytes.fromhex(hex_address[i : i + 8])[::-1] for i in range(0, len(hex_address), 8))
            address = ipaddress.ip_address(raw)
            mapped = address.ipv4_mapped if isinstance(address, ipaddress.IPv6Address) else None
            found.add(str(mapped or address))
    return found


def test_a_local_master_listens_on_loopback_only(cluster: Cluster) -> None:
    assert listening_addresses(cluster.master_port) == {"127.0.0.1"}


def test_nobody_logged_in_is_told_to_log_in(cluster: Cluster, tmp_path: Path) -> None:
    stranger = Person(cluster, tmp_path / "stranger")
    assert "det user login" in stranger.det("experiment", "list", ok=False)
    helped = Person(cluster, tmp_path / "env")
    helped.env.update(DET_USER="determined", DET_PASS=cluster.password)
    assert helped.det("user", "whoami") == "You are logged in as user 'determined'\n"


def test_a_user_logs_in_and_out(cluster: Cluster, tmp_path: Path) -> None:
    name = new_user(cluster, "Alice-pass-1")
    alice = logged_in(cluster, tmp_path / "alice", name, "Alice-pass-1")
    assert name in {u["username"] for u in cluster.json("user", "list")}
    assert alice.det("-u", "admin", "user", "whoami", stdin=f"{cluster.password}\n") == (
        "You are logged in as user 'admin'\n"
    )
    alice.det("user", "logout")
    assert "det user login" in alice.det("experiment", "list", ok=False)


def test_a_non_admin_cannot_administer(cluster: Cluster, tmp_path: Path) -> None:
    name = new_user(cluster, "Bob-pass-1")
    bob = logged_in(cluster, tmp_path / "bob", name, "Bob-pass-1")
    agent_id = cluster.json("agent", "list")[0]["agent_id"]
    assert "admin" in bob.det("agent", "disable", agent_id, ok=False)
    assert "admin" in bob.det("user", "create", f"x{name}", "--password", "Xx-pass-1", ok=False)
    assert "admin" in bob.det("user", "deactivate", "determined", ok=False)

    (tmp_path / "context").mkdir()
    (tmp_path / "context" / "config.yaml").write_text(CONFIG)
    created = cluster.det(
        "experiment",
        "create",
        str(tmp_path / "context" / "config.yaml"),
        str(tmp_path / "context"),
        "--paused",
    )
    experiment_id = created_id(created.stdout)
    cluster.det("experiment", "kill", str(experiment_id))
    wait_for(
        lambda: cluster.experiment_state(experiment_id).endswith("CANCELED"), "the killed experiment to end"
    )
    refused = bob.det("experiment", "delete", str(experiment_id), "--yes", ok=False)
    assert "owner" in refused or "admin" in refused, refused
    # Everyone views and edits; the owner is the admin who created it.
    assert bob.det("experiment", "describe", str(experiment_id), "--json")


def test_a_changed_password_ends_the_other_sessions(cluster: Cluster, tmp_path: Path) -> None:
    name = new_user(cluster, "Carol-pass-1")
    here = logged_in(cluster, tmp_path / "here", name, "Carol-pass-1")
    there = logged_in(cluster, tmp_path / "there", name, "Carol-pass-1")
    here.det("user", "change-password", stdin="Carol-pass-2\nCarol-pass-2\n")
    assert here.det("user", "whoami") == f"You are logged in as user '{name}'\n"  # logged in again
    refused = there.det("user", "whoami", ok=False)  # its token is refused, and no password on stdin
    assert "password" in refused.lower(), refused
    assert there.det("user", "whoami", stdin="Carol-pass-2\n") == f"You are logged in as user '{name}'\n"


def test_a_deactivated_user_cannot_log_in(cluster: Cluster, tmp_path: Path) -> None:
    name = new_user(cluster, "Dave-pass-1")
    dave = logged_in(cluster, tmp_path / "dave", name, "Dave-pass-1")
    cluster.det("user", "deactivate", name)
    assert name not in {u["username"] for u in cluster.json("user", "list")}
    assert name in {u["username"] for u in cluster.json("user", "list", "--all")}
    dave.det("user", "whoami", ok=False)
    Person(cluster, tmp_path / "again").det("user", "login", name, stdin="Dave-pass-1\n", ok=False)
    cluster.det("user", "activate", name)
    dave.det("user", "login", name, stdin="Dave-pass-1\n")
