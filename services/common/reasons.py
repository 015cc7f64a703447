"""The reasons decisions carry for people (TrialCreated, TrialStopRequested,
AllocationRequested, AllocationAssigned...): short words, never part of what
is decided. A reason built from what users named (a metric, an agent) is cut
to MAX_REASON_CHARS, so the log never grows with them."""

MAX_REASON_CHARS = 300
_ELLIPSIS = "..."


def capped(reason: str) -> str:
    """`reason`, cut to MAX_REASON_CHARS (ending in "...") when longer."""
    if len(reason) <= MAX_REASON_CHARS:
        return reason
    return reason[: MAX_REASON_CHARS - len(_ELLIPSIS)] + _ELLIPSIS


def number(value: float) -> str:
    """A metric value in a reason: four significant digits ("0.8123", "1.2e+04")."""
    return f"{value:.4g}"
