"""Findings 3, 6 and 7 of issue 17, replayed on one real local cluster as the
non-admin mallory would (tests/support/attacker.py), beside the admin's running experiment.

3. A trial's token outlived its trial and killed the admin's experiment: her
   trial prints DET_SESSION_TOKEN, she reads it back with `det trial logs` and
   sends it as `x-allocation-token` to the gateway's gRPC and HTTP APIs. While
   her trial runs it is refused for the admin's experiment (kill, pause, list);
   once her trial has ended it is refused for everything, her trial's own
   reports included. The admin's experiment runs on.
6. A non-admin deleted the admin's checkpoints: `det checkpoint delete` and
   `det e set gc-policy ... 0 0 0` fail naming the owner, and every checkpoint
   stays; killing the admin's experiment stays open to her (basic mode).
7. Login had no rate limit: 30 wrong passwords for admin in a burst are slowed
   (the answer says how long to wait), and the right password works after
   waiting what the answer said.

The tests run in this order on the module's cluster: the admin's running
experiment outlives finding 3's tests and is killed by mallory in finding 6's."""

import json
import re
import textwrap
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import grpc
import httpx
import pytest
from google.protobuf.message import Message
from support import attacker
from support.e2e_cluster import Cluster, det, started_cluster, wait_for

from determined.proto import api_pb2, api_pb2_grpc, events_pb2
from services.gateway.features.users.login_limits import FREE_FAILURES

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

TERMINAL = ("COMPLETED", "ERROR", "CANCELED")

# Runs until killed (at most 5 minutes), reporting its progress; prints the
# allocation token first when given "--print-token", as a careless script does.
LOOPING_PY = textwrap.dedent(
    """
    import os, sys, time
    import determined as det

    if "--print-token" in sys.argv:
        print("my token:", os.environ["DET_SESSION_TOKEN"], flush=True)
    with det.core.init() as core_context:
        for step in range(1200):
            core_context.train.report_progress(step / 1200)
            time.sleep(0.25)
    """
)
# Stores three checkpoints and ends.
CHECKPOINTS_PY = textwrap.dedent(
    """
    import determined as det

    with det.core.init() as core_context:
        for step in (1, 2, 3):
            with core_context.checkpoint.store_path({"steps_completed": step}) as (path, storage_id):
                (path / "weights.bin").write_bytes(bytes([step]) * 1024)
    """
)
TOKEN_LINE = re.compile(r"my token: (\S+)")
WAIT = re.compile(r"too many failed logins for user admin: wait (\d+) s before trying again")


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    with started_cluster("det-user-attacks") as running:
        yield running


# mallory, the attacker (tests/support/attacker.py), on this module's cluster.
mallory = attacker.mallory
mallory_password = attacker.mallory_password


def config(name: str, *arguments: str, storage: dict[str, Any] | None = None) -> str:
    document: dict[str, Any] = {
        "name": name,
        "entrypoint": ["python3", "train.py", *arguments],
        "searcher": {"name": "single", "metric": "x", "max_length": {"batches": 1}},
        "max_restarts": 0,
    }
    if storage is not None:
        document["checkpoint_storage"] = storage
    return json.dumps(document)


def created(who: Cluster, context: Path, script: str, config_text: str) -> int:
    context.mkdir()
    (context / "train.py").write_text(script)
    return who.create(context, config_text)


def running_trial(who: Cluster, experiment_id: int) -> dict[str, Any]:
    """The experiment's one trial, once it runs."""
    return wait_for(
        lambda: next((t for t in who.trials(experiment_id) if t["state"] == "RUNNING"), None),
        f"experiment {experiment_id}'s trial to run",
        180,
    )


def still_running(cluster: Cluster, experiment_id: int) -> None:
    assert cluster.experiment_state(experiment_id) == "ACTIVE"
    assert [t["state"] for t in cluster.trials(experiment_id)] == ["RUNNING"]


@pytest.fixture(scope="module")
def admins_checkpoints(cluster: Cluster, tmp_path_factory: pytest.TempPathFactory) -> tuple[int, list[str]]:
    """The admin's ended experiment and the uuids of its three checkpoints (a policy
    that keeps all three)."""
    storage = {"type": "shared_fs", "host_path": str(cluster.storage_folder("admin")), "save_trial_latest": 3}
    context = tmp_path_factory.mktemp("admin") / "checkpoints"
    experiment_id = created(cluster, context, CHECKPOINTS_PY, config("checkpoints", storage=storage))
    wait_for(lambda: cluster.experiment_state(experiment_id) in TERMINAL, "the admin's checkpoints", 180)
    assert cluster.experiment_state(experiment_id) == "COMPLETED"
    return experiment_id, sorted(c["uuid"] for c in completed_checkpoints(cluster, experiment_id))


def completed_checkpoints(cluster: Cluster, experiment_id: int) -> list[dict[str, Any]]:
    listed = cluster.json("experiment", "list-checkpoints", str(experiment_id))
    assert len(listed) == 3 and {c["state"] for c in listed} == {"COMPLETED"}, listed
    return list(listed)


@pytest.fixture(scope="module")
def admins_running(
    cluster: Cluster, admins_checkpoints: tuple[int, list[str]], tmp_path_factory: pytest.TempPathFactory
) -> int:
    """The admin's experiment, running until someone kills it (after the checkpoints
    one: two slots hold it and mallory's)."""
    context = tmp_path_factory.mktemp("admin") / "running"
    experiment_id = created(cluster, context, LOOPING_PY, config("long"))
    running_trial(cluster, experiment_id)
    return experiment_id


@pytest.fixture(scope="module")
def stolen(
    mallory: Cluster, admins_running: int, tmp_path_factory: pytest.TempPathFactory
) -> tuple[int, int, str]:
    """Mallory's running experiment, its trial and the allocation token her trial printed
    and she read back from its logs."""
    context = tmp_path_factory.mktemp("mallory") / "printing"
    experiment_id = created(mallory, context, LOOPING_PY, config("careless", "--print-token"))
    trial_id = int(running_trial(mallory, experiment_id)["id"])
    found = wait_for(lambda: TOKEN_LINE.search(mallory.logs(trial_id)), "the token in her trial's logs", 60)
    return experiment_id, trial_id, found.group(1)


@pytest.fixture(scope="module")
def api(cluster: Cluster) -> Iterator[api_pb2_grpc.DeterminedStub]:
    """The gateway's gRPC API, with no login."""
    with grpc.insecure_channel(f"localhost:{cluster.master_port}") as channel:
        yield api_pb2_grpc.DeterminedStub(channel)


@pytest.fixture(scope="module")
def web(cluster: Cluster) -> Iterator[httpx.Client]:
    """The gateway's HTTP API, with no login."""
    with httpx.Client(base_url=f"http://localhost:{cluster.master_port + 1}", timeout=60) as client:
        yield client


def refused(call: Callable[..., Any], request: Message, token: str) -> grpc.RpcError:
    """The error of `call(request)` made with the allocation token `token`."""
    try:
        call(request, metadata=(("x-allocation-token", token),), timeout=60)
    except grpc.RpcError as error:
        return error
    raise AssertionError(f"{type(request).__name__} accepted the allocation token")


def assert_refused_for_the_admins_experiment(
    api: api_pb2_grpc.DeterminedStub, web: httpx.Client, token: str, theirs: int
) -> None:
    for call, request in (
        (api.KillExperiment, api_pb2.KillExperimentRequest(experiment_id=theirs)),
        (api.PauseExperiment, api_pb2.PauseExperimentRequest(experiment_id=theirs)),
        (api.GetExperiments, api_pb2.GetExperimentsRequest()),
    ):
        error = refused(call, request, token)
        assert error.code() == grpc.StatusCode.PERMISSION_DENIED, error
        assert "is good only for a trial process's own calls" in (error.details() or ""), error
    for method, path in (
        ("GET", "/api/v1/experiments"),
        ("GET", f"/api/v1/experiments/{theirs}"),
        ("POST", f"/api/v1/experiments/{theirs}/kill"),
        ("POST", f"/api/v1/experiments/{theirs}/pause"),
    ):
        answer = web.request(method, path, headers={"x-allocation-token": token})
        assert answer.status_code == 403, (method, path, answer.text)
        answer = web.request(method, path, headers={"authorization": f"Bearer {token}"})
        assert answer.status_code == 401, (method, path, answer.text)


def test_a_printed_token_reaches_no_other_experiment_while_its_trial_runs(
    cluster: Cluster,
    api: api_pb2_grpc.DeterminedStub,
    web: httpx.Client,
    admins_running: int,
    stolen: tuple[int, int, str],
) -> None:
    _, trial_id, token = stolen
    # The token is good: her running trial's own calls take it.
    api.GetTrialMetadata(
        api_pb2.GetTrialMetadataRequest(trial_id=trial_id),
        metadata=(("x-allocation-token", token),),
        timeout=60,
    )
    assert_refused_for_the_admins_experiment(api, web, token, admins_running)
    still_running(cluster, admins_running)


def test_a_printed_token_is_good_for_nothing_once_its_trial_ended(
    cluster: Cluster,
    mallory: Cluster,
    api: api_pb2_grpc.DeterminedStub,
    web: httpx.Client,
    admins_running: int,
    stolen: tuple[int, int, str],
) -> None:
    experiment_id, trial_id, token = stolen
    mallory.det("experiment", "kill", str(experiment_id))
    wait_for(lambda: mallory.experiment_state(experiment_id) == "CANCELED", "her experiment to end", 120)

    report = events_pb2.MetricReport(group="training", steps_completed=1, metrics_json='{"x": 1.0}')
    own_calls = (
        (
            api.ReportMetrics,
            api_pb2.ReportMetricsRequest(
                trial_id=trial_id, trial_run_id=1, batch_seq=1, reporter_id="mallory", reports=[report]
            ),
        ),
        (
            api.ReportProgress,
            api_pb2.ReportProgressRequest(trial_id=trial_id, progress=0.5, reporter_id="mallory", seq=1),
        ),
    )
    for call, request in own_calls:
        error = refused(call, request, token)
        assert error.code() == grpc.StatusCode.FAILED_PRECONDITION, error
        assert f"of trial {trial_id} is closed" in (error.details() or ""), error
    assert_refused_for_the_admins_experiment(api, web, token, admins_running)
    still_running(cluster, admins_running)


def test_mallory_cannot_delete_the_admins_checkpoints_but_may_kill_its_experiment(
    cluster: Cluster, mallory: Cluster, admins_checkpoints: tuple[int, list[str]], admins_running: int
) -> None:
    experiment_id, uuids = admins_checkpoints
    deleted = mallory.det("checkpoint", "delete", uuids[0], "--yes", check=False)
    assert deleted.returncode != 0, deleted.stdout
    assert f"experiment {experiment_id} belongs to admin" in deleted.stderr, deleted.stderr
    policy = mallory.det(
        "experiment",
        "set",
        "gc-policy",
        str(experiment_id),
        "--save-experiment-best",
        "0",
        "--save-trial-best",
        "0",
        "--save-trial-latest",
        "0",
        "--yes",
        check=False,
    )
    assert policy.returncode != 0, policy.stdout
    assert f"experiment {experiment_id} belongs to admin" in policy.stderr, policy.stderr

    assert sorted(c["uuid"] for c in completed_checkpoints(cluster, experiment_id)) == uuids
    for uuid in uuids:
        described = cluster.json("checkpoint", "describe", uuid)
        assert described["state"] == "COMPLETED", described

    # Killing someone's experiment stays open to every user (Determined's basic mode).
    mallory.det("experiment", "kill", str(admins_running))
    wait_for(
        lambda: cluster.experiment_state(admins_running) == "CANCELED", "the admin's experiment to end", 120
    )


def test_login_guesses_are_slowed_and_the_right_password_works_after_the_wait(
    cluster: Cluster, api: api_pb2_grpc.DeterminedStub, tmp_path: Path
) -> None:
    """Last: the guesses slow down every login for a while."""
    codes, details = [], []
    for n in range(30):
        try:
            api.Login(api_pb2.LoginRequest(username="admin", password=f"guess-{n}"), timeout=60)
            raise AssertionError(f"guess-{n} logged in")
        except grpc.RpcError as error:
            codes.append(error.code())
            details.append(error.details() or "")
    assert codes[:FREE_FAILURES] == [grpc.StatusCode.UNAUTHENTICATED] * FREE_FAILURES, details
    slowed = [d for c, d in zip(codes, details, strict=False) if c == grpc.StatusCode.RESOURCE_EXHAUSTED]
    assert slowed and all(WAIT.fullmatch(d) for d in slowed), details
    assert set(codes) == {grpc.StatusCode.UNAUTHENTICATED, grpc.StatusCode.RESOURCE_EXHAUSTED}
    assert codes.count(grpc.StatusCode.UNAUTHENTICATED) < len(codes) // 2, (
        details
    )  # most never reached bcrypt

    env = dict(cluster.env, DET_CONFIG_DIR=str(tmp_path / "admin-cli"))
    for _ in range(5):  # the right password, after waiting what each answer says
        logged = det(env, "user", "login", "admin", stdin=f"{cluster.password}\n")
        if logged.returncode == 0:
            break
        wait = WAIT.search(logged.stderr)
        assert wait, logged.stdout + logged.stderr
        time.sleep(int(wait.group(1)))
    assert logged.returncode == 0, logged.stdout + logged.stderr
    assert "logged in as user 'admin'" in det(env, "user", "whoami").stdout
