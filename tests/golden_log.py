"""Reading the golden event logs under tests/golden/ (see its README)."""

from pathlib import Path

from google.protobuf import json_format

from services.common.envelope import Envelope

GOLDEN = Path(__file__).parent / "golden"


def golden_log(name: str) -> list[Envelope]:
    lines = (GOLDEN / name).read_text().splitlines()
    return [json_format.Parse(line, Envelope()) for line in lines if line.strip()]
