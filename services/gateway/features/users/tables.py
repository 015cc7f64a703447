"""The users' and their logins' tables. No password or hash: those stay in the
events (and the gateway's memory), never in a column a query can return."""

from sqlalchemy import BigInteger, Boolean, Column, Index, Table, Text

from services.gateway.read_models import metadata

users = Table(
    "users",
    metadata,
    Column("user_id", BigInteger, primary_key=True),
    Column("username", Text, nullable=False),
    Column("display_name", Text, nullable=False),
    Column("admin", Boolean, nullable=False),
    Column("active", Boolean, nullable=False),
    Column("created_at_ns", BigInteger, nullable=False),
    # "user:<name>", or "cluster" for the built-in users.
    Column("created_by", Text, nullable=False),
    Column("password_changed_at_ns", BigInteger, nullable=False),
)


user_sessions = Table(
    "user_sessions",
    metadata,
    Column("session_id", Text, primary_key=True),
    Column("user_id", BigInteger, nullable=False),
    Column("started_at_ns", BigInteger, nullable=False),
    Column("expires_at_ns", BigInteger, nullable=False),
    # The logout; NULL while it was not ended so.
    Column("ended_at_ns", BigInteger),
    Index("user_sessions_by_user", "user_id"),
)
