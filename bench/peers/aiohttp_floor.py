"""The floor under our webhook: bare aiohttp + uvloop + orjson over TLS, no product.

POST /validate-foo reads and parses the body and answers one fixed, allowed AdmissionReview:
no bounds, metrics, logs, decode or rules. What it costs per request is what the HTTP stack
costs; what our webhook costs above it is what the product adds (bench.floor).

    python bench/peers/aiohttp_floor.py CERT_DIR PORT
"""

from __future__ import annotations

import ssl
import sys

import orjson
import uvloop
from aiohttp import web

ANSWER = orjson.dumps(
    {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": {"uid": "x", "allowed": True}}
)


async def validate(request: web.Request) -> web.Response:
    orjson.loads(await request.read())
    return web.Response(body=ANSWER, content_type="application/json")


async def readyz(request: web.Request) -> web.Response:
    return web.Response(text="ok")


def main() -> None:
    cert_dir, port = sys.argv[1], int(sys.argv[2])
    app = web.Application()
    app.router.add_post("/validate-foo", validate)
    app.router.add_get("/readyz", readyz)
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(f"{cert_dir}/tls.crt", f"{cert_dir}/tls.key")
    web.run_app(
        app, host="127.0.0.1", port=port, ssl_context=context, access_log=None, loop=uvloop.new_event_loop(), print=None
    )


if __name__ == "__main__":
    main()
