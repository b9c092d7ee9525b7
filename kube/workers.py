"""`--workers N`: a supervisor process and N serving processes that share the port (SO_REUSEPORT).

One Python process serves on one core; a Go webhook uses every core of its pod. With N > 1 the
command starts itself N times as workers (``--workers 1`` plus the environment below) and only
supervises: it forwards SIGTERM/SIGINT (each worker drains as a single process does), and when
every worker has exited it exits, 0 if they all stopped cleanly.

A worker that dies while nobody asked it to stop is **not** restarted: the supervisor logs one
line, stops the others and exits non-zero, so the kubelet restarts the whole pod. A silent
restart inside the container would hide a crash loop from the pod's restart count,
CrashLoopBackOff and every alert built on them, and a pod that lost a worker would keep
serving at a fraction of its capacity with nobody told.

Shared state lives in a private runtime directory the supervisor creates and removes:
``serving/<index>`` exists while that worker serves (``/readyz`` of any worker counts them,
because SO_REUSEPORT hands the kubelet's probe to any one of them), ``pids/<pid>`` names every
worker (for the pod's summed ``process_*`` metrics) and ``metrics/`` is prometheus-client's
``PROMETHEUS_MULTIPROC_DIR``. Standard library only: the supervisor imports nothing it does not use.
"""

from __future__ import annotations

import ctypes
import logging
import os
import signal
import subprocess
import sys
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import FrameType

log = logging.getLogger(__name__)

WORKER_ENV = "FOO_OPERATOR_WORKER"  # "<index>/<count>"
RUNTIME_ENV = "FOO_OPERATOR_RUNTIME_DIR"
MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"


@dataclass(frozen=True)
class Worker:
    """This process's place among the supervisor's workers."""

    index: int
    count: int
    runtime_dir: Path

    @classmethod
    def from_environ(cls, environ: Mapping[str, str] = os.environ) -> Worker | None:
        """The worker the supervisor started, or None for a process started on its own."""
        slot, runtime = environ.get(WORKER_ENV), environ.get(RUNTIME_ENV)
        if not slot or not runtime:
            return None
        index, _, count = slot.partition("/")
        return cls(int(index), int(count), Path(runtime))

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


def worker_environ(index: int, count: int, runtime_dir: Path, environ: Mapping[str, str]) -> dict[str, str]:
    return {
        **environ,
        WORKER_ENV: f"{index}/{count}",
        RUNTIME_ENV: str(runtime_dir),
        MULTIPROC_ENV: str(runtime_dir / "metrics"),
    }


def describe_exit(code: int) -> str:
    if code < 0:
        try:
            return f"was killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"was killed by signal {-code}"
    return f"exited with code {code}"


def _stop_with_parent() -> None:
    """PR_SET_PDEATHSIG: a supervisor killed outright (SIGKILL, the OOM killer) leaves no worker
    serving on: the kernel sends each one SIGTERM, and it drains as usual."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)
    except (OSError, AttributeError):  # not Linux
        pass


class Supervisor:
    """Starts ``count`` workers (``command`` + ``--workers 1``), forwards stop signals, reaps them."""

    def __init__(self, command: Sequence[str], count: int, *, prog: str) -> None:
        self.command = list(command)
        self.count = count
        self.prog = prog
        self.stopping = False
        self.children: dict[int, tuple[int, subprocess.Popen[bytes]]] = {}  # pid -> (index, process)

    def _forward(self, signum: int, frame: FrameType | None) -> None:
        self.stopping = True
        for _, process in self.children.values():
            if process.returncode is None:
                process.send_signal(signum)

    def run(self) -> int:
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, self._forward)
        with tempfile.TemporaryDirectory(prefix="foo-operator-workers-") as runtime:
            runtime_dir = Path(runtime)
            metrics_dir = runtime_layout(runtime_dir)
            for index in range(self.count):
                self._start(index, runtime_dir)
            return self._reap(metrics_dir, runtime_dir)

    def _start(self, index: int, runtime_dir: Path) -> None:
        child = subprocess.Popen(
            [*self.command, "--workers", "1"],
            env=worker_environ(index, self.count, runtime_dir, os.environ),
            preexec_fn=_stop_with_parent,
        )
        (runtime_dir / "pids" / str(child.pid)).touch()
        self.children[child.pid] = (index, child)
        log.info("worker started", extra={"worker": index, "pid": child.pid})
        if self.stopping:  # a signal came while the others were starting
            child.terminate()

    def _reap(self, metrics_dir: Path, runtime_dir: Path) -> int:
        from prometheus_client.multiprocess import mark_process_dead

        code = 0
        while any(child.returncode is None for _, child in self.children.values()):
            pid, status = os.wait()
            if pid not in self.children:
                continue  # an orphan re-parented to us when we run as the container's PID 1
            index, child = self.children[pid]
            child.returncode = os.waitstatus_to_exitcode(status)
            mark_process_dead(pid, str(metrics_dir))  # type: ignore[no-untyped-call]
            (runtime_dir / "pids" / str(pid)).unlink(missing_ok=True)
            (runtime_dir / "serving" / str(index)).unlink(missing_ok=True)
            if self.stopping:
                code = code or (1 if child.returncode else 0)
                continue
            print(
                f"{self.prog}: worker {index} (pid {pid}) {describe_exit(child.returncode)}; stopping the "
                "other workers and exiting so that the pod restarts",
                file=sys.stderr,
                flush=True,
            )
            code = 1
            self._forward(signal.SIGTERM, None)
        return code


def supervise(command: Sequence[str], count: int, *, prog: str) -> int:
    """Run ``count`` workers of ``command`` until they have all exited; the exit code to return."""
    return Supervisor(command, count, prog=prog).run()
