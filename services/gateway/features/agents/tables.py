"""The agents' table."""

from sqlalchemy import BigInteger, Boolean, Column, Table, Text
from sqlalchemy.dialects.postgresql import JSONB

from services.gateway.read_models import metadata

agents = Table(
    "agents",
    metadata,
    Column("agent_id", Text, primary_key=True),
    Column("hostname", Text, nullable=False),
    Column("slots", JSONB, nullable=False),
    Column("registered_at_ns", BigInteger, nullable=False),
    # "" (a registration from before pools) is the pool "default".
    Column("resource_pool", Text, nullable=False, server_default=""),
    # Where the other workers of a gang reach it ("": its hostname).
    Column("address", Text, nullable=False, server_default=""),
    # How it runs allocations: "process" or "docker" (services/common/trial_runtime.py).
    Column("runtime", Text, nullable=False, server_default="process"),
    # What an operator made of it: ENABLED, DISABLED (its work asked to stop) or
    # DRAINING (disabled, its work left to finish). Kept across registrations.
    Column("state", Text, nullable=False, server_default="ENABLED"),
    # The event id of its current registration, and whether the scheduler found
    # that registration lost (no heartbeat); a newer registration clears it.
    Column("registration_event_id", Text, nullable=False, server_default=""),
    Column("lost", Boolean, nullable=False, server_default="false"),
    # Its slots an admin disabled: {"<slot id>": "DISABLED" or "DRAINING"}. Kept across registrations.
    Column("disabled_slots", JSONB, nullable=False, server_default="{}"),
)
