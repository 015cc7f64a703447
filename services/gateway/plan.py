"""The plan of one batch of events (pure): what the batch does to the read
models' rows, as data the projector folds over the rows it loads and writes
back whole, one statement per table (projection.py makes it; the features'
row rules fill it).

A change is (operation, arguments): a module-level function of the row (or
None: no row yet) and its arguments, returning the new row (or None). Plans
are pickled (replay.py), and a module-level function pickles by its name.
The generic operations are here; a feature's own ones sit beside its rules.
"""

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

Row = dict[str, Any]
Args = tuple[Any, ...]
# A metric point's key: (trial_id, group, steps_completed, trial_run_id).
MetricKey = tuple[int, str, int, int]
Operation = Callable[..., Row | None]
Change = tuple[Operation, Args]
# The columns of a metric row after its key: metrics, reported_at_ns, superseded.
SUPERSEDED = 6


@dataclass
class Plan:
    """What one batch of events does to the read models."""

    # In the order of the events: (table, key, change).
    changes: list[tuple[str, Any, Change]] = field(default_factory=list)
    # The newest value of each metric point in the batch (one upsert may not
    # touch a row twice).
    metric_rows: dict[MetricKey, Args] = field(default_factory=dict)
    # (trial_id, trial_run_id, resumed_at) of each run requested: the stored
    # points of earlier runs past its resume point are superseded.
    superseded: list[Args] = field(default_factory=list)
    # A trial's highest point in the batch, lowered by a later resume.
    total_batches: dict[int, int] = field(default_factory=dict)
    # Trial id -> the keys of its points in metric_rows.
    trial_points: dict[int, set[MetricKey]] = field(default_factory=dict)
    # (sequence, event type) of the batch's events the index by type holds
    # (features/events/type_index.py; planning.py fills it: it knows the sequences).
    event_types: list[tuple[int, str]] = field(default_factory=list)

    def keys(self) -> dict[str, list[Any]]:
        """The keys of the rows the batch changes, per table: the rows to load."""
        keys: dict[str, dict[Any, None]] = {}
        for table, key, _ in self.changes:
            keys.setdefault(table, {})[key] = None
        for trial_id in self.total_batches:
            keys.setdefault("trials", {})[trial_id] = None
        return {table: list(found) for table, found in keys.items()}

    def rows(self, stored: Mapping[str, Mapping[Any, Row]]) -> dict[str, list[Row]]:
        """Folds the batch over the `stored` rows it touches (table -> key ->
        row; a key that is missing has no row); returns, per table it changes
        (or that `stored` names), the rows that differ from the stored ones,
        to be written back whole."""
        current: dict[str, dict[Any, Row | None]] = {table: {} for table in stored}
        for table, key, (operation, arguments) in self.changes:
            rows = current.setdefault(table, {})
            row = rows[key] if key in rows else _copy(stored.get(table, {}).get(key))
            rows[key] = operation(row, *arguments)
        trials = current.setdefault("trials", {}) if self.total_batches else {}
        for trial_id, batches in self.total_batches.items():
            row = trials[trial_id] if trial_id in trials else _copy(stored.get("trials", {}).get(trial_id))
            if row is not None:
                row["total_batches"] = max(row["total_batches"], batches)
            trials[trial_id] = row
        return {
            table: [
                row for key, row in rows.items() if row is not None and row != stored.get(table, {}).get(key)
            ]
            for table, rows in current.items()
        }

    def metric_columns(self) -> list[list[Any]]:
        """The metric rows as one list per column, for the unnest() upsert."""
        return [list(column) for column in zip(*self.metric_rows.values(), strict=True)]

    def change(self, table: str, key: Any, change: Change) -> None:
        self.changes.append((table, key, change))


@dataclass(frozen=True)
class PlannedBatch:
    """The plan of the events `first` to `last` (made by the replay helper:
    replay.py). Not what they wake: a replayed batch wakes every waiter
    (Projector._apply_planned), which costs less than finding out."""

    first: int
    last: int
    plan: Plan


def _copy(row: Row | None) -> Row | None:
    return None if row is None else dict(row)


# -- the generic changes ---------------------------------------------------------------


def created(new: Row) -> Change:
    """Creates the row unless it exists (a replayed creation keeps the first)."""
    return _create, (new,)


def replaced(new: Row, kept: tuple[str, ...] = ()) -> Change:
    """Creates the row, or replaces every column of it but `kept`."""
    return _replace, (new, kept)


def updated(**values: Any) -> Change:
    """Sets these columns of the row, if it exists."""
    return _set, (values,)


def first(**values: Any) -> Change:
    """Sets these columns of the row where they are still NULL (the first
    value stays: COALESCE)."""
    return _first, (values,)


def _create(row: Row | None, new: Row) -> Row | None:
    return dict(new) if row is None else row


def _replace(row: Row | None, new: Row, kept: tuple[str, ...]) -> Row | None:
    return dict(new) if row is None else {**new, **{column: row[column] for column in kept}}


def _set(row: Row | None, values: dict[str, Any]) -> Row | None:
    if row is not None:
        row.update(values)
    return row


def _first(row: Row | None, values: dict[str, Any]) -> Row | None:
    if row is not None:
        for column, value in values.items():
            if row[column] is None:
                row[column] = value
    return row
