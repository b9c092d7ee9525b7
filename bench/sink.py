"""A transport that takes every write at once and is never paused: a connection served in process."""

from __future__ import annotations

import asyncio
from typing import Any


class Sink(asyncio.Transport):
    """Counts what is written to it; never pauses the protocol's writing."""

    def __init__(self) -> None:
        super().__init__()
        self.written = 0

    def write(self, data: Any) -> None:
        self.written += len(data)

    def get_write_buffer_size(self) -> int:
        return 0

    def get_write_buffer_limits(self) -> tuple[int, int]:
        return 16 * 1024, 64 * 1024

    def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        pass  # never paused: the limits the server sets do not matter here

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return default

    def is_closing(self) -> bool:
        return False

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass
