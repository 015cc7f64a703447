"""The CUDA paths, on a real GPU: what CI (no GPU) can never run.

- the agent's slot detection (pynvml) offers the GPU as a `cuda` slot named by its name and uuid;
- a process trial of one slot sees that slot's GPU and no other (CUDA_VISIBLE_DEVICES by UUID),
  as torch and `det.get_cluster_info().gpu_uuids` say; a zero-slot trial sees none;
- a PyTorchTrial trains through the Trainer off-cluster in mixed precision (autocast in float16
  and a wrapped GradScaler, as `_pytorch_context` documents), its loss falls, and its
  checkpoint loads back onto the GPU, both by resuming and by `load_trial_from_checkpoint_path`;
- our launcher (`determined.launch.torch_distributed`) starts a one-slot worker whose
  `det.pytorch.init()` makes an nccl process group, which allreduces a CUDA tensor (two ranks
  on one GPU are not tried: NCCL refuses a GPU shared by two ranks);
- `det deploy local cluster-up` with its GPU agent runs the MNIST example's const.yaml on one
  slot to COMPLETED (skipped, saying what is missing, where the cluster's packages or servers
  are not installed).

Without CUDA every test skips, saying why. `bench/gpu_check.sh` runs them on a GPU machine
(`--noconftest`: tests/conftest.py's server fixtures, and the packages they import, are for
the other suites; these tests start what they need themselves). For a dry run on a machine
without a GPU, DET_GPU_TESTS_ON_CPU=1 runs all but the slot test on the CPU (bfloat16
autocast, gloo, a `--no-gpu` cluster) to check the tests themselves.
"""

import importlib
import importlib.util
import json
import os
import shutil
import statistics
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.nn.functional as F
import yaml

import determined.pytorch as det_torch
from deploy.local import servers
from determined.pytorch import _state

pytestmark = pytest.mark.gpu

REPO = Path(__file__).resolve().parents[2]
CUDA = torch.cuda.is_available()
ON_CPU = os.environ.get("DET_GPU_TESTS_ON_CPU") == "1"
NO_CUDA = (
    "no CUDA device (torch.cuda.is_available() is false): these tests need a GPU; "
    "bench/gpu_check.sh runs them on one"
)
needs_cuda = pytest.mark.skipif(not CUDA, reason=NO_CUDA)
# The tests that also check themselves on the CPU when DET_GPU_TESTS_ON_CPU=1 (a dry run).
needs_cuda_or_dry_run = pytest.mark.skipif(
    not (CUDA or ON_CPU), reason=NO_CUDA + " (or DET_GPU_TESTS_ON_CPU=1)"
)


def half_dtype(device: torch.device) -> torch.dtype:
    """float16 on the GPU (the dtype a GradScaler exists for); bfloat16, the CPU's, in a dry run."""
    return torch.float16 if device.type == "cuda" else torch.bfloat16


def regression_set(seed: int, records: int) -> torch.utils.data.TensorDataset:
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(records, 16, generator=generator)
    y = x[:, :8].sum(dim=1, keepdim=True) - x[:, 8:].sum(dim=1, keepdim=True)
    return torch.utils.data.TensorDataset(x, y)


class MixedPrecisionTrial(det_torch.PyTorchTrial):
    """A small regression MLP trained in mixed precision the way our context documents it:
    `context.autocast()` around the forward pass, a GradScaler given to `wrap_scaler`."""

    def __init__(self, context: det_torch.PyTorchTrialContext) -> None:
        self.context = context
        model = torch.nn.Sequential(torch.nn.Linear(16, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1))
        self.model = context.wrap_model(model)
        self.optimizer = context.wrap_optimizer(torch.optim.Adam(self.model.parameters(), lr=0.01))
        self.scaler = context.wrap_scaler(torch.amp.GradScaler(context.device.type))
        self.losses: list[float] = []
        self.seen: set[tuple[str, str, torch.dtype]] = set()  # (batch device, model device, output dtype)

    def build_training_data_loader(self) -> det_torch.DataLoader:
        return det_torch.DataLoader(regression_set(0, 1024), batch_size=32, shuffle=True)

    def build_validation_data_loader(self) -> det_torch.DataLoader:
        return det_torch.DataLoader(regression_set(1, 128), batch_size=32)

    def predict(self, x: torch.Tensor) -> torch.Tensor:
        with self.context.autocast(dtype=half_dtype(self.context.device)):
            return self.model(x)  # type: ignore[no-any-return]

    def train_batch(self, batch: Any, epoch_idx: int, batch_idx: int) -> dict[str, Any]:
        x, y = batch
        output = self.predict(x)
        loss = F.mse_loss(output.float(), y)
        parameter = next(self.model.parameters())
        self.seen.add((x.device.type, parameter.device.type, output.dtype))
        self.context.backward(self.scaler.scale(loss))
        self.context.step_optimizer(self.optimizer, scaler=self.scaler)
        self.scaler.update()
        self.losses.append(loss.item())  # a sync per batch: fine in a test
        return {"loss": loss}

    def evaluate_batch(self, batch: Any, batch_idx: int) -> dict[str, Any]:
        x, y = batch
        return {"validation_loss": F.mse_loss(self.predict(x).float(), y)}


def fit(storage: Path, batches: int, latest_checkpoint: str | None = None) -> MixedPrecisionTrial:
    exp_conf = {"checkpoint_storage": str(storage)}
    with det_torch.init(hparams={}, exp_conf=exp_conf, enable_tensorboard_logging=False) as context:
        trial = MixedPrecisionTrial(context)
        det_torch.Trainer(trial, context).fit(
            max_length=det_torch.Batch(batches), checkpoint_policy="none", latest_checkpoint=latest_checkpoint
        )
    return trial


def checkpoint_folders(storage: Path) -> dict[int, Path]:
    """steps_completed -> folder of the Trainer checkpoints under `storage`."""
    return {
        json.loads(metadata.read_text())["steps_completed"]: metadata.parent
        for metadata in storage.glob("*/metadata.json")
    }


@needs_cuda
def test_the_agent_offers_the_gpu_as_a_cuda_slot() -> None:
    from services.agent.slots import detect_slots

    slots = detect_slots(cpu_slots=3)
    assert [slot.type for slot in slots] == ["cuda"] * torch.cuda.device_count(), slots
    for slot in slots:
        properties = torch.cuda.get_device_properties(slot.slot_id)
        # The slot names the GPU as NVML does, "NAME (GPU-UUID)": the same GPU torch sees.
        assert properties.name in slot.device
        assert str(properties.uuid).removeprefix("GPU-") in slot.device
        print(f"slot {slot.slot_id}: {slot.device}, {properties.total_memory / 2**30:.1f} GiB")


# Run as a trial: which GPUs it sees, by torch and by `det.get_cluster_info().gpu_uuids`.
SEEN_GPUS = """
import json, torch, determined as det
names = [str(torch.cuda.get_device_properties(i).uuid) for i in range(torch.cuda.device_count())]
uuids = ["GPU-" + name.removeprefix("GPU-") for name in names]
print(json.dumps({"torch": uuids, "cluster_info": det.get_cluster_info().gpu_uuids}))
"""


def gpus_a_trial_sees(slot_ids: list[int], slots: list[Any], folder: Path) -> dict[str, list[str]]:
    """Starts a process with the environment the agent gives a trial of `slot_ids` (its process
    runtime) and returns the GPUs it sees."""
    from determined.proto import events_pb2
    from services.agent.core import AgentAllocation
    from services.agent.launch import CONFIG_FILE, AgentIdentity, trial_environment

    request = events_pb2.AllocationRequested(
        allocation_id="1.1", task_id="1", task_type="TRIAL", trial=events_pb2.TrialLaunch(trial_id=1)
    )
    identity = AgentIdentity(
        "gpu-check", "gpu-check", "127.0.0.1:1", str(Path(sys.executable).parent), slots=tuple(slots)
    )
    folder.mkdir()
    (folder / CONFIG_FILE).write_text("{}")
    env = trial_environment(
        AgentAllocation(request, "gpu-check", tuple(slot_ids)),
        identity,
        session_token="",
        slot_type="cuda",
        inherited=os.environ,
        folder=folder,
    )
    env["PYTHONPATH"] = os.environ.get("PYTHONPATH", "")  # where this run finds torch (bench/gpu_check.sh)
    done = subprocess.run(
        [sys.executable, "-c", SEEN_GPUS], env=env, capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return json.loads(done.stdout.splitlines()[-1])  # type: ignore[no-any-return]


@needs_cuda
def test_each_one_slot_trial_sees_its_own_gpu_and_a_zero_slot_trial_none(tmp_path: Path) -> None:
    """On a 2-GPU agent, the trials of slots 0 and 1 see one different GPU each (on a 1-GPU
    machine, the one trial sees its GPU: tests/unit/test_agent_gpus.py checks the mapping for
    more)."""
    from services.agent.slots import detect_slots

    slots = detect_slots(cpu_slots=1)
    seen = [gpus_a_trial_sees([slot.slot_id], slots, tmp_path / f"slot-{slot.slot_id}") for slot in slots]
    assert seen == [{"torch": [slot.gpu_uuid], "cluster_info": [slot.gpu_uuid]} for slot in slots]
    assert len({tuple(trial["torch"]) for trial in seen}) == len(slots) == torch.cuda.device_count()
    print(f"{len(slots)} one-slot trials, each on its own GPU: {[trial['torch'] for trial in seen]}")
    assert gpus_a_trial_sees([], slots, tmp_path / "zero-slot") == {"torch": [], "cluster_info": []}


@needs_cuda_or_dry_run
def test_mixed_precision_training_saves_and_loads_back_to_the_gpu(tmp_path: Path) -> None:
    device = torch.device("cuda", 0) if CUDA else torch.device("cpu")
    trained = fit(tmp_path, batches=96)

    assert trained.context.device == device
    assert trained.seen == {(device.type, device.type, half_dtype(device))}
    first, last = statistics.mean(trained.losses[:8]), statistics.mean(trained.losses[-8:])
    assert last < first / 4, trained.losses

    checkpoint = checkpoint_folders(tmp_path)[96]
    state = _state.read_state(checkpoint)
    assert [scaler["scale"] for scaler in state["scalers_state_dict"]] == [trained.scaler.get_scale()]

    # Resuming: the Trainer puts the weights and the optimizer's state back on the device.
    resumed = fit(tmp_path, batches=104, latest_checkpoint=checkpoint.name)
    assert len(resumed.losses) == 8 and statistics.mean(resumed.losses) < first / 4, resumed.losses
    moments = [tensor for values in resumed.optimizer.state.values() for tensor in values.values()]
    assert {tensor.device.type for tensor in moments if tensor.dim() > 0} == {device.type}

    # Loading for inference: the same weights, and the same predictions once on the device.
    loaded = det_torch.load_trial_from_checkpoint_path(
        checkpoint, trial_class=MixedPrecisionTrial, torch_load_kwargs={"map_location": device}
    )
    assert isinstance(loaded, MixedPrecisionTrial)
    loaded.model.to(device)
    for got, want in zip(
        loaded.model.state_dict().values(), state["models_state_dict"][0].values(), strict=True
    ):
        assert torch.equal(got.cpu(), want.cpu())
    x = regression_set(2, 64).tensors[0].to(device)
    assert loaded.predict(x).device.type == device.type


@needs_cuda_or_dry_run
def test_nccl_allreduce_through_the_launcher(tmp_path: Path) -> None:
    result_file = tmp_path / "result.json"
    task = {
        "DET_MASTER": "http://127.0.0.1:1",  # never dialled: the worker trains off-cluster
        "DET_CLUSTER_ID": "gpu-check",
        "DET_AGENT_ID": "gpu-check",
        "DET_SLOT_IDS": "[0]",
        "DET_TASK_ID": "gpu-check",
        "DET_ALLOCATION_ID": "gpu-check.1",
        "DET_SESSION_TOKEN": "",
        "DET_TASK_TYPE": "COMMAND",
        "C10D_PORT": str(servers.free_port()),
        "INTER_TRAIN_PROCESS_COMM_PORT_1": str(servers.free_port()),
    }
    command = [
        sys.executable, "-m", "determined.launch.torch_distributed", "--",
        sys.executable, str(Path(__file__).with_name("nccl_worker.py")), str(result_file),
    ]  # fmt: skip
    done = subprocess.run(
        command, env={**os.environ, **task}, capture_output=True, text=True, timeout=180, check=False
    )
    assert done.returncode == 0, done.stdout + done.stderr
    result = json.loads(result_file.read_text())
    assert result == {
        "backend": "nccl" if CUDA else "gloo",
        "world_size": 1,
        "device": "cuda:0" if CUDA else "cpu",
        "allreduced": [1.0] * 4,
        "allgathered_ranks": [0],
    }


CLUSTER_PACKAGES = ("nats", "asyncpg", "sqlalchemy", "pydantic_settings", "structlog", "starlette", "uvicorn")
TERMINAL = ("COMPLETED", "ERROR", "CANCELED")


def missing_cluster_parts() -> list[str]:
    """What a local cluster needs that this machine lacks (packages, the servers' binaries)."""
    missing = [name for name in CLUSTER_PACKAGES if importlib.util.find_spec(name) is None]
    for binary in (servers.nats_server_binary, servers.postgres_bin_dir):
        try:
            binary()
        except servers.ServerError as error:
            missing.append(str(error))
    return missing


@needs_cuda_or_dry_run
def test_the_mnist_example_completes_on_a_gpu_agent(tmp_path: Path) -> None:
    if missing := missing_cluster_parts():
        pytest.skip(f"a local cluster needs what this machine lacks: {'; '.join(missing)}")
    e2e_cluster: Any = importlib.import_module("support.e2e_cluster")  # imports the packages checked above

    context = tmp_path / "mnist_pytorch"
    shutil.copytree(REPO / "examples" / "mnist_pytorch", context, ignore=shutil.ignore_patterns("data"))
    config = yaml.safe_load((context / "const.yaml").read_text())
    config.update(resources={"slots_per_trial": 1}, max_restarts=0)
    cluster = e2e_cluster.Cluster(Path("/tmp") / f"det-gpu-{uuid.uuid4().hex[:8]}")
    # The e2e Cluster offers CPU slots (--no-gpu); here the agent finds the GPU itself (in a
    # dry run on the CPU, one CPU slot).
    started = e2e_cluster.det(
        cluster.env, "deploy", "local", "cluster-up", "--data-dir", str(cluster.data_dir),
        "--master-port", str(cluster.master_port), "--nats-port", str(cluster.nats_port),
        "--postgres-port", str(cluster.postgres_port), *([] if CUDA else ["--no-gpu"]),
    )  # fmt: skip
    try:
        assert started.returncode == 0, started.stdout + started.stderr
        slots = cluster.det("slot", "list").stdout
        assert ("cuda" if CUDA else "cpu") in slots, slots
        print(slots)
        experiment_id = cluster.create(context, json.dumps(config))
        e2e_cluster.wait_for(
            lambda: cluster.experiment_state(experiment_id) in TERMINAL, f"experiment {experiment_id}", 180
        )
        [trial] = cluster.trials(experiment_id)
        logs = cluster.logs(int(trial["id"]))
        print(logs[-3000:])
        assert cluster.experiment_state(experiment_id) == "COMPLETED", logs
        assert "training on the CPU" not in logs, logs
    finally:
        cluster.down()
        shutil.rmtree(cluster.data_dir, ignore_errors=True)
        shutil.rmtree(cluster.cli_config, ignore_errors=True)
