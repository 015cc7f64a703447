"""What describes an experiment, as users edit it (pure): archive and
unarchive (det experiment archive|unarchive), name, description, notes and
labels (det experiment set name|description, label add|remove; Determined's
PatchExperiment, PutExperimentLabel, DeleteExperimentLabel), and which
experiments a listing shows (GetExperimentsRequest's filters).

Each edit is decided against the experiment's version (the stream sequence of
its newest event) and appended with it as the expected version, its message id
`archive-<id>-<version>` or `details-<id>-<version>`: two racing edits (two
labels added at once) append one each, the second decided again on the first's
result, so neither is lost. Any user may edit any experiment's description,
as in Determined's basic mode; a trial process may not.
"""

from determined.common import states
from determined.proto import api_pb2, events_pb2
from services.common.envelope import Append, aggregate
from services.gateway.errors import FailedPreconditionError, InvalidArgumentError
from services.gateway.features.commands import Unchanged
from services.gateway.features.experiments.queries import (
    EXPERIMENT_SORTS,
    SORT_ALIASES,
    ExperimentListing,
)

# What an edit may hold (checked before anything else is done with it).
MAX_NAME_CHARS = 255
MAX_DESCRIPTION_CHARS = 10_000
MAX_NOTES_CHARS = 100_000
MAX_LABEL_CHARS = 255
MAX_LABELS = 100
# What a listing's filters may hold.
MAX_FILTER_VALUES = 100
MAX_LISTING_LIMIT = 10_000
_STATES = frozenset(state.value for state in states.ExperimentState)


def archive_set(experiment: api_pb2.Experiment, archived: bool, version: int) -> Append | Unchanged:
    """Archives an ended experiment (only those, as Determined), or unarchives an
    archived one; Unchanged when it is so already."""
    action = "archive" if archived else "unarchive"
    if experiment.archived == archived:
        return Unchanged(f"Experiment {experiment.id} is {'already' if archived else 'not'} archived")
    if archived and experiment.state not in states.TERMINAL_STATES:
        raise FailedPreconditionError(
            f"Experiment {experiment.id} is {experiment.state}: only an ended experiment can be archived"
        )
    payload = events_pb2.ExperimentArchiveSet(experiment_id=experiment.id, archived=archived)
    return Append(
        aggregate("experiment", experiment.id), payload, f"{action}-{experiment.id}-{version}", version
    )


def details_set(
    experiment: api_pb2.Experiment,
    version: int,
    *,
    name: str | None = None,
    description: str | None = None,
    notes: str | None = None,
    labels: list[str] | None = None,
) -> Append | Unchanged:
    """Sets the fields given (None: left as they are), each checked first;
    Unchanged when each is so already."""
    payload = events_pb2.ExperimentDetailsSet(experiment_id=experiment.id)
    if name is not None and checked_name(name) != experiment.name:
        payload.name = name
    if description is not None and _checked_text(description, "description", MAX_DESCRIPTION_CHARS) != (
        experiment.description
    ):
        payload.description = description
    if notes is not None and _checked_text(notes, "notes", MAX_NOTES_CHARS) != experiment.notes:
        payload.notes = notes
    if labels is not None and (unique := checked_labels(labels)) != list(experiment.labels):
        payload.labels.SetInParent()  # present even when it clears them all
        payload.labels.labels.extend(unique)
    if not any(payload.HasField(field) for field in ("name", "description", "notes", "labels")):
        return Unchanged(f"Experiment {experiment.id} is so already: nothing to change")
    return Append(
        aggregate("experiment", experiment.id), payload, f"details-{experiment.id}-{version}", version
    )


def label_added(labels: list[str], label: str) -> list[str]:
    """The labels with `label` last (where it is when present already)."""
    return labels if checked_label(label) in labels else [*labels, label]


def label_removed(labels: list[str], label: str) -> list[str]:
    return [kept for kept in labels if kept != checked_label(label)]


def checked_name(name: str) -> str:
    """A name: not blank (Determined's rule), at most MAX_NAME_CHARS."""
    _checked_text(name, "name", MAX_NAME_CHARS)
    if not name.strip():
        raise InvalidArgumentError("an experiment's name must not be empty or only spaces")
    return name


def checked_labels(labels: list[str]) -> list[str]:
    """The labels, each once (in their first place), each checked."""
    if len(labels) > MAX_LABELS:
        raise InvalidArgumentError(f"an experiment has at most {MAX_LABELS} labels, not {len(labels)}")
    return list(dict.fromkeys(checked_label(label) for label in labels))


def checked_label(label: str) -> str:
    """A label: 1 to MAX_LABEL_CHARS characters, no comma (listings take their
    label filter as a comma-separated list), no spaces around it."""
    _checked_text(label, "a label", MAX_LABEL_CHARS)
    if not label or label != label.strip():
        raise InvalidArgumentError(f"a label must not be empty or start or end with a space: {label!r}")
    if "," in label:
        raise InvalidArgumentError(
            f"a label must not hold a comma (label filters are comma-separated): {label!r}"
        )
    return label


def _checked_text(text: str, what: str, most: int) -> str:
    if len(text) > most:
        raise InvalidArgumentError(f"{what} is {len(text)} characters long; at most {most} are allowed")
    if any(ord(char) < 32 and char not in "\n\t" for char in text):
        raise InvalidArgumentError(f"{what} must not hold control characters")
    return text


def listing_of(request: api_pb2.GetExperimentsRequest) -> ExperimentListing:
    """The listing GetExperiments asks for, each filter checked."""
    if request.limit < 0 or request.offset < 0 or request.limit > MAX_LISTING_LIMIT:
        raise InvalidArgumentError(
            f"limit must be 0 (all) to {MAX_LISTING_LIMIT} and offset at least 0,"
            f" not {request.limit} and {request.offset}"
        )
    for what, values in (("labels", request.labels), ("states", request.states), ("users", request.users)):
        if len(values) > MAX_FILTER_VALUES:
            raise InvalidArgumentError(f"{what} may name at most {MAX_FILTER_VALUES}, not {len(values)}")
    return ExperimentListing(
        states=tuple(_checked_state(state) for state in request.states),
        owners=tuple(request.users),
        name=_checked_text(request.name, "the name filter", MAX_NAME_CHARS),
        labels=tuple(checked_label(label) for label in request.labels),
        archived=request.archived if request.HasField("archived") else None,
        sort_by=checked_sort(request.sort_by),
        descending=request.descending,
    )


def checked_sort(sort_by: str) -> str:
    """One of EXPERIMENT_SORTS, or Determined's name of one ("" is "id")."""
    name = SORT_ALIASES.get(sort_by.lower(), sort_by.lower()) or "id"
    if name not in EXPERIMENT_SORTS:
        raise InvalidArgumentError(
            f"sort_by {sort_by[:80]!r} is not one of {', '.join(EXPERIMENT_SORTS + tuple(SORT_ALIASES))}"
        )
    return name


def _checked_state(state: str) -> str:
    name = state.upper().removeprefix("STATE_")
    if name not in _STATES:
        raise InvalidArgumentError(f"{state[:80]!r} is not an experiment state: {', '.join(sorted(_STATES))}")
    return name
