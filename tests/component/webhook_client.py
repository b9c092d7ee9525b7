"""The webhook's admission port (serving.reviews) on 127.0.0.1, and an aiohttp client session to it."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable

import aiohttp
import pytest

from serving.reviews.server import ReviewServer
from webhook.app import Settings, Webhook, build_app


class WebhookClient:
    """A client of one served webhook: ``post``/``get`` as aiohttp's, ``host``/``port`` for raw sockets."""

    def __init__(self, webhook: Webhook, server: ReviewServer, session: aiohttp.ClientSession) -> None:
        self.webhook = webhook
        self.server = server
        self.session = session
        self.host = "127.0.0.1"
        self.port = server.port
        self.post = session.post
        self.get = session.get
        self.request = session.request


async def serve_webhook(webhook: Webhook) -> tuple[ReviewServer, aiohttp.ClientSession]:
    """``webhook`` listening on a free port, and a session whose base URL it is."""
    server = ReviewServer(webhook.reviews)
    await server.start("127.0.0.1", 0)
    return server, aiohttp.ClientSession(base_url=f"http://127.0.0.1:{server.port}")


ServeWebhook = Callable[..., Awaitable[WebhookClient]]


@pytest.fixture
async def webhook_client() -> AsyncIterator[ServeWebhook]:
    """``await webhook_client(settings_or_webhook)``: a served webhook; stopped when the test ends."""
    served: list[WebhookClient] = []

    async def serve(app: Settings | Webhook | None = None) -> WebhookClient:
        webhook = app if isinstance(app, Webhook) else build_app(app)
        server, session = await serve_webhook(webhook)
        served.append(WebhookClient(webhook, server, session))
        return served[-1]

    yield serve
    for client in served:
        await client.session.close()
        await client.server.stop(1.0)


Client = WebhookClient
