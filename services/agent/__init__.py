"""The agent service."""
