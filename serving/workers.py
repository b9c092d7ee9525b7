"""`--workers N`: a supervisor process and N serving processes that share the port (SO_REUSEPORT).

One Python process serves on one core; a Go webhook uses every core of its pod. With N > 1 the
command, once its flags are read and checked, forks N workers and only supervises: it forwards
SIGTERM/SIGINT (each worker drains as a single process does), and when every worker has exited
it exits, 0 if they all stopped cleanly. Forked, not started anew: the workers share the
supervisor's imported modules (start-up time and, copy-on-write, memory in the pod's limit).

A worker that dies while nobody asked it to stop is **not** restarted: the supervisor prints one
line, stops the others and exits non-zero, so the kubelet restarts the whole pod. A silent
restart inside the container would hide a crash loop from the pod's restart count,
CrashLoopBackOff and every alert built on them, and a pod that lost a worker would keep
serving at a fraction of its capacity with nobody told.

Shared state lives in a private runtime directory the supervisor creates and removes:
``serving/<index>`` exists while that worker serves (``/readyz`` of any worker counts them,
because SO_REUSEPORT hands the kubelet's probe to any one of them), ``pids/<pid>`` names every
worker (for the pod's summed ``process_*`` metrics) and ``metrics/`` is prometheus-client's
``PROMETHEUS_MULTIPROC_DIR``.
"""

from __future__ import annotations

import gc
import logging
import os
import signal
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import FrameType

log = logging.getLogger(__name__)

MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"


@dataclass(frozen=True)
class Worker:
    """This process's place among the supervisor's workers."""

    index: int
    count: int
    runtime_dir: Path

    @property
    def first(self) -> bool:
        """Worker 0 does what one process per pod must do (the certificate rotator)."""
        return self.index == 0

    def announce(self, serving: bool) -> None:
        """Say (or stop saying) that this worker serves."""
        marker = self.runtime_dir / "serving" / str(self.index)
        if serving:
            marker.write_text(str(os.getpid()))
        else:
            marker.unlink(missing_ok=True)

    def serving(self) -> int:
        """How many workers serve now."""
        try:
            return len(os.listdir(self.runtime_dir / "serving"))
        except OSError:
            return 0

    def readiness(self) -> tuple[bool, str]:
        """Ready only when every worker serves: any of them may answer the kubelet's probe."""
        serving = self.serving()
        where = f"worker {self.index} of {self.count}"
        if serving < self.count:
            return False, f"{where}: {serving} of {self.count} workers serving"
        return True, f"ok ({where})"

    def pids(self) -> list[int]:
        """The pod's processes: the supervisor and every worker."""
        try:
            workers = [int(name) for name in os.listdir(self.runtime_dir / "pids")]
        except OSError:
            workers = [os.getpid()]
        return [os.getppid(), *workers]


def runtime_layout(runtime_dir: Path) -> Path:
    """Make the runtime directory's parts; returns the metrics directory."""
    for part in ("serving", "pids", "metrics"):
        (runtime_dir / part).mkdir()
    return runtime_dir / "metrics"


def describe_exit(code: int) -> str:
    if code < 0:
        try:
            return f"was killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"was killed by signal {-code}"
    return f"exited with code {code}"


def _stop_with_parent(supervisor: int) -> None:
    """PR_SET_PDEATHSIG: a supervisor killed outright (SIGKILL, the OOM killer) leaves no worker
    serving on: the kernel sends each one SIGTERM, and it drains as usual. ctypes is imported
    here, in a forked worker only: a single-process webhook never pays for its import at start."""
    import ctypes

    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)
    except (OSError, AttributeError):  # not Linux
        pass
    if os.getppid() != supervisor:  # it died before the line above
        os.kill(os.getpid(), signal.SIGTERM)


def _name_the_worker_in_logs(index: int) -> None:
    """Every line this worker logs says ``worker=N``: N workers print the same lines ("serving",
    "serving certificate loaded"), and a person reading the pod's log must tell them apart."""

    def tag(record: logging.LogRecord) -> bool:
        if not hasattr(record, "worker"):
            record.worker = index
        return True

    for handler in logging.getLogger().handlers:
        handler.addFilter(tag)


def _count_into_files(metrics_dir: Path) -> None:
    """Make this process's prometheus-client metrics live in the shared files. prometheus-client
    picks its value class when it is first imported, from this variable; the supervisor imported
    it before there was a directory, so the worker picks again, before it creates any metric."""
    from prometheus_client import values

    os.environ[MULTIPROC_ENV] = str(metrics_dir)
    values.ValueClass = values.get_value_class()  # type: ignore[no-untyped-call]


class Supervisor:
    """Forks ``count`` workers that each run ``serve(worker)``, forwards stop signals, reaps them."""

    def __init__(self, count: int, serve: Callable[[Worker], int], *, prog: str) -> None:
        self.count = count
        self.serve = serve
        self.prog = prog
        self.stopping = False
        self.children: dict[int, int] = {}  # pid -> worker index, while it runs

    def _forward(self, signum: int, frame: FrameType | None) -> None:
        self.stopping = True
        for pid in self.children:
            try:
                os.kill(pid, signum)
            except ProcessLookupError:
                pass

    def run(self) -> int:
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, self._forward)
        with tempfile.TemporaryDirectory(prefix="foo-operator-workers-") as runtime:
            runtime_dir = Path(runtime)
            runtime_layout(runtime_dir)
            # What is imported now is shared by every worker: keep the collector from touching
            # (and so copying) those pages in each of them.
            gc.freeze()
            for index in range(self.count):
                self._start(Worker(index, self.count, runtime_dir))
            return self._reap(runtime_dir)

    def _start(self, worker: Worker) -> None:
        sys.stdout.flush()
        sys.stderr.flush()
        supervisor = os.getpid()
        pid = os.fork()
        if pid == 0:
            os._exit(self._be_worker(worker, supervisor))
        (worker.runtime_dir / "pids" / str(pid)).touch()
        self.children[pid] = worker.index
        log.info("worker started", extra={"worker": worker.index, "pid": pid})
        if self.stopping:  # a signal came while the others were starting
            os.kill(pid, signal.SIGTERM)

    def _be_worker(self, worker: Worker, supervisor: int) -> int:
        """The forked child's whole life; never returns into the supervisor's code."""
        code = 1
        try:
            for sig in (signal.SIGTERM, signal.SIGINT):
                signal.signal(sig, signal.SIG_DFL)  # the worker's own loop handles them once it runs
            _stop_with_parent(supervisor)
            _name_the_worker_in_logs(worker.index)
            _count_into_files(worker.runtime_dir / "metrics")
            code = self.serve(worker)
        except BaseException:
            log.exception("worker failed", extra={"worker": worker.index})
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
        return code

    def _reap(self, runtime_dir: Path) -> int:
        from prometheus_client.multiprocess import mark_process_dead

        code = 0
        while self.children:
            try:
                pid, status = os.wait()
            except ChildProcessError:
                break
            index = self.children.pop(pid, None)
            if index is None:
                continue  # an orphan re-parented to us when we run as the container's PID 1
            exit_code = os.waitstatus_to_exitcode(status)
            mark_process_dead(pid, str(runtime_dir / "metrics"))  # type: ignore[no-untyped-call]
            (runtime_dir / "pids" / str(pid)).unlink(missing_ok=True)
            (runtime_dir / "serving" / str(index)).unlink(missing_ok=True)
            if self.stopping:
                code = code or (1 if exit_code else 0)
                continue
            print(
                f"{self.prog}: worker {index} (pid {pid}) {describe_exit(exit_code)}; stopping the "
                "other workers and exiting so that the pod restarts",
                file=sys.stderr,
                flush=True,
            )
            code = 1
            self._forward(signal.SIGTERM, None)
        return code


def supervise(count: int, serve: Callable[[Worker], int], *, prog: str) -> int:
    """Run ``count`` forked workers, each ``serve(worker)``, until they have all exited; the exit code."""
    return Supervisor(count, serve, prog=prog).run()
