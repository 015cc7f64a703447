"""The experiments feature."""

from services.gateway.features.experiments.projection import FEATURE

__all__ = ["FEATURE"]
