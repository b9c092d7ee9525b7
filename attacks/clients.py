"""The attack mix's clients (issue #25): attackers, honest callers and the kubelet's probe, each in
a process of its own, against one server; and what the mix needs on the plane (its Foos, the
aggregator's front-proxy identity). bench.attack_mix measures a server under them on loopback,
tests/e2e/test_attack_mix.py the chart's pods on the real node.
"""

from __future__ import annotations

import asyncio
import dataclasses
import multiprocessing
import os
import resource
import ssl
from multiprocessing.connection import Connection
from typing import Any

from hack.plane.adminclient import AdminClient, plain_foo
from hack.plane.cluster import LocalControlPlane

from . import webhook as webhook_attacks
from .harness import Attack, Tally, Target
from .honest import HONEST_LABEL, Honest, Probes, run_honest, run_probe
from .insights import INSIGHTS_ATTACKS
from .webhook import WEBHOOK_ATTACKS

ATTACKS: dict[str, dict[int, Attack]] = {"webhook": WEBHOOK_ATTACKS, "insights": INSIGHTS_ATTACKS}
LABELS_PER_FOO = 128  # x 63-character values: ~8 KiB of labels per Foo


def _raise_nofile() -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


async def _attack_all(target: Target, findings: tuple[int, ...], server: str, seconds: float) -> dict[int, Tally]:
    """Every attack for ``seconds``; then a few seconds to finish what is in flight, no more: a
    loop holding thousands of connections may take minutes to unwind, and only the tallies matter."""
    tallies = {n: Tally() for n in findings}
    stop = asyncio.Event()
    tasks = [asyncio.create_task(ATTACKS[server][n](target, tallies[n], stop)) for n in findings]
    done, _ = await asyncio.wait(tasks, timeout=seconds)
    for task in done:  # an attack that ended early is a harness bug: say so, do not hide it
        task.result()
    stop.set()
    await asyncio.wait(tasks, timeout=5)
    return tallies


def _client(
    role: str, target: Target, run: tuple[str, tuple[int, ...], float, int, str | None], results: Connection
) -> None:
    """One client process: attackers, honest callers and the probe never share a loop. It leaves
    with os._exit once it has sent its outcome: the attackers' connections die with it."""
    _raise_nofile()
    server, findings, seconds, clients, attackers_from = run
    loop = asyncio.new_event_loop()
    outcome: object
    if role == "attack":
        attacker = dataclasses.replace(target, source=attackers_from)
        outcome = loop.run_until_complete(_attack_all(attacker, findings, server, seconds))
    elif role == "honest":
        outcome = loop.run_until_complete(run_honest(target, server, clients, seconds))
    else:
        outcome = loop.run_until_complete(run_probe(target, seconds))
    results.send(outcome)
    results.close()
    os._exit(0)


class Clients:
    """The three client processes of one server's run (attacks, honest callers, probe), forked."""

    ROLES = ("attack", "honest", "probe")

    def __init__(
        self,
        server: str,
        target: Target,
        findings: tuple[int, ...],
        seconds: float,
        honest: int,
        attackers_from: str | None = None,
    ) -> None:
        if server == "webhook":
            webhook_attacks.prepare()  # inherited by the forked attack process
        context = multiprocessing.get_context("fork")
        run = (server, findings, seconds, honest, attackers_from)
        self.seconds = seconds
        self.pipes = {role: context.Pipe(duplex=False) for role in self.ROLES}
        self.procs = [
            context.Process(
                target=_client, args=(role, target, run, send), name=f"attack-mix-{server}-{role}", daemon=True
            )
            for role, (_, send) in self.pipes.items()
        ]

    def start(self) -> None:
        for proc in self.procs:
            proc.start()

    def finished(self) -> bool:
        return all(receive.poll() for receive, _ in self.pipes.values())

    def results(self) -> tuple[dict[int, Tally], Honest, Probes]:
        """What each process found (waits for them; a process that died is a harness bug)."""
        outcomes = {}
        for role, (receive, _) in self.pipes.items():
            if not receive.poll(self.seconds + 60):
                raise RuntimeError(f"the attack mix's {role} client process ended without a result")
            outcomes[role] = receive.recv()
        for proc in self.procs:
            proc.join(timeout=10)
            if proc.is_alive():
                proc.kill()
        return outcomes["attack"], outcomes["honest"], outcomes["probe"]


def insights_target(
    host: str, port: int, context: ssl.SSLContext, p: LocalControlPlane, probe_port: int | None = None
) -> Target:
    """Insights at ``host:port``, with the aggregator's front-proxy client certificate of plane ``p``
    for the requests that need a user (one that may do anything)."""
    assert p.pki is not None
    front_proxy = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    front_proxy.check_hostname = context.check_hostname
    front_proxy.verify_mode = context.verify_mode
    front_proxy.load_verify_locations(cadata=_ca_of(context))
    front_proxy.load_cert_chain(p.pki.cert_file("front-proxy-client"), p.pki.key_file("front-proxy-client"))
    user = (("X-Remote-User", "admin"), ("X-Remote-Group", "system:masters"))
    return Target(host, port, context, front_proxy, user, probe_port)


def _ca_of(context: ssl.SSLContext) -> str:
    return "".join(ssl.DER_cert_to_PEM_cert(der) for der in context.get_ca_certs(binary_form=True))


def heavy_foo(i: int) -> dict[str, Any]:
    """A Foo with ~8 KiB of labels: its FooHealth, and a Table row holding it, are as large."""
    foo = plain_foo(i)
    foo["metadata"]["labels"] = {f"l{j:03d}": f"{j:03d}" + "v" * 60 for j in range(LABELS_PER_FOO)}
    return foo


def create_foos(p: LocalControlPlane, foos: int) -> None:
    """Five small Foos the honest lists select, and ``foos`` heavy ones, in the attacks' namespace."""
    honest = [plain_foo(i, prefix="honest") for i in range(5)]
    for foo in honest:
        foo["metadata"]["labels"] = dict([HONEST_LABEL])

    async def create() -> None:
        async with AdminClient(p) as client:
            outcome = await client.create_foos([*honest, *(heavy_foo(i) for i in range(foos))])
        if outcome.failed:
            raise RuntimeError(f"creating Foos failed: {outcome.first_error}")

    asyncio.run(create())
