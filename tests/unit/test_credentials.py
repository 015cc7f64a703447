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
    DeployError,
    RemoteCluster,
    agent_secret_file,
    cluster_identity,
    part_credentials,
    remote_environment,
    service_environment,
)
from deploy.local.credentials import (
    CREDENTIALS_FILE,
    NATS_USERS,
    CredentialsError,
    agent_user,
    authorization_config,
    credentials,
    nats_user_of,
    permissions,
    scram_verifier,
)
from deploy.local.servers import PASSWORD_RULES, NatsServer
from services.agent.core import AGENT_FOLDS
from services.checkpoint.core import GC_FOLDS
from services.common.envelope import SUBJECT_KINDS, Envelope, kinds_of
from services.common.ownership import APPENDS, READS
from services.scheduler.state import SCHEDULER_FOLDS
from services.searcher.core import SEARCHER_FOLDS
from services.searcher.lifecycle import LIFECYCLE_FOLDS
from services.searcher.unmanaged import UNMANAGED_FOLDS

AGENT = agent_user("a1")
# Every user a cluster may have: the services', an agent's, operator.
USERS = (*NATS_USERS, AGENT)


def allows(patterns: tuple[str, ...], subject: str) -> bool:
    """Whether a NATS permission list lets `subject` through (`*` one token, `>` the rest)."""

    def matches(pattern: str) -> bool:
        wanted, given = pattern.split("."), subject.split(".")
        for index, token in enumerate(wanted):
            if token == ">":
                return len(given) > index
            if index >= len(given) or (token != "*" and token != given[index]):
                return False
        return len(given) == len(wanted)

    return any(matches(pattern) for pattern in patterns)


def test_each_part_publishes_the_events_it_appends_and_no_other_kind() -> None:
    agent = permissions(AGENT).publish
    assert allows(agent, "det.events.agent.a1") and allows(agent, "det.events.allocation.9")
    assert not allows(agent, "det.events.agent.a2") and not allows(agent, "det.events.agent.a1.x")
    assert not any(
        subject.startswith(("det.events.experiment", "det.events.user", "det.events.trial"))
        for subject in agent
    )
    assert {s for s in permissions("searcher").publish if s.startswith("det.events.")} == {
        "det.events.allocation.>",
        "det.events.experiment.>",
        "det.events.trial.>",
    }
    assert {s for s in permissions("checkpoint").publish if s.startswith("det.events.")} == {
        "det.events.checkpoint.>",
        "det.events.experiment.>",
    }
    assert "det.events.>" in permissions("gateway").publish


def test_every_appended_event_type_has_a_subject_kind() -> None:
    assert all(event_type in SUBJECT_KINDS for types in APPENDS.values() for event_type in types)


def made_event_types(package: Path) -> set[str]:
    """The event types (Envelope payload fields) the package's code constructs (`events_pb2.X(...)`)."""
    payloads = {f.message_type.name: f.name for f in Envelope.DESCRIPTOR.oneofs_by_name["payload"].fields}
    made = set()
    for module in package.rglob("*.py"):
        if module.name.startswith("simulate"):
            continue  # the scheduler's what-if builds a recorded workload's events to fold them; it appends nothing
        for node in ast.walk(ast.parse(module.read_text())):
            function = node.func if isinstance(node, ast.Call) else None
            if (
                isinstance(function, ast.Attribute)
                and isinstance(function.value, ast.Name)
                and function.value.id == "events_pb2"
                and function.attr in payloads
            ):
                made.add(payloads[function.attr])
    return made


@pytest.mark.parametrize("part", sorted(APPENDS))
def test_a_part_may_append_exactly_the_event_types_its_code_makes(part: str) -> None:
    assert made_event_types(Path(services.__file__).parent / part) == set(APPENDS[part])


def test_each_part_reads_the_kinds_its_cores_fold() -> None:
    folded = {
        "agent": AGENT_FOLDS,
        "scheduler": SCHEDULER_FOLDS,
        "searcher": SEARCHER_FOLDS + LIFECYCLE_FOLDS + UNMANAGED_FOLDS,
        "checkpoint": GC_FOLDS,
    }
    assert {part: kinds_of(folds) for part, folds in folded.items()} == {p: list(k) for p, k in READS.items()}
    for part, kinds in READS.items():  # an append cut short looks at its aggregate's newest event
        assert {SUBJECT_KINDS[event_type] for event_type in APPENDS[part]} <= set(kinds), part


@pytest.mark.parametrize("user", ["scheduler", "searcher", "checkpoint", AGENT])
def test_a_part_reads_only_the_kinds_it_folds_and_never_user_events(user: str) -> None:
    publish = permissions(user).publish
    kinds = READS["agent" if user == AGENT else user]
    for kind in kinds:
        assert allows(publish, f"$JS.API.CONSUMER.CREATE.EVENTS.c1.det.events.{kind}.>")
        assert allows(publish, f"$JS.API.DIRECT.GET.EVENTS.det.events.{kind}.7")
    for kind in sorted(set(SUBJECT_KINDS.values()) - set(kinds)):
        assert not allows(publish, f"$JS.API.CONSUMER.CREATE.EVENTS.c1.det.events.{kind}.>"), kind
        assert not allows(publish, f"$JS.API.DIRECT.GET.EVENTS.det.events.{kind}.7"), kind
    assert "user" not in kinds
    # The forms that name no subject, which nats-server's permissions could not narrow.
    for unnamed in (
        "$JS.API.CONSUMER.CREATE.EVENTS",
        "$JS.API.CONSUMER.CREATE.EVENTS.c1",
        "$JS.API.CONSUMER.DURABLE.CREATE.EVENTS.c1",
        "$JS.API.CONSUMER.CREATE.EVENTS.c1.det.events.>",
        "$JS.API.STREAM.MSG.GET.EVENTS",
        "$JS.API.DIRECT.GET.EVENTS",
        "$JS.API.DIRECT.GET.EVENTS.det.events.>",
        "$JS.API.CONSUMER.CREATE.LOGS.c1.det.logs.>",
    ):
        assert not allows(publish, unnamed), unnamed


def test_the_gateway_and_the_operator_read_everything() -> None:
    for user in ("gateway", "operator"):
        publish = permissions(user).publish
        assert allows(publish, "$JS.API.CONSUMER.CREATE.EVENTS.c1.det.events.>")
        assert allows(publish, "$JS.API.STREAM.MSG.GET.EVENTS")
        assert allows(publish, "$JS.API.DIRECT.GET.EVENTS.det.events.user.1")


def test_only_the_scheduler_writes_the_job_queue_and_the_gateway_reads_it() -> None:
    for user in ("gateway", "searcher", "checkpoint", "operator", agent_user("a1")):
        publish = permissions(user).publish
        assert not allows(publish, "$KV.job_queue.queue"), user
        assert not allows(publish, "$JS.API.STREAM.CREATE.KV_job_queue"), user
    scheduler = permissions("scheduler", "ns1").publish
    assert allows(scheduler, "$KV.job_queue_ns1.queue")
    assert allows(scheduler, "$JS.API.STREAM.CREATE.KV_job_queue_ns1")
    assert not allows(scheduler, "$KV.job_queue.queue")
    gateway = permissions("gateway").publish
    assert allows(gateway, "$JS.API.STREAM.INFO.KV_job_queue")
    assert allows(gateway, "$JS.API.DIRECT.GET.KV_job_queue.$KV.job_queue.queue")


def test_an_agent_appends_as_itself_only() -> None:
    publish = permissions(agent_user("a.b")).publish
    assert allows(publish, "det.events.agent.a.b") and allows(publish, "det.heartbeats.a.b")
    for other in ("det.events.agent.a", "det.events.agent.a.c", "det.heartbeats.a", "det.heartbeats.c"):
        assert not allows(publish, other), other
    assert not allows(publish, "$KV.snapshots.scheduler.SchedulerCore")
    assert allows(publish, "$JS.API.CONSUMER.CREATE.OBJ_contexts")  # it fetches the contexts it runs


def test_the_operator_reads_and_appends_nothing() -> None:
    operator = permissions("operator")
    assert not any(
        s.startswith(("det.", "$O."))
        or ".STREAM.CREATE." in s
        or ".STREAM.UPDATE." in s
        or ".STREAM.PURGE." in s
        or ".STREAM.DELETE." in s
        for s in operator.publish
    )
    assert "$JS.API.CONSUMER.CREATE.>" in operator.publish


def test_only_the_gateway_changes_streams_and_stores_contexts() -> None:
    for user in USERS:
        changes = [
            s
            for s in permissions(user).publish
            if ".STREAM.UPDATE." in s or ".STREAM.PURGE." in s or s.startswith("$O.")
        ]
        assert bool(changes) == (user == "gateway"), user
        assert not any(".STREAM.DELETE." in s or ".MSG.DELETE." in s for s in permissions(user).publish)


def test_each_user_subscribes_to_its_own_inboxes_and_only_the_scheduler_to_heartbeats() -> None:
    for user in USERS:
        subscribe = permissions(user).subscribe
        assert f"_INBOX.{user}.>" in subscribe and "_INBOX.>" not in subscribe
        assert ("det.heartbeats.>" in subscribe) == (user == "scheduler")
    assert permissions(agent_user("a.b")).subscribe == ("_INBOX.agent:a~b.>",)  # one token: not agent a's


def test_a_namespace_names_its_own_streams() -> None:
    publish = permissions(AGENT, "t1").publish
    assert "$JS.API.STREAM.CREATE.EVENTS_t1" in publish and "t1.events.agent.a1" in publish
    assert "$JS.API.CONSUMER.CREATE.EVENTS_t1.*.t1.events.allocation.>" in publish


def test_each_agent_part_logs_in_as_its_agent() -> None:
    assert [nats_user_of(p, i) for p, i in (("agent", "host"), ("agent-1", "agent-1"), ("gateway", ""))] == [
        "agent:host",
        "agent:agent-1",
        "gateway",
    ]
    with pytest.raises(CredentialsError, match="agent-2 has no agent id"):
        nats_user_of("agent-2")


def test_the_config_holds_bcrypt_hashes_of_the_passwords_never_the_passwords(tmp_path: Path) -> None:
    found = credentials(tmp_path, ["a1"])
    text = authorization_config(found.nats)
    for user in found.nats.values():
        assert user.password not in text and json.dumps(user.password_hash) in text
        assert bcrypt.checkpw(user.password.encode(), user.password_hash.encode())
    assert text.count("{user: ") == len(USERS)
    assert '"$JS.API.STREAM.INFO.*"' in text
    assert text in NatsServer(tmp_path, 4222, tmp_path / "log", authorization=text).config_text()
    assert "authorization" not in NatsServer(tmp_path, 4222, tmp_path / "log").config_text()


def test_credentials_are_made_once_in_a_private_file(tmp_path: Path) -> None:
    first = credentials(tmp_path)
    assert stat.S_IMODE((tmp_path / CREDENTIALS_FILE).stat().st_mode) == 0o600
    assert credentials(tmp_path) == first
    assert (
        len({user.password for user in first.nats.values()} | {first.postgres_password})
        == len(NATS_USERS) + 1
    )


def test_an_older_file_gets_what_it_lacks_and_keeps_what_it_has(tmp_path: Path) -> None:
    made = credentials(tmp_path)
    document = json.loads((tmp_path / CREDENTIALS_FILE).read_text())
    del document["nats"]["operator"], document["postgres"]["gateway"]
    document["nats"]["agent"] = {"password": "shared", "bcrypt": "x"}  # the agents' shared user of old
    (tmp_path / CREDENTIALS_FILE).write_text(json.dumps(document))
    again = credentials(tmp_path, ["a1"])
    assert again.nats["gateway"] == made.nats["gateway"] and again.postgres_password == made.postgres_password
    assert again.nats["operator"] != made.nats["operator"] and again.gateway_password
    assert "agent" not in again.nats and again.nats[AGENT] == credentials(tmp_path, ["a1"]).nats[AGENT]


def test_an_older_cluster_secret_loses_the_agents_shared_password(tmp_path: Path) -> None:
    (tmp_path / "cluster.secret").write_text(
        json.dumps({"cluster_id": "c1", "secret": "s1", "nats_user": "agent", "nats_password": "shared"})
    )
    assert cluster_identity(tmp_path) == ("c1", "s1")
    assert json.loads((tmp_path / "cluster.secret").read_text()) == {"cluster_id": "c1", "secret": "s1"}
    assert stat.S_IMODE((tmp_path / "cluster.secret").stat().st_mode) == 0o600


def test_a_remote_agents_secret_file_holds_its_own_user_only(tmp_path: Path) -> None:
    path = agent_secret_file(tmp_path, "far-1")
    identity = json.loads(path.read_text())
    cluster_id, secret = cluster_identity(tmp_path)
    assert identity == {
        "cluster_id": cluster_id,
        "secret": secret,
        "agent_id": "far-1",
        "nats_user": "agent:far-1",
        "nats_password": credentials(tmp_path).nats["agent:far-1"].password,
    }
    assert stat.S_IMODE(path.stat().st_mode) == 0o600 and path.parent.name == "agent-secrets"
    with pytest.raises(DeployError, match="cannot be an agent id"):
        agent_secret_file(tmp_path, "../gateway")


def test_each_part_gets_its_own_credentials_only(tmp_path: Path) -> None:
    found = credentials(tmp_path, ["agent-2"])
    common = service_environment(ClusterOptions(tmp_path), tmp_path, "nats://x")
    secrets_ = [user.password for user in found.nats.values()] + [
        found.postgres_password,
        found.gateway_password,
    ]
    assert not any(secret in json.dumps(common) for secret in secrets_)
    agent = part_credentials("agent-2", tmp_path, 5433, "agent-2")
    assert agent == {
        "DET_NATS_USER": "agent:agent-2",
        "DET_NATS_PASSWORD": found.nats["agent:agent-2"].password,
    }
    gateway = part_credentials("gateway", tmp_path, 5433)
    assert gateway["DET_NATS_USER"] == "gateway"
    assert (
        gateway["DET_DATABASE_URL"]
        == f"postgresql://gateway:{found.gateway_password}@127.0.0.1:5433/determined"
    )
    assert found.postgres_password not in json.dumps(gateway)


def test_a_remote_agent_logs_in_as_itself() -> None:
    remote = RemoteCluster("master:8080", "nats://10.0.0.1:4222", "det", "c1", "s3cret", "pw", "agent:far-1")
    environment = remote_environment(ClusterOptions(Path("/nowhere")), Path("/nowhere"), remote)
    assert environment["DET_NATS_USER"] == "agent:far-1" and environment["DET_NATS_PASSWORD"] == "pw"


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


@pytest.mark.parametrize(
    "line", ["host all all 127.0.0.1/32 scram-sha-256", "host all all ::1/128 scram-sha-256"]
)
def test_postgres_asks_every_connection_for_a_password(line: str) -> None:
    assert line in PASSWORD_RULES.splitlines() and "trust" not in PASSWORD_RULES
