"""The checkpoints feature."""

from services.gateway.features.checkpoints.projection import FEATURE

__all__ = ["FEATURE"]
