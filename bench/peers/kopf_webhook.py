"""The kopf peer of our webhook service: kopf's own admission server with fooapi's rules.

Run in its own virtualenv (kopf and its dependencies are not ours), with the repository on
PYTHONPATH so the rules are exactly fooapi's and only the framework differs:

    FOO_BENCH_CERT_DIR=DIR FOO_BENCH_PORT=P PYTHONPATH=. kopf run --standalone --all-namespaces \
        bench/peers/kopf_webhook.py

kopf scans the API before it serves webhooks, so it needs a kube-apiserver that serves the Foo
CRD (bench starts a minimal LocalControlPlane for it). Paths are the handler ids, as kopf
routes them: /validate-foo and /mutate-foo, the same as ours. kopf has no conversion webhooks.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import kopf

from fooapi import GROUP, HUB_VERSION, KIND, PLURAL, default, validate
from fooapi.validation import deprecation_warnings


@kopf.on.startup()
def configure(settings: kopf.OperatorSettings, **_: Any) -> None:
    cert_dir = Path(os.environ["FOO_BENCH_CERT_DIR"])
    settings.admission.server = kopf.WebhookServer(
        addr="127.0.0.1",
        host="127.0.0.1",
        port=int(os.environ["FOO_BENCH_PORT"]),
        certfile=str(cert_dir / "tls.crt"),
        pkeyfile=str(cert_dir / "tls.key"),
    )
    settings.admission.managed = None  # nobody registers kopf with the apiserver: bench calls it


@kopf.on.mutate(GROUP, HUB_VERSION, PLURAL, id="mutate-foo", operations=["CREATE", "UPDATE"])
def mutate_foo(body: kopf.Body, patch: kopf.Patch, **_: Any) -> None:
    obj = dict(body)
    defaulted = default(obj)
    spec = defaulted.get("spec")
    if defaulted is obj or not isinstance(spec, dict):
        return
    for key, value in spec.items():
        if (obj.get("spec") or {}).get(key) != value:
            patch.spec[key] = value


@kopf.on.validate(GROUP, HUB_VERSION, PLURAL, id="validate-foo", operations=["CREATE", "UPDATE"])
def validate_foo(body: kopf.Body, old: kopf.Body | None, operation: str, warnings: list[str], **_: Any) -> None:
    obj = dict(body)
    warnings.extend(deprecation_warnings(obj))
    errors = validate(obj, dict(old) if old is not None and operation == "UPDATE" else None)
    if errors:
        name = (obj.get("metadata") or {}).get("name", "")
        details = "; ".join(f"{e.field}: {e.body()}" for e in errors)
        raise kopf.AdmissionError(f"{KIND} {name!r} is invalid: {details}", code=422)
