"""The agents feature."""

from services.gateway.features.agents.projection import FEATURE

__all__ = ["FEATURE"]
