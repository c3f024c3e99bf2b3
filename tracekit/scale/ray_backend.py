"""Per-rank work as Ray tasks: `tracekit parse|analyze|diff --ray [ADDRESS]`.

    with RayExecutor(None) as ex:               # a local Ray on this machine's cores
        results = list(ex.map(task, items))     # in input order, like the builtin map
    RayExecutor("auto")                          # join the cluster `ray start` made (or RAY_ADDRESS)
    RayExecutor("10.0.0.1:6379")                 # join a cluster by its head's GCS address
    RayExecutor("ray://10.0.0.1:10001")          # ... or through Ray Client

It implements `tracekit.scale.executor.Executor`: `fn` is a module-level function (Ray pickles it by
reference: every node must have the same tracekit installed), each item is small and picklable (a
path or URI and options, never a table), and each result is compact (per-step figures, collective
kernels): a task reads its rank where it runs and writes its own output, so event tables never travel
to the driver. A task takes one CPU; at most a few tasks per cluster CPU are in flight, so results wait
in the object store only until the driver takes them in order.

Ray is an optional extra (`pip install 'tracekit[ray]'`) and is imported only here, only when asked
for. Joining a cluster is bounded in time: an address where nothing listens fails at once, one that
does not answer as a Ray cluster fails after `TRACEKIT_RAY_CONNECT_TIMEOUT_S` (30 s by default), each
as one line (`ClusterError`, exit code 2) instead of Ray's own retries (over two minutes).
"""

from __future__ import annotations

import collections
import logging
import os
import re
import shutil
import socket
import tempfile
import threading
from typing import Any, Callable, Iterable, Iterator, Optional

from tracekit.data.pool import usable_cpus
from tracekit.errors import ClusterError, TracekitError

INSTALL_HINT = "pip install 'tracekit[ray]'"
CONNECT_TIMEOUT_S = 30.0
# The local Ray's object store holds task arguments and results only (a few KB to a few MB per rank);
# Ray's default, 30 % of memory, would reserve 7 GB of /dev/shm on a 24 GB machine for nothing.
LOCAL_OBJECT_STORE_BYTES = 256 << 20
# Tasks in flight per cluster CPU: enough to keep every CPU busy while the driver takes results in order.
IN_FLIGHT_PER_CPU = 4

_HOST_PORT = re.compile(r"^(\[[0-9a-fA-F:]+\]|[A-Za-z0-9.\-]+):(\d{1,5})$")


def looks_like_address(text: str) -> bool:
    """Whether `text` is a value of `--ray`: local, auto, HOST:PORT or ray://HOST:PORT."""
    return text in ("local", "auto") or text.startswith("ray://") or bool(_HOST_PORT.match(text))


class RayExecutor:
    """Run `fn(item)` for each item as a Ray task; results come back in input order.

    `address`: None or "local" starts a local Ray (this machine's cores, no dashboard, its logs in a
    temporary folder removed at `close`); "auto" joins the running cluster Ray finds (RAY_ADDRESS, or
    the latest `ray start` on this machine); "HOST:PORT" joins by the head's GCS address; "ray://..."
    through Ray Client. When Ray is already initialised in this process (a notebook, a test session),
    that instance is used, whatever `address` says (a process is connected to one Ray at a time), and
    left running."""

    def __init__(self, address: Optional[str] = None, *, connect_timeout_s: Optional[float] = None) -> None:
        self.address = "local" if address in (None, "", "local") else address
        if not looks_like_address(self.address):
            raise ClusterError(
                f"--ray {self.address!r}: expected nothing (a local Ray), 'auto', HOST:PORT "
                "(the head's GCS address, port 6379 by default) or ray://HOST:PORT (Ray Client)"
            )
        if self.address != "local":
            _token_auth_if_token()  # before Ray is imported: it reads its settings then
        self._ray = import_ray()
        self._temp_dir: Optional[str] = None
        self._owner = False  # whether close() shuts Ray down
        self._apply = None  # the remote function, made once per executor
        if self._ray.is_initialized():
            return
        os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")  # no report to Ray's servers
        if self.address == "local":
            self._start_local()
        else:
            self._join(_connect_timeout(connect_timeout_s))
        self._owner = True

    # -- the Executor protocol ------------------------------------------------------------------

    def map(self, fn: Callable[[Any], Any], items: Iterable[Any]) -> Iterator[Any]:
        """`fn(item)` for each item, as Ray tasks of one CPU each, yielded in input order.

        A TracekitError raised by a task is re-raised here as itself (its one-line message; the node
        is named when it is not this machine); any other failure of a task keeps Ray's remote
        traceback. Closing the iterator early cancels the tasks not yet taken."""
        ray = self._ray
        remote = self._remote()
        fn_ref = ray.put(fn)  # sent once, not with every task
        todo = iter(items)
        pending: collections.deque = collections.deque()
        window = self._window()
        try:
            for item in todo:
                pending.append(remote.remote(fn_ref, item))
                if len(pending) >= window:
                    break
            while pending:
                result = self._get(pending.popleft())
                nxt = next(todo, _END)
                if nxt is not _END:
                    pending.append(remote.remote(fn_ref, nxt))
                yield result
        finally:
            for ref in pending:
                ray.cancel(ref)

    def close(self) -> None:
        """Disconnect (and stop the local Ray this executor started); a no-op for a shared instance."""
        if self._owner:
            self._owner = False
            self._ray.shutdown()
        if self._temp_dir is not None:
            shutil.rmtree(self._temp_dir, ignore_errors=True)
            self._temp_dir = None

    def __enter__(self) -> RayExecutor:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def workers(self) -> int:
        """The CPUs of the cluster (or local Ray) the tasks run on: tasks that can run at once."""
        return max(1, int(self._ray.cluster_resources().get("CPU", 1)))

    @property
    def nodes(self) -> int:
        """The machines of the cluster that are alive (1 for a local Ray)."""
        return max(1, sum(1 for n in self._ray.nodes() if n.get("Alive")))

    # -- internals ------------------------------------------------------------------------------

    def _start_local(self) -> None:

        # Ray's session folder holds Unix sockets (path limit ~107 bytes): keep its parent short.
        self._temp_dir = tempfile.mkdtemp(prefix="tkray-", dir="/tmp" if os.path.isdir("/tmp") else None)
        try:
            self._ray.init(
                address="local",  # a new instance even when RAY_ADDRESS names a cluster
                num_cpus=usable_cpus(),  # the CPUs this process may run on (its affinity)
                include_dashboard=False,
                object_store_memory=LOCAL_OBJECT_STORE_BYTES,
                _temp_dir=self._temp_dir,
                log_to_driver=False,  # workers' output must not mix into a --json report on stdout
                logging_level=logging.ERROR,
            )
        except Exception as exc:  # Ray raises plain RuntimeError/ValueError/OSError when it cannot start
            self.close()
            raise ClusterError(f"could not start a local Ray: {_one_line(exc)}") from None

    def _join(self, timeout_s: float) -> None:
        address = self.address
        if address != "auto":
            host, port = _host_port(address)
            _probe(host, port, address, timeout_s)
        outcome: dict = {}

        def connect() -> None:
            try:
                self._ray.init(address=address, log_to_driver=False, logging_level=logging.ERROR)
                outcome["ok"] = True
            except BaseException as exc:  # handed to the waiting thread
                outcome["error"] = exc

        # Ray retries an address that does not answer as a cluster for minutes, inside one call: it
        # runs in a daemon thread so that the wait can be bounded (the process exits with the error).
        thread = threading.Thread(target=connect, name="tracekit-ray-connect", daemon=True)
        thread.start()
        thread.join(timeout_s)
        if thread.is_alive():
            raise ClusterError(
                f"--ray {address}: no answer from a Ray cluster within {timeout_s:g} s (something listens "
                "there, but not Ray's GCS?); check the address, or set TRACEKIT_RAY_CONNECT_TIMEOUT_S"
            )
        if "error" in outcome:
            raise ClusterError(f"--ray {address}: cannot join the cluster: {_one_line(outcome['error'])}")

    def _remote(self):
        if self._apply is None:
            self._apply = self._ray.remote(num_cpus=1)(_apply)
        return self._apply

    def _window(self) -> int:
        return max(8, IN_FLIGHT_PER_CPU * self.workers)

    def _get(self, ref: Any) -> Any:
        ray = self._ray
        try:
            return ray.get(ref)
        except ray.exceptions.RayTaskError as exc:
            cause = getattr(exc, "cause", None)
            if isinstance(cause, TracekitError):
                raise _on_node(cause, getattr(exc, "ip", None), ray) from None
            if isinstance(cause, (FileNotFoundError, PermissionError)) and cause.filename:
                raise ClusterError(
                    f"{cause.filename}: {cause.strerror or 'cannot read'} on Ray node "
                    f"{getattr(exc, 'ip', '?')}; a local path must be on a filesystem every node mounts "
                    "at the same path (or use s3://...)"
                ) from None
            if isinstance(cause, ModuleNotFoundError) and (cause.name or "").startswith("tracekit"):
                raise ClusterError(
                    f"a Ray worker cannot import {cause.name}: install tracekit (the same version as "
                    "here) on every node of the cluster"
                ) from None
            raise
        except ray.exceptions.RayError as exc:  # a worker or node died, the task was cancelled, ...
            raise ClusterError(f"a Ray task failed: {_one_line(exc)}") from None


_END = object()


def _apply(fn: Callable[[Any], Any], item: Any) -> Any:
    """The one remote function: `fn` travels as an argument (by reference for a module-level function),
    so any picklable callable works, builtins and functools.partial included."""
    return fn(item)


def import_ray():
    """The `ray` module, or one line that says how to install it."""
    try:
        import ray
    except ImportError:
        raise ClusterError(f"--ray needs Ray, which is not installed; {INSTALL_HINT}") from None
    return ray


def _connect_timeout(given: Optional[float]) -> float:
    if given is not None:
        return given
    from tracekit.settings import setting

    return setting("TRACEKIT_RAY_CONNECT_TIMEOUT_S") or CONNECT_TIMEOUT_S


def _host_port(address: str) -> tuple[str, int]:
    m = _HOST_PORT.match(address[len("ray://") :] if address.startswith("ray://") else address)
    if not m:
        raise ClusterError(f"--ray {address}: expected HOST:PORT or ray://HOST:PORT")
    return m.group(1).strip("[]"), int(m.group(2))


def _token_auth_if_token() -> None:
    """Ray (2.5x) clusters require a token by default (`ray start` and a local `ray.init` write
    ~/.ray/auth_token), but a driver joining by address (2.60) sends it only when RAY_AUTH_MODE=token:
    without, it is refused over and over for its whole connect timeout. So when a token is at hand
    (RAY_AUTH_TOKEN, RAY_AUTH_TOKEN_PATH, ~/.ray/auth_token) and the user chose no mode, use it."""
    if "RAY_AUTH_MODE" in os.environ:
        return
    token_file = os.environ.get("RAY_AUTH_TOKEN_PATH") or os.path.join(
        os.path.expanduser("~"), ".ray", "auth_token"
    )
    if os.environ.get("RAY_AUTH_TOKEN") or os.path.isfile(token_file):
        os.environ["RAY_AUTH_MODE"] = "token"


def _probe(host: str, port: int, address: str, timeout_s: float) -> None:
    """Fail fast, in one line, when nothing listens at the address (Ray itself would retry for minutes)."""
    try:
        with socket.create_connection((host, port), timeout=min(timeout_s, 10.0)):
            pass
    except OSError as exc:
        reason = exc.strerror or type(exc).__name__
        if isinstance(exc, socket.timeout):
            reason = "no answer"
        raise ClusterError(
            f"--ray {address}: cannot reach a Ray cluster there ({reason}); is it running "
            "(`ray status` on the head)? `--ray` alone starts a local Ray instead"
        ) from None


def _on_node(error: TracekitError, ip: Optional[str], ray: Any) -> TracekitError:
    """The task's error, naming the node it ran on when that is another machine (a local path there is
    not the driver's file)."""
    try:
        here = ray.util.get_node_ip_address()
    except Exception:  # a Ray Client driver has no node of its own
        here = None
    if not ip or ip == here:
        return error
    try:
        return type(error)(f"{error} (on Ray node {ip})")
    except TypeError:  # a subclass with another constructor: keep it as it is
        return error


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip() or type(exc).__name__
    return text.splitlines()[0]
