"""The agent's fork server: `python -m determined.exec.forkserver <socket> [module,module...]`.

One long-lived process per agent that has imported `determined`, grpc, the
generated protos and the modules the operator lists, then forks a child per
trial, so that a trial starts warm instead of paying for the interpreter's
start and those imports each time. Each child is still its own process: its
own session and process group, killed as one by the agent.

Protocol, one request per connection on the unix socket: the agent sends an
8-byte big-endian length and that many bytes of JSON `{"argv": [script,
*args], "cwd": ..., "env": {...}, "record": {"path": ..., "agent_id": ...,
"allocation_id": ...}, "tmp": {"folder": ..., "keep": [...]}}` ("record" and "tmp"
optional), with the two file descriptors
the child's stdout and stderr go to (`socket.send_fds`). The server answers
one JSON line `{"pid": N, "start_ticks": T}` once the child has its own
session and has written its process record to "path" (or `{"error": ...}`;
T: when it started, read while it is still the server's unreaped child, so
that the agent can record it without a reused pid in between), and one more line
`{"exit": CODE}` when the child ends (CODE as a shell reports it: the exit
code, or -signal). The record is the agent's (see
`services/common/processes.py`): `{"agent_id", "allocation_id", "pid",
"pgid", "start_ticks"}`, written before the child runs anything. "tmp": the
folder that becomes the child's own /tmp, and the paths of the machine's /tmp
it still sees (`private_tmp.py`).

A child runs its script and ends as `python3 script.py` would, exit code,
atexit handlers, finalizers and flushed files included (`interpreter.py`);
only the preloaded modules are not torn down.

No child outlives the server, nor the server its agent: each child asks the
kernel for SIGKILL when the server dies (PR_SET_PDEATHSIG), and the agent
starts the server the same way. The server starts no thread and no grpc
channel before forking (grpc is fork-safe only then): preloading only imports.
"""

import contextlib
import ctypes
import gc
import importlib
import json
import os
import select
import signal
import socket
import struct
import sys
import threading
import traceback
from typing import Any, NoReturn

from determined.exec import interpreter, private_tmp

# What every trial imports: the harness, grpc and the generated protos.
BASE_PRELOAD = (
    "determined",
    "determined.core",
    "grpc",
    "determined.proto.api_pb2",
    "determined.proto.api_pb2_grpc",
    "determined.proto.events_pb2",
)
HEADER = struct.Struct(">Q")
MAX_REQUEST_BYTES = 64 << 20
REQUEST_TIMEOUT_S = 10.0
PR_SET_PDEATHSIG = 1


def _say(message: str) -> None:
    print(f"determined forkserver: {message}", file=sys.stderr, flush=True)


def preload(modules: list[str]) -> list[str]:
    """Imports the modules; returns those that imported."""
    loaded = []
    for name in modules:
        try:
            importlib.import_module(name)
        except BaseException:  # noqa: BLE001 - a bad preload is skipped, never fatal
            _say(f"cannot preload {name!r}, skipped:\n{traceback.format_exc()}")
        else:
            loaded.append(name)
    return loaded


def _read_request(conn: socket.socket) -> tuple[dict[str, Any], list[int]]:
    data, fds, _flags, _addr = socket.recv_fds(conn, 1 << 16, 2)
    try:
        while len(data) < HEADER.size:
            chunk = conn.recv(1 << 16)
            if not chunk:
                raise ValueError("the request ended early")
            data += chunk
        (length,) = HEADER.unpack_from(data)
        if length > MAX_REQUEST_BYTES:
            raise ValueError(f"a request of {length} bytes")
        body = bytearray(data[HEADER.size :])
        while len(body) < length:
            chunk = conn.recv(1 << 16)
            if not chunk:
                raise ValueError("the request ended early")
            body += chunk
        request = json.loads(bytes(body))
        argv, cwd, env = request["argv"], request["cwd"], request["env"]
        if len(fds) != 2:
            raise ValueError(f"a request with {len(fds)} file descriptors rather than 2")
        if not (isinstance(argv, list) and argv and all(isinstance(a, str) for a in argv)):
            raise ValueError("argv must be a non-empty list of strings")
        if not isinstance(cwd, str) or not isinstance(env, dict):
            raise TypeError("cwd must be a string and env an object")
        record = request.get("record")
        if record is not None and not (
            isinstance(record, dict)
            and all(isinstance(record.get(k), str) for k in ("path", "agent_id", "allocation_id"))
        ):
            raise TypeError("record must be an object of strings path, agent_id and allocation_id")
        tmp = request.get("tmp")
        if tmp is not None and not (
            isinstance(tmp, dict)
            and isinstance(tmp.get("folder"), str)
            and isinstance(tmp.get("keep"), list)
            and all(isinstance(path, str) for path in tmp["keep"])
        ):
            raise TypeError("tmp must be an object with a string folder and a list of strings keep")
        return request, fds
    except BaseException:
        for fd in fds:
            os.close(fd)
        raise


def _send(conn: socket.socket, message: dict[str, Any]) -> None:
    conn.sendall(json.dumps(message).encode() + b"\n")


def _write_record(record: dict[str, str]) -> None:
    """In the child, once it leads its own session: the agent's record of it
    (written atomically, as `services.common.processes.write_process_record`)."""
    pid = os.getpid()
    document = {
        "agent_id": record["agent_id"],
        "allocation_id": record["allocation_id"],
        "pid": pid,
        "pgid": os.getpgid(0),
        "start_ticks": _start_ticks(pid),
    }
    path = record["path"]
    staging = os.path.join(os.path.dirname(path), f".{os.path.basename(path)}.{pid}")
    with open(staging, "w") as file:
        file.write(json.dumps(document) + "\n")
    os.replace(staging, path)


def _start_ticks(pid: int) -> int:
    """When the process started (field 22 of /proc/<pid>/stat, clock ticks since boot)."""
    with open(f"/proc/{pid}/stat") as stat:
        text = stat.read()
    return int(text[text.rindex(")") + 2 :].split()[19])


def run_child(request: dict[str, Any], out_fd: int, err_fd: int) -> NoReturn:
    """In the forked child, with its own session already: becomes the trial
    process, runs the script as `python3 script.py args...` would, and ends as
    that interpreter would (`interpreter.py`). Never returns."""
    try:
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.dup2(out_fd, 1)
        os.dup2(err_fd, 2)
        for fd in {null, out_fd, err_fd} - {0, 1, 2}:
            os.close(fd)
        env: dict[str, str] = {str(k): str(v) for k, v in request["env"].items()}
        interpreter.install_stdio(unbuffered=bool(env.get("PYTHONUNBUFFERED")))
        os.environ.clear()
        os.environ.update(env)
        os.chdir(request["cwd"])
        if request.get("tmp") is not None:
            _private_tmp(request["tmp"]["folder"], request["tmp"]["keep"])
    except BaseException:  # noqa: BLE001 - set-up failed: the user reads why in stderr
        with contextlib.suppress(BaseException):
            traceback.print_exc()
            sys.stderr.flush()
        os._exit(1)
    interpreter.run_as_main([str(a) for a in request["argv"]])


def _private_tmp(folder: str, keep: list[str]) -> None:
    """The trial's own /tmp (`private_tmp.py`); where it cannot have one, TMPDIR, and its log says why."""
    try:
        private_tmp.enter(folder, keep)
    except (OSError, ValueError) as error:
        os.environ["TMPDIR"] = folder
        print(private_tmp.shared_note(str(error), folder), file=sys.stderr, flush=True)


class Server:
    def __init__(self, path: str) -> None:
        self.path = path
        self.children: dict[int, socket.socket] = {}
        self.parent = os.getppid()
        # Looked up now: a child must not load libraries between fork and exec.
        self.prctl = ctypes.CDLL(None, use_errno=True).prctl
        self.prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]
        self.wake_r, self.wake_w = os.pipe()
        os.set_blocking(self.wake_r, False)
        os.set_blocking(self.wake_w, False)
        # Bound and listening under another name, then renamed: once the path
        # exists, connections are accepted.
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        staging = f"{path}.{os.getpid()}"
        self.listener.bind(staging)
        self.listener.listen(128)
        os.rename(staging, path)

    def serve(self) -> None:
        signal.signal(signal.SIGCHLD, lambda _signum, _frame: None)
        signal.set_wakeup_fd(self.wake_w)
        while os.getppid() == self.parent:
            ready, _, _ = select.select([self.listener.fileno(), self.wake_r], [], [], 1.0)
            if self.wake_r in ready:
                while True:
                    try:
                        if not os.read(self.wake_r, 4096):
                            break
                    except BlockingIOError:
                        break
            self.reap()
            if self.listener.fileno() in ready:
                self.accept()
        _say("the agent is gone; exiting")

    def accept(self) -> None:
        try:
            conn, _ = self.listener.accept()
        except OSError:
            return
        conn.settimeout(REQUEST_TIMEOUT_S)
        try:
            request, (out_fd, err_fd) = _read_request(conn)
        except (OSError, ValueError, TypeError, KeyError) as error:
            _say(f"bad request: {error}")
            with contextlib.suppress(OSError):
                _send(conn, {"error": f"bad request: {error}"})
            conn.close()
            return
        try:
            pid = self.fork(request, conn, out_fd, err_fd)
        except OSError as error:
            _say(f"cannot fork: {error}")
            with contextlib.suppress(OSError):
                _send(conn, {"error": f"cannot fork: {error}"})
            conn.close()
            return
        finally:
            os.close(out_fd)
            os.close(err_fd)
        try:
            _send(conn, {"pid": pid, "start_ticks": _start_ticks(pid)})  # not reaped yet: still our child
        except OSError:  # the agent cannot know of it: it must not run
            with contextlib.suppress(OSError):
                os.killpg(pid, signal.SIGKILL)
            conn.close()
            return
        self.children[pid] = conn

    def fork(self, request: dict[str, Any], conn: socket.socket, out_fd: int, err_fd: int) -> int:
        if threading.active_count() > 1:
            _say(f"forking with {threading.active_count()} threads running (a preloaded module started them)")
        ready_r, ready_w = os.pipe()
        server = os.getpid()
        try:
            pid = os.fork()
        except OSError:
            os.close(ready_r)
            os.close(ready_w)
            raise
        if pid == 0:
            try:
                os.setsid()
                # Dies with the server (which dies with the agent); exits if it already has.
                if self.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) != 0 or os.getppid() != server:
                    os._exit(1)
                signal.set_wakeup_fd(-1)
                signal.signal(signal.SIGCHLD, signal.SIG_DFL)
                for fd in (ready_r, self.wake_r, self.wake_w):
                    os.close(fd)
                for sock in (self.listener, conn, *self.children.values()):
                    sock.close()
                if request.get("record") is not None:
                    _write_record(request["record"])
                os.close(ready_w)  # tells the server: its own session, recorded, killable as a group
            except BaseException:  # noqa: BLE001 - the agent reads why in the trial's stderr
                with contextlib.suppress(BaseException):
                    os.write(
                        err_fd, f"determined forkserver: cannot start:\n{traceback.format_exc()}".encode()
                    )
                os._exit(1)
            run_child(request, out_fd, err_fd)
        os.close(ready_w)
        os.read(ready_r, 1)  # EOF once the child has its session (or died)
        os.close(ready_r)
        return pid

    def reap(self) -> None:
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            conn = self.children.pop(pid, None)
            if conn is not None:
                with contextlib.suppress(OSError):
                    _send(conn, {"exit": os.waitstatus_to_exitcode(status)})
                conn.close()


def main(argv: list[str]) -> None:
    if len(argv) not in (2, 3):
        sys.exit("usage: python -m determined.exec.forkserver <socket> [module,module...]")
    extra = [name.strip() for name in (argv[2] if len(argv) == 3 else "").split(",") if name.strip()]
    loaded = preload([*BASE_PRELOAD, *extra])
    gc.collect()
    gc.freeze()  # preloaded objects stay out of the children's collections: fewer copied pages
    server = Server(argv[1])
    _say(f"ready: pid {os.getpid()}, preloaded {', '.join(loaded)}")
    server.serve()


if __name__ == "__main__":
    main(sys.argv)
