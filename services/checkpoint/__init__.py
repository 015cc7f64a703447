"""The checkpoint service."""
