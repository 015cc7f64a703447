"""The tasks' table: one row per notebook, TensorBoard, command or shell (a
task is one AllocationRequested with a TaskLaunch spec; its one allocation
is "<task id>.1")."""

from sqlalchemy import BigInteger, Boolean, Column, Index, Integer, Table, Text
from sqlalchemy.dialects.postgresql import JSONB

from services.gateway.read_models import metadata

tasks = Table(
    "tasks",
    metadata,
    Column("task_id", Text, primary_key=True),
    Column("task_type", Text, nullable=False),
    Column("description", Text, nullable=False),
    Column("owner", Text, nullable=False),
    Column("allocation_id", Text, nullable=False),
    Column("job_id", Text, nullable=False),
    Column("resource_pool", Text, nullable=False),
    Column("slots", Integer, nullable=False),
    Column("priority", Integer, nullable=False),
    # The config (JSON, defaults applied), the context's hash ("": none), and
    # what it runs: the command's arguments, the TensorBoard's experiments and trials.
    Column("config_json", Text, nullable=False),
    Column("context_hash", Text, nullable=False),
    Column("command", JSONB, nullable=False),
    Column("experiment_ids", JSONB, nullable=False),
    Column("trial_ids", JSONB, nullable=False),
    # A task state word (determined.common.states.TaskState), kept by the row rules.
    Column("state", Text, nullable=False),
    Column("requested_at_ns", BigInteger, nullable=False),
    # The agent it was assigned ("" before), when, and when its process started.
    Column("agent_id", Text, nullable=False),
    Column("assigned_at_ns", BigInteger),
    Column("started_at_ns", BigInteger),
    # Where its server answers (AllocationReady: "host:port"); "" before.
    Column("proxy_address", Text, nullable=False),
    # Asked to die (AllocationKillRequested), and the first reason given; NULL while not.
    Column("kill_reason", Text),
    # Ended: when, its exit code (NULL when it never ran), and why, in words.
    Column("ended_at_ns", BigInteger),
    Column("exit_code", Integer),
    Column("exit_reason", Text, nullable=False),
    # The agent went away under it.
    Column("agent_lost", Boolean, nullable=False),
    Index("tasks_by_owner", "owner", "requested_at_ns"),
)
