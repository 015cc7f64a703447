"""det experiment cancel and continue (Determined's CancelExperiment and
ContinueExperiment): each decided by run_commands.py on the experiment as the
read models hold it at its newest version; the searcher does the rest (it
stops the trials of a canceled experiment gracefully, and reopens the trial
of a continued one)."""

import asyncio

from determined.proto import api_pb2
from services.common.envelope import Append, aggregate
from services.gateway.auth import require_user
from services.gateway.errors import NotFoundError
from services.gateway.features.commands import Unchanged
from services.gateway.features.experiments import commands, run_commands
from services.gateway.features.experiments.service import Experiments
from services.gateway.features.parts import FeatureService, Parts


class ExperimentRuns(FeatureService):
    def __init__(self, parts: Parts, experiments: Experiments) -> None:
        super().__init__(parts)
        self._experiments = experiments

    async def cancel_experiment(
        self, request: api_pb2.CancelExperimentRequest
    ) -> api_pb2.CancelExperimentResponse:
        require_user()
        experiment_id = request.experiment_id

        async def decide(version: int) -> Append | Unchanged:
            found = await self._experiment(experiment_id)
            return run_commands.cancel_requested(experiment_id, found.state, version)

        unchanged = await self._decide_and_append(aggregate("experiment", experiment_id), decide)
        return api_pb2.CancelExperimentResponse(unchanged_reason=unchanged)

    async def continue_experiment(
        self, request: api_pb2.ContinueExperimentRequest
    ) -> api_pb2.ContinueExperimentResponse:
        """Validates the experiment's config with the overrides merged in (the
        config model, as a create does), then appends ExperimentContinued."""
        require_user()
        experiment_id = request.experiment_id
        override = run_commands.override_config(request.override_config_yaml)

        async def decide(version: int) -> Append | Unchanged:
            found = await self._experiment(experiment_id)
            config = await asyncio.to_thread(  # off the event loop, as a create's
                commands.validate_config,
                run_commands.continued_config(found, override),
                checkpoint_host_path=self.settings.checkpoint_path,
                checkpoint_storage=self.settings.checkpoint_storage,
                experiment_seed=0,  # the stored config has its seed
                name=found.name,
            )
            await self._experiments.check_resource_pool(config.config_json)
            return run_commands.experiment_continued(experiment_id, config.config_json, version)

        await self._decide_and_append(aggregate("experiment", experiment_id), decide)
        return api_pb2.ContinueExperimentResponse(experiment=await self._experiment(experiment_id))

    async def _experiment(self, experiment_id: int) -> api_pb2.Experiment:
        found = await self._found(self.queries.experiments.experiment, experiment_id, "experiment")
        if found.state == "DELETED":
            raise NotFoundError(f"experiment {experiment_id} was deleted")
        return found
