"""The gateway's features, one package each: its tables, its row rules
(projection.py: how each event changes its rows), its queries, its pure
commands and its feature functions (service.py), which the gRPC servicer and
the HTTP routes both call. Adding a feature is adding its package and one
line here."""

from services.gateway.features import agents, checkpoints, events, experiments, models, tasks, trials, users
from services.gateway.features.feature import Feature

FEATURES: tuple[Feature, ...] = (
    experiments.FEATURE,
    trials.FEATURE,
    checkpoints.FEATURE,
    models.FEATURE,
    agents.FEATURE,
    users.FEATURE,
    tasks.FEATURE,
    events.FEATURE,
)
