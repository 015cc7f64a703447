"""The SDK under Determined 0.38's names: every name its `determined.experimental` and
`client` export exists here (the members this cluster has no counterpart for fail where they
are used, naming themselves), and what the newer calls send (log filters, sorts, filters),
against the in-process gateway of tests/support/checkpoint_gateway.py. The calls against the
real gateway: tests/integration/test_sdk_calls_gateway.py."""

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.checkpoint_gateway import CheckpointGateway, Served

import determined.experimental as experimental
from determined.experimental import client
from determined.experimental._experiment import experiments_request
from determined.experimental._trial import sorted_trials
from determined.experimental._user import check_password
from determined.proto import api_pb2

# What Determined 0.38.1 exports (its determined/experimental/__init__.py and client.py),
# less its modules and typing helpers.
EXPERIMENTAL_NAMES = [
    "Checkpoint",
    "Determined",
    "Experiment",
    "ExperimentReference",
    "Model",
    "ModelOrderBy",
    "ModelSortBy",
    "ModelVersion",
    "OrderBy",
    "Project",
    "Trial",
    "TrialOrderBy",
    "TrialReference",
    "TrialSortBy",
    "client",
]
CLIENT_NAMES = [
    "Checkpoint",
    "CheckpointOrderBy",
    "CheckpointSortBy",
    "CheckpointState",
    "Determined",
    "DownloadMode",
    "Experiment",
    "ExperimentOrderBy",
    "ExperimentSortBy",
    "ExperimentState",
    "Model",
    "ModelOrderBy",
    "ModelSortBy",
    "ModelVersion",
    "Oauth2ScimClient",
    "OrderBy",
    "Project",
    "ResourcePool",
    "TrainingMetrics",
    "Trial",
    "TrialMetrics",
    "TrialOrderBy",
    "TrialSortBy",
    "TrialState",
    "User",
    "ValidationMetrics",
    "Workspace",
    "add_oauth_client",
    "create_experiment",
    "create_model",
    "create_user",
    "create_workspace",
    "delete_workspace",
    "get_checkpoint",
    "get_experiment",
    "get_model",
    "get_model_by_id",
    "get_model_labels",
    "get_models",
    "get_session_username",
    "get_trial",
    "get_user_by_id",
    "get_user_by_name",
    "get_workspace",
    "iter_trials_metrics",
    "list_experiments",
    "list_models",
    "list_oauth_clients",
    "list_users",
    "list_workspaces",
    "login",
    "logout",
    "remove_oauth_client",
    "stream_trials_metrics",
    "stream_trials_training_metrics",
    "stream_trials_validation_metrics",
    "whoami",
]
# Determined 0.38's members of its classes.
MEMBERS = {
    client.Determined: "create_user get_user_by_id get_user_by_name get_session_username whoami logout"
    " list_users list_experiments iter_trials_metrics stream_trials_metrics get_model_by_id get_models"
    " get_model_labels list_workspaces",
    client.Experiment: "activate add_label archive await_first_trial cancel delete download_code get_trials"
    " iter_trials kill list_checkpoints list_trials pause reload remove_label set_description set_labels"
    " set_name set_notes top_checkpoint top_n_checkpoints unarchive wait move_to_project",
    client.Trial: "get_checkpoints get_experiment iter_logs iter_metrics kill list_checkpoints logs reload"
    " select_checkpoint stream_metrics stream_training_metrics stream_validation_metrics top_checkpoint",
    client.Checkpoint: "add_metadata delete download get_metrics reload remove_files remove_metadata"
    " write_metadata_file get_pachyderm_commit",
    client.Model: "get_version get_versions list_versions register_version reload add_metadata archive",
    client.ModelVersion: "get_metrics iter_metrics set_name set_notes delete",
    client.User: "activate change_display_name change_password deactivate reload rename link_with_agent",
}


@pytest.fixture
def fake(tmp_path: Path) -> Iterator[tuple[client.Determined, CheckpointGateway]]:
    servicer = CheckpointGateway(tmp_path / "storage")
    servicer.experiments[3] = api_pb2.Experiment(id=3, state="COMPLETED", searcher_metric="loss")
    servicer.trials[5] = api_pb2.Trial(id=5, experiment_id=3, state="COMPLETED")
    for n, uuid in enumerate(("c-2", "c-1", "c-3"), start=1):
        servicer.add_checkpoint(uuid, {"model.bin": b"w"}, steps=10 * n, trial_id=9 - n)
    served = Served(servicer)
    try:
        yield client.Determined(f"http://{served.address}/"), servicer
    finally:
        served.stop()


def test_every_name_determined_exports_is_here() -> None:
    assert [n for n in EXPERIMENTAL_NAMES if not hasattr(experimental, n)] == []
    assert [n for n in CLIENT_NAMES if not hasattr(client, n)] == []
    assert experimental.TrialOrderBy.ASCENDING is experimental.OrderBy.ASC
    assert client.CheckpointOrderBy.DESC is client.OrderBy.DESCENDING
    assert experimental.ExperimentReference is client.Experiment
    missing = {
        cls.__name__: [m for m in names.split() if not hasattr(cls, m)] for cls, names in MEMBERS.items()
    }
    assert missing == {cls.__name__: [] for cls in MEMBERS}


def test_a_member_with_no_counterpart_fails_where_it_is_used_naming_itself() -> None:
    with pytest.raises(
        client.UnsupportedError, match="Project is not supported by this cluster: it has no workspaces"
    ):
        client.Project()
    with pytest.raises(NotImplementedError, match="Determined.list_workspaces is not supported"):
        client.Determined("127.0.0.1:1").list_workspaces()
    with pytest.raises(NotImplementedError, match="det experiment create --test"):
        experimental.test_one_batch("trial:MyTrial")
    with pytest.raises(NotImplementedError, match="noverify=True"):
        client.Determined("127.0.0.1:1", noverify=True)
    with pytest.raises(NotImplementedError, match="TrialSortBy.CHECKPOINT_SIZE"):
        sorted_trials([], client.TrialSortBy.CHECKPOINT_SIZE, "asc", "loss")


def test_the_experiment_listing_request() -> None:
    request = experiments_request(
        client.ExperimentSortBy.SEARCHER_METRIC_VAL,
        client.OrderBy.DESCENDING,
        ["a", "b"],
        ["alice"],
        [client.ExperimentState.COMPLETED, "ERROR"],
        "mnist",
    )
    assert (request.sort_by, request.descending, request.name) == ("searcher_metric_val", True, "mnist")
    assert (list(request.labels), list(request.users), list(request.states)) == (
        ["a", "b"],
        ["alice"],
        ["COMPLETED", "ERROR"],
    )
    assert not request.HasField("archived")  # archived ones too, as Determined's SDK lists them
    assert experiments_request(None, None, None, None, None, None) == api_pb2.GetExperimentsRequest()


def trial(trial_id: int, **fields: object) -> client.Trial:
    return client.Trial(None, api_pb2.Trial(id=trial_id, **fields))  # type: ignore[arg-type]


def test_trials_sorted_as_asked_those_without_the_value_last() -> None:
    validated = {"latest_validation": api_pb2.MetricPoint(metrics_json='{"loss": 0.5}')}
    trials = [
        trial(3, searcher_metric_value=0.2, total_batches=30, **validated),
        trial(1, total_batches=10),
        trial(2, searcher_metric_value=0.1, total_batches=20, ended_at_ns=5, started_at_ns=1),
    ]

    def ids(sort_by: client.TrialSortBy, order: str = "asc") -> list[int]:
        return [t.id for t in sorted_trials(trials, sort_by, order, "loss")]

    assert ids(client.TrialSortBy.ID) == [1, 2, 3]
    assert ids(client.TrialSortBy.BEST_VALIDATION_METRIC) == [2, 3, 1]
    assert ids(client.TrialSortBy.BEST_VALIDATION_METRIC, "desc") == [3, 2, 1]
    assert ids(client.TrialSortBy.BATCHES_PROCESSED, "DESC") == [3, 2, 1]
    assert ids(client.TrialSortBy.LATEST_VALIDATION_METRIC) == [3, 1, 2]
    assert ids(client.TrialSortBy.DURATION) == [2, 1, 3]


def test_a_trials_log_filters_become_the_request(fake: tuple[client.Determined, CheckpointGateway]) -> None:
    determined, gateway = fake
    trial = determined.get_trial(5)
    lines = list(
        trial.logs(
            tail=10,
            rank_ids=[0],
            stdtypes=["stderr"],
            min_level=client.LogLevel.WARNING,
            timestamp_before="2026-11-22T03:00:00Z",
            timestamp_after=1_700_000_000,
            sources=["container"],
            search_text="loss",
        )
    )
    assert len(lines) == 3
    sent = gateway.sent(api_pb2.TrialLogsRequest)[-1]
    assert (sent.limit, sent.tail, list(sent.rank_ids), list(sent.stdtypes)) == (10, True, [0], ["stderr"])
    assert list(sent.levels) == ["WARNING", "ERROR", "CRITICAL"]
    assert (sent.timestamp_before_ns, sent.timestamp_after_ns) == (
        1_795_316_400 * 10**9,
        1_700_000_000 * 10**9,
    )
    assert (list(sent.sources), sent.search_text, sent.follow) == (["container"], "loss", False)
    list(trial.iter_logs(head=2))
    sent = gateway.sent(api_pb2.TrialLogsRequest)[-1]
    assert (sent.limit, sent.tail) == (2, False)
    for bad, message in (
        ({"head": 1, "tail": 1}, "head or tail"),
        ({"timestamp_after": "yesterday"}, "not a time"),
    ):
        with pytest.raises(ValueError, match=message):
            list(trial.logs(**bad))  # type: ignore[arg-type]


def test_trial_metrics_by_their_older_names(fake: tuple[client.Determined, CheckpointGateway]) -> None:
    determined, gateway = fake
    trial = determined.get_trial(5)
    [first, _] = trial.stream_validation_metrics()
    assert isinstance(first, client.ValidationMetrics) and (first.group, first.total_batches) == (
        "validation",
        10,
    )
    reports = list(determined.stream_trials_metrics([5, 6], "training"))
    assert [(r.trial_id, r.steps_completed) for r in reports] == [(5, 10), (5, 20), (6, 10), (6, 20)]
    assert [r.trial_id for r in gateway.sent(api_pb2.GetTrialMetricsRequest)][-2:] == [5, 6]


def test_checkpoints_sorted_by_what_the_master_does_not_sort(
    fake: tuple[client.Determined, CheckpointGateway],
) -> None:
    determined, gateway = fake
    experiment = determined.get_experiment(3)
    by_uuid = experiment.list_checkpoints(client.CheckpointSortBy.UUID, client.OrderBy.ASC, max_results=2)
    assert [c.uuid for c in by_uuid] == ["c-1", "c-2"]
    assert gateway.sent(api_pb2.GetExperimentCheckpointsRequest)[-1].max_results == 0  # all, then cut here
    by_trial = experiment.list_checkpoints(client.CheckpointSortBy.TRIAL_ID, client.OrderBy.DESC)
    assert [c.training.trial_id for c in by_trial] == [8, 7, 6]


def test_checkpoint_metadata_written_to_a_file(
    fake: tuple[client.Determined, CheckpointGateway], tmp_path: Path
) -> None:
    determined, _ = fake
    determined.get_checkpoint("c-1").write_metadata_file(tmp_path / "metadata.json")
    assert json.loads((tmp_path / "metadata.json").read_text()) == {"steps_completed": 20}


@pytest.mark.parametrize(
    ("password", "message"),
    [
        (None, "a password is required"),
        ("short1A", "has fewer than 8 characters"),
        ("alllowercase1", "has no uppercase letter"),
        ("NoDigitsHere", "has no digit"),
    ],
)
def test_a_new_users_password_follows_determineds_rules(password: str | None, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        check_password(password)
    check_password("Good-Pass1")
