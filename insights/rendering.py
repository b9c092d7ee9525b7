"""YAML answers, rendered off the event loop and only up to a size.

PyYAML is slow (its pure-Python emitter takes seconds for a large FooReview; libyaml's is still
far slower per byte than orjson), and the loop that runs it answers nobody meanwhile. So the
answer is encoded as JSON on the loop (orjson), refused above YAML_LIMIT, and
dumped to YAML by one worker thread while the response is being written.
"""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import orjson
import yaml  # type: ignore[import-untyped]
from aiohttp.abc import AbstractStreamWriter
from aiohttp.payload import Payload

from apimachinery.bodies import JSON, StatusError
from apimachinery.status import failure

from .media import YAML

# Past this libyaml holds a core for long (bench/README.md); kubectl asks for JSON and renders YAML,
# so only hand-made calls (curl) ever ask us for YAML, and never for this much.
YAML_LIMIT = 512 * 1024

# One thread: renders queue rather than take turns at the GIL with the loop and each other.
_RENDERER = ThreadPoolExecutor(max_workers=1, thread_name_prefix="yaml")
_DUMPER = getattr(yaml, "CSafeDumper", yaml.SafeDumper)


def _to_yaml(document: bytes) -> bytes:
    text: str = yaml.dump(orjson.loads(document), Dumper=_DUMPER, sort_keys=False, allow_unicode=True)
    return text.encode()


class _YamlPayload(Payload):
    """A JSON document written out as YAML, rendered by the worker thread as it is sent."""

    def __init__(self, document: bytes) -> None:
        super().__init__(document, content_type=YAML)
        self._document = document

    def decode(self, encoding: str = "utf-8", errors: str = "strict") -> str:
        return _to_yaml(self._document).decode(encoding, errors)

    async def write(self, writer: AbstractStreamWriter) -> None:
        await writer.write(await asyncio.get_running_loop().run_in_executor(_RENDERER, _to_yaml, self._document))


def yaml_body(body: Any, limit: int = YAML_LIMIT) -> Payload:
    """``body`` as a YAML payload, or a 406 Status suggesting JSON when it is too large to render."""
    return yaml_document(orjson.dumps(body), limit)


def yaml_document(document: bytes | None, limit: int = YAML_LIMIT) -> Payload:
    """A JSON document as a YAML payload; None (or one over ``limit``) is the 406 Status."""
    if document is None or len(document) > limit:
        size = f"{len(document)} bytes" if document is not None else f"more than {limit} bytes"
        raise StatusError(
            failure(
                406,
                f"the answer is {size} as JSON; this server renders YAML only up to {limit} bytes: ask for {JSON}",
            )
        )
    return _YamlPayload(document)
