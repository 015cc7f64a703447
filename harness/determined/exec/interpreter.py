"""Running a script in a process that already runs Python (a child of the fork server), as
`python3 script.py` would, and ending that process as its interpreter would.

A fresh interpreter, once the script is done, waits for the threads it started that are not
daemons, runs the `atexit` handlers (logging's shutdown, `weakref.finalize`, executors' ones),
flushes stdout and stderr, then tears down its modules, which frees their objects: files left
open are flushed and closed by their finalizers, `__del__` methods run. `run_as_main` does all
that for what the script made: the modules it imported and its `__main__`, in reverse order of
import, as the interpreter clears them (each name set to None, first those with one leading
underscore), with a collection after, and then flushes any file still open (one a preloaded
module holds). It does not tear down the modules the process had before (what the fork
server preloaded: torch's teardown alone takes a second). The exit code is the interpreter's:
0; SystemExit's code (a message: printed, 1); 1 for an uncaught exception, printed by
`sys.excepthook` from the script's own frame on; an uncaught KeyboardInterrupt ends the
process by SIGINT; a script that cannot be read, 2.
"""

import _io
import atexit
import builtins
import contextlib
import gc
import io
import os
import signal
import sys
import threading
import traceback
import types
import weakref
from collections.abc import Callable
from importlib.machinery import SourceFileLoader
from typing import Any, NoReturn

CANNOT_OPEN_EXIT_CODE = 2


def install_stdio(*, unbuffered: bool) -> None:
    """sys.stdin, stdout and stderr (and their `__std*__`) over descriptors 0, 1 and 2, made as
    the interpreter makes them, with the encoding and error handlers this process has."""
    encoding = getattr(sys.__stdout__, "encoding", None) or "utf-8"
    errors = getattr(sys.__stdout__, "errors", None) or "strict"
    for fd, name in enumerate(("stdin", "stdout", "stderr")):
        stream = _stream(
            fd, f"<{name}>", encoding, errors if fd < 2 else "backslashreplace", unbuffered=unbuffered
        )
        setattr(sys, name, stream)
        setattr(sys, f"__{name}__", stream)


def _stream(fd: int, name: str, encoding: str, errors: str, *, unbuffered: bool) -> io.TextIOWrapper:
    writing = fd != 0
    # Reading, always buffered: TextIOWrapper needs read1().
    buffering = 0 if unbuffered and writing else -1
    buffer: Any = open(fd, "wb" if writing else "rb", buffering=buffering, closefd=False)  # noqa: SIM115
    raw = buffer if buffering == 0 else buffer.raw
    raw.name = name
    line_buffering = not unbuffered and (raw.isatty() or fd == 2)
    return io.TextIOWrapper(
        buffer,
        encoding,
        errors,
        newline="\n",
        line_buffering=line_buffering,
        write_through=unbuffered,
    )


def run_as_main(argv: list[str]) -> NoReturn:
    """Runs argv[0] as `__main__` with argv as sys.argv (sys.path[0] its folder), then ends
    the process as the interpreter would (see the module). Never returns."""
    before = set(sys.modules)
    script = argv[0]
    path = script if os.path.isabs(script) else os.path.join(os.getcwd(), script)
    sys.argv = list(argv)
    sys.path[0] = os.path.dirname(os.path.realpath(path))
    try:
        with io.open_code(path) as file:
            source = file.read()
    except OSError as error:
        program = os.path.basename(sys.executable)
        print(f"{program}: can't open file {path!r}: [Errno {error.errno}] {error.strerror}", file=sys.stderr)
        _flush_stdio()
        os._exit(CANNOT_OPEN_EXIT_CODE)
    main = _new_main(path)
    code, interrupted = _run(source, path, main)
    del main
    _end(before)
    if interrupted:  # as the interpreter: it dies of the signal, for its parent to see
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGINT)
        code = 128 + signal.SIGINT
    os._exit(code)


def _new_main(path: str) -> types.ModuleType:
    main = types.ModuleType("__main__")
    main.__dict__.update(
        __file__=path,
        __cached__=None,
        __builtins__=builtins,
        __loader__=SourceFileLoader("__main__", path),
        __annotations__={},
    )
    sys.modules["__main__"] = main
    return main


def _run(source: bytes, path: str, main: types.ModuleType) -> tuple[int, bool]:
    """Runs the script; returns its exit code and whether a KeyboardInterrupt ended it."""
    try:
        exec(compile(source, path, "exec", dont_inherit=True), main.__dict__)
    except SystemExit as exit_:
        return _exit_code(exit_.code), False
    except BaseException as error:  # noqa: BLE001 - reported as the interpreter reports it
        # From the script's own frame on (a syntax error: none), as `python3 script.py` prints it.
        trace = error.__traceback__
        _report(error.with_traceback(trace.tb_next if trace is not None else None))
        return 1, isinstance(error, KeyboardInterrupt)
    return 0, False


def _report(error: BaseException) -> None:
    try:
        sys.excepthook(type(error), error, error.__traceback__)
    except BaseException:  # noqa: BLE001 - as the interpreter, when the script's hook fails
        print("Error in sys.excepthook:", file=sys.stderr)
        traceback.print_exc()
        print("\nOriginal exception was:", file=sys.stderr)
        sys.__excepthook__(type(error), error, error.__traceback__)


def _exit_code(code: object) -> int:
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF
    print(code, file=sys.stderr)
    return 1


def _end(before: set[str]) -> None:
    """What the interpreter does once the script is done, for what the script made."""
    _quietly(getattr(threading, "_shutdown", lambda: None), "on threading shutdown")
    atexit._run_exitfuncs()
    _flush_stdio()
    new = [name for name in sys.modules if name not in before or name == "__main__"]
    _free_modules(new)
    _flush_files_left_open()
    _flush_stdio()


def _free_modules(names: list[str]) -> None:
    """As the interpreter's teardown: out of sys.modules, a collection, then the dicts of
    those still alive cleared in reverse order of import."""
    alive = [weakref.ref(module) for module in (sys.modules.pop(name) for name in reversed(names))]
    gc.collect()
    for ref in alive:
        module = ref()
        if module is not None:
            _clear(module.__dict__)
        del module
    gc.collect()


def _clear(namespace: dict[str, Any]) -> None:
    """A module's globals set to None, those with one leading underscore first (CPython's
    `_PyModule_ClearDict`): their finalizers may still need the others."""
    names = [name for name in namespace if isinstance(name, str)]
    for name in names:
        if name.startswith("_") and not name.startswith("__"):
            namespace[name] = None
    for name in names:
        if name != "__builtins__":
            namespace[name] = None


def _flush_files_left_open() -> None:
    """Files the script left open that outlived its modules (a preloaded module holds them):
    what they buffered reaches the file, as their finalizer would see to."""
    files = [thing for thing in gc.get_objects() if issubclass(type(thing), _io._IOBase)]
    # Text first: a text file's flush goes through the binary file under it.
    files.sort(key=lambda thing: not issubclass(type(thing), _io._TextIOBase))
    for file in files:
        with contextlib.suppress(BaseException):
            if not file.closed:
                file.flush()


def _flush_stdio() -> None:
    for stream in (sys.stdout, sys.stderr, sys.__stdout__, sys.__stderr__):
        with contextlib.suppress(BaseException):
            if stream is not None and not stream.closed:
                stream.flush()


def _quietly(function: Callable[[], object], where: str) -> None:
    try:
        function()
    except BaseException:  # noqa: BLE001 - as the interpreter: reported, and the exit goes on
        print(f"Exception ignored {where}:", file=sys.stderr)
        traceback.print_exc()
