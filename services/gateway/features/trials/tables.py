"""The tables of trials, their runs (allocations) and their metric points."""

from sqlalchemy import BigInteger, Boolean, Column, Double, Index, Integer, Table, Text, text
from sqlalchemy.dialects.postgresql import JSONB

from services.gateway.read_models import metadata

trials = Table(
    "trials",
    metadata,
    Column("id", BigInteger, primary_key=True),
    Column("experiment_id", BigInteger, nullable=False),
    Column("request_id", Text, nullable=False),
    # ACTIVE until it ends; queries show RUNNING while its current allocation runs.
    Column("state", Text, nullable=False),
    Column("hparams_json", Text, nullable=False),
    Column("trial_seed", BigInteger, nullable=False),
    Column("started_at_ns", BigInteger, nullable=False),
    Column("ended_at_ns", BigInteger),
    Column("end_reason", Text, nullable=False),
    Column("progress", Double, nullable=False),
    Column("total_batches", BigInteger, nullable=False),
    # The newest run requested: its allocation, and its run id (= runs so far).
    Column("current_allocation_id", Text),
    Column("runs", Integer, nullable=False),
    # Its runs when a continue last reopened it (0: never): restarts count only
    # the failed runs after these (Determined zeroes them on a continue).
    Column("runs_before_continue", Integer, nullable=False, server_default="0"),
    # The rung the searcher promoted it to and the length it should train to.
    Column("rung", Integer, nullable=False),
    Column("searcher_length", BigInteger, nullable=False),
    # Why the searcher is done with it (TrialStopRequested); NULL while it is not.
    Column("stop_reason", Text),
    # What the trial last said it is doing (core_context.train.set_status).
    Column("status", Text, nullable=False),
    Column("kill_requested", Boolean, nullable=False),
    # Why the trial said it exits early (TrialEarlyExitReported: INVALID_HP or
    # USER_REQUESTED_STOP; the first report); NULL while it did not.
    Column("early_exit_reason", Text),
    # core_context.train.set_metadata(): a JSON object as text, so that it
    # reads back with the keys in the trial's order; "{}" until one is set.
    Column("metadata_json", Text, nullable=False, server_default="{}"),
    # Its best value of the searcher metric over its validations shown, as the
    # experiment's best_metric (the best of its trials'); kept the same way.
    Column("best_metric", Double),
    Index("trials_by_experiment", "experiment_id", "id"),
)


allocations = Table(
    "allocations",
    metadata,
    Column("allocation_id", Text, primary_key=True),
    Column("trial_id", BigInteger, nullable=False),
    Column("trial_run_id", Integer, nullable=False),
    Column("requested_at_ns", BigInteger, nullable=False),
    # Where its slots are, [{"agent_id": ..., "slot_ids": [...]}, ...] (one
    # entry per agent it spans); NULL until the scheduler assigns it.
    Column("placements", JSONB),
    Column("assigned_at_ns", BigInteger),
    Column("started_at_ns", BigInteger),
    # Asked to stop gracefully (searcher, pause, preemption), and the first reason
    # of the stop that stands: the event ids of the requests not withdrawn (a
    # pause's may be: services/common/stops.py, a JSON list) or acknowledged.
    Column("stop_requested", Boolean, nullable=False),
    Column("stop_reason", Text),
    Column("stop_acknowledged", Boolean, nullable=False),
    Column("stop_requests", JSONB, nullable=False, server_default="[]"),
    # Withdrawn before it was assigned: nothing ran.
    Column("canceled", Boolean, nullable=False),
    Column("exited_at_ns", BigInteger),
    Column("exit_code", Integer),
    Column("killed", Boolean, nullable=False),
    Column("agent_lost", Boolean, nullable=False),
    Column("error", Text),
    Index("allocations_by_trial", "trial_id", "trial_run_id"),
    # What runs now (det slot list): the assigned allocations that have not exited.
    Index(
        "allocations_running",
        "allocation_id",
        postgresql_where=text("placements IS NOT NULL AND exited_at_ns IS NULL AND NOT canceled"),
    ),
)


metrics = Table(
    "metrics",
    metadata,
    Column("trial_id", BigInteger, primary_key=True),
    Column("group", Text, primary_key=True),
    Column("steps_completed", BigInteger, primary_key=True),
    Column("trial_run_id", Integer, primary_key=True),
    Column("metrics", JSONB, nullable=False),
    Column("reported_at_ns", BigInteger, nullable=False),
    # A later run resumed from a checkpoint before this point: the point was
    # trained again, so it is kept for the record but never shown.
    Column("superseded", Boolean, nullable=False),
)
