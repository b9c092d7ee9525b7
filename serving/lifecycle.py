"""One TLS server lifecycle for every HTTPS process of the product (webhook, insights).

Both serve over TLS with hot certificate reload, `/healthz` and `/readyz`, the Status error
edge and a graceful drain on SIGTERM: the webhook on its own protocol (serving.reviews),
insights on aiohttp (serving.appserving). Written once here so the two processes can never drift
apart on how they start, report readiness or stop. Nothing here imports aiohttp: the webhook
must listen without paying for it (the heaviest import of a start).
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import logging
import shlex
import signal
import sys
from collections.abc import Callable, Coroutine, Iterable
from dataclasses import dataclass
from pathlib import Path
from ssl import SSLContext
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from prometheus_client import CollectorRegistry

from certs.files import CA_CERT, TLS_CERT, TLS_KEY
from componentbase.cli import add_log_flags, bind_address, non_negative_float, parse_bind_address, port

from .limits import TRIM_SECONDS, give_back_freed_memory_every
from .metricsserver import MetricsOptions, MetricsServer, MetricsSetupError, metrics_server
from .probes import ProbeServer, ProbeSetupError
from .readiness import Readiness
from .tls import CertificateFilesError, CertWatcher, RefusedReason, check_pair
from .tlspolicy import SECURE_TLS12_SUITES, TLSPolicy, parse_tls_policy

if TYPE_CHECKING:
    from cryptography import x509  # imported by serving.tls only when a certificate is described

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ServingOptions:
    """Where and how to listen; the same flags for every HTTPS process."""

    cert_dir: Path
    cert_name: str = TLS_CERT
    key_name: str = TLS_KEY
    client_ca_file: Path | None = None
    bind_address: str = "0.0.0.0"
    port: int = 9443
    cert_reload_interval: float = 5.0
    # Time between "not ready" and closing the listener, so endpoints stop routing to us first.
    drain_seconds: float = 0.0
    # How long in-flight requests may take to finish once the listener is closed.
    shutdown_timeout: float = 10.0
    tls_policy: TLSPolicy = TLSPolicy()
    # Several worker processes listen on the same port (SO_REUSEPORT; the kernel spreads connections).
    reuse_port: bool = False
    # Off unless asked for: two servers in one test process must not both want :8080.
    metrics: MetricsOptions = MetricsOptions(port=0)
    # The kubelet's probes on a port of their own (serving.probes); 0: only on the serving port.
    probe_host: str | None = None
    probe_port: int = 0

    def check_pair(self) -> None:
        """Raise CertificateFilesError, naming the file, if this server's pair does not load."""
        check_pair(self.cert_dir / self.cert_name, self.cert_dir / self.key_name, self.tls_policy)

    def certificate(
        self,
        client_ca_file: Path | None = None,
        *,
        on_load: Callable[[x509.Certificate], None] | None = None,
        on_refused: Callable[[RefusedReason], None] | None = None,
    ) -> CertWatcher:
        """The one watcher over this server's pair, with its TLS policy; ``on_load`` sees each
        certificate loaded (the webhook's expiry metric), ``on_refused`` why a new pair was not
        taken (serving.tls.refused_reloads)."""
        return CertWatcher(
            self.cert_dir / self.cert_name,
            self.cert_dir / self.key_name,
            client_ca_file=client_ca_file,
            on_load=on_load,
            on_refused=on_refused,
            policy=self.tls_policy,
        )


Options = TypeVar("Options", bound=ServingOptions)


def stop_on_signals(stop: asyncio.Event) -> None:
    """SIGTERM/SIGINT set ``stop`` (only possible from the main thread; tests set it themselves)."""
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        try:
            loop.add_signal_handler(sig, stop.set)
        except (NotImplementedError, RuntimeError, ValueError):  # uvloop off the main thread: ValueError
            pass


async def serving_metrics(
    options: ServingOptions, registry: CollectorRegistry, *, kubeconfig: str | None, name: str
) -> MetricsServer | None:
    """The metrics listener of a TLS server. Secure, it serves the listener's pair without asking
    for client certificates, through the listener's own watcher (``serve_until_stopped`` hands it
    over), so one watcher reads the files both ports serve."""
    return await metrics_server(
        options.metrics,
        registry,
        certificate=None,
        kubeconfig=kubeconfig,
        user_agent=f"foo-operator-{name}",
    )


class Listener(Protocol):
    """A server on one port: aiohttp's (``AppListener``) or the admission port's (serving.reviews)."""

    readiness: Readiness

    async def prepare(self) -> None:
        """Its own start-up, run before the TLS context is built: the insights API connects to the
        cluster there and writes the front-proxy CA its listener verifies clients with."""

    async def start(self, host: str, port: int, *, ssl: SSLContext, reuse_port: bool, backlog: int) -> None: ...

    async def stop(self, timeout: float) -> None:
        """Stop listening, let requests in progress finish within ``timeout``, close the rest."""


async def _started_unless_stopped(metrics: MetricsServer, options: ServingOptions, stop: asyncio.Event) -> bool:
    """Serve the bound metrics port; False if ``stop`` came first (a SIGTERM is not held up).

    Its aiohttp is imported in a thread, so reviews keep flowing meanwhile instead of waiting
    for the whole import; a drain asked for then starts at once, and ``metrics.stop`` closes
    what was not served yet.
    """
    starting = asyncio.ensure_future(metrics.start(options.cert_reload_interval))
    stopping = asyncio.ensure_future(stop.wait())
    await asyncio.wait([starting, stopping], return_when=asyncio.FIRST_COMPLETED)
    stopping.cancel()
    if starting.done():
        starting.result()  # a failure to serve is the process's, as before
        return True
    starting.cancel()
    await asyncio.gather(starting, return_exceptions=True)
    return False


async def serve_until_stopped(
    listener: Listener,
    options: ServingOptions,
    watcher: CertWatcher,
    stop: asyncio.Event,
    *,
    name: str,
    background: Iterable[asyncio.Task[None]] = (),
    metrics: MetricsServer | None = None,
) -> None:
    """Listen over TLS until ``stop`` is set, then turn unready, drain, and close.

    The one lifecycle of every listener: ready once it listens and its metrics port is bound
    (served a moment later), unready first on the way out, ``drain_seconds`` for endpoints to
    stop routing here, then closed with ``shutdown_timeout`` for requests in progress.
    ``background`` tasks (rotators, watchers) are cancelled and awaited on the way out;
    ``metrics`` is bound before the listener starts and stops after it; without a pair of its
    own it serves ``watcher``'s, which this lifecycle keeps current for both ports.
    """
    readiness = listener.readiness
    tasks = list(background)
    probes = (
        ProbeServer(readiness.ready, options.probe_host, options.probe_port, reuse_port=options.reuse_port)
        if options.probe_port
        else None
    )
    try:
        if metrics is not None:
            metrics.serve_with(watcher)
            # The metrics port now, without aiohttp: a port already taken is one line and exit 1,
            # before anything reports ready.
            metrics.bind()
        if probes is not None:
            probes.start()  # answering from now on: not ready until the listener is up
        await listener.prepare()
        # Built only now: a context built before ``prepare`` would miss the client CA it wrote, and
        # refuse the aggregator's handshakes until the watcher's next round (kube-apiserver then
        # marks the APIService unavailable and backs off: seconds of 503s after a ready pod).
        await listener.start(
            options.bind_address,
            options.port,
            ssl=watcher.server_context(),
            reuse_port=options.reuse_port,
            backlog=1024,
        )
        readiness.set_serving()
        log.info(
            "serving",
            extra={
                "server": name,
                "address": f"{options.bind_address}:{options.port}",
                "cert_dir": str(options.cert_dir),
            },
        )
        tasks.append(asyncio.create_task(watcher.watch(options.cert_reload_interval), name=f"{name}-cert-watcher"))
        # What a burst of connections or reviews freed goes back to the system (serving.limits).
        tasks.append(asyncio.create_task(give_back_freed_memory_every(TRIM_SECONDS), name=f"{name}-malloc-trim"))
        if metrics is not None and not await _started_unless_stopped(metrics, options, stop):
            return
        await stop.wait()
    finally:
        readiness.set_draining()
        log.info("shutting down: not ready, draining", extra={"server": name, "drain_seconds": options.drain_seconds})
        if options.drain_seconds > 0 and readiness.serving:
            await asyncio.sleep(options.drain_seconds)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await listener.stop(options.shutdown_timeout)
        if metrics is not None:
            await metrics.stop()
        if probes is not None:
            await probes.stop()
        log.info("stopped", extra={"server": name})


# ---- command line, shared by `python -m webhook` and `python -m insights` -------------------------


def add_serving_flags(parser: argparse.ArgumentParser, *, default_port: int) -> None:
    """Where to listen, which certificate to serve, how to log: the same words in every server."""
    parser.add_argument("--cert-dir", type=Path, required=True, help=f"directory holding {TLS_CERT} and {TLS_KEY}")
    parser.add_argument("--cert-name", default=TLS_CERT, help="certificate file in --cert-dir")
    parser.add_argument("--key-name", default=TLS_KEY, help="private key file in --cert-dir")
    parser.add_argument("--bind-address", default="0.0.0.0", help="address to listen on")
    parser.add_argument("--port", type=port, default=default_port, help="TCP port to serve HTTPS on")
    parser.add_argument(
        "--drain-seconds",
        type=non_negative_float,
        default=0.0,
        help="time between turning unready and closing the listener on SIGTERM",
    )
    tls = parser.add_argument_group("TLS (the words kube-apiserver takes)")
    tls.add_argument("--tls-min-version", default="VersionTLS12", help="VersionTLS12 or VersionTLS13")
    tls.add_argument(
        "--tls-cipher-suites",
        default="",
        help="comma-separated IANA names of the TLS 1.2 suites to allow (default: every ECDHE "
        f"suite with an AEAD cipher: {','.join(SECURE_TLS12_SUITES)}); TLS 1.3 suites are "
        "always on",
    )
    metrics = parser.add_argument_group("metrics (its own listener, as in controller-runtime)")
    metrics.add_argument(
        "--metrics-bind-address", default=":8080", help="host:port or :port for /metrics; 0 turns it off"
    )
    metrics.add_argument(
        "--metrics-secure",
        action="store_true",
        help="serve /metrics over HTTPS with the serving certificate, to callers whose bearer "
        "token passes a TokenReview and a SubjectAccessReview (get on /metrics)",
    )
    parser.add_argument(
        "--health-probe-bind-address",
        type=bind_address("--health-probe-bind-address"),
        default=(None, 0),
        metavar="ADDRESS",
        help="host:port or :port for /healthz, /livez and /readyz over plain HTTP, answered by a thread "
        "of their own however busy the serving port is (the chart: :8081); 0 (default): on the serving port only",
    )
    add_log_flags(parser)
    parser.add_argument("--no-uvloop", action="store_true", help="use asyncio's own event loop")


def check_serving_flags(
    args: argparse.Namespace,
    prog: str,
    *,
    certificates_made_here: bool = False,
    service: str | None = None,
    namespace: str = "default",
) -> str | None:
    """One line saying what is wrong with the serving flags, or None."""
    for name in () if certificates_made_here else (args.cert_name, args.key_name):
        if not (args.cert_dir / name).is_file():
            command = generate_command(args.cert_dir, service or prog, namespace, args.cert_name, args.key_name)
            return f"{args.cert_dir / name} does not exist (make a pair with: {command})"
    try:
        parse_tls_policy(args.tls_min_version, args.tls_cipher_suites)
        _, metrics_port = parse_bind_address(args.metrics_bind_address)
    except ValueError as err:
        return str(err)
    if metrics_port and metrics_port == args.port:
        return f"--metrics-bind-address must not use the serving port {args.port}"
    probe_port = args.health_probe_bind_address[1]
    if probe_port and probe_port in (args.port, metrics_port):
        taken = "the serving port" if probe_port == args.port else "the metrics port"
        return f"--health-probe-bind-address must not use {taken} {probe_port}"
    return None


def generate_command(
    cert_dir: Path, service: str, namespace: str, cert_name: str = TLS_CERT, key_name: str = TLS_KEY
) -> str:
    """The ``foo-operator-certs generate`` line that makes the pair a server looks for, as a shell reads it.

    Names other than the defaults are passed on, and files already there are overwritten
    (``--force``): a half pair is of no use, and the printed line must work as printed.
    """
    command = ["foo-operator-certs", "generate", "--service", service, "--namespace", namespace, "--out", str(cert_dir)]
    if cert_name != TLS_CERT:
        command += ["--cert-name", cert_name]
    if key_name != TLS_KEY:
        command += ["--key-name", key_name]
    if any((cert_dir / name).exists() for name in (CA_CERT, cert_name, key_name)):
        command.append("--force")
    return shlex.join(command)


def serving_options(
    args: argparse.Namespace,
    kind: type[Options] = ServingOptions,  # type: ignore[assignment]
    *,
    reuse_port: bool = False,
    **extra: Any,
) -> Options:
    """The options the flags ask for (checked first by ``check_serving_flags``); ``kind`` may add fields.

    ``reuse_port``: this process is one of several workers on the same ports (both of them).
    """
    host, metrics_port = parse_bind_address(args.metrics_bind_address)
    probe_host, probe_port = args.health_probe_bind_address
    return kind(
        cert_dir=args.cert_dir,
        cert_name=args.cert_name,
        key_name=args.key_name,
        bind_address=args.bind_address,
        port=args.port,
        drain_seconds=args.drain_seconds,
        tls_policy=parse_tls_policy(args.tls_min_version, args.tls_cipher_suites),
        metrics=MetricsOptions(host=host, port=metrics_port, secure=args.metrics_secure, reuse_port=reuse_port),
        reuse_port=reuse_port,
        probe_host=probe_host,
        probe_port=probe_port,
        **extra,
    )


def run_server(server: Coroutine[Any, Any, None], args: argparse.Namespace, prog: str) -> int:
    """Run ``server`` on uvloop (unless --no-uvloop); a listener that cannot bind is one line, exit 1."""
    runner: Callable[[Coroutine[Any, Any, None]], None] = asyncio.run
    if not args.no_uvloop:
        try:
            import uvloop

            runner = uvloop.run
        except ImportError:
            pass
    # Everything imported so far lives as long as the process: move it out of the collector's
    # sight, so its full collections stop re-walking modules (CPU that big reviews paid for).
    # A command that paused the collector while it started (python -m webhook) has it back from here.
    gc.freeze()
    gc.enable()
    try:
        runner(server)
    except (MetricsSetupError, ProbeSetupError, CertificateFilesError) as err:
        print(f"{prog}: {err}", file=sys.stderr)
        return 1
    except OSError as err:
        server.close()
        print(f"{prog}: cannot serve on {args.bind_address}:{args.port}: {err.strerror or err}", file=sys.stderr)
        return 1
    return 0
