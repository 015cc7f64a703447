"""Argument types of the CLI, checked at parse time so that bad input is told
apart from a missing experiment before anything is sent."""

import argparse
from collections.abc import Callable

# Ids are int64 on the wire (proto) and BIGINT in the read models.
MAX_ID = 2**63 - 1


def id_of(kind: str) -> Callable[[str], int]:
    """An argparse `type` for the id of an experiment, trial, ...: a whole
    number from 1 to MAX_ID; anything else is refused with a message naming
    the argument (argparse adds "argument experiment_id:")."""

    def parse(text: str) -> int:
        try:
            value = int(text.strip(), 10)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not {kind} id (a whole number)") from None
        if not 1 <= value <= MAX_ID:
            raise argparse.ArgumentTypeError(f"{text} is not {kind} id: ids go from 1 to {MAX_ID}")
        return value

    parse.__name__ = f"{kind.split()[-1]}_id"
    return parse


EXPERIMENT_ID = id_of("an experiment")
TRIAL_ID = id_of("a trial")
