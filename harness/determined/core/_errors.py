"""Exceptions user code meets at the harness (re-exported as `det.InvalidHP` and from
`det.core`).

    ValueError
    └── ReportError                   a report the cluster cannot store; nothing of it is queued
        ├── ReportTooLargeError       over MAX_REPORT_BYTES once serialized
        └── UnserializableValueError  a value (or key) that is not JSON (also a TypeError)
"""


class InvalidHP(Exception):
    """Raise inside `with det.core.init()` when the sampled hyperparameters cannot work.

    The context then ends the trial cleanly (exit 0) instead of counting it as a failure.
    """


class ReportError(ValueError):
    """A report (metrics, metadata, a checkpoint's metadata) that the cluster cannot store.

    Raised at the call when the harness can tell (the report is then not queued), and on the
    next report call after the gateway refused a queued report that was then dropped: its
    message names the report or the key and the limit.
    """


class ReportTooLargeError(ReportError):
    """The report's JSON is over the per-report limit (`MAX_REPORT_BYTES`)."""


class UnserializableValueError(ReportError, TypeError):
    """A value or key with no JSON form, even after the conversions the harness makes (numpy
    scalars and arrays, torch tensors, NaN and infinities). Also a TypeError, which is what
    such values raised before."""
