"""`core_context.profiler`: the machine's system metrics, sampled while the trial trains.

`on()` starts a daemon thread in the node's first process (local rank 0) that reads the
machine's counters every `sampling_interval` seconds and reports the averages of every
`samples_per_report` samples as one point of the metrics group "profiling" (another node's
local chief: "profiling-node<cross rank>", so the nodes' points do not overwrite each other),
its steps_completed being the number of reports so far. `off()` stops it; so does closing the
context. Both are idempotent.

Sampling is cheap and needs no new dependency: CPU utilisation from /proc/stat, memory from
/proc/meminfo, disk and network rates from /proc/diskstats and /proc/net/dev, and GPU
utilisation and memory through pynvml, imported on the thread only, used only when it
imports and finds GPUs (those CUDA_VISIBLE_DEVICES names, else all). Metric names are
Determined's: cpu_util_simple (%), memory_free (GB), disk_iops, disk_throughput_read/_write
(bytes/s), net_throughput_recv/_sent (bytes/s), gpu_util (%, mean over the GPUs) and
gpu_free_memory (GB, summed). A counter that cannot be read is left out of the report.
"""

import contextlib
import logging
import numbers
import os
import pathlib
import threading
import time
import warnings
from collections.abc import Callable
from typing import Any, Protocol

logger = logging.getLogger("determined.core")

GROUP = "profiling"
_GB = 1e9
_SECTOR_BYTES = 512
# Block devices that are not disks of their own (or count another disk's I/O again).
_VIRTUAL_DISKS = ("loop", "ram", "zram", "dm-", "md", "sr", "fd")

ReportMetrics = Callable[[str, int, dict[str, Any]], None]


class Sampler(Protocol):
    def sample(self) -> dict[str, float]: ...

    def close(self) -> None: ...


class ProfilerContext:
    """`core_context.profiler`: on(), off()."""

    def __init__(
        self,
        report: ReportMetrics,
        *,
        enabled: bool = True,
        group: str = GROUP,
        sampler: Callable[[], Sampler] | None = None,
    ) -> None:
        self._report = report
        self._enabled = enabled
        self._group = group
        self._new_sampler = sampler or SystemSampler
        self._lock = threading.Lock()
        self._collector: _Collector | None = None
        self._reports = 0

    def on(self, sampling_interval: float = 1, samples_per_report: int = 10) -> None:
        """Start sampling every `sampling_interval` seconds and reporting the averages of every
        `samples_per_report` samples; nothing happens when it is on already, or outside the
        node's first process."""
        interval, per_report = _checked(sampling_interval, samples_per_report)
        if not self._enabled:
            return
        with self._lock:
            if self._collector is not None and self._collector.is_alive():
                logger.debug("the profiler is on already")
                return
            self._collector = _Collector(self, interval, per_report)
            self._collector.start()

    def off(self) -> None:
        """Stop sampling (samples not yet reported are dropped)."""
        with self._lock:
            collector, self._collector = self._collector, None
        if collector is not None:
            collector.stop()

    def _send(self, averages: dict[str, float]) -> None:
        self._reports += 1
        self._report(self._group, self._reports, averages)


class DummyProfilerContext(ProfilerContext):
    """Off-cluster: the same calls, checked, and nothing is sampled."""

    def __init__(self) -> None:
        super().__init__(lambda group, steps, metrics: None, enabled=False)

    def on(self, sampling_interval: float = 1, samples_per_report: int = 10) -> None:
        _checked(sampling_interval, samples_per_report)
        logger.debug("profiler.on(): off-cluster, nothing is sampled")


def _checked(sampling_interval: Any, samples_per_report: Any) -> tuple[float, int]:
    if isinstance(sampling_interval, bool) or not isinstance(sampling_interval, numbers.Real):
        raise TypeError(f"sampling_interval must be a number, got {type(sampling_interval).__name__}")
    interval = float(sampling_interval)
    if not interval > 0:  # also refuses NaN
        raise ValueError(f"sampling_interval must be > 0 seconds, got {sampling_interval}")
    if isinstance(samples_per_report, bool) or not isinstance(samples_per_report, numbers.Integral):
        raise TypeError(f"samples_per_report must be an int, got {type(samples_per_report).__name__}")
    per_report = int(samples_per_report)
    if per_report < 1:
        raise ValueError(f"samples_per_report must be >= 1, got {samples_per_report}")
    return interval, per_report


class _Collector(threading.Thread):
    def __init__(self, profiler: ProfilerContext, interval: float, per_report: int) -> None:
        super().__init__(name="determined-profiler", daemon=True)
        self._profiler = profiler
        self._interval = interval
        self._per_report = per_report
        self._stopped = threading.Event()

    def stop(self) -> None:
        self._stopped.set()
        if self.ident is not None and threading.current_thread() is not self:
            self.join()

    def run(self) -> None:
        try:
            sampler = self._profiler._new_sampler()
        except Exception:
            logger.exception("the profiler could not start")
            return
        try:
            samples: list[dict[str, float]] = []
            while not self._stopped.wait(self._interval):
                samples.append(sampler.sample())
                if len(samples) >= self._per_report:
                    self._profiler._send(_averages(samples))
                    samples = []
        except Exception as error:  # noqa: BLE001 - the shipper failed or was closed: stop profiling
            logger.warning("the profiler stopped: %s", error)
        finally:
            sampler.close()


def _averages(samples: list[dict[str, float]]) -> dict[str, float]:
    sums: dict[str, float] = {}
    counts: dict[str, int] = {}
    for sample in samples:
        for name, value in sample.items():
            sums[name] = sums.get(name, 0.0) + value
            counts[name] = counts.get(name, 0) + 1
    return {name: sums[name] / counts[name] for name in sums}


class SystemSampler:
    """Readings of this machine; the rates are over the time since the previous reading."""

    def __init__(
        self,
        proc: pathlib.Path = pathlib.Path("/proc"),
        sys: pathlib.Path = pathlib.Path("/sys"),
        gpus: bool = True,
    ) -> None:
        self._proc = proc
        self._sys = sys
        self._at = time.monotonic()
        self._cpu = self._read(_cpu_times)
        self._disk = self._read(_disk_counters)
        self._net = self._read(_net_counters)
        self._gpus = _Gpus.open() if gpus else None

    def sample(self) -> dict[str, float]:
        now = time.monotonic()
        elapsed, self._at = max(now - self._at, 1e-9), now
        sample: dict[str, float] = {}
        cpu = self._read(_cpu_times)
        if cpu is not None and self._cpu is not None:
            busy, total = cpu[0] - self._cpu[0], cpu[1] - self._cpu[1]
            if total > 0:
                sample["cpu_util_simple"] = 100.0 * busy / total
        self._cpu = cpu
        available = self._read(_memory_available)
        if available is not None:
            sample["memory_free"] = available / _GB
        disk = self._read(_disk_counters)
        if disk is not None and self._disk is not None:
            ios, read, written = (now_ - then for now_, then in zip(disk, self._disk, strict=True))
            sample.update(
                disk_iops=ios / elapsed,
                disk_throughput_read=read / elapsed,
                disk_throughput_write=written / elapsed,
            )
        self._disk = disk
        net = self._read(_net_counters)
        if net is not None and self._net is not None:
            sample["net_throughput_recv"] = (net[0] - self._net[0]) / elapsed
            sample["net_throughput_sent"] = (net[1] - self._net[1]) / elapsed
        self._net = net
        if self._gpus is not None:
            sample.update(self._gpus.sample())
        return sample

    def close(self) -> None:
        if self._gpus is not None:
            self._gpus.close()

    def _read(self, reader: Callable[[pathlib.Path, pathlib.Path], Any]) -> Any:
        try:
            return reader(self._proc, self._sys)
        except (OSError, ValueError, IndexError):
            return None


def _cpu_times(proc: pathlib.Path, sys: pathlib.Path) -> tuple[int, int]:
    """(busy, total) jiffies of all CPUs together; idle and iowait count as not busy."""
    with open(proc / "stat") as stat:
        fields = [int(value) for value in stat.readline().split()[1:]]
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)
    # guest and guest_nice (fields 8, 9) are already counted in user and nice.
    total = sum(fields[:8])
    return total - idle, total


def _memory_available(proc: pathlib.Path, sys: pathlib.Path) -> int:
    """Bytes available for new work (MemAvailable)."""
    for line in (proc / "meminfo").read_text().splitlines():
        name, _, value = line.partition(":")
        if name == "MemAvailable":
            return int(value.split()[0]) * 1024
    raise ValueError("no MemAvailable in meminfo")


def _disk_counters(proc: pathlib.Path, sys: pathlib.Path) -> tuple[int, int, int]:
    """(I/O operations, bytes read, bytes written) so far, over the machine's disks."""
    block = sys / "block"
    disks = {entry.name for entry in block.iterdir()} if block.is_dir() else None
    ios = read = written = 0
    for line in (proc / "diskstats").read_text().splitlines():
        fields = line.split()
        name = fields[2]
        if name.startswith(_VIRTUAL_DISKS) or (disks is not None and name not in disks):
            continue  # virtual devices, and partitions (their disk counts them already)
        ios += int(fields[3]) + int(fields[7])
        read += int(fields[5]) * _SECTOR_BYTES
        written += int(fields[9]) * _SECTOR_BYTES
    return ios, read, written


def _net_counters(proc: pathlib.Path, sys: pathlib.Path) -> tuple[int, int]:
    """(bytes received, bytes sent) so far, over every interface but loopback."""
    received = sent = 0
    for line in (proc / "net" / "dev").read_text().splitlines()[2:]:
        name, _, counters = line.partition(":")
        if name.strip() == "lo":
            continue
        fields = counters.split()
        received += int(fields[0])
        sent += int(fields[8])
    return received, sent


class _Gpus:
    """The GPUs this process may use, read through NVML."""

    def __init__(self, pynvml: Any, handles: list[Any]) -> None:
        self._nvml = pynvml
        self._handles = handles

    @classmethod
    def open(cls) -> "_Gpus | None":
        """None when pynvml does not import, NVML does not start or there is no GPU to read."""
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", FutureWarning)  # pynvml's own deprecation notice
                import pynvml
        except ImportError:
            return None
        try:
            pynvml.nvmlInit()
        except pynvml.NVMLError:  # no driver or no library: no GPU to read
            return None
        try:
            handles = _visible_gpus(pynvml, os.environ.get("CUDA_VISIBLE_DEVICES"))
        except pynvml.NVMLError as error:
            logger.debug("the profiler reads no GPU: %s", error)
            handles = []
        if not handles:
            pynvml.nvmlShutdown()
            return None
        return cls(pynvml, handles)

    def sample(self) -> dict[str, float]:
        try:
            utilisation = [self._nvml.nvmlDeviceGetUtilizationRates(h).gpu for h in self._handles]
            free = [self._nvml.nvmlDeviceGetMemoryInfo(h).free for h in self._handles]
        except self._nvml.NVMLError:
            return {}
        return {"gpu_util": sum(utilisation) / len(utilisation), "gpu_free_memory": sum(free) / _GB}

    def close(self) -> None:
        with contextlib.suppress(self._nvml.NVMLError):
            self._nvml.nvmlShutdown()


def _visible_gpus(pynvml: Any, visible: str | None) -> list[Any]:
    """Handles of the GPUs CUDA_VISIBLE_DEVICES names (indices or UUIDs), else of all."""
    if visible is None:
        return [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(pynvml.nvmlDeviceGetCount())]
    handles = []
    for name in (part.strip() for part in visible.split(",")):
        if not name or name.startswith("-"):
            break  # CUDA ignores the devices after an invalid one
        if name.isdigit():
            handles.append(pynvml.nvmlDeviceGetHandleByIndex(int(name)))
        else:
            handles.append(pynvml.nvmlDeviceGetHandleByUUID(name))
    return handles
