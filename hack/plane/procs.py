"""One control-plane process: start it with its output in a log file, watch it, stop it."""

from __future__ import annotations

import collections
import ctypes
import http.client
import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Self

TAIL_LINES = 30


class Started:
    """``with X(...) as x``: ``start()`` on entry, ``stop()`` on exit however the block ended.

    The control plane, the real node and the product are each one of these.
    """

    def start(self) -> None:
        raise NotImplementedError

    def stop(self) -> None:
        raise NotImplementedError

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


class ComponentError(RuntimeError):
    """A component exited or never became ready; the message carries its last log lines."""


def run_command(
    argv: Sequence[str | os.PathLike[str]],
    *,
    check: bool = True,
    timeout: float = 60,
    input: str | None = None,
    error: type[Exception] = ComponentError,
) -> subprocess.CompletedProcess[str]:
    """Run a machine command to completion; with ``check``, a failure raises ``error`` with its stderr."""
    result = subprocess.run([str(a) for a in argv], capture_output=True, text=True, timeout=timeout, input=input)
    if check and result.returncode != 0:
        raise error(f"{' '.join(map(str, argv))}: {result.stderr.strip() or result.returncode}")
    return result


def _die_with_parent() -> None:
    # PR_SET_PDEATHSIG: if the Python process is SIGKILLed (a crashed pytest, an OOM kill),
    # the kernel SIGKILLs the child too instead of leaving etcd and the apiserver behind.
    PR_SET_PDEATHSIG = 1
    try:
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    except (OSError, AttributeError):  # not Linux: no safety net, stop() still works
        pass


class Component:
    """A named long-running binary whose stdout and stderr go to `log_file` (appended)."""

    def __init__(
        self,
        name: str,
        argv: Sequence[str | os.PathLike[str]],
        log_file: Path,
        *,
        env: dict[str, str] | None = None,
        pid_dir: Path | None = None,
        cwd: Path | None = None,
    ) -> None:
        self.name = name
        self.argv = [str(a) for a in argv]
        self.log_file = log_file
        self.env = env
        self.pid_dir = pid_dir
        self.cwd = cwd
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        self.log_file.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log_file, "ab") as log:
            log.write(f"==> {time.strftime('%H:%M:%S')} starting: {' '.join(self.argv)}\n".encode())
            log.flush()
            # The death signal is tied to the thread that forks; only the main thread is sure
            # to live as long as the plane, so elsewhere we rely on stop() alone.
            in_main = threading.current_thread() is threading.main_thread()
            self.proc = subprocess.Popen(
                self.argv,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=self.env,
                cwd=self.cwd,
                # Own process group: Ctrl-C in the terminal reaches only our CLI, which then
                # tears the plane down in order instead of every process dying at once.
                start_new_session=True,
                preexec_fn=_die_with_parent if in_main else None,
            )
        if self.pid_dir is not None:
            self.pid_dir.mkdir(parents=True, exist_ok=True)
            (self.pid_dir / f"{self.name}.pid").write_text(f"{self.proc.pid}\n")

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc else None

    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def check_alive(self) -> None:
        """Raise ComponentError with the log tail if the process has exited."""
        if self.proc is not None and self.proc.poll() is not None:
            raise ComponentError(f"{self.name} exited with code {self.proc.returncode}\n{self.describe_log()}")

    def tail(self, lines: int = TAIL_LINES) -> list[str]:
        try:
            with open(self.log_file, errors="replace") as f:
                return list(collections.deque(f, maxlen=lines))
        except FileNotFoundError:
            return []

    def describe_log(self, lines: int = TAIL_LINES) -> str:
        body = "".join("    " + line for line in self.tail(lines))
        return f"--- last {lines} lines of {self.log_file} ---\n{body}"

    def stop(self, grace: float = 10.0) -> None:
        """SIGTERM, then SIGKILL after `grace` seconds. Safe to call twice."""
        proc = self.proc
        if proc is None:
            return
        if proc.poll() is None:
            try:
                proc.send_signal(signal.SIGTERM)
                proc.wait(timeout=grace)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=grace)
            except ProcessLookupError:
                pass
        self.proc = None
        if self.pid_dir is not None:
            (self.pid_dir / f"{self.name}.pid").unlink(missing_ok=True)


def wait_until(
    what: str, ready: Callable[[], bool], *, timeout: float, watch: Sequence[Component] = (), interval: float = 0.2
) -> None:
    """Poll `ready()` until true; fail fast (with logs) if a watched component dies."""
    deadline = time.monotonic() + timeout
    while True:
        for component in watch:
            component.check_alive()
        try:
            if ready():
                return
        # Connection refused, a TLS handshake with a half-started server, a torn response, ...
        except (OSError, http.client.HTTPException, ValueError):
            pass
        if time.monotonic() > deadline:
            logs = "\n".join(c.describe_log() for c in watch)
            raise ComponentError(f"timed out after {timeout:.0f}s waiting for {what}\n{logs}")
        time.sleep(interval)
