"""Exceptions user code raises at the harness (re-exported as `det.InvalidHP`)."""


class InvalidHP(Exception):
    """Raise inside `with det.core.init()` when the sampled hyperparameters cannot work.

    The context then ends the trial cleanly (exit 0) instead of counting it as a failure.
    """
