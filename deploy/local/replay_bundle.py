"""A bundle: the events `det events export` writes (or `python -m services.eventlog` prints),
read back for `det deploy local replay`.

One JSON object per line (a bundle ending in .gz is read gzipped):

    {"determined_es_bundle": 1, "exported_at": "...", "filter": {...}, "cluster_id": "..."}
    {"sequence": 1, "event_id": "...", "aggregate": "agent/vm", ..., "agent_registered": {...}}
    {"sequence": 7, "unreadable": "not an event envelope (DecodeError)"}

The header line is optional (services.eventlog prints none) and only first. Every other line is
an event: the envelope in protobuf's JSON form plus the sequence it had in its log (increasing
from line to line), or an event its log could not read, which a replay leaves out. Each line is
checked before anything is loaded: at most MAX_EVENT_BYTES, JSON, an envelope that is
well-formed (services/common/wellformed.py); BundleError names the line and what is wrong.
"""

import gzip
import io
import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from google.protobuf import json_format

from determined.common.limits import MAX_EVENT_BYTES
from services.common.envelope import Envelope
from services.common.wellformed import MalformedEventError, decoded

HEADER_KEY = "determined_es_bundle"
FORMAT = 1


class BundleError(Exception):
    """A bundle that cannot be replayed: the message names the file, the line and why."""


@dataclass(frozen=True)
class Header:
    """What the first line may say about where the bundle comes from."""

    fields: dict[str, Any]


@dataclass(frozen=True)
class Unreadable:
    """An event its log held but could not read: left out of a replay."""

    sequence: int
    why: str


@dataclass(frozen=True)
class Event:
    sequence: int
    envelope: Envelope


Line = Header | Unreadable | Event


@dataclass
class Summary:
    """What check_bundle found: the events a replay loads, those it leaves out, the header."""

    events: int = 0
    unreadable: list[int] = field(default_factory=list)
    header: dict[str, Any] = field(default_factory=dict)


def parsed_line(text: bytes, number: int, previous_sequence: int) -> Line:
    """Line `number` (from 1) of a bundle, after one whose sequence was `previous_sequence`
    (0: none yet); ValueError saying what is wrong with it."""
    text = text.rstrip(b"\r\n")
    if len(text) > MAX_EVENT_BYTES:
        raise ValueError(f"over {MAX_EVENT_BYTES} bytes, the limit of one event")
    try:
        fields = json.loads(text)
    except ValueError as error:  # also bytes that are not UTF-8
        raise ValueError(f"not JSON ({error})") from None
    if not isinstance(fields, dict):
        raise ValueError("not a JSON object")
    if HEADER_KEY in fields:
        return _header(fields, number)
    sequence = fields.pop("sequence", None)
    if type(sequence) is not int or sequence < 1:
        raise ValueError('no "sequence" (a whole number from 1)')
    if sequence <= previous_sequence:
        raise ValueError(f"sequence {sequence} after {previous_sequence}: the events must be in log order")
    if "unreadable" in fields:
        return Unreadable(sequence, str(fields["unreadable"]))
    return Event(sequence, _envelope(fields))


def _header(fields: dict[str, Any], number: int) -> Header:
    if number != 1:
        raise ValueError("a bundle's header can only be its first line")
    if fields[HEADER_KEY] != FORMAT:
        raise ValueError(f"bundle format {fields[HEADER_KEY]!r}: this version reads format {FORMAT}")
    return Header(fields)


def _envelope(fields: dict[str, Any]) -> Envelope:
    envelope = Envelope()
    try:
        json_format.ParseDict(fields, envelope)
    except (json_format.ParseError, ValueError, TypeError, RecursionError) as error:
        raise ValueError(f"not an event envelope ({error})") from None
    try:
        decoded(envelope.SerializeToString())  # the check every reader of a log makes
    except MalformedEventError as error:
        raise ValueError(str(error)) from None
    return envelope


def read_bundle(path: Path) -> Iterator[Line]:
    """The bundle's lines in order (blank ones skipped); BundleError at the first bad one."""
    previous = 0
    try:
        with _opened(path) as lines:
            for number, text in enumerate(_lines(lines), start=1):
                if not text.strip():
                    continue
                try:
                    line = parsed_line(text, number, previous)
                except ValueError as error:
                    raise BundleError(f"{path}, line {number}: {error}") from None
                if not isinstance(line, Header):
                    previous = line.sequence
                yield line
    except (OSError, EOFError) as error:  # EOFError: a .gz cut short
        raise BundleError(f"cannot read {path}: {getattr(error, 'strerror', None) or error}") from None


def check_bundle(path: Path) -> Summary:
    """Reads the whole bundle: BundleError at its first bad line, or when it holds no event."""
    summary = Summary()
    for line in read_bundle(path):
        if isinstance(line, Header):
            summary.header = line.fields
        elif isinstance(line, Unreadable):
            summary.unreadable.append(line.sequence)
        else:
            summary.events += 1
    if summary.events == 0:
        raise BundleError(f"{path} holds no event to replay")
    return summary


def _opened(path: Path) -> io.BufferedIOBase:
    return gzip.open(path, "rb") if path.name.endswith(".gz") else open(path, "rb")  # noqa: SIM115


def _lines(lines: io.BufferedIOBase) -> Iterator[bytes]:
    """Each line, read MAX_EVENT_BYTES at a time at most, so that a huge one is not held whole:
    what is left of it is skipped and the line is too long (parsed_line says so)."""
    while True:
        text = lines.readline(MAX_EVENT_BYTES + 1)
        if not text:
            return
        if len(text) > MAX_EVENT_BYTES and not text.endswith(b"\n"):
            while (rest := lines.readline(MAX_EVENT_BYTES)) and not rest.endswith(b"\n"):
                pass
        yield text
