"""The trial process's gRPC connection to the gateway.

The only module of the harness that touches grpc or the generated protobuf code, and it
imports them lazily so that `import determined` stays light off-cluster.

What a failed call means (`failure_kind`, by status code):

- transient (UNAVAILABLE: the gateway restarting, or a part it stands on — nats-server,
  PostgreSQL — down; DEADLINE_EXCEEDED; CANCELLED): the same call is retried here, with
  back-off, for up to `retry_for_s`. An outage is logged once when it starts and once when
  the gateway answers again, never once per retry. The allocation's long poll
  (`watch_allocation`) is not retried here: its watcher retries it for as long as the trial
  runs.
- refused (INVALID_ARGUMENT, RESOURCE_EXHAUSTED): the request's content cannot be stored;
  for a metrics batch, `BatchRefusedError`, so that the sender can split it.
- final (anything else: FAILED_PRECONDITION, PERMISSION_DENIED, NOT_FOUND, ...): raised at
  once, never retried.
"""

import itertools
import logging
import os
import threading
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Literal, NamedTuple, TypeVar

from determined.common.limits import MAX_MESSAGE_BYTES

logger = logging.getLogger("determined.core")

CALL_TIMEOUT_S = 30.0
RETRY_FOR_S = 600.0
# Tells apart two trial processes of one trial run in metric message ids.
REPORTER_ID = uuid.uuid4().hex
_BACKOFF_FIRST_S = 0.05
_BACKOFF_MAX_S = 2.0
# Numbers this process's status and progress reports (with REPORTER_ID: a retried report is
# stored once, the same status or progress reported again later is stored again).
_report_seqs = itertools.count(1)

T = TypeVar("T")

FailureKind = Literal["transient", "refused", "final"]
_TRANSIENT_CODES = frozenset({"UNAVAILABLE", "DEADLINE_EXCEEDED", "CANCELLED"})
_REFUSED_CODES = frozenset({"INVALID_ARGUMENT", "RESOURCE_EXHAUSTED"})


def failure_kind(code: str) -> FailureKind:
    """What a failed call's status code (its name) says about calling again."""
    if code in _TRANSIENT_CODES:
        return "transient"
    if code in _REFUSED_CODES:
        return "refused"
    return "final"


def part_reporter(reporter_id: str, part: str) -> str:
    """The reporter id a part of a split batch is sent under: `part` is its path of halves
    ("0", "01", ...; "" for a whole batch). The gateway makes the message id from it and
    the batch_seq, so each part is stored once however often it is sent, and never mixed
    up with the batch it came from."""
    return f"{reporter_id}.{part}" if part else reporter_id


class BatchRefusedError(Exception):
    """The gateway refused a metrics batch for its content (too large, not storable):
    sending the same batch again cannot succeed, and nothing of it was stored."""


class Outage:
    """Whether the gateway is unreachable, and since when: one log line when an outage
    starts and one when it ends, whatever the number of calls and retries in between.
    Shared by the threads that call through one client."""

    def __init__(self, what: str) -> None:
        self._what = what
        self._lock = threading.Lock()
        self._since: float | None = None

    def failed(self, description: str, now: float) -> None:
        with self._lock:
            if self._since is not None:
                return
            self._since = now
        logger.warning("%s: waiting for the gateway (%s)", self._what, description)

    def answered(self, now: float) -> None:
        with self._lock:
            since, self._since = self._since, None
        if since is not None:
            logger.warning("%s: the gateway answers again after %.1f s", self._what, now - since)


class MetricRecord(NamedTuple):
    """One serialized metrics report, as it goes over the wire."""

    group: str
    steps_completed: int
    metrics_json: str
    reported_at_ns: int


class AllocationState(NamedTuple):
    """What the cluster wants of the trial's allocation: WatchAllocation's answer."""

    stop: bool = False
    reason: str = ""
    # The searcher's current length for the trial, in its unit (0 = the config's max_length).
    searcher_length: int = 0
    searcher_stopped: bool = False


def grpc_target(master: str) -> str:
    """`http://host:port/` or `host:port` -> `host:port`."""
    return master.split("://", 1)[-1].rstrip("/")


def uses_tls(master: str, environ: Mapping[str, str]) -> bool:
    """Whether clients reach the master at `master` with TLS (see master_channel)."""
    return master.lower().startswith("https://") or bool(environ.get("DET_MASTER_CERT_FILE"))


class MasterCertError(Exception):
    """The certificate DET_MASTER_CERT_FILE names cannot be read."""


def master_channel(
    master: str, options: Sequence[tuple[str, Any]], environ: Mapping[str, str] | None = None
) -> Any:
    """A gRPC channel to the master at `master` (`host:port`, `http://...` or `https://...`).

    TLS (Determined's variables) when the address is https:// or DET_MASTER_CERT_FILE is set:
    the certificate (or CA bundle) in DET_MASTER_CERT_FILE is what the master's certificate
    must chain to (a self-signed one: that certificate itself), else the system's CAs;
    DET_MASTER_CERT_NAME is the name checked in it instead of the address's host.
    Plaintext otherwise."""
    import grpc

    env = os.environ if environ is None else environ
    cert_file = env.get("DET_MASTER_CERT_FILE", "")
    target = grpc_target(master)
    if not uses_tls(master, env):
        return grpc.insecure_channel(target, options=list(options))
    try:
        roots = Path(cert_file).read_bytes() if cert_file else None
    except OSError as error:
        raise MasterCertError(
            f"cannot read DET_MASTER_CERT_FILE {cert_file}: {error.strerror or error}"
        ) from None
    name = env.get("DET_MASTER_CERT_NAME", "")
    named = [("grpc.ssl_target_name_override", name)] if name else []
    credentials = grpc.ssl_channel_credentials(root_certificates=roots)
    return grpc.secure_channel(target, credentials, options=[*options, *named])


class TrialClient:
    """The calls a trial makes, authenticated with its allocation token (`as_user`: with a
    user's session token, a detached run's script, determined.experimental.core_v2)."""

    def __init__(
        self,
        master: str,
        allocation_token: str,
        *,
        retry_for_s: float = RETRY_FOR_S,
        what: str = "reports",
        as_user: bool = False,
    ) -> None:
        import grpc

        from determined.proto import api_pb2, api_pb2_grpc, events_pb2

        self._grpc = grpc
        self._api = api_pb2
        self._events = events_pb2
        self._channel = master_channel(
            master,
            [
                ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
                ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
                # Reconnect quickly once a restarted gateway listens again.
                ("grpc.initial_reconnect_backoff_ms", 100),
                ("grpc.min_reconnect_backoff_ms", 100),
                ("grpc.max_reconnect_backoff_ms", 2000),
            ],
        )
        self._stub = api_pb2_grpc.DeterminedStub(self._channel)  # type: ignore[no-untyped-call]
        self._metadata: tuple[tuple[str, str], ...] = (("x-allocation-token", allocation_token),)
        if as_user:  # no token: the call goes without one (a gateway that allows anonymous calls)
            self._metadata = (("authorization", f"Bearer {allocation_token}"),) if allocation_token else ()
        self._retry_for_s = retry_for_s
        # `what` names the calls in the outage's log lines ("reports", "watching the allocation").
        self._outage = Outage(what)
        self._closed = False

    def report_metrics(
        self, trial_id: int, trial_run_id: int, batch_seq: int, part: str, records: Sequence[MetricRecord]
    ) -> None:
        """Send one batch (or the part `part` of a split one, see `part_reporter`); raise
        BatchRefusedError when the gateway refuses its content."""
        report = self._events.MetricReport
        request = self._api.ReportMetricsRequest(
            trial_id=trial_id,
            trial_run_id=trial_run_id,
            batch_seq=batch_seq,
            reporter_id=part_reporter(REPORTER_ID, part),
            reports=[
                report(group=g, steps_completed=s, metrics_json=m, reported_at_ns=a) for g, s, m, a in records
            ],
        )
        try:
            self._call(self._stub.ReportMetrics, request)
        except self._grpc.RpcError as error:
            if failure_kind(error.code().name) == "refused":
                raise BatchRefusedError(self.describe(error)) from None
            raise

    def report_progress(self, trial_id: int, progress: float) -> None:
        request = self._api.ReportProgressRequest(
            trial_id=trial_id, progress=progress, reporter_id=REPORTER_ID, seq=next(_report_seqs)
        )
        self._call(self._stub.ReportProgress, request)

    def report_checkpoint(
        self,
        *,
        uuid: str,
        trial_id: int,
        allocation_id: str,
        steps_completed: int,
        metadata_json: str,
        resources: Mapping[str, int],
    ) -> None:
        request = self._api.ReportCheckpointRequest(
            uuid=uuid,
            trial_id=trial_id,
            allocation_id=allocation_id,
            steps_completed=steps_completed,
            metadata_json=metadata_json,
            resources=resources,
        )
        self._call(self._stub.ReportCheckpoint, request)

    def delete_checkpoints(self, uuids: Sequence[str]) -> None:
        """Ask the cluster to delete checkpoints of this trial (its checkpoint service deletes
        the files and records them as deleted)."""
        self._call(self._stub.DeleteCheckpoints, self._api.DeleteCheckpointsRequest(uuids=list(uuids)))

    def report_status(self, trial_id: int, status: str) -> None:
        request = self._api.ReportStatusRequest(
            trial_id=trial_id, status=status, reporter_id=REPORTER_ID, seq=next(_report_seqs)
        )
        self._call(self._stub.ReportStatus, request)

    def start_unmanaged_trial(self, experiment_id: int) -> Any:
        """A detached run's trial, once the searcher created it (StartUnmanagedTrialResponse)."""
        request = self._api.StartUnmanagedTrialRequest(experiment_id=experiment_id)
        return self._call(self._stub.StartUnmanagedTrial, request)

    def report_unmanaged_trial(self, trial_id: int, end_state: str = "", reason: str = "") -> None:
        """A detached run's heartbeat (no `end_state`), or how it ended ("COMPLETED", "ERROR")."""
        request = self._api.ReportUnmanagedTrialRequest(
            trial_id=trial_id,
            end_state=end_state,
            reason=reason,
            reporter_id=REPORTER_ID,
            seq=next(_report_seqs),
        )
        self._call(self._stub.ReportUnmanagedTrial, request)

    def report_early_exit(self, trial_id: int, reason: str) -> bool:
        """Report why the trial exits early ("INVALID_HP" or "USER_REQUESTED_STOP"). False when
        the gateway says an early exit was reported already (Determined's 400); True when this
        call stored it, also when a retry after a lost reply finds its own report stored."""
        attempts = 0

        def report(request: Any, **kwargs: Any) -> Any:
            nonlocal attempts
            attempts += 1
            return self._stub.ReportEarlyExit(request, **kwargs)

        try:
            self._call(report, self._api.ReportEarlyExitRequest(trial_id=trial_id, reason=reason))
        except self._grpc.RpcError as error:
            if "already reported" not in (self.refusal(error) or ""):
                raise
            return attempts > 1
        return True

    def set_trial_metadata(self, trial_id: int, metadata_json: str) -> None:
        request = self._api.SetTrialMetadataRequest(trial_id=trial_id, metadata_json=metadata_json)
        self._call(self._stub.SetTrialMetadata, request)

    def report_checkpoint_use(self, trial_id: int, checkpoint_uuid: str) -> None:
        request = self._api.ReportCheckpointUseRequest(trial_id=trial_id, checkpoint_uuid=checkpoint_uuid)
        self._call(self._stub.ReportCheckpointUse, request)

    def get_trial_metadata(self, trial_id: int) -> str:
        """The trial's metadata as JSON text ("{}" when none was set)."""
        response = self._call(
            self._stub.GetTrialMetadata, self._api.GetTrialMetadataRequest(trial_id=trial_id)
        )
        return str(response.metadata_json or "{}")

    def get_best_validation(self, trial_id: int) -> float | None:
        """The experiment's best searcher metric so far; None before any trial reported one."""
        response = self._call(
            self._stub.GetBestValidation, self._api.GetBestValidationRequest(trial_id=trial_id)
        )
        return float(response.metric) if response.found else None

    def watch_allocation(
        self, allocation_id: str, known: AllocationState, timeout_s: float
    ) -> AllocationState:
        """One long poll: answers once the cluster's answer differs from `known`, or after
        `timeout_s` unchanged. Not retried: the watcher decides what an error means."""
        request = self._api.WatchAllocationRequest(
            allocation_id=allocation_id,
            stop=known.stop,
            searcher_length=known.searcher_length,
            timeout_s=timeout_s,
        )
        try:
            response = self._stub.WatchAllocation(
                request, timeout=timeout_s + CALL_TIMEOUT_S, metadata=self._metadata
            )
        except self._grpc.RpcError as error:
            self._note(error)
            raise
        self._outage.answered(time.monotonic())
        return AllocationState(
            stop=response.stop,
            reason=response.reason,
            searcher_length=response.searcher_length,
            searcher_stopped=response.searcher_stopped,
        )

    def acknowledge_stop(self, allocation_id: str) -> None:
        self._call(self._stub.AcknowledgeStop, self._api.AcknowledgeStopRequest(allocation_id=allocation_id))

    def close(self) -> None:
        """Release the connection; calls in flight end with CANCELLED (no outage, then)."""
        self._closed = True
        self._channel.close()

    def is_transient(self, error: BaseException) -> bool:
        """The gateway is unreachable, slow, went away mid-call (a restarting server cancels
        the calls in flight) or a part it stands on is down: the same call may succeed later."""
        return isinstance(error, self._grpc.RpcError) and failure_kind(error.code().name) == "transient"

    def refusal(self, error: BaseException) -> str | None:
        """Why the gateway refuses this allocation's calls for good (FAILED_PRECONDITION: the
        allocation is closed, or the call does not fit its state), else None."""
        if (
            isinstance(error, self._grpc.RpcError)
            and error.code() == self._grpc.StatusCode.FAILED_PRECONDITION
        ):
            return str(error.details())
        return None

    def describe(self, error: BaseException) -> str:
        """A one-line account of a failed call (a gRPC error's code and details)."""
        if isinstance(error, self._grpc.RpcError):
            return f"{error.code().name}: {error.details()}"
        return repr(error)

    def _call(self, method: Callable[..., T], request: Any) -> T:
        """Call `method`, retrying the same request while the gateway is unreachable."""
        give_up_at = time.monotonic() + self._retry_for_s
        delay = _BACKOFF_FIRST_S
        while True:
            try:
                response = method(request, timeout=CALL_TIMEOUT_S, metadata=self._metadata)
            except self._grpc.RpcError as error:
                self._note(error)
                if not self.is_transient(error) or time.monotonic() + delay > give_up_at:
                    raise
            else:
                self._outage.answered(time.monotonic())
                return response
            time.sleep(delay)
            delay = min(delay * 2, _BACKOFF_MAX_S)

    def _note(self, error: Any) -> None:
        """Start an outage on a transient failure; any other answer ends one."""
        if self._closed:
            return
        if self.is_transient(error):
            self._outage.failed(self.describe(error), time.monotonic())
        else:
            self._outage.answered(time.monotonic())
