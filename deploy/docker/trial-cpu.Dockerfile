# The CPU trial environment: Python 3.11, torch 2.13.0 (CPU), numpy, tensorboardX and the harness
# (`import determined`), and JupyterLab and TensorBoard for notebook and TensorBoard tasks, in a
# venv first on PATH, so `python3 train.py` finds them (no sshd: `det shell` needs an image with
# openssh-server and libnss-wrapper, as the CUDA one has). Built by
# `det deploy local build-images` from a folder of wheels made on the host (no network).
ARG BASE=python:3.11-slim-bookworm
FROM ${BASE} AS build
COPY wheels/deps /wheels/deps
RUN python3 -m venv /opt/determined \
    && /opt/determined/bin/pip install --quiet --no-index --no-cache-dir /wheels/deps/*.whl
COPY wheels/own /wheels/own
RUN /opt/determined/bin/pip install --quiet --no-index --no-deps --no-cache-dir /wheels/own/*.whl

FROM ${BASE}
COPY --from=build /opt/determined /opt/determined
ENV PATH=/opt/determined/bin:$PATH PYTHONUNBUFFERED=1
