"""The gateway service: the public gRPC API and the read-model projector.

    python -m services.gateway            serve (DET_DATABASE_URL is required;
                                          DET_NATS_URL, DET_NAMESPACE, DET_GATEWAY_PORT=8080,
                                          DET_CHECKPOINT_PATH, DET_CLUSTER_SECRET, DET_CLUSTER_ID,
                                          DET_READY_FILE, DET_LOG_JSON/LEVEL/FILE,
                                          DET_ADVERTISED_NATS_URL,
                                          DET_HTTP_PORT: the HTTP/JSON API, none when unset;
                                          DET_PROXY_PORT: tasks' pages, on DET_HTTP_PORT when unset)
    python -m services.gateway.rebuild    drop the read models and replay the log
                                          (--until SEQUENCE: up to there; --verify: check
                                          the live ones against a rebuild beside them)

By feature: features/<name>/ (experiments, trials, checkpoints, models,
users, agents, jobs, logs), each with its tables, its row rules
(projection.py: events -> rows, pure), its queries (read models -> API
messages), its commands (pure: requests -> Appends) and its functions
(service.py), which both edges call: servicer (gRPC, one line per RPC) and
http/ (the HTTP/JSON API). features/__init__.py lists the features whose rows
the projector keeps; api.py holds one object per feature's functions.

Shared: settings (environment), server (composition root), auth (the one
interceptor: principals; errors -> status through grpc_status), errors (domain
errors, no gRPC), projection (the dispatch: event type -> a feature's rule),
plan (a batch's plan), planning (leaving out what cannot be applied), watched
(what a stored batch wakes), projector (shell: batches, one transaction each,
stored position), replay (the helper process of long replays), read_models and
schema (the read models' schema), rebuild, downsample (LTTB for charts).
"""
