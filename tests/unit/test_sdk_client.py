"""The SDK (`determined.experimental.client`): light to import, what its calls
send, and what they give back, against an in-process gateway
(tests/support/checkpoint_gateway.py). tests/integration/test_sdk_gateway.py runs it against the
real gateway."""

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.checkpoint_gateway import CheckpointGateway, Served

from determined.experimental import client
from determined.experimental._checkpoint import listing_request
from determined.proto import api_pb2

UUID_A = "aaaaaaaa-0000-4000-8000-000000000001"
UUID_B = "bbbbbbbb-0000-4000-8000-000000000002"


@pytest.fixture
def fake(tmp_path: Path) -> Iterator[tuple[client.Determined, CheckpointGateway]]:
    servicer = CheckpointGateway(tmp_path / "storage")
    servicer.experiments[3] = api_pb2.Experiment(
        id=3,
        state="COMPLETED",
        config_json=json.dumps({"searcher": {"metric": "loss", "smaller_is_better": False}}),
    )
    servicer.trials[5] = api_pb2.Trial(id=5, experiment_id=3, state="COMPLETED", hparams_json='{"lr": 0.1}')
    servicer.add_checkpoint(UUID_A, {"model.bin": b"weights", "sub/x": b"1"}, metric=0.9, steps=10)
    servicer.add_checkpoint(UUID_B, {"model.bin": b"other"}, metric=0.5, steps=20)
    served = Served(servicer)
    try:
        yield client.Determined(f"http://{served.address}/"), servicer
    finally:
        served.stop()


def test_importing_the_client_loads_nothing_heavy() -> None:
    heavy = ("grpc", "torch", "sqlalchemy", "pydantic", "google.protobuf", "services", "boto3", "yaml")
    code = (
        "import sys\nfrom determined.experimental import client\n"
        "client.login; client.Determined; client.Checkpoint.download\n"
        f"print(','.join(m for m in {heavy!r} if m in sys.modules))\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == ""


@pytest.mark.parametrize(
    ("sort_by", "order_by", "max_results", "sent"),
    [
        (None, None, None, {"sort_by": "searcher_metric", "max_results": 0}),
        (
            client.CheckpointSortBy.BATCH_NUMBER,
            client.OrderBy.DESCENDING,
            3,
            {"sort_by": "steps_completed", "order_by": "desc", "max_results": 3},
        ),
        (client.CheckpointSortBy.END_TIME, client.OrderBy.ASC, None, {"order_by": "asc", "max_results": 0}),
        ("accuracy", "DESC", None, {"sort_by": "accuracy", "order_by": "desc", "max_results": 0}),
        ("searcher_metric", "asc", 2, {"sort_by": "searcher_metric", "order_by": "asc", "max_results": 2}),
    ],
)
def test_listing_arguments_become_the_requests_sort(
    sort_by: object, order_by: object, max_results: int | None, sent: dict[str, object]
) -> None:
    assert listing_request(sort_by, order_by, max_results) == sent  # type: ignore[arg-type]


def test_listing_arguments_that_make_no_sense_are_refused() -> None:
    with pytest.raises(ValueError, match="sort_by and order_by go together"):
        listing_request("loss", None, None)
    with pytest.raises(ValueError, match="max_results must be 1 or more"):
        listing_request(None, None, 0)
    with pytest.raises(ValueError):
        listing_request("loss", "sideways", None)


def test_checkpoints_of_an_experiment_and_a_trial(fake: tuple[client.Determined, CheckpointGateway]) -> None:
    determined, gateway = fake
    experiment = determined.get_experiment(3)
    assert experiment.state is client.ExperimentState.COMPLETED
    assert experiment.wait(interval=0) is client.ExperimentState.COMPLETED
    assert [c.uuid for c in experiment.list_checkpoints()] == [UUID_A, UUID_B]
    assert gateway.sent(api_pb2.GetExperimentCheckpointsRequest)[-1].sort_by == "searcher_metric"

    top = experiment.top_checkpoint()
    assert top.uuid == UUID_A
    sent = gateway.sent(api_pb2.GetExperimentCheckpointsRequest)[-1]
    assert (sent.sort_by, sent.order_by, sent.max_results) == ("searcher_metric", "", 1)
    # By another metric: the experiment's smaller_is_better (false) orders it, unless told.
    experiment.top_checkpoint(sort_by="accuracy")
    assert gateway.sent(api_pb2.GetExperimentCheckpointsRequest)[-1].order_by == "desc"
    experiment.top_checkpoint(sort_by="accuracy", smaller_is_better=True)
    assert gateway.sent(api_pb2.GetExperimentCheckpointsRequest)[-1].order_by == "asc"

    trial = determined.get_trial(5)
    assert (trial.experiment_id, trial.hparams, trial.state) == (3, {"lr": 0.1}, client.TrialState.COMPLETED)
    assert trial.top_checkpoint(sort_by="loss").uuid == UUID_A
    sent = gateway.sent(api_pb2.GetTrialCheckpointsRequest)[-1]
    assert (sent.trial_id, sent.sort_by, sent.order_by, sent.max_results) == (5, "loss", "desc", 1)

    assert (top.training.trial_id, top.training.steps_completed, top.training.searcher_metric) == (5, 10, 0.9)
    assert top.training.validation_metrics == {"loss": 0.9}
    assert top.metadata == {"steps_completed": 10} and top.state is client.CheckpointState.COMPLETED
    assert top.resources == {"model.bin": 7, "sub/": 0, "sub/x": 1}

    gateway.checkpoints.clear()
    with pytest.raises(ValueError, match="experiment 3 has no checkpoint"):
        experiment.top_checkpoint()


def test_a_trials_logs_and_metrics(fake: tuple[client.Determined, CheckpointGateway]) -> None:
    determined, gateway = fake
    trial = determined.get_trial(5)
    assert list(trial.logs(follow=True)) == [
        "[2001-09-09T01:46:40.000000Z] 5.1      || line 0\n",
        "[2001-09-09T01:46:40.000000Z] 5.1      || line 1\n",
        "[2001-09-09T01:46:40.000000Z] 5.2      || line 2\n",
    ]
    assert gateway.sent(api_pb2.TrialLogsRequest)[0].follow is True
    points = list(trial.iter_metrics("validation"))
    assert [(p.group, p.steps_completed, p.metrics) for p in points] == [
        ("validation", 10, {"loss": 0.1}),
        ("validation", 20, {"loss": 0.05}),
    ]
    assert points[0].trial_id == 5 and points[0].end_time.year == 2001


def test_waiting_for_a_first_trial_that_never_comes(
    fake: tuple[client.Determined, CheckpointGateway],
) -> None:
    determined, gateway = fake
    gateway.experiments[4] = api_pb2.Experiment(id=4, state="ERROR", end_reason="the searcher failed")
    with pytest.raises(
        RuntimeError, match="experiment 4 ended ERROR before a trial began: the searcher failed"
    ):
        determined.get_experiment(4).await_first_trial(interval=0)
    assert determined.get_experiment(3).await_first_trial().id == 5


def test_a_checkpoint_downloads_deletes_and_removes_files(
    fake: tuple[client.Determined, CheckpointGateway], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    determined, gateway = fake
    checkpoint = determined.get_checkpoint(UUID_A)
    path = checkpoint.download(tmp_path / "master", mode="master")
    assert path == str(tmp_path / "master")
    assert (tmp_path / "master/model.bin").read_bytes() == b"weights"
    only = checkpoint.download(
        tmp_path / "some",
        mode=client.DownloadMode.DIRECT,
        selector=lambda relpath: relpath.startswith("sub/"),
    )
    assert sorted(p.name for p in Path(only).rglob("*")) == ["sub", "x"]
    monkeypatch.chdir(tmp_path)
    assert checkpoint.download() == f"checkpoints/{UUID_A}"
    assert (tmp_path / "checkpoints" / UUID_A / "sub/x").read_bytes() == b"1"

    checkpoint.delete()
    checkpoint.remove_files(["sub/**"])
    sent = gateway.sent(api_pb2.DeleteCheckpointsRequest)
    assert [(list(r.uuids), list(r.globs)) for r in sent] == [([UUID_A], []), ([UUID_A], ["sub/**"])]
    with pytest.raises(ValueError, match="globs must be non-empty"):
        checkpoint.remove_files([])
    with pytest.raises(client.APIError, match=f"checkpoint {UUID_B[:-1]}9 not found") as raised:
        determined.get_checkpoint(UUID_B[:-1] + "9")
    assert raised.value.code == "NOT_FOUND"

    gateway.checkpoints[UUID_A].state = "DELETED"
    checkpoint.reload()
    assert checkpoint.state is client.CheckpointState.DELETED
    with pytest.raises(client.APIError, match="was deleted"):
        checkpoint.download(tmp_path / "gone")


def test_models_and_their_versions(fake: tuple[client.Determined, CheckpointGateway]) -> None:
    determined, _ = fake
    model = determined.create_model("mnist", description="digits", metadata={"team": "cv"}, labels=["a"])
    assert (model.name, model.description, model.metadata, model.labels) == (
        "mnist",
        "digits",
        {"team": "cv"},
        ["a"],
    )
    assert model.get_version() is None
    first = model.register_version(UUID_A)
    second = model.register_version(UUID_B, name="better", comment="more steps")
    assert (first.model_version, second.model_version, second.name) == (1, 2, "better")
    assert [v.model_version for v in model.get_versions()] == [2, 1]
    assert [v.checkpoint.uuid for v in model.get_versions(client.OrderBy.ASC)] == [UUID_A, UUID_B]
    latest = determined.get_model("mnist").get_version()
    assert latest is not None and latest.checkpoint.uuid == UUID_B
    assert determined.get_model(1).get_version(1).checkpoint.uuid == UUID_A  # type: ignore[union-attr]
    assert determined.get_model("mnist").get_version(3) is None
    assert [m.name for m in determined.list_models()] == ["mnist"]
    assert determined.get_checkpoint(UUID_A).model_versions == ["mnist:1"]
    with pytest.raises(client.APIError) as raised:
        determined.get_checkpoint(UUID_A).delete()
    assert raised.value.code == "INVALID_ARGUMENT" and UUID_A in str(raised.value)


def test_the_module_functions_use_the_login(
    fake: tuple[client.Determined, CheckpointGateway], monkeypatch: pytest.MonkeyPatch
) -> None:
    determined, _ = fake
    address = determined._gateway.address
    monkeypatch.setattr(client, "_determined", None)
    monkeypatch.setenv("DET_MASTER", address)
    assert client.get_checkpoint(UUID_A).uuid == UUID_A  # $DET_MASTER when nobody logged in
    client.login(master="127.0.0.1:1")
    with pytest.raises(client.APIError) as raised:
        client.get_trial(5)
    assert raised.value.code == "UNAVAILABLE"
    client.login(master=address)
    assert client.get_trial(5).id == 5
