"""The users feature."""

from services.gateway.features.users.projection import FEATURE

__all__ = ["FEATURE"]
