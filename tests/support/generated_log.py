"""A busy cluster's log written by today's cores: bench/gen_log.py's
simulation (the real searcher, trial lifecycle and scheduler cores against a
simulated agent and trials), generated in-process at a small size."""

import functools
import importlib.util
from pathlib import Path
from types import ModuleType

from services.common.envelope import Envelope
from services.common.eventlog import StoredEvent

GEN_LOG = Path(__file__).parents[2] / "bench" / "gen_log.py"


@functools.cache
def _gen_log() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gen_log", GEN_LOG)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def generated_log(events: int, seed: int, incidents: float = 1.0) -> list[StoredEvent]:
    """The log of about `events` events (`python bench/gen_log.py --events N --seed S
    --incidents I`), each with its sequence, as a read gives it."""
    entries = _gen_log().generate(events, seed, incidents)
    return [
        StoredEvent(sequence, Envelope.FromString(data), caught_up=False)
        for sequence, (_, data, _) in enumerate(entries, start=1)
    ]
