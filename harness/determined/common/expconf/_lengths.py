"""Training lengths: ``{batches: N}``, ``{records: N}`` or ``{epochs: N}``
(deprecated knobs of the legacy Trial APIs), and the searcher's
``max_length`` which may also be a bare integer."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field, PlainValidator, model_validator

from determined.common.expconf._base import AsJson, ConfigModel, validate_part
from determined.common.expconf._errors import ConfigRuleError

LengthUnit = Literal["batches", "records", "epochs"]


class Length(ConfigModel):
    """Exactly one of the three units, with a count of at least 0."""

    batches: Annotated[int, Field(ge=0)] | None = None
    records: Annotated[int, Field(ge=0)] | None = None
    epochs: Annotated[int, Field(ge=0)] | None = None

    @model_validator(mode="after")
    def _one_unit(self) -> Length:
        if len(self.model_dump(exclude_none=True)) != 1:
            raise ConfigRuleError([("", "must have exactly one of batches, records or epochs")])
        return self

    @property
    def unit(self) -> LengthUnit:
        return "batches" if self.batches is not None else "records" if self.records is not None else "epochs"

    @property
    def value(self) -> int:
        return int(getattr(self, self.unit))

    def to_json(self) -> dict[str, int]:
        return {self.unit: self.value}


def _searcher_length(value: Any) -> Length | int:
    if isinstance(value, int) and not isinstance(value, bool):
        if value < 0:
            raise ConfigRuleError([("", "must be at least 0")])
        return value
    if isinstance(value, Length):
        return value
    if not isinstance(value, dict):
        raise ConfigRuleError([("", "must be an integer or one of {batches: N}, {records: N}, {epochs: N}")])
    return validate_part(Length, value)


SearcherLength = Annotated[Length | int, PlainValidator(_searcher_length), AsJson]


def batches(count: int) -> Length:
    return Length(batches=count)


def to_nearest_batches(
    length: Length | int, *, global_batch_size: int | None, records_per_epoch: int
) -> Length:
    """A length of the legacy Trial APIs counted in batches wherever the config says how
    large a batch and an epoch are, truncating as Determined's master did: records //
    global batch size, epochs * records_per_epoch // global batch size. Otherwise the
    length keeps its unit (a bare int counts batches), and the trainer counts records by
    the global batch size and epochs by the training data's length."""
    if isinstance(length, int):
        return batches(length)
    if global_batch_size:
        if length.records is not None:
            return batches(length.records // global_batch_size)
        if length.epochs is not None and records_per_epoch:
            return batches(length.epochs * records_per_epoch // global_batch_size)
    return length
