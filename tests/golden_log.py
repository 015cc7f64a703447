"""Reading the golden event logs under tests/golden/ (see its README)."""

import json
from pathlib import Path

from google.protobuf import json_format

from services.common.envelope import Envelope

GOLDEN = Path(__file__).parent / "golden"


def golden_log(name: str) -> list[Envelope]:
    """The envelopes of a log recorded with `python -m services.eventlog`."""
    envelopes = []
    for line in (GOLDEN / name).read_text().splitlines():
        fields = json.loads(line)
        fields.pop("sequence", None)
        envelopes.append(json_format.ParseDict(fields, Envelope()))
    return envelopes
