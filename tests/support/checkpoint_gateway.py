"""An in-process gateway for the checkpoint CLI and SDK unit tests: a real gRPC
server whose servicer answers the checkpoint, GC and model registry calls
from what a test gives it, records the requests, and streams checkpoint files
from a real folder (`<storage>/<uuid>/<relpath>`) in small chunks, so that
downloads are resumed and split as they are against the real gateway.
`break_after_chunks` cuts the next file stream (UNAVAILABLE) after that many
chunks, once."""

import json
import threading
from collections.abc import Iterator
from concurrent import futures
from pathlib import Path
from typing import Any

import grpc

from determined.common import storage
from determined.proto import api_pb2, api_pb2_grpc, events_pb2


class CheckpointGateway(api_pb2_grpc.DeterminedServicer):
    def __init__(self, storage: Path, chunk_bytes: int = 4) -> None:
        self.storage = storage
        self.chunk_bytes = chunk_bytes
        self.checkpoints: dict[str, api_pb2.Checkpoint] = {}
        self.experiments: dict[int, api_pb2.Experiment] = {}
        self.trials: dict[int, api_pb2.Trial] = {}
        self.models: dict[str, api_pb2.Model] = {}
        self.preview = api_pb2.PreviewGcResponse()
        self.unchanged_reason = ""
        self.break_after_chunks: int | None = None
        self.requests: list[Any] = []
        self.lock = threading.Lock()

    def add_checkpoint(
        self,
        uuid: str,
        files: dict[str, bytes],
        *,
        trial_id: int = 5,
        experiment_id: int = 3,
        steps: int = 10,
        metric: float | None = None,
        state: str = "COMPLETED",
        storage_json: str | None = None,
    ) -> api_pb2.Checkpoint:
        """A checkpoint whose files are written to the storage folder, recorded as the harness records them."""
        folder = self.storage / uuid
        for relpath, data in files.items():
            (folder / relpath).parent.mkdir(parents=True, exist_ok=True)
            (folder / relpath).write_bytes(data)
        shared_fs = {"type": "shared_fs", "host_path": str(self.storage)}
        checkpoint = api_pb2.Checkpoint(
            uuid=uuid,
            trial_id=trial_id,
            experiment_id=experiment_id,
            steps_completed=steps,
            metadata_json=json.dumps({"steps_completed": steps}),
            resources=storage.build(shared_fs).list_resources(uuid),
            reported_at_ns=10**18 + steps,
            state=state,
            storage_json=storage_json or json.dumps(shared_fs),
            validation_metrics_json=json.dumps({"loss": metric}) if metric is not None else "",
        )
        if metric is not None:
            checkpoint.searcher_metric = metric
        self.checkpoints[uuid] = checkpoint
        return checkpoint

    def _record(self, request: Any) -> None:
        with self.lock:
            self.requests.append(request)

    def sent(self, kind: type) -> list[Any]:
        return [r for r in self.requests if isinstance(r, kind)]

    def GetCheckpoint(self, request: Any, context: grpc.ServicerContext) -> Any:
        if request.uuid not in self.checkpoints:
            context.abort(grpc.StatusCode.NOT_FOUND, f"checkpoint {request.uuid} not found")
        return api_pb2.GetCheckpointResponse(checkpoint=self.checkpoints[request.uuid])

    def _listing(self, request: Any, keep: Any) -> Any:
        self._record(request)
        found = [c for c in self.checkpoints.values() if keep(c)]
        return api_pb2.GetCheckpointsResponse(checkpoints=found[: request.max_results or None])

    def GetExperimentCheckpoints(self, request: Any, context: grpc.ServicerContext) -> Any:
        return self._listing(request, lambda c: c.experiment_id == request.experiment_id)

    def GetTrialCheckpoints(self, request: Any, context: grpc.ServicerContext) -> Any:
        return self._listing(request, lambda c: c.trial_id == request.trial_id)

    def DeleteCheckpoints(self, request: Any, context: grpc.ServicerContext) -> Any:
        self._record(request)
        registered = [
            u for u in request.uuids if u in self.checkpoints and self.checkpoints[u].model_versions
        ]
        if registered:
            context.abort(
                grpc.StatusCode.INVALID_ARGUMENT, f"checkpoints {', '.join(registered)} are model versions"
            )
        return api_pb2.DeleteCheckpointsResponse()

    def PreviewGc(self, request: Any, context: grpc.ServicerContext) -> Any:
        self._record(request)
        return self.preview

    def SetGcPolicy(self, request: Any, context: grpc.ServicerContext) -> Any:
        self._record(request)
        return api_pb2.SetGcPolicyResponse(unchanged_reason=self.unchanged_reason)

    def DeleteExperiment(self, request: Any, context: grpc.ServicerContext) -> Any:
        self._record(request)
        return api_pb2.DeleteExperimentResponse()

    def DownloadCheckpointFile(self, request: Any, context: grpc.ServicerContext) -> Iterator[Any]:
        self._record(request)
        checkpoint = self.checkpoints[request.uuid]
        size = checkpoint.resources[request.path]
        if not 0 <= request.offset <= size:
            context.abort(
                grpc.StatusCode.INVALID_ARGUMENT, f"offset {request.offset} is past the file's {size}"
            )
        data = (self.storage / request.uuid / request.path).read_bytes()
        offset, sent = request.offset, 0
        while offset < size:
            if self.break_after_chunks is not None and sent == self.break_after_chunks:
                self.break_after_chunks = None
                context.abort(grpc.StatusCode.UNAVAILABLE, "connection reset")
            chunk = data[offset : offset + self.chunk_bytes]
            yield api_pb2.DownloadCheckpointFileResponse(data=chunk, offset=offset, size=size)
            offset, sent = offset + len(chunk), sent + 1

    def GetExperiment(self, request: Any, context: grpc.ServicerContext) -> Any:
        if request.experiment_id not in self.experiments:
            context.abort(grpc.StatusCode.NOT_FOUND, f"experiment {request.experiment_id} not found")
        experiment = self.experiments[request.experiment_id]
        trials = [t for t in self.trials.values() if t.experiment_id == experiment.id]
        return api_pb2.GetExperimentResponse(experiment=experiment, trials=trials)

    def GetTrial(self, request: Any, context: grpc.ServicerContext) -> Any:
        if request.trial_id not in self.trials:
            context.abort(grpc.StatusCode.NOT_FOUND, f"trial {request.trial_id} not found")
        return api_pb2.GetTrialResponse(trial=self.trials[request.trial_id])

    def TrialLogs(self, request: Any, context: grpc.ServicerContext) -> Iterator[Any]:
        self._record(request)
        lines = [events_pb2.LogLine(timestamp_ns=10**18, log=f"line {n}") for n in range(3)]
        yield api_pb2.TrialLogsResponse(trial_id=request.trial_id, allocation_id="5.1", lines=lines[:2])
        yield api_pb2.TrialLogsResponse(trial_id=request.trial_id, allocation_id="5.2", lines=lines[2:])

    def GetTrialMetrics(self, request: Any, context: grpc.ServicerContext) -> Iterator[Any]:
        self._record(request)
        for steps in (10, 20):
            point = api_pb2.MetricPoint(
                group=request.group,
                steps_completed=steps,
                reported_at_ns=10**18,
                metrics_json=json.dumps({"loss": 1 / steps}),
            )
            yield api_pb2.GetTrialMetricsResponse(points=[point])

    def CreateModel(self, request: Any, context: grpc.ServicerContext) -> Any:
        self._record(request)
        if request.name in self.models:
            context.abort(grpc.StatusCode.ALREADY_EXISTS, f"model {request.name} already exists")
        model = api_pb2.Model(
            model_id=len(self.models) + 1,
            name=request.name,
            description=request.description,
            metadata_json=request.metadata_json,
            labels=request.labels,
            owner="determined",
            created_at_ns=10**18,
        )
        self.models[request.name] = model
        return api_pb2.CreateModelResponse(model=model)

    def GetModels(self, request: Any, context: grpc.ServicerContext) -> Any:
        listed = []
        for model in self.models.values():
            summary = api_pb2.Model()
            summary.CopyFrom(model)
            del summary.versions[:]
            listed.append(summary)
        return api_pb2.GetModelsResponse(models=listed)

    def GetModel(self, request: Any, context: grpc.ServicerContext) -> Any:
        if request.name not in self.models:
            context.abort(grpc.StatusCode.NOT_FOUND, f"model {request.name} not found")
        return api_pb2.GetModelResponse(model=self.models[request.name])

    def RegisterModelVersion(self, request: Any, context: grpc.ServicerContext) -> Any:
        self._record(request)
        model = self.models[request.model_name]
        checkpoint = self.checkpoints[request.checkpoint_uuid]
        version = model.versions.add(
            model_name=model.name,
            version=len(model.versions) + 1,
            checkpoint=checkpoint,
            name=request.name,
            comment=request.comment,
            owner="determined",
            registered_at_ns=10**18,
        )
        model.num_versions = len(model.versions)
        checkpoint.model_versions.append(f"{model.name}:{version.version}")
        version.checkpoint.CopyFrom(checkpoint)
        return api_pb2.RegisterModelVersionResponse(version=version)


class Served:
    """The servicer on a real gRPC server at `address` (127.0.0.1 and a free port)."""

    def __init__(self, servicer: CheckpointGateway) -> None:
        self.servicer = servicer
        self._server = grpc.server(futures.ThreadPoolExecutor(4))
        api_pb2_grpc.add_DeterminedServicer_to_server(servicer, self._server)  # type: ignore[no-untyped-call]
        self.address = f"127.0.0.1:{self._server.add_insecure_port('127.0.0.1:0')}"
        self._server.start()

    def stop(self) -> None:
        self._server.stop(grace=None).wait()
