"""The Python SDK: `from determined.experimental import client`.

Importing this package loads nothing heavy; `client` talks to the master with
the CLI's gRPC client, connecting on first use.
"""
