"""Queries of the model registry, answered from the read models (model
versions indexed by checkpoint and by model); a version shows its checkpoint
as the checkpoint queries do."""

import json

import asyncpg

from determined.proto import api_pb2
from services.gateway.features.checkpoints.queries import CheckpointQueries
from services.gateway.read_models import SCHEMA as S
from services.gateway.read_models import ReadModels

_MODELS = f"""
SELECT m.*, (SELECT count(*) FROM {S}.model_versions v WHERE v.model_name = m.name) AS num_versions
FROM {S}.models m
"""


class ModelQueries:
    def __init__(self, pool: asyncpg.Pool) -> None:
        self.pool = ReadModels(pool)
        self.checkpoints = CheckpointQueries(pool)

    async def next_model_id(self) -> int:
        return int(await self.pool.fetchval(f"SELECT coalesce(max(model_id), 0) + 1 FROM {S}.models"))

    async def models(self) -> list[api_pb2.Model]:
        """Every model, in creation order, without its versions."""
        return [model_message(row) for row in await self.pool.fetch(_MODELS + " ORDER BY m.model_id, m.name")]

    async def model(self, name: str) -> api_pb2.Model | None:
        """The model with its versions, oldest first."""
        row = await self.pool.fetchrow(_MODELS + " WHERE m.name = $1", name)
        if row is None:
            return None
        model = model_message(row)
        model.versions.extend(await self._versions(name))
        return model

    async def model_version(self, name: str, version: int) -> api_pb2.ModelVersion | None:
        versions = await self._versions(name, version)
        return versions[0] if versions else None

    async def _versions(self, name: str, version: int | None = None) -> list[api_pb2.ModelVersion]:
        sql = f"SELECT * FROM {S}.model_versions WHERE model_name = $1"
        rows = await (
            self.pool.fetch(sql + " AND version = $2", name, version)
            if version is not None
            else self.pool.fetch(sql + " ORDER BY version", name)
        )
        checkpoints = (
            await self.checkpoints.checkpoints([row["checkpoint_uuid"] for row in rows]) if rows else {}
        )
        return [
            api_pb2.ModelVersion(
                model_name=row["model_name"],
                version=row["version"],
                checkpoint=checkpoints.get(row["checkpoint_uuid"]),
                name=row["name"],
                comment=row["comment"],
                owner=row["owner"],
                registered_at_ns=row["registered_at_ns"],
            )
            for row in rows
        ]


def model_message(row: asyncpg.Record) -> api_pb2.Model:
    return api_pb2.Model(
        model_id=row["model_id"],
        name=row["name"],
        description=row["description"],
        metadata_json=row["metadata_json"],
        labels=json.loads(row["labels"]),
        owner=row["owner"],
        created_at_ns=row["created_at_ns"],
        num_versions=row["num_versions"],
    )
