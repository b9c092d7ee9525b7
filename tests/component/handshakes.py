"""How many TLS handshakes the test process holds state for, as a server (asyncio's loop)."""

from __future__ import annotations

import gc
from asyncio import sslproto


def handshakes_held() -> int:
    """Server-side TLS handshakes under way: each holds an SSL object and its two buffers."""
    gc.collect()
    return sum(
        1
        for obj in gc.get_objects()
        if isinstance(obj, sslproto.SSLProtocol)
        and obj._server_side
        and obj._state == sslproto.SSLProtocolState.DO_HANDSHAKE
    )
