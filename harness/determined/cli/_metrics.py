"""`det trial metrics`: every point of a trial's metrics as a table, CSV or
JSON, written as the points arrive.

A table or CSV has one column per metric key, and the keys are known only
once every point has been read: the points are first spooled to a temporary
file (one line each) while the columns are collected, then written out. The
CLI's memory does not grow with the number of points.
"""

import csv
import json
import tempfile
from collections.abc import Iterable, Iterator
from typing import IO, Any

from determined.cli._output import format_log_time, message_dict

FIXED_COLUMNS = ("group", "steps_completed", "reported_at")
TABLE_HEADERS = ("Group", "# of Batches", "Report Time")


def cell(value: Any) -> str:
    """A metric value in a table or CSV cell: strings as they are ("NaN" as
    stored), anything else as JSON (numbers, booleans, nested values)."""
    if value is None:
        return ""
    return value if isinstance(value, str) else json.dumps(value, sort_keys=True)


class Columns:
    """The metric keys, in name order (as stored, a point's keys keep no order
    of the user's), and how wide each column is."""

    def __init__(self) -> None:
        self._fixed_widths = [len(header) for header in TABLE_HEADERS]
        self._key_widths: dict[str, int] = {}

    @property
    def keys(self) -> list[str]:
        return sorted(self._key_widths)

    @property
    def widths(self) -> list[int]:
        return self._fixed_widths + [self._key_widths[key] for key in self.keys]

    def add(self, fixed: list[str], metrics: dict[str, Any]) -> None:
        for index, text in enumerate(fixed):
            self._fixed_widths[index] = max(self._fixed_widths[index], len(text))
        for key, value in metrics.items():
            self._key_widths[key] = max(self._key_widths.get(key, len(key)), len(cell(value)))


def fixed_cells(point: Any) -> list[str]:
    return [point.group, str(point.steps_completed), format_log_time(point.reported_at_ns)]


def write_json(points: Iterable[Any], out: IO[str]) -> None:
    """A JSON array, one point per line, written point by point."""
    separator = "[\n"
    for point in points:
        out.write(separator + json.dumps(message_dict(point), sort_keys=True))
        separator = ",\n"
    out.write("[]\n" if separator == "[\n" else "\n]\n")


def write_rows(points: Iterable[Any], out: IO[str], *, as_csv: bool) -> None:
    """CSV (group, steps_completed, reported_at, then one column per metric
    key) or an aligned table of the same columns."""
    columns = Columns()
    with tempfile.TemporaryFile("w+", encoding="utf-8") as spool:
        for point in points:
            fixed, metrics = fixed_cells(point), json.loads(point.metrics_json or "{}")
            columns.add(fixed, metrics)
            spool.write(json.dumps([fixed, metrics]) + "\n")
        spool.seek(0)
        keys = columns.keys
        rows = (fixed + [cell(metrics.get(key)) for key in keys] for fixed, metrics in map(json.loads, spool))
        if as_csv:
            _write_csv(columns, rows, out)
        else:
            _write_table(columns, rows, out)


def _write_csv(columns: Columns, rows: Iterator[list[str]], out: IO[str]) -> None:
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow([*FIXED_COLUMNS, *columns.keys])
    writer.writerows(rows)


def _write_table(columns: Columns, rows: Iterator[list[str]], out: IO[str]) -> None:
    widths = columns.widths

    def line(cells: list[str]) -> str:
        return " | ".join(c.ljust(w) for c, w in zip(cells, widths, strict=True)).rstrip() + "\n"

    out.write(line([*TABLE_HEADERS, *columns.keys]))
    out.write("-+-".join("-" * w for w in widths) + "\n")
    for row in rows:
        out.write(line(row))
