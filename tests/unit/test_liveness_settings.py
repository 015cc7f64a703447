"""The scheduler's settings (environment) and the configuration they give."""

import pytest
from pydantic import ValidationError

from services.scheduler.__main__ import SchedulerSettings
from services.scheduler.config import SchedulerConfig


def test_the_defaults_are_determineds() -> None:
    settings = SchedulerSettings()
    assert settings.agent_lost_s == 10.0
    assert settings.scheduler_config() == SchedulerConfig()


def test_every_setting_reaches_the_configuration(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DET_AGENT_LOST_S", "2.5")
    monkeypatch.setenv("DET_SCHEDULER_TYPE", "priority")
    monkeypatch.setenv("DET_SCHEDULER_POOL_TYPES", " gpu = fair_share ,, cpu=priority ")
    monkeypatch.setenv("DET_SCHEDULER_MIN_RUN_S", "0")
    monkeypatch.setenv("DET_SCHEDULER_DEFAULT_PRIORITY", "7")
    settings = SchedulerSettings()
    assert settings.agent_lost_s == 2.5
    assert settings.scheduler_config() == SchedulerConfig(
        default_type="priority",
        pool_types={"gpu": "fair_share", "cpu": "priority"},
        min_run_s=0.0,
        default_priority=7,
    )


@pytest.mark.parametrize(
    "name, value, message",
    [
        ("DET_SCHEDULER_POOL_TYPES", "gpu=fifo", "'gpu=fifo' is not POOL=fair_share or POOL=priority"),
        ("DET_SCHEDULER_POOL_TYPES", "gpu", "'gpu' is not POOL=fair_share or POOL=priority"),
        ("DET_SCHEDULER_POOL_TYPES", "=priority", "'=priority' is not POOL=fair_share or POOL=priority"),
        ("DET_SCHEDULER_TYPE", "fifo", "'fifo' is not one of fair_share, priority"),
        ("DET_AGENT_LOST_S", "0", "greater than 0"),
        ("DET_SCHEDULER_MIN_RUN_S", "-1", "greater than or equal to 0"),
    ],
)
def test_a_malformed_setting_stops_the_start_naming_it(
    monkeypatch: pytest.MonkeyPatch, name: str, value: str, message: str
) -> None:
    monkeypatch.setenv(name, value)
    with pytest.raises(ValidationError) as raised:
        SchedulerSettings()
    assert name.removeprefix("DET_").lower() in str(raised.value)
    assert message in str(raised.value)
