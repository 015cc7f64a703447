"""Monitoring: the cluster's metrics for Prometheus (GET /metrics on the
gateway's HTTP port; http/metrics.py says who may read them).

    service    the registry and a scrape: each source read at scrape time
    families   the metric families of a scrape, from what the sources read (pure)
    queries    the read models' counts (trials, runs, tasks by state)
    consumers  each service's and agent's lag, from nats-server's consumer list
    observed   what the projector's batches tell: events by type, trials' start phases

It has no tables and no row rules: it reads the other features' tables and
the event log, and observes the projector.
"""
