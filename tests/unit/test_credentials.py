"""A local cluster's credentials as data: who may publish what on nats-server, the
config text that says so, the files that keep them and what each part is given."""

import ast
import base64
import hashlib
import hmac
import json
import stat
from pathlib import Path

import bcrypt
import pytest

import services
from deploy.local.cluster import (
    ClusterOptions,
    RemoteCluster,
    cluster_identity,
    part_credentials,
    remote_environment,
    service_environment,
)
from deploy.local.credentials import (
    APPENDS,
    CREDENTIALS_FILE,
    NATS_USERS,
    authorization_config,
    credentials,
    nats_user_of,
    permissions,
    scram_verifier,
)
from deploy.local.servers import PASSWORD_RULES, NatsServer
from services.common.envelope import SUBJECT_KINDS, Envelope


def test_each_part_publishes_the_events_it_appends_and_no_other_kind() -> None:
    assert set(permissions("agent").publish) >= {"det.events.agent.>", "det.events.allocation.>"}
    assert not any(subject.startswith(("det.events.experiment", "det.events.user", "det.events.trial"))
                   for subject in permissions("agent").publish)
    assert {s for s in permissions("searcher").publish if s.startswith("det.events.")} == {
        "det.events.allocation.>", "det.events.experiment.>", "det.events.trial.>"}
    assert {s for s in permissions("checkpoint").publish if s.startswith("det.events.")} == {
        "det.events.checkpoint.>", "det.events.experiment.>"}
    assert "det.events.>" in permissions("gateway").publish


def test_every_appended_event_type_has_a_subject_kind() -> None:
    assert all(event_type in SUBJECT_KINDS for types in APPENDS.values() for event_type in types)


def made_event_types(package: Path) -> set[str]:
    """The event types (Envelope payload fields) the package's code constructs (`events_pb2.X(...)`)."""
    payloads = {f.message_type.name: f.name for f in Envelope.DESCRIPTOR.oneofs_by_name["payload"].fields}
    made = set()
    for module in package.rglob("*.py"):
        for node in ast.walk(ast.parse(module.read_text())):
            function = node.func if isinstance(node, ast.Call) else None
            if (isinstance(function, ast.Attribute) and isinstance(function.value, ast.Name)
                    and function.value.id == "events_pb2" and function.attr in payloads):
                made.add(payloads[function.attr])
    return made


@pytest.mark.parametrize("part", sorted(APPENDS))
def test_a_part_may_append_exactly_the_event_types_its_code_makes(part: str) -> None:
    assert made_event_types(Path(services.__file__).parent / part) == set(APPENDS[part])


def test_the_operator_reads_and_appends_nothing() -> None:
    operator = permissions("operator")
    assert not any(s.startswith(("det.", "$O.")) or ".STREAM.CREATE." in s or ".STREAM.UPDATE." in s
                   or ".STREAM.PURGE." in s or ".STREAM.DELETE." in s for s in operator.publish)
    assert "$JS.API.CONSUMER.CREATE.>" in operator.publish


def test_only_the_gateway_changes_streams_and_stores_contexts() -> None:
    for user in NATS_USERS:
        changes = [s for s in permissions(user).publish if ".STREAM.UPDATE." in s or ".STREAM.PURGE." in s
                   or s.startswith("$O.")]
        assert bool(changes) == (user == "gateway"), user
        assert not any(".STREAM.DELETE." in s or ".MSG.DELETE." in s for s in permissions(user).publish)


def test_each_user_subscribes_to_its_own_inboxes_and_only_the_scheduler_to_heartbeats() -> None:
    for user in NATS_USERS:
        subscribe = permissions(user).subscribe
        assert f"_INBOX.{user}.>" in subscribe and "_INBOX.>" not in subscribe
        assert ("det.heartbeats.>" in subscribe) == (user == "scheduler")
    assert "det.heartbeats.>" in permissions("agent").publish


def test_a_namespace_names_its_own_streams() -> None:
    publish = permissions("agent", "t1").publish
    assert "$JS.API.STREAM.CREATE.EVENTS_t1" in publish and "t1.events.agent.>" in publish


def test_agent_parts_share_the_agent_user() -> None:
    assert [nats_user_of(p) for p in ("agent", "agent-1", "agent-far-away", "gateway")] == [
        "agent", "agent", "agent", "gateway"]


def test_the_config_holds_bcrypt_hashes_of_the_passwords_never_the_passwords(tmp_path: Path) -> None:
    found = credentials(tmp_path)
    text = authorization_config(found.nats)
    for user in found.nats.values():
        assert user.password not in text and json.dumps(user.password_hash) in text
        assert bcrypt.checkpw(user.password.encode(), user.password_hash.encode())
    assert text.count("{user: ") == len(NATS_USERS)
    assert '"$JS.API.STREAM.INFO.*"' in text
    assert text in NatsServer(tmp_path, 4222, tmp_path / "log", authorization=text).config_text()
    assert "authorization" not in NatsServer(tmp_path, 4222, tmp_path / "log").config_text()


def test_credentials_are_made_once_in_a_private_file(tmp_path: Path) -> None:
    first = credentials(tmp_path)
    assert stat.S_IMODE((tmp_path / CREDENTIALS_FILE).stat().st_mode) == 0o600
    assert credentials(tmp_path) == first
    assert len({user.password for user in first.nats.values()} | {first.postgres_password}) == len(NATS_USERS) + 1


def test_an_older_file_gets_what_it_lacks_and_keeps_what_it_has(tmp_path: Path) -> None:
    made = credentials(tmp_path)
    document = json.loads((tmp_path / CREDENTIALS_FILE).read_text())
    del document["nats"]["operator"], document["postgres"]["gateway"]
    (tmp_path / CREDENTIALS_FILE).write_text(json.dumps(document))
    again = credentials(tmp_path)
    assert again.nats["agent"] == made.nats["agent"] and again.postgres_password == made.postgres_password
    assert again.nats["operator"] != made.nats["operator"] and again.gateway_password


def test_cluster_secret_carries_the_agents_password_also_for_an_older_file(tmp_path: Path) -> None:
    (tmp_path / "cluster.secret").write_text(json.dumps({"cluster_id": "c1", "secret": "s1"}))
    assert cluster_identity(tmp_path) == ("c1", "s1")
    identity = json.loads((tmp_path / "cluster.secret").read_text())
    assert identity["nats_user"] == "agent"
    assert identity["nats_password"] == credentials(tmp_path).nats["agent"].password
    assert stat.S_IMODE((tmp_path / "cluster.secret").stat().st_mode) == 0o600


def test_each_part_gets_its_own_credentials_only(tmp_path: Path) -> None:
    found = credentials(tmp_path)
    common = service_environment(ClusterOptions(tmp_path), tmp_path, "nats://x")
    secrets_ = [user.password for user in found.nats.values()] + [found.postgres_password, found.gateway_password]
    assert not any(secret in json.dumps(common) for secret in secrets_)
    agent = part_credentials("agent-2", tmp_path, 5433)
    assert agent == {"DET_NATS_USER": "agent", "DET_NATS_PASSWORD": found.nats["agent"].password}
    gateway = part_credentials("gateway", tmp_path, 5433)
    assert gateway["DET_NATS_USER"] == "gateway"
    assert gateway["DET_DATABASE_URL"] == f"postgresql://gateway:{found.gateway_password}@127.0.0.1:5433/determined"
    assert found.postgres_password not in json.dumps(gateway)


def test_a_remote_agent_logs_in_as_agent() -> None:
    remote = RemoteCluster("master:8080", "nats://10.0.0.1:4222", "det", "c1", "s3cret", "pw")
    environment = remote_environment(ClusterOptions(Path("/nowhere")), Path("/nowhere"), remote)
    assert environment["DET_NATS_USER"] == "agent" and environment["DET_NATS_PASSWORD"] == "pw"


def test_the_scram_verifier_is_postgres_own_form() -> None:
    """RFC 7677's SCRAM-SHA-256 keys, as PostgreSQL stores them."""
    salt = b"0123456789abcdef"
    verifier = scram_verifier("pencil", salt, 4096)
    method, rest = verifier.split("$", 1)
    iterations_salt, keys = rest.split("$")
    assert method == "SCRAM-SHA-256" and iterations_salt == f"4096:{base64.b64encode(salt).decode()}"
    salted = hashlib.pbkdf2_hmac("sha256", b"pencil", salt, 4096)
    server_key = hmac.new(salted, b"Server Key", "sha256").digest()
    assert keys.split(":")[1] == base64.b64encode(server_key).decode()
    assert scram_verifier("pencil") != scram_verifier("pencil")  # a new salt each time


@pytest.mark.parametrize("line", ["host all all 127.0.0.1/32 scram-sha-256", "host all all ::1/128 scram-sha-256"])
def test_postgres_asks_every_connection_for_a_password(line: str) -> None:
    assert line in PASSWORD_RULES.splitlines() and "trust" not in PASSWORD_RULES
