"""core_context.profiler: sampling in the background, averages reported as "profiling" points."""

import pathlib
import subprocess
import sys
import threading
import time
import types
from collections.abc import Iterator
from typing import Any

import pytest
from support.core_gateway import FakeGateway, Server, set_trial_env, wait_for

import determined as det
from determined.core import _profiler
from determined.core._profiler import ProfilerContext, SystemSampler


class Recorder:
    def __init__(self) -> None:
        self.points: list[tuple[str, int, dict[str, Any]]] = []
        self.lock = threading.Lock()

    def __call__(self, group: str, steps_completed: int, metrics: dict[str, Any]) -> None:
        with self.lock:
            self.points.append((group, steps_completed, metrics))


class CountingSampler:
    """Samples 1, 2, 3, ... of "x"; "y" only in even samples."""

    opened = 0
    closed = 0

    def __init__(self) -> None:
        CountingSampler.opened += 1
        self.n = 0

    def sample(self) -> dict[str, float]:
        self.n += 1
        return {"x": float(self.n), **({"y": 10.0 * self.n} if self.n % 2 == 0 else {})}

    def close(self) -> None:
        CountingSampler.closed += 1


def test_averages_of_each_report_numbered_from_one() -> None:
    recorder = Recorder()
    profiler = ProfilerContext(recorder, sampler=CountingSampler)
    profiler.on(sampling_interval=0.001, samples_per_report=4)
    wait_for(lambda: len(recorder.points) >= 2)
    profiler.off()
    assert recorder.points[:2] == [
        ("profiling", 1, {"x": 2.5, "y": 30.0}),  # y: (20 + 40) / 2
        ("profiling", 2, {"x": 6.5, "y": 70.0}),
    ]


def test_on_is_idempotent_and_off_stops_it_and_on_again_counts_on() -> None:
    recorder = Recorder()
    profiler = ProfilerContext(recorder, sampler=CountingSampler)
    opened = CountingSampler.opened
    profiler.on(sampling_interval=0.001, samples_per_report=1)
    profiler.on(sampling_interval=0.001, samples_per_report=1)
    wait_for(lambda: len(recorder.points) >= 3)
    assert CountingSampler.opened == opened + 1
    profiler.off()
    profiler.off()
    assert not any(t.name == "determined-profiler" for t in threading.enumerate())
    stopped_at = len(recorder.points)
    time.sleep(0.05)
    assert len(recorder.points) == stopped_at
    profiler.on(sampling_interval=0.001, samples_per_report=1)
    wait_for(lambda: len(recorder.points) > stopped_at)
    profiler.off()
    assert [steps for _, steps, _ in recorder.points] == list(range(1, len(recorder.points) + 1))
    assert CountingSampler.closed == CountingSampler.opened


def test_a_process_other_than_the_nodes_first_samples_nothing() -> None:
    recorder = Recorder()
    profiler = ProfilerContext(recorder, enabled=False, sampler=CountingSampler)
    profiler.on(sampling_interval=0.001, samples_per_report=1)
    time.sleep(0.05)
    profiler.off()
    assert recorder.points == []


@pytest.mark.parametrize(
    ("interval", "per_report", "error"),
    [
        (0, 10, ValueError),
        (-1, 10, ValueError),
        ("1", 10, TypeError),
        (1, 0, ValueError),
        (1, 1.5, TypeError),
        (float("nan"), 10, ValueError),
        (True, 10, TypeError),
    ],
)
def test_arguments_are_checked(interval: Any, per_report: Any, error: type[Exception]) -> None:
    with pytest.raises(error):
        ProfilerContext(Recorder(), sampler=CountingSampler).on(interval, per_report)
    with pytest.raises(error):
        det.core.DummyProfilerContext().on(interval, per_report)


def test_a_failing_report_stops_the_profiler_quietly(caplog: pytest.LogCaptureFixture) -> None:
    def refuse(group: str, steps: int, metrics: dict[str, Any]) -> None:
        raise RuntimeError("the metrics shipper is not running")

    profiler = ProfilerContext(refuse, sampler=CountingSampler)
    profiler.on(sampling_interval=0.001, samples_per_report=1)
    wait_for(lambda: "the profiler stopped" in caplog.text)
    profiler.off()


def fake_proc(root: pathlib.Path, *, jiffies: tuple[int, int], available_kb: int, io: int, net: int) -> None:
    """/proc and /sys files as Linux writes them; `jiffies` = (busy, idle)."""
    busy, idle = jiffies
    (root / "proc" / "net").mkdir(parents=True, exist_ok=True)
    (root / "sys" / "block" / "sda").mkdir(parents=True, exist_ok=True)
    (root / "proc" / "stat").write_text(f"cpu  {busy} 0 0 {idle} 0 0 0 0 0 0\ncpu0 1 2 3 4\n")
    (root / "proc" / "meminfo").write_text(f"MemTotal: 999 kB\nMemAvailable:   {available_kb} kB\n")
    (root / "proc" / "diskstats").write_text(
        f"   8       0 sda {io} 0 {io * 2} 0 {io} 0 {io * 4} 0 0 0 0\n"
        f"   8       1 sda1 {io} 0 {io * 2} 0 {io} 0 {io * 4} 0 0 0 0\n"
        f"   7       0 loop0 {io} 0 {io} 0 {io} 0 {io} 0 0 0 0\n"
    )
    (root / "proc" / "net" / "dev").write_text(
        "Inter-|   Receive\n face |bytes\n"
        f"    lo: {net} 0 0 0 0 0 0 0 {net} 0 0 0 0 0 0 0\n"
        f"  eth0: {net} 0 0 0 0 0 0 0 {net * 3} 0 0 0 0 0 0 0\n"
    )


def test_system_readings_from_proc(tmp_path: pathlib.Path) -> None:
    fake_proc(tmp_path, jiffies=(100, 100), available_kb=1000, io=10, net=1000)
    sampler = SystemSampler(tmp_path / "proc", tmp_path / "sys", gpus=False)
    fake_proc(tmp_path, jiffies=(175, 125), available_kb=2_000_000, io=30, net=3000)
    sample = sampler.sample()
    sampler.close()
    assert sample["cpu_util_simple"] == 75.0
    assert sample["memory_free"] == 2_000_000 * 1024 / 1e9
    rates = {name: value for name, value in sample.items() if name.startswith(("disk", "net"))}
    # Only sda counts (its partition and the loop device do not); the elapsed time is tiny.
    ratio = rates["disk_iops"] / 40  # 20 reads + 20 writes
    assert ratio > 0
    assert rates["disk_throughput_read"] == pytest.approx(40 * 512 * ratio)
    assert rates["disk_throughput_write"] == pytest.approx(80 * 512 * ratio)
    assert rates["net_throughput_recv"] == pytest.approx(2000 * ratio)
    assert rates["net_throughput_sent"] == pytest.approx(6000 * ratio)


def test_unreadable_counters_are_left_out(tmp_path: pathlib.Path) -> None:
    sampler = SystemSampler(tmp_path / "missing", tmp_path / "missing", gpus=False)
    assert sampler.sample() == {}


def test_this_machines_readings() -> None:
    sampler = SystemSampler()
    time.sleep(0.05)
    sample = sampler.sample()
    sampler.close()
    assert 0 <= sample["cpu_util_simple"] <= 100
    assert sample["memory_free"] > 0


def test_visible_gpus_follow_cuda_visible_devices() -> None:
    class Nvml:
        def nvmlDeviceGetCount(self) -> int:
            return 3

        def nvmlDeviceGetHandleByIndex(self, index: int) -> str:
            return f"gpu{index}"

        def nvmlDeviceGetHandleByUUID(self, uuid: str) -> str:
            return uuid

    nvml = Nvml()
    assert _profiler._visible_gpus(nvml, None) == ["gpu0", "gpu1", "gpu2"]
    assert _profiler._visible_gpus(nvml, "2,GPU-abc") == ["gpu2", "GPU-abc"]
    assert _profiler._visible_gpus(nvml, "") == []
    assert _profiler._visible_gpus(nvml, "1,-1,2") == ["gpu1"]


# -- through det.core.init() ---------------------------------------------------------------


@pytest.fixture
def on_cluster(gateway: Server, tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    config = {"checkpoint_storage": {"type": "shared_fs", "host_path": str(tmp_path)}}
    set_trial_env(monkeypatch, gateway.port, config)
    yield
    det.get_cluster_info.cache_clear()


def test_on_a_cluster_the_chief_reports_profiling_points_until_closed(
    gateway: Server, on_cluster: None
) -> None:
    fake: FakeGateway = gateway.gateway
    with det.core.init() as core_context:
        assert isinstance(core_context.profiler, det.core.ProfilerContext)
        core_context.profiler.on(sampling_interval=0.01, samples_per_report=2)
        wait_for(lambda: _profiled(fake) >= 2)
    assert not any(t.name == "determined-profiler" for t in threading.enumerate())
    points = [(steps, metrics) for group, steps, metrics in fake.reports() if group == "profiling"]
    assert [steps for steps, _ in points] == list(range(1, len(points) + 1))
    assert {"cpu_util_simple", "memory_free"} <= set(points[0][1])


def _profiled(fake: FakeGateway) -> int:
    return sum(1 for group, _, _ in fake.reports() if group == "profiling")


def test_off_cluster_the_profiler_does_nothing(tmp_path: pathlib.Path) -> None:
    with det.core.init(checkpoint_storage=str(tmp_path)) as core_context:
        assert isinstance(core_context.profiler, det.core.DummyProfilerContext)
        core_context.profiler.on()
        core_context.profiler.on(sampling_interval=2, samples_per_report=5)
        core_context.profiler.off()
        core_context.profiler.off()
        assert not any(t.name == "determined-profiler" for t in threading.enumerate())


def test_pynvml_is_imported_only_once_profiling_starts() -> None:
    code = (
        "import sys, time\n"
        "from determined.core._profiler import ProfilerContext\n"
        "print('pynvml' in sys.modules)\n"
        "profiler = ProfilerContext(lambda *report: None)\n"
        "profiler.on(sampling_interval=0.01, samples_per_report=1)\n"
        "time.sleep(0.1)\n"
        "profiler.off()\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.split() == ["False"]
    assert "Traceback" not in result.stderr


def test_gpus_are_read_through_pynvml_when_it_finds_some(monkeypatch: pytest.MonkeyPatch) -> None:
    class NVMLError(Exception):
        pass

    nvml = types.ModuleType("pynvml")
    calls: list[str] = []
    readings = {"gpu0": (30, 4e9), "gpu1": (50, 6e9)}
    nvml.NVMLError = NVMLError  # type: ignore[attr-defined]
    nvml.nvmlInit = lambda: calls.append("init")  # type: ignore[attr-defined]
    nvml.nvmlShutdown = lambda: calls.append("shutdown")  # type: ignore[attr-defined]
    nvml.nvmlDeviceGetCount = lambda: 2  # type: ignore[attr-defined]
    nvml.nvmlDeviceGetHandleByIndex = lambda i: f"gpu{i}"  # type: ignore[attr-defined]
    nvml.nvmlDeviceGetUtilizationRates = lambda h: types.SimpleNamespace(gpu=readings[h][0])  # type: ignore[attr-defined]
    nvml.nvmlDeviceGetMemoryInfo = lambda h: types.SimpleNamespace(free=readings[h][1])  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "pynvml", nvml)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    sampler = SystemSampler()
    sample = sampler.sample()
    sampler.close()
    assert (sample["gpu_util"], sample["gpu_free_memory"]) == (40.0, 10.0)
    assert calls == ["init", "shutdown"]
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    assert _profiler._Gpus.open() is None and calls[-1] == "shutdown"
