"""The experiments' edits (det experiment archive|unarchive, set name|description,
label add|remove; Determined's PatchExperiment): each decided by details.py
on the experiment as the read models hold it at its newest version, and
decided again when another edit was appended meanwhile."""

from collections.abc import Callable

from determined.proto import api_pb2
from services.common.envelope import Append, aggregate
from services.gateway.auth import require_user
from services.gateway.errors import NotFoundError
from services.gateway.features.commands import Unchanged
from services.gateway.features.experiments import details
from services.gateway.features.parts import FeatureService

# Edits racing on one experiment that each get appended (users labelling it from scripts at once).
EDIT_ATTEMPTS = 20


class ExperimentEdits(FeatureService):
    async def archive_experiment(
        self, request: api_pb2.ArchiveExperimentRequest
    ) -> api_pb2.ArchiveExperimentResponse:
        unchanged = await self._archive_set(request.experiment_id, True)
        return api_pb2.ArchiveExperimentResponse(unchanged_reason=unchanged)

    async def unarchive_experiment(
        self, request: api_pb2.UnarchiveExperimentRequest
    ) -> api_pb2.UnarchiveExperimentResponse:
        unchanged = await self._archive_set(request.experiment_id, False)
        return api_pb2.UnarchiveExperimentResponse(unchanged_reason=unchanged)

    async def _archive_set(self, experiment_id: int, archived: bool) -> str:
        return await self._edit(
            experiment_id, lambda found, version: details.archive_set(found, archived, version)
        )

    async def patch_experiment(
        self, request: api_pb2.PatchExperimentRequest
    ) -> api_pb2.PatchExperimentResponse:
        def decide(found: api_pb2.Experiment, version: int) -> Append | Unchanged:
            return details.details_set(
                found,
                version,
                name=request.name if request.HasField("name") else None,
                description=request.description if request.HasField("description") else None,
                notes=request.notes if request.HasField("notes") else None,
                labels=list(request.labels.labels) if request.HasField("labels") else None,
            )

        await self._edit(request.experiment_id, decide)
        return api_pb2.PatchExperimentResponse(experiment=await self._experiment(request.experiment_id))

    async def put_experiment_label(
        self, request: api_pb2.PutExperimentLabelRequest
    ) -> api_pb2.PutExperimentLabelResponse:
        labels = await self._edit_labels(
            request.experiment_id, lambda labels: details.label_added(labels, request.label)
        )
        return api_pb2.PutExperimentLabelResponse(labels=labels)

    async def delete_experiment_label(
        self, request: api_pb2.DeleteExperimentLabelRequest
    ) -> api_pb2.DeleteExperimentLabelResponse:
        labels = await self._edit_labels(
            request.experiment_id, lambda labels: details.label_removed(labels, request.label)
        )
        return api_pb2.DeleteExperimentLabelResponse(labels=labels)

    async def _edit_labels(self, experiment_id: int, change: Callable[[list[str]], list[str]]) -> list[str]:
        """The experiment's labels once the change is made (or was not needed)."""
        await self._edit(
            experiment_id,
            lambda found, version: details.details_set(found, version, labels=change(list(found.labels))),
        )
        return list((await self._experiment(experiment_id)).labels)

    async def _edit(
        self, experiment_id: int, decide: Callable[[api_pb2.Experiment, int], Append | Unchanged]
    ) -> str:
        """Why nothing changed, or "" once the edit is appended and shown."""
        require_user()

        async def decided(version: int) -> Append | Unchanged:
            return decide(await self._experiment(experiment_id), version)

        return await self._decide_and_append(aggregate("experiment", experiment_id), decided, EDIT_ATTEMPTS)

    async def _experiment(self, experiment_id: int) -> api_pb2.Experiment:
        found = await self._found(self.queries.experiments.experiment, experiment_id, "experiment")
        if found.state == "DELETED":
            raise NotFoundError(f"experiment {experiment_id} was deleted")
        return found
