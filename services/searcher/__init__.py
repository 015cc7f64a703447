"""The searcher service."""
