# The CPU trial environment: Python 3.11, torch 2.13.0 (CPU), numpy, tensorboardX and the harness
# (`import determined`), in a venv first on PATH, so `python3 train.py` finds them. Not JupyterLab:
# the wheels are resolved for the host's Python, and some of its dependencies need a newer 3.11
# than Debian's (soupsieve: >= 3.11.5; bookworm has 3.11.2); nor sshd (no package index here). Built by
# `det deploy local build-images` from a folder of wheels made on the host (no network). The
# harness's own wheel goes in last, in the final stage: a new checkout rebuilds only that small
# layer, and Docker reuses the copy of the dependencies' venv (torch: about 1 GiB).
ARG BASE=python:3.11-slim-bookworm
FROM ${BASE} AS build
COPY wheels/deps /wheels/deps
RUN python3 -m venv /opt/determined \
    && /opt/determined/bin/pip install --quiet --no-index --no-cache-dir /wheels/deps/*.whl

FROM ${BASE}
COPY --from=build /opt/determined /opt/determined
COPY wheels/own /wheels/own
RUN /opt/determined/bin/pip install --quiet --no-index --no-deps --no-cache-dir /wheels/own/*.whl \
    && rm -rf /wheels
ENV PATH=/opt/determined/bin:$PATH PYTHONUNBUFFERED=1
