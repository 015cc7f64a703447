"""The model registry's RPCs (det model create|list|describe|register-version):
the functions the gRPC servicer and the HTTP routes call, over commands.py
and the read models. Reads: any caller; creating
a model or registering a version: users only. A version is a checkpoint, so
these build on the checkpoints' lookups."""

import asyncio

from determined.proto import api_pb2
from services.common.envelope import aggregate
from services.common.eventlog import ConflictError
from services.gateway.auth import require_user
from services.gateway.errors import AlreadyExistsError, FailedPreconditionError, NotFoundError
from services.gateway.features.checkpoints.service import Checkpoints
from services.gateway.features.models import commands as models
from services.gateway.features.parts import DECIDE_ATTEMPTS, FeatureService, Parts, appended


class Models(FeatureService):
    def __init__(self, parts: Parts, checkpoints: Checkpoints) -> None:
        super().__init__(parts)
        self.checkpoints = checkpoints
        # One model creation at a time in this gateway, so that two never take one model id.
        self.model_ids = asyncio.Lock()

    async def create_model(self, request: api_pb2.CreateModelRequest) -> api_pb2.CreateModelResponse:
        user = require_user()
        name = models.checked_name(request.name)
        async with self.model_ids:
            await self.projector.catch_up()
            if await self.queries.models.model(name) is not None:
                raise AlreadyExistsError(f"model {name} exists already")
            append = models.model_created(
                request, model_id=await self.queries.models.next_model_id(), owner=user.username
            )
            try:
                sequence, stored_event = await self.store.append(append, actor=user.actor)
            except ConflictError as error:
                raise AlreadyExistsError(f"model {name} exists already") from error
            if not appended(append, stored_event):  # another request created it a moment ago
                raise AlreadyExistsError(f"model {name} exists already")
            await self.projector.wait_for(sequence)
        return api_pb2.CreateModelResponse(model=await self._model(name))

    async def get_models(self, request: api_pb2.GetModelsRequest) -> api_pb2.GetModelsResponse:
        return api_pb2.GetModelsResponse(models=await self.queries.models.models())

    async def get_model(self, request: api_pb2.GetModelRequest) -> api_pb2.GetModelResponse:
        return api_pb2.GetModelResponse(model=await self._model(request.name))

    async def register_model_version(
        self, request: api_pb2.RegisterModelVersionRequest
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
            checkpoint = await self.checkpoints.checkpoint(request.checkpoint_uuid)
            experiment = await self.checkpoints.experiment(checkpoint.experiment_id)
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
            version = await self.queries.models.model_version(name, model.num_versions + 1)
            return api_pb2.RegisterModelVersionResponse(version=version)
        raise FailedPreconditionError(f"model {name} kept changing meanwhile; try again")

    async def _model(self, name: str) -> api_pb2.Model:
        model = await self._after_catch_up(self.queries.models.model, name)
        if model is None:
            raise NotFoundError(f"model {name} not found")
        return model
