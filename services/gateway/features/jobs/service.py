"""The jobs' functions (det job list|update), which the gRPC servicer and the
HTTP routes call: the queue as the scheduler publishes it (queue.py), with
what the read models know of each job (name, owner)."""

from determined.common import states
from determined.proto import api_pb2
from services.common.envelope import aggregate
from services.common.eventlog import ConflictError
from services.common.job_queue import PublishedQueue
from services.gateway.auth import current_principal, require_user
from services.gateway.errors import FailedPreconditionError, NotFoundError
from services.gateway.features.commands import Unchanged
from services.gateway.features.events.as_of import AsOfReads
from services.gateway.features.events.as_of_point import asked
from services.gateway.features.jobs import commands
from services.gateway.features.jobs.queue import JobQueue
from services.gateway.features.parts import FeatureService, Parts
from services.gateway.features.tasks import commands as task_commands


class Jobs(FeatureService):
    def __init__(self, parts: Parts) -> None:
        super().__init__(parts)
        self._job_queue = JobQueue(parts.store)
        self._as_of = AsOfReads(parts)

    async def get_jobs(self, request: api_pb2.GetJobsRequest) -> api_pb2.GetJobsResponse:
        """The scheduler's queue, pool by pool, with what the read models know
        of each job (name, owner); as it was, from the log, when asked so."""
        if asked(request.as_of):
            queue, pools, point = await self._as_of.job_queue(
                request.as_of, await self._job_queue.published()
            )
            response = await self._jobs(queue, pools, request.resource_pool)
            response.as_of.CopyFrom(point)
            return response
        queue = await self._job_queue.latest()
        return await self._jobs(queue, await self.queries.agents.resource_pools(), request.resource_pool)

    async def _jobs(
        self, queue: PublishedQueue, pools: list[str], resource_pool: str
    ) -> api_pb2.GetJobsResponse:
        """The jobs of `queue` (those of `resource_pool`, "": every pool) with
        their names and owners, and the scheduler of each pool of theirs and of `pools`."""
        views = [view for view in queue.jobs if not resource_pool or view.resource_pool == resource_pool]
        experiment_ids = [
            commands.checked_job_id(view.job_id) for view in views if _is_experiment_job(view.job_id)
        ]
        experiments = await self.queries.experiments.experiment_jobs(experiment_ids)
        if len(experiments) < len(set(experiment_ids)) and await self.projector.catch_up():
            experiments = await self.queries.experiments.experiment_jobs(
                experiment_ids
            )  # one created a moment ago
        task_ids = [task_id for view in views if (task_id := commands.task_of_job(view.job_id))]
        tasks = await self.queries.tasks.task_jobs(task_ids) if task_ids else {}
        response = api_pb2.GetJobsResponse()
        for view in views:
            job = response.jobs.add(
                job_id=view.job_id,
                type="EXPERIMENT" if _is_experiment_job(view.job_id) else "TASK",
                resource_pool=view.resource_pool,
                priority=view.priority,
                weight=view.weight,
                max_slots=view.max_slots,
                submitted_at_ns=view.submitted_at_ns,
                slots_needed=view.slots_needed,
                slots_acquired=view.slots_acquired,
                state=view.state,
                position=view.position,
                waiting_reason=view.waiting_reason,
            )
            if _is_experiment_job(view.job_id):
                job.experiment_id = commands.checked_job_id(view.job_id)
                known = experiments.get(job.experiment_id)
                if known is not None:
                    job.name, job.owner = known.name, known.owner
            elif (task := tasks.get(commands.task_of_job(view.job_id) or "")) is not None:
                job.name, job.owner = task
        for pool in sorted({job.resource_pool for job in response.jobs} | set(pools)):
            if not resource_pool or pool == resource_pool:
                response.schedulers[pool] = queue.scheduler_of(pool)
        return response

    async def update_job(self, request: api_pb2.UpdateJobRequest) -> api_pb2.UpdateJobResponse:
        """Changes a running or queued experiment's priority, weight or
        max_slots (JobResourcesChanged on its aggregate); NOT_FOUND for an
        unknown or ended one."""
        task_id = commands.task_of_job(request.job_id)
        if task_id is not None:
            return await self._update_task_job(task_id, request)
        experiment_id = commands.checked_job_id(request.job_id)
        stored = await self.store.last_event(aggregate("experiment", experiment_id))
        if stored is None:
            raise NotFoundError(f"job experiment/{experiment_id} not found")
        await self.projector.wait_for(stored.sequence)
        experiment = await self._found(self.queries.experiments.experiment, experiment_id, "experiment")
        if experiment.state in states.EXPERIMENT_ENDED_STATES:
            raise NotFoundError(
                f"job experiment/{experiment_id} not found: the experiment is {experiment.state}"
            )
        default_priority = (await self._job_queue.published()).default_priority
        current = commands.job_resources(experiment.config_json, default_priority)
        principal = current_principal()
        decision = commands.job_resources_changed(
            experiment_id, request, current, principal.actor.partition(":")[2], stored.sequence
        )
        if isinstance(decision, Unchanged):
            return api_pb2.UpdateJobResponse(unchanged_reason=decision.reason)
        try:
            sequence, _ = await self.store.append(decision, actor=principal.actor)
        except ConflictError as error:
            raise FailedPreconditionError(
                f"experiment {experiment_id} changed meanwhile; try again"
            ) from error
        await self.projector.wait_for(sequence)
        return api_pb2.UpdateJobResponse()

    async def _update_task_job(
        self, task_id: str, request: api_pb2.UpdateJobRequest
    ) -> api_pb2.UpdateJobResponse:
        """A notebook's, TensorBoard's, command's or shell's job (`det notebook set
        priority`): its owner or an admin; NOT_FOUND once it has ended."""
        principal = require_user()
        task_id = task_commands.checked_task_id(task_id)
        job_id = aggregate("task", task_id)
        stored = await self.store.last_event(aggregate("allocation", f"{task_id}.1"))
        if stored is None:
            raise NotFoundError(f"job {job_id} not found")
        await self.projector.wait_for(stored.sequence)
        task = await self._after_catch_up(self.queries.tasks.task, task_id)
        if task is None or task.state == states.TaskState.TERMINATED:
            raise NotFoundError(f"job {job_id} not found" + (f": the task is {task.state}" if task else ""))
        task_commands.check_owner_or_admin(
            task, principal.username, admin=principal.admin, what="change its job"
        )
        default_priority = (await self._job_queue.published()).default_priority
        current = commands.job_resources(task.config_json, default_priority)
        decision = commands.task_job_changed(task_id, request, current, principal.username, stored.sequence)
        if isinstance(decision, Unchanged):
            return api_pb2.UpdateJobResponse(unchanged_reason=decision.reason)
        try:
            sequence, _ = await self.store.append(decision, actor=principal.actor)
        except ConflictError as error:
            raise FailedPreconditionError(f"task {task_id} changed meanwhile; try again") from error
        await self.projector.wait_for(sequence)
        return api_pb2.UpdateJobResponse()


def _is_experiment_job(job_id: str) -> bool:
    return job_id.startswith("experiment/")
