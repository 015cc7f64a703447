import json

import pytest

import determined as det
from determined._info import ClusterInfo


def trial_env(**overrides: str) -> dict[str, str]:
    env = {
        "DET_MASTER": "127.0.0.1:8080",
        "DET_CLUSTER_ID": "c1",
        "DET_AGENT_ID": "agent-1",
        "DET_SLOT_IDS": "[0]",
        "DET_TASK_ID": "7",
        "DET_ALLOCATION_ID": "7.1",
        "DET_SESSION_TOKEN": "tok",
        "DET_TASK_TYPE": "TRIAL",
        "DET_EXPERIMENT_ID": "3",
        "DET_TRIAL_ID": "7",
        "DET_TRIAL_RUN_ID": "1",
        "DET_TRIAL_SEED": "42",
        "DET_EXPERIMENT_CONFIG": json.dumps(
            {"data": {"url": "x"}, "checkpoint_storage": {"type": "shared_fs"}}
        ),
        "DET_HPARAMS": json.dumps({"lr": 0.1, "model": {"layers": 2}}),
        "DET_STEPS_COMPLETED": "100",
        "DET_SEARCHER_LENGTH": "234",
    }
    env.update(overrides)
    return env


def test_off_cluster_there_is_no_cluster_info(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("DET_MASTER", "DET_ALLOCATION_ID"):
        monkeypatch.delenv(name, raising=False)
    det.get_cluster_info.cache_clear()
    assert det.get_cluster_info() is None


def test_on_cluster_the_info_is_read_once_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in trial_env().items():
        monkeypatch.setenv(name, value)
    det.get_cluster_info.cache_clear()
    try:
        info = det.get_cluster_info()
        assert info is not None and info is det.get_cluster_info()
    finally:
        det.get_cluster_info.cache_clear()


def test_a_trial_task_has_all_fields() -> None:
    info = ClusterInfo._from_env(trial_env(DET_LATEST_CHECKPOINT="abc"))
    assert info.master_url == "http://127.0.0.1:8080"
    assert (info.cluster_id, info.agent_id, info.slot_ids) == ("c1", "agent-1", [0])
    assert (info.task_id, info.allocation_id, info.session_token, info.task_type) == (
        "7",
        "7.1",
        "tok",
        "TRIAL",
    )
    assert info.latest_checkpoint == "abc"
    assert info.user_data == {"url": "x"}
    assert (info.container_addrs, info.container_rank) == (["127.0.0.1"], 0)
    trial = info.trial
    assert isinstance(trial, det.TrialInfo)
    assert (trial.trial_id, trial.experiment_id, trial.trial_seed) == (7, 3, 42)
    assert trial.hparams == {"lr": 0.1, "model": {"layers": 2}}
    assert trial._config["checkpoint_storage"] == {"type": "shared_fs"}
    assert (trial._steps_completed, trial._trial_run_id, trial._searcher_length) == (100, 1, 234)


def test_without_a_searcher_length_the_config_decides() -> None:
    env = trial_env(DET_SEARCHER_LENGTH="")
    assert ClusterInfo._from_env(env).trial._searcher_length == 0
    del env["DET_SEARCHER_LENGTH"]
    assert ClusterInfo._from_env(env).trial._searcher_length == 0


def test_without_a_checkpoint_latest_checkpoint_is_none() -> None:
    assert ClusterInfo._from_env(trial_env()).latest_checkpoint is None


def test_a_master_url_with_a_scheme_is_kept() -> None:
    assert ClusterInfo._from_env(trial_env(DET_MASTER="https://gw:443/")).master_url == "https://gw:443"


def test_a_non_trial_task_has_no_trial_info() -> None:
    info = ClusterInfo._from_env(trial_env(DET_TASK_TYPE="COMMAND", DET_LATEST_CHECKPOINT="abc"))
    assert info.latest_checkpoint is None and info.user_data == {}
    with pytest.raises(RuntimeError, match="TRIAL"):
        _ = info.trial


def test_a_missing_variable_is_named() -> None:
    env = trial_env()
    del env["DET_SESSION_TOKEN"]
    with pytest.raises(ValueError, match="DET_SESSION_TOKEN"):
        ClusterInfo._from_env(env)


def test_the_package_surface() -> None:
    assert det.LOG_FORMAT == "%(levelname)s: [%(process)s] %(name)s: %(message)s"
    assert isinstance(det.__version__, str)
    assert issubclass(det.InvalidHP, Exception)
    assert det.core.init is not None
