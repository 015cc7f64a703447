"""The one converter from a stored config (ExperimentCreated.config_json) to
the typed, frozen ExperimentConfig that pure cores read. Every default lives
in the config model (determined.common.expconf); no core reads a raw dict."""

import functools
import json

from determined.common.expconf import ExperimentConfig, load_config


@functools.lru_cache(maxsize=256)
def experiment_config(config_json: str) -> ExperimentConfig:
    """The stored, fully defaulted config as a typed value (cached: many
    events of one experiment carry the same text)."""
    return load_config(json.loads(config_json or "{}"), new_experiment=False)
