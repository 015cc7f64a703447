"""The tasks' functions (det notebook|tensorboard|cmd|shell|task ...), which
the gRPC servicer and the HTTP routes call.

Who may do what: as with experiments, every user sees every task (list,
describe); only its owner or an admin may kill it or read its logs (a
notebook's log shows its server's URLs, and the proxy lets only them in).
"""

import asyncio
import contextlib
import time
import uuid
from collections.abc import AsyncIterator

import structlog

from determined.common.states import TaskState, TaskType
from determined.proto import api_pb2, events_pb2
from services.common.eventlog import ConflictError
from services.gateway.auth import require_user
from services.gateway.errors import NotFoundError
from services.gateway.features.commands import Unchanged
from services.gateway.features.experiments import commands as experiment_commands
from services.gateway.features.experiments.service import Experiments
from services.gateway.features.logs import stream
from services.gateway.features.parts import FeatureService, Parts
from services.gateway.features.tasks import commands, idle
from services.gateway.features.tasks.commands import TaskRequest
from services.gateway.features.tasks.queries import ProxyTarget

log = structlog.get_logger()


class Tasks(FeatureService):
    def __init__(self, parts: Parts, experiments: Experiments) -> None:
        super().__init__(parts)
        self.experiments = experiments

    async def launch_task(self, request: api_pb2.LaunchTaskRequest) -> api_pb2.LaunchTaskResponse:
        """Validates and appends the task's AllocationRequested; answers with
        the task as the read models show it. The same request id (of the same
        user) starts one task: a retry answers with it."""
        principal = require_user()
        request_id = experiment_commands.checked_request_id(request.request_id)
        checked = await asyncio.to_thread(commands.checked_request, request)  # off the event loop
        task_id = (
            commands.task_id_of_request(principal.username, request_id) if request_id else str(uuid.uuid4())
        )
        await self.experiments.check_resource_pool(checked.config_json)
        warnings = await self.experiments.runtime_warnings(checked.config_json)
        context_hash = (
            (await self.experiments.stored_context(request.context_hash))[0] if request.context_hash else ""
        )
        sources, source_warnings = await self._sources(checked)
        append = commands.task_launched(
            task_id, checked, owner=principal.username, context_hash=context_hash, sources=sources
        )
        try:
            sequence, _ = await self.store.append(append, actor=principal.actor)
        except ConflictError:
            sequence = None  # started already by this request id: answer with that task
        if sequence is not None:
            await self.projector.wait_for(sequence)
            log.info("task_launched", task_id=task_id, task_type=checked.task_type, request_id=request_id)
        task = await self._task(task_id)
        return api_pb2.LaunchTaskResponse(task=task, warnings=warnings + source_warnings)

    async def _sources(self, checked: TaskRequest) -> tuple[list[events_pb2.TensorboardSource], list[str]]:
        if not (checked.experiment_ids or checked.trial_ids):
            return commands.tensorboard_sources(checked, [], set())
        await self.projector.catch_up()  # an experiment created a moment ago is shown
        found = await self.queries.tasks.source_trials(checked.experiment_ids, checked.trial_ids)
        known = await self.queries.tasks.known_experiments(checked.experiment_ids)
        return commands.tensorboard_sources(checked, found, known)

    async def get_tasks(self, request: api_pb2.GetTasksRequest) -> api_pb2.GetTasksResponse:
        if request.task_type:
            commands.checked_task_type(request.task_type)
        tasks = await self.queries.tasks.tasks(request.task_type, request.include_terminated)
        return api_pb2.GetTasksResponse(tasks=tasks)

    async def get_task(self, request: api_pb2.GetTaskRequest) -> api_pb2.GetTaskResponse:
        return api_pb2.GetTaskResponse(task=await self._task(request.task_id))

    async def kill_task(self, request: api_pb2.KillTaskRequest) -> api_pb2.KillTaskResponse:
        """Asks the task's allocation to die (the scheduler cancels it while it
        waits; its agent kills it once it runs); owner or admin."""
        principal = require_user()
        task = await self._task(request.task_id)
        commands.check_owner_or_admin(task, principal.username, admin=principal.admin, what="kill it")
        decision = commands.kill_requested(task, principal.username)
        if isinstance(decision, Unchanged):
            return api_pb2.KillTaskResponse(unchanged_reason=decision.reason)
        sequence, _ = await self.store.append(decision, actor=principal.actor)
        await self.projector.wait_for(sequence)  # the caller sees it TERMINATING at once
        return api_pb2.KillTaskResponse()

    async def task_logs(self, request: api_pb2.TaskLogsRequest) -> AsyncIterator[api_pb2.TaskLogsResponse]:
        """The task's output, batch by batch; following ends once its one
        allocation has closed its logs, or it has ended and nothing more comes."""
        task = await self.logs_readable(request.task_id)

        async def ended() -> bool:
            current = await self.queries.tasks.task(task.id)
            return current is None or current.state == TaskState.TERMINATED

        async def closes(_: object) -> bool:
            return True  # a task has one allocation: its closing batch is the last

        subject = self.store.logs.task_subject(task.task_type, task.id)
        reading = stream.batches(self.store, subject, request.follow, ended, closes)
        async with contextlib.aclosing(reading) as batches:
            async for stored in batches:
                batch = stored.batch
                yield api_pb2.TaskLogsResponse(
                    task_id=task.id,
                    allocation_id=batch.allocation_id,
                    agent_id=batch.agent_id,
                    lines=batch.lines,
                )

    async def logs_readable(self, task_id: str) -> api_pb2.Task:
        """The task, whose logs the caller may read (its owner or an admin)."""
        principal = require_user()
        task = await self._task(task_id)
        commands.check_owner_or_admin(task, principal.username, admin=principal.admin, what="read its logs")
        return task

    async def proxy_target(self, task_id: str) -> ProxyTarget:
        """The task whose server the caller may open at /proxy/<task id>/ (its
        owner or an admin); whether it answers is the proxy's to find out."""
        principal = require_user()
        target = await self._after_catch_up(
            self.queries.tasks.proxy_target, commands.checked_task_id(task_id)
        )
        if target is None:
            raise NotFoundError(f"task {task_id} not found")
        shown = api_pb2.Task(id=target.task_id, owner=target.owner)
        commands.check_owner_or_admin(shown, principal.username, admin=principal.admin, what="open it")
        return target

    async def stop_idle_tensorboards(self, activity: idle.ProxyActivity, watching_since_ns: int) -> float:
        """Kills each TensorBoard unused through the proxy for its idle_timeout
        (idle.py); answers how many seconds until the next look."""
        timeouts = idle.idle_timeouts(await self.queries.tasks.tasks(TaskType.TENSORBOARD, False))
        for kill in idle.idle_kills(timeouts, activity, watching_since_ns, time.time_ns()):
            await self.store.append(kill, actor=idle.ACTOR)
            log.info("tensorboard_idle_killed", aggregate=kill.aggregate)
        return idle.check_every_s(timeouts)

    async def _task(self, task_id: str) -> api_pb2.Task:
        """The task, after a catch-up on a miss; NotFoundError if there is none."""
        task = await self._after_catch_up(self.queries.tasks.task, commands.checked_task_id(task_id))
        if task is None:
            raise NotFoundError(f"task {task_id[:80]} not found")
        return task
