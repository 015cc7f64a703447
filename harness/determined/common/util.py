"""The names of Determined 0.38's `determined.common.util` that user scripts import: the
metric group names, and small helpers (random state, sizes, YAML, times). Standard library
at import; YAML is loaded on first use."""

import functools
import os
import pathlib
import random
import re
import time
import warnings
from collections.abc import Callable, Iterator, Sequence
from datetime import datetime
from typing import IO, Any, TypeVar

# The metric groups Determined names: `trial.iter_metrics(util._LEGACY_VALIDATION)`.
_LEGACY_TRAINING = "training"
_LEGACY_VALIDATION = "validation"
_INFERENCE = "inference"

T = TypeVar("T")
F = TypeVar("F", bound=Callable[..., Any])

_TRUE = frozenset({"y", "yes", "t", "true", "on", "1"})
_FALSE = frozenset({"n", "no", "f", "false", "off", "0"})


def chunks(items: Sequence[T], chunk_size: int) -> Iterator[Sequence[T]]:
    """`items` in consecutive slices of `chunk_size` (the last may be shorter)."""
    for start in range(0, len(items), chunk_size):
        yield items[start : start + chunk_size]


def sizeof_fmt(val: float) -> str:
    """A byte count in binary units, one decimal: 1536 -> "1.5KB"."""
    size = float(val)
    for unit in ("", "K", "M", "G", "T", "P", "E", "Z"):
        if abs(size) < 1024.0:
            return f"{size:3.1f}{unit}B"
        size /= 1024.0
    return f"{size:.1f}YB"


def debug_mode() -> bool:
    """Whether $DET_DEBUG asks for debug output (true, 1 or yes)."""
    return os.environ.get("DET_DEBUG", "").lower() in ("true", "1", "yes")


def preserve_random_state(fn: F) -> F:
    """Runs `fn` without changing the state of Python's `random` for its caller."""

    @functools.wraps(fn)
    def wrapped(*args: Any, **kwargs: Any) -> Any:
        state = random.getstate()
        try:
            return fn(*args, **kwargs)
        finally:
            random.setstate(state)

    return wrapped  # type: ignore[return-value]


def yaml_safe_load(stream: IO[Any] | str) -> Any:
    import yaml

    return yaml.safe_load(stream)


def yaml_safe_dump(data: Any, stream: IO[Any] | None = None, default_flow_style: bool | None = None) -> Any:
    """YAML text of `data` (keys in their order), or written to `stream` when given."""
    import yaml

    return yaml.safe_dump(data, stream, default_flow_style=default_flow_style, sort_keys=False)


def get_config_path() -> pathlib.Path:
    """The folder of the CLI's own files (the login tokens)."""
    from determined.cli._auth import config_folder

    return config_folder()


def parse_protobuf_timestamp(ts: str) -> datetime:
    """An RFC 3339 time as the REST API writes it ("2026-11-22T03:00:00.123456789Z")."""
    return datetime.fromisoformat(re.sub(r"(\.\d{6})\d+", r"\1", ts))


def is_protobuf_timestamp(ts: str) -> bool:
    """Whether `ts` is a UTC time as the REST API takes it: "YYYY-MM-DDTHH:MM:SS[.ffffff]Z"."""
    return re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d{1,6})?Z", ts) is not None and _parses(ts)


def _parses(ts: str) -> bool:
    try:
        datetime.fromisoformat(ts)
    except ValueError:
        return False
    return True


def wait_for(predicate: Callable[[], tuple[bool, T]], timeout: float = 60, interval: float = 0.1) -> T:
    """Calls `predicate` every `interval` seconds until it answers (True, value); returns the
    value. TimeoutError after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        done, value = predicate()
        if done:
            return value
        if time.monotonic() > deadline:
            raise TimeoutError(f"not done after {timeout} s")
        time.sleep(interval)


def deprecated(message: str | None = None) -> Callable[[F], F]:
    """Marks a function deprecated: each call warns (DeprecationWarning), with `message`."""

    def decorator(fn: F) -> F:
        @functools.wraps(fn)
        def wrapped(*args: Any, **kwargs: Any) -> Any:
            text = f"{fn.__name__} is deprecated and will be removed in a future version."
            warnings.warn(text + (f" {message}." if message else ""), DeprecationWarning, stacklevel=2)
            return fn(*args, **kwargs)

        return wrapped  # type: ignore[return-value]

    return decorator


def strtobool(val: str) -> bool:
    """distutils' strtobool as a bool: y/yes/t/true/on/1 and n/no/f/false/off/0 (any case);
    ValueError for anything else."""
    text = val.strip().lower()
    if text in _TRUE:
        return True
    if text in _FALSE:
        return False
    raise ValueError(f"not a truth value: {val!r}")
