"""The models feature."""

from services.gateway.features.models.projection import FEATURE

__all__ = ["FEATURE"]
