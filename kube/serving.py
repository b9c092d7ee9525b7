"""One TLS server lifecycle for every HTTPS process of the product (webhook, insights).

Both serve an aiohttp app over TLS with hot certificate reload, `/healthz` and `/readyz`, the
Status error edge and a graceful drain on SIGTERM. Written once here so the two processes can
never drift apart on how they start, report readiness or stop.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import logging
import shlex
import signal
import sys
from collections.abc import Awaitable, Callable, Coroutine, Iterable
from dataclasses import dataclass
from pathlib import Path
from ssl import SSLContext
from typing import Any, Protocol, TypeVar

from aiohttp import hdrs, web
from prometheus_client import CollectorRegistry

from .cli import add_log_flags, non_negative_float, port
from .http import StatusError, status_response
from .metricsserver import MetricsOptions, MetricsServer, MetricsSetupError, metrics_server, parse_bind_address
from .readiness import Readiness
from .reviewserver import KEEPALIVE_SECONDS
from .status import failure
from .tls import CertWatcher
from .tlspolicy import SECURE_TLS12_SUITES, TLSPolicy, parse_tls_policy

log = logging.getLogger(__name__)

# The file names ``foo-operator-certs generate`` writes and a Secret of type kubernetes.io/tls holds.
CA_FILE, CERT_FILE, KEY_FILE = "ca.crt", "tls.crt", "tls.key"


Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


READINESS = web.AppKey("readiness", Readiness)


@web.middleware
async def status_edge(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Every error leaves as a Kubernetes Status; nothing leaves as a traceback."""
    try:
        return await handler(request)
    except StatusError as err:
        return status_response(err.status)
    except web.HTTPException as err:
        if err.status < 400:
            raise
        message = {
            404: "the server could not find the requested resource",
            405: f"method {request.method} is not allowed on {request.path}",
        }.get(err.status, err.reason)
        return status_response(failure(err.status, message))
    except Exception:
        log.exception("internal error serving %s %s", request.method, request.path)
        return status_response(failure(500, "internal error; see the server's log"))


async def close_while_draining(request: web.Request, response: web.StreamResponse) -> None:
    """Once shutting down, every answer says `Connection: close` in its own headers.

    Clients keep HTTP/1.1 connections alive and reuse them without looking at endpoints again,
    so the apiserver keeps sending to a replica that is no longer in the EndpointSlice until
    the connection closes. Closed by the server at the end of the drain, one in use loses its
    request: Go does not retry a POST written onto a reused connection that then hits EOF. Told
    to close by a response, the client retires the connection itself and dials a ready replica.

    An `on_response_prepare` hook, not a middleware: handlers that write their answer themselves
    (the webhook writes while the body's bytes are still charged) send headers before any
    middleware sees the response, and a close decided after the headers left is exactly the
    race above — the client pools a connection we then close. The header is set by hand as
    well: aiohttp computes its own Connection header before it runs this hook.
    """
    if request.app[READINESS].draining:
        response.force_close()
        response.headers[hdrs.CONNECTION] = "close"


async def healthz(request: web.Request) -> web.StreamResponse:
    return web.Response(text="ok")


async def readyz(request: web.Request) -> web.StreamResponse:
    ready, why = request.app[READINESS].ready()
    return web.Response(text=why, status=200 if ready else 503)


def serving_app(readiness: Readiness, *, client_max_size: int = 1024 * 1024) -> web.Application:
    """An app with the shared edge (drain, Status errors) and the probes; callers add routes."""
    app = web.Application(middlewares=[status_edge], client_max_size=client_max_size)
    app.on_response_prepare.append(close_while_draining)
    app[READINESS] = readiness
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", readyz)
    return app


@dataclass(frozen=True)
class ServingOptions:
    """Where and how to listen; the same flags for every HTTPS process."""

    cert_dir: Path
    cert_name: str = "tls.crt"
    key_name: str = "tls.key"
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

    def certificate(self, client_ca_file: Path | None = None) -> CertWatcher:
        """A watcher over this server's pair, with its TLS policy."""
        return CertWatcher(
            self.cert_dir / self.cert_name,
            self.cert_dir / self.key_name,
            client_ca_file=client_ca_file,
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
    """The metrics listener of a TLS server: its serving pair (no client CA) when secure."""
    return await metrics_server(
        options.metrics,
        registry,
        certificate=options.certificate(),
        kubeconfig=kubeconfig,
        user_agent=f"foo-operator-{name}",
    )


class Listener(Protocol):
    """A server on one port: aiohttp's (``AppListener``) or the admission port's (kube.reviewserver)."""

    readiness: Readiness

    async def start(self, host: str, port: int, *, ssl: SSLContext, reuse_port: bool, backlog: int) -> None: ...

    async def stop(self, timeout: float) -> None:
        """Stop listening, let requests in progress finish within ``timeout``, close the rest."""


class AppListener:
    """An aiohttp app as a Listener (the insights API)."""

    def __init__(self, app: web.Application) -> None:
        self.app = app
        self.readiness = app[READINESS]
        self.runner: web.AppRunner | None = None

    async def start(self, host: str, port: int, *, ssl: SSLContext, reuse_port: bool, backlog: int) -> None:
        self.runner = web.AppRunner(
            self.app,
            handle_signals=False,
            access_log=logging.getLogger("aiohttp.access"),
            keepalive_timeout=KEEPALIVE_SECONDS,
        )
        await self.runner.setup()
        site = web.TCPSite(
            self.runner, host, port, ssl_context=ssl, backlog=backlog, reuse_address=True, reuse_port=reuse_port or None
        )
        await site.start()

    async def stop(self, timeout: float) -> None:
        if self.runner is not None:
            self.runner._shutdown_timeout = timeout  # what AppRunner(shutdown_timeout=) sets, now deprecated
            await self.runner.cleanup()


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

    The one lifecycle of every listener: ready only once it listens (and its metrics listener
    too), unready first on the way out, ``drain_seconds`` for endpoints to stop routing here,
    then closed with ``shutdown_timeout`` for requests in progress. ``background`` tasks
    (rotators, watchers) are cancelled and awaited on the way out; ``metrics`` starts with the
    listener and stops after it.
    """
    readiness = listener.readiness
    tasks = list(background)
    try:
        await listener.start(
            options.bind_address,
            options.port,
            ssl=watcher.server_context(),
            reuse_port=options.reuse_port,
            backlog=1024,
        )
        if metrics is not None:
            await metrics.start(options.cert_reload_interval)
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
        log.info("stopped", extra={"server": name})


# ---- command line, shared by `python -m webhook` and `python -m insights` -------------------------


def add_serving_flags(parser: argparse.ArgumentParser, *, default_port: int) -> None:
    """Where to listen, which certificate to serve, how to log: the same words in every server."""
    parser.add_argument("--cert-dir", type=Path, required=True, help="directory holding tls.crt and tls.key")
    parser.add_argument("--cert-name", default=CERT_FILE, help="certificate file in --cert-dir")
    parser.add_argument("--key-name", default=KEY_FILE, help="private key file in --cert-dir")
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
    return None


def generate_command(
    cert_dir: Path, service: str, namespace: str, cert_name: str = CERT_FILE, key_name: str = KEY_FILE
) -> str:
    """The ``foo-operator-certs generate`` line that makes the pair a server looks for, as a shell reads it.

    Names other than the defaults are passed on, and files already there are overwritten
    (``--force``): a half pair is of no use, and the printed line must work as printed.
    """
    command = ["foo-operator-certs", "generate", "--service", service, "--namespace", namespace, "--out", str(cert_dir)]
    if cert_name != CERT_FILE:
        command += ["--cert-name", cert_name]
    if key_name != KEY_FILE:
        command += ["--key-name", key_name]
    if any((cert_dir / name).exists() for name in (CA_FILE, cert_name, key_name)):
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
    # sight, so its full collections stop re-walking modules (bench.profile: -20% CPU on big reviews).
    # A command that paused the collector while it started (python -m webhook) has it back from here.
    gc.freeze()
    gc.enable()
    try:
        runner(server)
    except MetricsSetupError as err:
        print(f"{prog}: {err}", file=sys.stderr)
        return 1
    except OSError as err:
        server.close()
        print(f"{prog}: cannot serve on {args.bind_address}:{args.port}: {err.strerror or err}", file=sys.stderr)
        return 1
    return 0
