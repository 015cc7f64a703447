"""A detached run: a script outside the cluster that is its own unmanaged experiment's one trial.

The script's user creates the experiment (CreateExperiment with `unmanaged`; its config says
what Determined's core_v2 sends: name, description, labels, data, the searcher shown in the UI,
the checkpoint storage, and the script's hparams as const hyperparameters), waits for the
trial the searcher creates for it (StartUnmanagedTrial), then reports with the calls a trial
process makes, authenticated by the user's login. While it runs, a thread says it is alive as
often as the cluster asks; when it ends, the cluster hears how (COMPLETED, or ERROR with the
exception that ended it). A script that dies without saying so ends ERROR once its heartbeats
stop (the searcher's timeout). The gateway's side: services/gateway/features/experiments/
unmanaged.py; the searcher's: services/searcher/unmanaged.py.
"""

from __future__ import annotations

import json
import logging
import sys
import threading
import uuid
from dataclasses import dataclass
from types import TracebackType
from typing import TYPE_CHECKING, Any

from determined import _info
from determined._client import TrialClient
from determined.common.states import TrialState
from determined.core import _checkpoint
from determined.core._context import Context, _trial_context
from determined.core._distributed import DistributedContext, DummyDistributedContext
from determined.core._preempt import PreemptMode
from determined.core._train import TensorboardMode

if TYPE_CHECKING:
    from determined.experimental._determined import Determined
    from determined.experimental.core_v2._core_v2 import Config

logger = logging.getLogger("determined.core")

# Determined's searcher for a run that names none: only the web UI reads it.
DEFAULT_SEARCHER = {"name": "single", "metric": "unmanaged"}


def storage_section(checkpoint_storage: str | dict[str, Any] | None) -> dict[str, Any]:
    """Where the script's checkpoints go: as given, else the user data dir (as Determined)."""
    return _checkpoint.storage_section(checkpoint_storage or str(_checkpoint.default_storage_root()))


def config_yaml(config: Config, storage: dict[str, Any]) -> str:
    """The unmanaged experiment's config, as YAML."""
    import yaml

    fields = {
        "name": config.name or f"unmanaged-{uuid.uuid4().hex[:8]}",
        "description": config.description,
        "labels": config.labels,
        "data": config.data,
        "searcher": config.searcher or DEFAULT_SEARCHER,
        "hyperparameters": {k: {"type": "const", "val": v} for k, v in (config.hparams or {}).items()},
        "workspace": config.workspace,
        "project": config.project,
        "checkpoint_storage": storage,
    }
    return str(yaml.safe_dump({k: v for k, v in fields.items() if v is not None}, sort_keys=False))


def master_url(client: Determined) -> str:
    """The master as a trial's ClusterInfo names it (https:// for a TLS master)."""
    gateway = client._gateway
    return f"{'https' if gateway.tls else 'http'}://{gateway.address}"


def create_experiment(client: Determined, config_text: str) -> int:
    """Creates the unmanaged experiment as the client's user (once, however often retried)."""
    from determined.proto import api_pb2

    gateway = client._gateway
    request = api_pb2.CreateExperimentRequest(
        config_yaml=config_text, activate=True, request_id=uuid.uuid4().hex, unmanaged=True
    )
    return int(gateway.call(gateway.stub.CreateExperiment, request).experiment_id)


def cluster_info(master: str, token: str, experiment_id: int, started: Any) -> _info.ClusterInfo:
    """What the script knows about its trial (StartUnmanagedTrialResponse `started`): no agent,
    no slots, no allocation."""
    trial = _info.TrialInfo(
        trial_id=started.trial_id,
        experiment_id=experiment_id,
        trial_seed=started.trial_seed,
        hparams=json.loads(started.hparams_json or "{}"),
        config=json.loads(started.config_json or "{}"),
        steps_completed=0,
        trial_run_id=1,
    )
    return _info.ClusterInfo(
        master_url=master,
        cluster_id="",
        agent_id="unmanaged",
        slot_ids=[],
        task_id=f"{experiment_id}.{started.trial_id}",
        allocation_id="",
        session_token=token,
        task_type="TRIAL",
        trial_info=trial,
    )


@dataclass
class ExitWatch:
    """What ended the script: an uncaught exception or sys.exit's code (as Determined's
    core_v2 finds out, by wrapping sys.excepthook and sys.exit while the run lasts)."""

    exception: BaseException | None = None
    exit_code: object = None

    def install(self) -> None:
        self._excepthook, self._exit = sys.excepthook, sys.exit
        sys.excepthook = self._caught
        sys.exit = self._exiting  # type: ignore[assignment]

    def remove(self) -> None:
        sys.excepthook, sys.exit = self._excepthook, self._exit

    def failure(self) -> str | None:
        """Why the script failed (None: it did not)."""
        if self.exception is not None:
            return f"{type(self.exception).__name__}: {self.exception}"
        if self.exit_code not in (None, 0):
            return f"exit code {self.exit_code}"
        return None

    def _caught(self, kind: type[BaseException], error: BaseException, tb: TracebackType | None) -> None:
        self.exception = error
        self._excepthook(kind, error, tb)

    def _exiting(self, code: object = 0) -> None:
        self.exit_code = code
        self._exit(code)  # type: ignore[arg-type]


class DetachedRun:
    """Says the script is alive every `heartbeat_s` from `start()`, and how it ended at `close()`
    (through a `client` of its own: the context closes its own before)."""

    def __init__(self, client: TrialClient, trial_id: int, heartbeat_s: float) -> None:
        self._client = client
        self._trial_id = trial_id
        self._heartbeat_s = heartbeat_s
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._beat, name="DetachedRunHeartbeat", daemon=True)
        self._watch = ExitWatch()
        self._failure: str | None = None
        self._started = False
        self._closed = False

    def start(self) -> None:
        if not self._started and not self._closed:
            self._started = True
            self._watch.install()
            self._thread.start()

    def failed(self, error: BaseException) -> None:
        """The script ends with `error` (the `with` block's exception)."""
        self._failure = f"{type(error).__name__}: {error}"

    def close(self) -> None:
        """Stops the heartbeats and says how the script ended (once)."""
        if self._closed:
            return
        self._closed = True
        self._stopped.set()
        if self._started:
            self._watch.remove()
            self._thread.join()
        failure = self._failure or self._watch.failure()
        if failure is not None:
            logger.error("the detached run's trial %d ends ERROR: %s", self._trial_id, failure)
        ended = TrialState.COMPLETED if failure is None else TrialState.ERROR
        try:
            self._client.report_unmanaged_trial(self._trial_id, end_state=ended, reason=failure or "")
        except Exception as error:
            if self._client.refusal(error) is None:
                raise
            logger.warning(
                "the cluster ended the detached run's trial already: %s", self._client.refusal(error)
            )
        finally:
            self._client.close()

    def _beat(self) -> None:
        """Until close(), or until the cluster says the trial has ended (killed, timed out)."""
        while not self._stopped.is_set():
            try:
                self._client.report_unmanaged_trial(self._trial_id)
            except Exception as error:  # noqa: BLE001 - the next heartbeat may get through
                refusal = self._client.refusal(error)
                if refusal is not None:
                    logger.warning("the detached run's trial has ended on the cluster: %s", refusal)
                    return
                logger.warning("the detached run's heartbeat failed (%s); trying again", error)
            self._stopped.wait(self._heartbeat_s)


class DetachedContext(Context):
    """The Core API context of a detached run: a trial's, whose start also starts the
    heartbeats and whose close also says how the script ended."""

    def __init__(self, *, run: DetachedRun, **parts: Any) -> None:
        super().__init__(**parts)
        self._run = run

    def start(self) -> None:
        super().start()
        self._run.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if exc is not None:
            self._run.failed(exc)
        super().__exit__(exc_type, exc, tb)

    def close(self, *exception: Any) -> None:
        try:
            super().close(*exception)
        finally:
            self._run.close()


def detached_context(
    client: Determined,
    config: Config,
    distributed: DistributedContext | None,
    checkpoint_storage: str | dict[str, Any] | None,
    preempt_mode: PreemptMode,
    tensorboard_mode: TensorboardMode,
) -> Context:
    """Creates the detached run's experiment and trial, and the context it reports through."""
    if distributed is not None and distributed.size > 1:
        raise NotImplementedError(
            "a detached run is one process here; run a distributed script on the cluster"
        )
    storage = storage_section(checkpoint_storage or config.checkpoint_storage)
    experiment_id = create_experiment(client, config_yaml(config, storage))
    token = client._gateway.session.token() or ""
    master = master_url(client)
    reports = TrialClient(master, token, as_user=True)
    started = reports.start_unmanaged_trial(experiment_id)
    info = cluster_info(master, token, experiment_id, started)
    logger.info("detached run: experiment %d, trial %d", experiment_id, started.trial_id)
    run = DetachedRun(
        TrialClient(master, token, as_user=True, what="heartbeats"), started.trial_id, started.heartbeat_s
    )

    def context(**parts: Any) -> Context:
        return DetachedContext(run=run, **parts)

    return _trial_context(
        info,
        distributed or DummyDistributedContext(),
        storage,
        preempt_mode,
        tensorboard_mode,
        client=reports,
        context_type=context,
    )
