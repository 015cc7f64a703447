"""The trials feature."""

from services.gateway.features.trials.projection import FEATURE

__all__ = ["FEATURE"]
