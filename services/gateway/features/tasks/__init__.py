"""The tasks feature: notebooks, TensorBoards, commands and shells."""

from services.gateway.features.tasks.projection import FEATURE

__all__ = ["FEATURE"]
