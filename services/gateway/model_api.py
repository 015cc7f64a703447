"""The model registry's RPCs (det model create|list|describe|register-version):
thin handlers over models.py and the read models. Reads: any caller; creating
a model or registering a version: users only. A version is a checkpoint, so
these build on the checkpoint RPCs' lookups."""

import asyncio

from determined.proto import api_pb2
from services.common.envelope import aggregate
from services.common.eventstore import ConflictError
from services.gateway import models
from services.gateway.auth import require_user
from services.gateway.checkpoint_api import DECIDE_ATTEMPTS, CheckpointRpcs, Context, appended
from services.gateway.errors import AlreadyExistsError, FailedPreconditionError, NotFoundError


class ModelRpcs(CheckpointRpcs):
    # One model creation at a time in this gateway, so that two never take one model id.
    model_ids: asyncio.Lock

    async def CreateModel(
        self, request: api_pb2.CreateModelRequest, context: Context
    ) -> api_pb2.CreateModelResponse:
        user = require_user()
        name = models.checked_name(request.name)
        async with self.model_ids:
            await self.projector.catch_up()
            if await self.checkpoint_queries.model(name) is not None:
                raise AlreadyExistsError(f"model {name} exists already")
            append = models.model_created(
                request, model_id=await self.checkpoint_queries.next_model_id(), owner=user.username
            )
            try:
                sequence, stored_event = await self.store.append(append, actor=user.actor)
            except ConflictError as error:
                raise AlreadyExistsError(f"model {name} exists already") from error
            if not appended(append, stored_event):  # another request created it a moment ago
                raise AlreadyExistsError(f"model {name} exists already")
            await self.projector.wait_for(sequence)
        return api_pb2.CreateModelResponse(model=await self._model(name))

    async def GetModels(
        self, request: api_pb2.GetModelsRequest, context: Context
    ) -> api_pb2.GetModelsResponse:
        return api_pb2.GetModelsResponse(models=await self.checkpoint_queries.models())

    async def GetModel(self, request: api_pb2.GetModelRequest, context: Context) -> api_pb2.GetModelResponse:
        return api_pb2.GetModelResponse(model=await self._model(request.name))

    async def RegisterModelVersion(
        self, request: api_pb2.RegisterModelVersionRequest, context: Context
    ) -> api_pb2.RegisterModelVersionResponse:
        """The checkpoint as the model's next version, numbered against the
        model's last event (a registration meanwhile: numbered again)."""
        user = require_user()
        name = models.checked_name(request.model_name)
        for _ in range(DECIDE_ATTEMPTS):
            stored = await self.store.last_event(aggregate("model", name))
            if stored is None:
                raise NotFoundError(f"model {name} not found")
            await self.projector.wait_for(stored.sequence)
            model = await self._model(name)
            checkpoint = await self._checkpoint(request.checkpoint_uuid)
            experiment = await self._experiment(checkpoint.experiment_id)
            append = models.model_version_registered(
                request,
                model_id=model.model_id,
                version=model.num_versions + 1,
                checkpoint=checkpoint,
                experiment_state=experiment.state,
                owner=user.username,
                model_version=stored.sequence,
            )
            try:
                sequence, stored_event = await self.store.append(append, actor=user.actor)
            except ConflictError:
                continue
            if not appended(append, stored_event):  # a racing registration took this number
                continue
            await self.projector.wait_for(sequence)
            version = await self.checkpoint_queries.model_version(name, model.num_versions + 1)
            return api_pb2.RegisterModelVersionResponse(version=version)
        raise FailedPreconditionError(f"model {name} kept changing meanwhile; try again")

    async def _model(self, name: str) -> api_pb2.Model:
        model = await self._after_catch_up(self.checkpoint_queries.model, name)
        if model is None:
            raise NotFoundError(f"model {name} not found")
        return model
