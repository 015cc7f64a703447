# The CUDA trial environment: NVIDIA's CUDA runtime with cuDNN, Python 3.12, torch 2.13.0 from
# PyPI (its CUDA build), the harness, JupyterLab and TensorBoard (notebook and TensorBoard tasks)
# and OpenSSH's sshd with nss_wrapper (shells). Needs NVIDIA's base image and a package index: where
# neither is reachable, `det deploy local build-images` skips it and says so. wheels/own holds
# the harness's wheel only.
ARG BASE=nvidia/cuda:12.8.1-cudnn-runtime-ubuntu24.04
FROM ${BASE}
RUN apt-get update -qq \
    && DEBIAN_FRONTEND=noninteractive apt-get install -qq -y --no-install-recommends \
        python3 python3-venv ca-certificates openssh-server libnss-wrapper \
    && rm -rf /var/lib/apt/lists/*
COPY wheels/own /wheels/own
RUN python3 -m venv /opt/determined \
    && /opt/determined/bin/pip install --quiet --no-cache-dir "$(ls /wheels/own/*.whl)[torch,tasks]" \
    && rm -rf /wheels
ENV PATH=/opt/determined/bin:$PATH PYTHONUNBUFFERED=1
