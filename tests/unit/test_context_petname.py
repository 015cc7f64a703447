"""Default experiment names (kept with the context helpers: both are small
pure pieces of ``determined.common``)."""

from __future__ import annotations

import random

from determined.common.petname import ADJECTIVES, NOUNS, experiment_name, petname


def test_petname_is_adjective_adjective_noun() -> None:
    first, second, noun = petname(random.Random(3)).split("-")

    assert first in ADJECTIVES and second in ADJECTIVES and noun in NOUNS


def test_the_same_seed_gives_the_same_name() -> None:
    assert experiment_name(random.Random(11)) == experiment_name(random.Random(11))
    assert experiment_name(random.Random(11)).startswith("Experiment (")
