"""Programs the agent runs next to trials (`python -m determined.exec.<name>`)."""
