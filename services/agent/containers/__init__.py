"""The agent's Docker runtime: an allocation run as a container instead of a
process (DET_AGENT_RUNTIME=docker). `spec.py` decides what the container is
(pure: from the config, the allocation and the trial's environment),
`bundle.py` how the harness reaches an image that lacks it, `runtime.py`
does it with the `docker` library."""
