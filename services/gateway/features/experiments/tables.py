"""The experiments' table."""

from sqlalchemy import BigInteger, Boolean, Column, Double, Index, Table, Text
from sqlalchemy.dialects.postgresql import JSONB

from services.gateway.read_models import metadata

experiments = Table(
    "experiments",
    metadata,
    Column("id", BigInteger, primary_key=True),
    Column("name", Text, nullable=False),
    Column("owner", Text, nullable=False),
    # Without the EXPERIMENT_STATE_ prefix: ACTIVE, PAUSED, STOPPING_KILLED, ...
    Column("state", Text, nullable=False),
    Column("started_at_ns", BigInteger, nullable=False),
    Column("ended_at_ns", BigInteger),
    Column("description", Text, nullable=False),
    Column("labels", JSONB, nullable=False),
    Column("resource_pool", Text, nullable=False),
    Column("searcher_name", Text, nullable=False),
    Column("searcher_metric", Text, nullable=False),
    Column("smaller_is_better", Boolean, nullable=False),
    Column("config_json", Text, nullable=False),
    Column("context_hash", Text, nullable=False),
    # Why it ended (e.g. which searcher it could not run); "" while running.
    Column("end_reason", Text, nullable=False, server_default=""),
    # The searcher's own progress (ExperimentProgressChanged); NULL until it
    # reports one, and the queries fall back on the trials' mean.
    Column("progress", Double),
    # The event ids of the deletions asked of it (`det experiment delete`; a
    # DELETE_FAILED one may be asked again), a set so that replaying a request
    # counts it once: their number numbers the next request's message id.
    Column("delete_requests", JSONB, nullable=False, server_default="[]"),
    # Why the last deletion left files behind (DELETE_FAILED); "" otherwise.
    Column("delete_error", Text, nullable=False, server_default=""),
    # The best value of the searcher metric (by smaller_is_better) over the
    # validations shown (not superseded); NULL before the first one. Kept by
    # the metric statements of projection.py, not by the row fold.
    Column("best_metric", Double),
    # Set by det experiment archive|unarchive (ExperimentArchiveSet); listings
    # leave archived ones out unless asked (det experiment list --all).
    Column("archived", Boolean, nullable=False, server_default="false"),
    # A user's notes (ExperimentDetailsSet; name, description and labels,
    # which start as the config's, change in their own columns).
    Column("notes", Text, nullable=False, server_default=""),
    # The experiment it was forked from (0: none) and whether it is a detached
    # run (core_v2), both from ExperimentCreated.
    Column("parent_id", BigInteger, nullable=False, server_default="0"),
    Column("unmanaged", Boolean, nullable=False, server_default="false"),
    # Listings filter on archived and page by id.
    Index("experiments_by_archived", "archived", "id"),
)
