"""Memorable three-word names (``adjective-adjective-noun``) for experiments
that were not given one. Pure: the caller hands in the RNG so the name is
decided once, recorded, and never drawn again on replay."""

from __future__ import annotations

import random

ADJECTIVES = (
    "amber", "brave", "calm", "clever", "crisp", "dapper", "eager", "fancy", "gentle", "glad",
    "golden", "happy", "humble", "jolly", "keen", "lively", "lucky", "mellow", "merry", "misty",
    "noble", "patient", "plucky", "polite", "proud", "quiet", "rapid", "rosy", "shiny", "silver",
    "snowy", "steady", "sunny", "swift", "tidy", "upbeat", "vivid", "warm", "witty", "zesty",
)  # fmt: skip
NOUNS = (
    "badger", "beacon", "cactus", "comet", "cricket", "dolphin", "falcon", "fern", "gecko", "harbor",
    "heron", "island", "koala", "lantern", "maple", "meadow", "narwhal", "otter", "panda", "pebble",
    "puffin", "quokka", "raven", "river", "robin", "salmon", "sparrow", "spruce", "tiger", "walrus",
)  # fmt: skip


def petname(rng: random.Random) -> str:
    """Two adjectives and a noun joined by ``-``, e.g. ``brave-misty-otter``."""
    return f"{rng.choice(ADJECTIVES)}-{rng.choice(ADJECTIVES)}-{rng.choice(NOUNS)}"


def experiment_name(rng: random.Random) -> str:
    """The default experiment name, as Determined writes it: ``Experiment (<petname>)``."""
    return f"Experiment ({petname(rng)})"
