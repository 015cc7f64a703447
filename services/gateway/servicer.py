"""The gRPC edge: each RPC is one call of its feature's function (api.py),
the same one the HTTP routes call. Domain errors are raised, never aborted
on: the interceptor (auth.py) turns them into statuses (grpc_status.py).
"""

from collections.abc import AsyncIterator
from typing import TypeAlias
from urllib.parse import unquote

import grpc

from determined.proto import api_pb2, api_pb2_grpc
from services.gateway.api import Api

Context: TypeAlias = grpc.aio.ServicerContext


class Servicer(api_pb2_grpc.DeterminedServicer):
    def __init__(self, api: Api) -> None:
        self.api = api

    async def Login(self, request: api_pb2.LoginRequest, context: Context) -> api_pb2.LoginResponse:
        """The one call whose gRPC context matters: the client's address (login_limits.py)."""
        return await self.api.users.login(request, address=_peer_address(context))

    # -- agents ------------------------------------------------------------------------------

    async def GetMaster(
        self, request: api_pb2.GetMasterRequest, context: Context
    ) -> api_pb2.GetMasterResponse:
        return await self.api.agents.get_master(request)

    async def GetAgents(
        self, request: api_pb2.GetAgentsRequest, context: Context
    ) -> api_pb2.GetAgentsResponse:
        return await self.api.agents.get_agents(request)

    async def EnableAgent(
        self, request: api_pb2.EnableAgentRequest, context: Context
    ) -> api_pb2.EnableAgentResponse:
        return await self.api.agents.enable_agent(request)

    async def DisableAgent(
        self, request: api_pb2.DisableAgentRequest, context: Context
    ) -> api_pb2.DisableAgentResponse:
        return await self.api.agents.disable_agent(request)

    async def EnableSlot(
        self, request: api_pb2.EnableSlotRequest, context: Context
    ) -> api_pb2.EnableSlotResponse:
        return await self.api.agents.enable_slot(request)

    async def DisableSlot(
        self, request: api_pb2.DisableSlotRequest, context: Context
    ) -> api_pb2.DisableSlotResponse:
        return await self.api.agents.disable_slot(request)

    # -- jobs --------------------------------------------------------------------------------

    async def GetJobs(self, request: api_pb2.GetJobsRequest, context: Context) -> api_pb2.GetJobsResponse:
        return await self.api.jobs.get_jobs(request)

    async def UpdateJob(
        self, request: api_pb2.UpdateJobRequest, context: Context
    ) -> api_pb2.UpdateJobResponse:
        return await self.api.jobs.update_job(request)

    # -- experiments -------------------------------------------------------------------------

    async def CreateExperiment(
        self, request: api_pb2.CreateExperimentRequest, context: Context
    ) -> api_pb2.CreateExperimentResponse:
        return await self.api.experiments.create(request)

    async def UploadContext(
        self, request_iterator: AsyncIterator[api_pb2.UploadContextRequest], context: Context
    ) -> api_pb2.UploadContextResponse:
        return await self.api.experiments.upload_context(request_iterator)

    async def GetExperiments(
        self, request: api_pb2.GetExperimentsRequest, context: Context
    ) -> api_pb2.GetExperimentsResponse:
        return await self.api.experiments.get_experiments(request)

    async def GetExperiment(
        self, request: api_pb2.GetExperimentRequest, context: Context
    ) -> api_pb2.GetExperimentResponse:
        return await self.api.experiments.get_experiment(request)

    async def GetExperimentTrials(
        self, request: api_pb2.GetExperimentTrialsRequest, context: Context
    ) -> api_pb2.GetExperimentTrialsResponse:
        return await self.api.experiments.get_experiment_trials(request)

    async def KillExperiment(
        self, request: api_pb2.KillExperimentRequest, context: Context
    ) -> api_pb2.KillExperimentResponse:
        return await self.api.experiments.kill_experiment(request)

    async def ActivateExperiment(
        self, request: api_pb2.ActivateExperimentRequest, context: Context
    ) -> api_pb2.ActivateExperimentResponse:
        return await self.api.experiments.activate_experiment(request)

    async def PauseExperiment(
        self, request: api_pb2.PauseExperimentRequest, context: Context
    ) -> api_pb2.PauseExperimentResponse:
        return await self.api.experiments.pause_experiment(request)

    async def CancelExperiment(
        self, request: api_pb2.CancelExperimentRequest, context: Context
    ) -> api_pb2.CancelExperimentResponse:
        return await self.api.experiment_runs.cancel_experiment(request)

    async def ContinueExperiment(
        self, request: api_pb2.ContinueExperimentRequest, context: Context
    ) -> api_pb2.ContinueExperimentResponse:
        return await self.api.experiment_runs.continue_experiment(request)

    async def GetModelDef(
        self, request: api_pb2.GetModelDefRequest, context: Context
    ) -> api_pb2.GetModelDefResponse:
        return await self.api.experiments.get_model_def(request)

    async def ArchiveExperiment(
        self, request: api_pb2.ArchiveExperimentRequest, context: Context
    ) -> api_pb2.ArchiveExperimentResponse:
        return await self.api.experiment_edits.archive_experiment(request)

    async def UnarchiveExperiment(
        self, request: api_pb2.UnarchiveExperimentRequest, context: Context
    ) -> api_pb2.UnarchiveExperimentResponse:
        return await self.api.experiment_edits.unarchive_experiment(request)

    async def PatchExperiment(
        self, request: api_pb2.PatchExperimentRequest, context: Context
    ) -> api_pb2.PatchExperimentResponse:
        return await self.api.experiment_edits.patch_experiment(request)

    async def PutExperimentLabel(
        self, request: api_pb2.PutExperimentLabelRequest, context: Context
    ) -> api_pb2.PutExperimentLabelResponse:
        return await self.api.experiment_edits.put_experiment_label(request)

    async def DeleteExperimentLabel(
        self, request: api_pb2.DeleteExperimentLabelRequest, context: Context
    ) -> api_pb2.DeleteExperimentLabelResponse:
        return await self.api.experiment_edits.delete_experiment_label(request)

    # -- trials ------------------------------------------------------------------------------

    async def GetTrial(self, request: api_pb2.GetTrialRequest, context: Context) -> api_pb2.GetTrialResponse:
        return await self.api.trials.get_trial(request)

    async def GetTrialMetrics(
        self, request: api_pb2.GetTrialMetricsRequest, context: Context
    ) -> AsyncIterator[api_pb2.GetTrialMetricsResponse]:
        async for response in self.api.trials.get_trial_metrics(request):
            yield response

    async def KillTrial(
        self, request: api_pb2.KillTrialRequest, context: Context
    ) -> api_pb2.KillTrialResponse:
        return await self.api.trials.kill_trial(request)

    # -- logs --------------------------------------------------------------------------------

    async def MasterLogs(
        self, request: api_pb2.MasterLogsRequest, context: Context
    ) -> AsyncIterator[api_pb2.MasterLogsResponse]:
        async for response in self.api.logs.master_logs(request):
            yield response

    async def TrialLogs(
        self, request: api_pb2.TrialLogsRequest, context: Context
    ) -> AsyncIterator[api_pb2.TrialLogsResponse]:
        async for response in self.api.logs.trial_logs(request):
            yield response

    # -- reports -----------------------------------------------------------------------------

    async def ReportMetrics(
        self, request: api_pb2.ReportMetricsRequest, context: Context
    ) -> api_pb2.ReportMetricsResponse:
        return await self.api.reports.report_metrics(request)

    async def ReportProgress(
        self, request: api_pb2.ReportProgressRequest, context: Context
    ) -> api_pb2.ReportProgressResponse:
        return await self.api.reports.report_progress(request)

    async def ReportCheckpoint(
        self, request: api_pb2.ReportCheckpointRequest, context: Context
    ) -> api_pb2.ReportCheckpointResponse:
        return await self.api.reports.report_checkpoint(request)

    async def ReportStatus(
        self, request: api_pb2.ReportStatusRequest, context: Context
    ) -> api_pb2.ReportStatusResponse:
        return await self.api.reports.report_status(request)

    async def ReportEarlyExit(
        self, request: api_pb2.ReportEarlyExitRequest, context: Context
    ) -> api_pb2.ReportEarlyExitResponse:
        return await self.api.reports.report_early_exit(request)

    async def SetTrialMetadata(
        self, request: api_pb2.SetTrialMetadataRequest, context: Context
    ) -> api_pb2.SetTrialMetadataResponse:
        return await self.api.reports.set_trial_metadata(request)

    async def GetTrialMetadata(
        self, request: api_pb2.GetTrialMetadataRequest, context: Context
    ) -> api_pb2.GetTrialMetadataResponse:
        return await self.api.reports.get_trial_metadata(request)

    async def AcknowledgeStop(
        self, request: api_pb2.AcknowledgeStopRequest, context: Context
    ) -> api_pb2.AcknowledgeStopResponse:
        return await self.api.reports.acknowledge_stop(request)

    async def WatchAllocation(
        self, request: api_pb2.WatchAllocationRequest, context: Context
    ) -> api_pb2.WatchAllocationResponse:
        return await self.api.reports.watch_allocation(request)

    async def GetBestValidation(
        self, request: api_pb2.GetBestValidationRequest, context: Context
    ) -> api_pb2.GetBestValidationResponse:
        return await self.api.reports.get_best_validation(request)

    async def StartUnmanagedTrial(
        self, request: api_pb2.StartUnmanagedTrialRequest, context: Context
    ) -> api_pb2.StartUnmanagedTrialResponse:
        return await self.api.reports.detached.start_unmanaged_trial(request)

    async def ReportUnmanagedTrial(
        self, request: api_pb2.ReportUnmanagedTrialRequest, context: Context
    ) -> api_pb2.ReportUnmanagedTrialResponse:
        return await self.api.reports.detached.report_unmanaged_trial(request)

    # -- checkpoints -------------------------------------------------------------------------

    async def GetCheckpoint(
        self, request: api_pb2.GetCheckpointRequest, context: Context
    ) -> api_pb2.GetCheckpointResponse:
        return await self.api.checkpoints.get_checkpoint(request)

    async def GetExperimentCheckpoints(
        self, request: api_pb2.GetExperimentCheckpointsRequest, context: Context
    ) -> api_pb2.GetCheckpointsResponse:
        return await self.api.checkpoints.get_experiment_checkpoints(request)

    async def GetTrialCheckpoints(
        self, request: api_pb2.GetTrialCheckpointsRequest, context: Context
    ) -> api_pb2.GetCheckpointsResponse:
        return await self.api.checkpoints.get_trial_checkpoints(request)

    async def DeleteCheckpoints(
        self, request: api_pb2.DeleteCheckpointsRequest, context: Context
    ) -> api_pb2.DeleteCheckpointsResponse:
        return await self.api.checkpoints.delete_checkpoints(request)

    async def PostCheckpointMetadata(
        self, request: api_pb2.PostCheckpointMetadataRequest, context: Context
    ) -> api_pb2.PostCheckpointMetadataResponse:
        return await self.api.checkpoint_edits.post_checkpoint_metadata(request)

    async def GetCheckpointUsers(
        self, request: api_pb2.GetCheckpointUsersRequest, context: Context
    ) -> api_pb2.GetCheckpointUsersResponse:
        return await self.api.checkpoint_edits.get_checkpoint_users(request)

    async def ReportCheckpointUse(
        self, request: api_pb2.ReportCheckpointUseRequest, context: Context
    ) -> api_pb2.ReportCheckpointUseResponse:
        return await self.api.checkpoint_edits.report_checkpoint_use(request)

    async def PreviewGc(
        self, request: api_pb2.PreviewGcRequest, context: Context
    ) -> api_pb2.PreviewGcResponse:
        return await self.api.checkpoints.preview_gc(request)

    async def SetGcPolicy(
        self, request: api_pb2.SetGcPolicyRequest, context: Context
    ) -> api_pb2.SetGcPolicyResponse:
        return await self.api.checkpoints.set_gc_policy(request)

    async def DeleteExperiment(
        self, request: api_pb2.DeleteExperimentRequest, context: Context
    ) -> api_pb2.DeleteExperimentResponse:
        return await self.api.checkpoints.delete_experiment(request)

    async def DownloadCheckpointFile(
        self, request: api_pb2.DownloadCheckpointFileRequest, context: Context
    ) -> AsyncIterator[api_pb2.DownloadCheckpointFileResponse]:
        async for response in self.api.checkpoints.download_checkpoint_file(request):
            yield response

    # -- models ------------------------------------------------------------------------------

    async def CreateModel(
        self, request: api_pb2.CreateModelRequest, context: Context
    ) -> api_pb2.CreateModelResponse:
        return await self.api.models.create_model(request)

    async def GetModels(
        self, request: api_pb2.GetModelsRequest, context: Context
    ) -> api_pb2.GetModelsResponse:
        return await self.api.models.get_models(request)

    async def GetModel(self, request: api_pb2.GetModelRequest, context: Context) -> api_pb2.GetModelResponse:
        return await self.api.models.get_model(request)

    async def RegisterModelVersion(
        self, request: api_pb2.RegisterModelVersionRequest, context: Context
    ) -> api_pb2.RegisterModelVersionResponse:
        return await self.api.models.register_model_version(request)

    # -- users -------------------------------------------------------------------------------

    async def Logout(self, request: api_pb2.LogoutRequest, context: Context) -> api_pb2.LogoutResponse:
        return await self.api.users.logout(request)

    async def GetMe(self, request: api_pb2.GetMeRequest, context: Context) -> api_pb2.GetMeResponse:
        return await self.api.users.get_me(request)

    async def GetUsers(self, request: api_pb2.GetUsersRequest, context: Context) -> api_pb2.GetUsersResponse:
        return await self.api.users.get_users(request)

    async def CreateUser(
        self, request: api_pb2.CreateUserRequest, context: Context
    ) -> api_pb2.CreateUserResponse:
        return await self.api.users.create_user(request)

    async def UpdateUser(
        self, request: api_pb2.UpdateUserRequest, context: Context
    ) -> api_pb2.UpdateUserResponse:
        return await self.api.users.update_user(request)

    async def SetUserPassword(
        self, request: api_pb2.SetUserPasswordRequest, context: Context
    ) -> api_pb2.SetUserPasswordResponse:
        return await self.api.users.set_user_password(request)

    # -- tasks: notebooks, TensorBoards, commands, shells ------------------------------------

    async def LaunchTask(
        self, request: api_pb2.LaunchTaskRequest, context: Context
    ) -> api_pb2.LaunchTaskResponse:
        return await self.api.tasks.launch_task(request)

    async def GetTasks(self, request: api_pb2.GetTasksRequest, context: Context) -> api_pb2.GetTasksResponse:
        return await self.api.tasks.get_tasks(request)

    async def GetTask(self, request: api_pb2.GetTaskRequest, context: Context) -> api_pb2.GetTaskResponse:
        return await self.api.tasks.get_task(request)

    async def KillTask(self, request: api_pb2.KillTaskRequest, context: Context) -> api_pb2.KillTaskResponse:
        return await self.api.tasks.kill_task(request)

    async def TaskLogs(
        self, request: api_pb2.TaskLogsRequest, context: Context
    ) -> AsyncIterator[api_pb2.TaskLogsResponse]:
        async for response in self.api.tasks.task_logs(request):
            yield response

    # -- the event log -----------------------------------------------------------------------

    async def GetEvents(
        self, request: api_pb2.GetEventsRequest, context: Context
    ) -> AsyncIterator[api_pb2.GetEventsResponse]:
        async for response in self.api.events.get_events(request):
            yield response

    async def ExplainEvents(
        self, request: api_pb2.ExplainEventsRequest, context: Context
    ) -> api_pb2.ExplainEventsResponse:
        return await self.api.explanations.explain_events(request)

    async def GetWorkload(
        self, request: api_pb2.GetWorkloadRequest, context: Context
    ) -> api_pb2.GetWorkloadResponse:
        return await self.api.workloads.get_workload(request)


def _peer_address(context: Context) -> str:
    """The client's address as HTTP names it: gRPC's peer ("ipv4:10.0.0.5:41234",
    "ipv6:%5B::1%5D:41234") without its scheme and port."""
    _, _, address = unquote(str(context.peer() or "")).partition(":")
    host, _, port = address.rpartition(":")
    return (host if port.isdigit() else address).strip("[]")
