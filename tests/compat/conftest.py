"""Determined 0.38.1's own client against a local cluster: the session-scoped
`determined_cluster` fixture (tests/support/determined_client.py) for every test here."""

from support.determined_client import determined_cluster

__all__ = ["determined_cluster"]
