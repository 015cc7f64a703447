"""Queries of users, answered from the read models (logins and sessions are
checked against the in-memory directory instead: directory.py)."""

import asyncpg

from determined.proto import api_pb2
from services.gateway.read_models import SCHEMA as S
from services.gateway.read_models import ReadModels


class UserQueries:
    def __init__(self, pool: asyncpg.Pool) -> None:
        self.pool = ReadModels(pool)

    async def users(self, include_inactive: bool) -> list[api_pb2.User]:
        """The active users (every one with `include_inactive`), by id."""
        rows = await self.pool.fetch(
            f"SELECT user_id AS id, username, display_name, admin, active, created_at_ns FROM {S}.users"
            " WHERE active OR $1 ORDER BY user_id",
            include_inactive,
        )
        return [api_pb2.User(**dict(row)) for row in rows]
