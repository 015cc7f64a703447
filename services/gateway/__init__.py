"""The gateway service: the public gRPC API and the read-model projector.

    python -m services.gateway            serve (DET_DATABASE_URL is required;
                                          DET_NATS_URL, DET_NAMESPACE, DET_GATEWAY_PORT=8080,
                                          DET_CHECKPOINT_PATH, DET_CLUSTER_SECRET, DET_CLUSTER_ID,
                                          DET_READY_FILE, DET_LOG_JSON/LEVEL/FILE,
                                          DET_ADVERTISED_NATS_URL, DET_SCHEDULER_*,
                                          DET_HTTP_PORT: the HTTP/JSON API, none when unset)
    python -m services.gateway.rebuild    drop the read models and replay the log

Modules: settings (environment), server (composition root), auth (the one
interceptor: principals, error -> status), errors, servicer (thin handlers),
commands (pure: requests -> Appends), logs (TrialLogs streaming), tables
(read-model schema), projection (pure: events -> rows), projector (shell:
batches, one transaction each, stored position), queries (read models ->
API messages), jobs (GetJobs: the scheduler's core folded read-only), rebuild;
for checkpoints and the model registry: checkpoints and models (pure rules),
checkpoint_api and model_api (their RPCs, inherited by the servicer),
checkpoint_queries (their read-model queries); http/ (the HTTP/JSON API over the
same servicer) and downsample (LTTB for charts).
"""
