"""Process limits a server lives by: open files, and memory given back to the system after a burst.

Shared by every serving process (webhook workers, insights): each one's connection cap is only
worth something if the kernel lets it hold that many descriptors, and its memory budget only if
what a burst allocated goes back to the system once the burst is over.
"""

from __future__ import annotations

import asyncio
import logging
import resource
from typing import Any

log = logging.getLogger(__name__)


def raise_open_file_limit() -> int:
    """Raise the soft RLIMIT_NOFILE to the hard limit; returns the soft limit now in force.

    Container runtimes start processes with a soft limit of 1024 (the hard one is usually
    1048576): one client holding 1,000 connections would otherwise take every descriptor,
    and the kubelet's probes and kube-apiserver would be refused. The per-process connection
    caps (serving.reviews's for the webhook, serving.connections' for insights) are what bound connections; this only stops the kernel's limit
    from being the smaller one.
    """
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or soft < hard:
        target = hard if hard != resource.RLIM_INFINITY else max(soft, 1 << 20)
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            soft = target
        except (ValueError, OSError) as err:  # a sandbox may refuse: keep what we have, say so
            log.warning("cannot raise the open file limit", extra={"soft": soft, "hard": hard, "error": str(err)})
    return soft


_libc: Any = None  # ctypes.CDLL once loaded: ctypes is imported on first use, off the webhook's start-up

# How often a serving process gives freed heap pages back (serving.lifecycle runs it beside every
# listener): often enough that its memory follows a burst down within seconds.
TRIM_SECONDS = 10.0

# glibc's M_MMAP_THRESHOLD (malloc.h), and the size from which blocks get pages of their own.
_M_MMAP_THRESHOLD = -3
MMAP_THRESHOLD = 128 * 1024


def _glibc() -> Any:
    """glibc loaded through ctypes, or None (another libc).

    By its soname: ``ctypes.util.find_library`` asks ``ldconfig``, which the image, like most
    slim images, does not have; there it found nothing, and neither the trim nor the threshold
    below ever ran in a pod.
    """
    global _libc
    if _libc is None:
        import ctypes

        try:
            libc = ctypes.CDLL("libc.so.6")
            libc.malloc_trim.argtypes = [ctypes.c_size_t]
            libc.mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
        except (OSError, AttributeError):
            return None
        _libc = libc
    return _libc


def keep_large_blocks_out_of_the_heap() -> bool:
    """Give every block of MMAP_THRESHOLD bytes or more pages of its own, unmapped when freed;
    False without glibc.

    glibc does so from 128 KiB, but after the first such block is freed it raises that
    threshold (up to 32 MiB) to save system calls: from then on request bodies and answers of
    a few MiB come from the heap, and what they leave there when freed stays in the process
    below whatever small object was allocated after them, as memory no budget counts. Under
    the webhook's attack mix the pod's cgroup peaked at its limit and a process was OOM-killed;
    with the threshold fixed, well under it (bench/README.md, "Attack mix"). Setting it turns
    glibc's raising off. Called before any worker is forked: they inherit it.
    """
    libc = _glibc()
    if libc is None:
        return False
    return bool(libc.mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD))


def give_back_freed_memory() -> bool:
    """Return the heap's free pages to the system (glibc's ``malloc_trim(0)``); False without glibc.

    glibc trims only the top of its heap: memory freed below a block still in use stays in the
    process, for good (after a burst of half-sent heads insights kept most of its peak; figures
    in docs/architecture.md, "Resource model (insights)"). It costs what it gives back, and
    almost nothing when there is nothing to give.
    """
    libc = _glibc()
    if libc is None:
        return False
    libc.malloc_trim(0)
    return True


async def give_back_freed_memory_every(interval: float) -> None:
    """Trim the heap every ``interval`` seconds, until cancelled: after a burst, RSS comes down.

    In a thread: a trim costs what it gives back (hundreds of ms after a large burst), and on the
    event loop it held every probe that long. ctypes lets go of the GIL for the call, and the
    loop's small objects come from Python's own arenas, not the heap the trim locks.
    """
    while True:
        await asyncio.sleep(interval)
        await asyncio.to_thread(give_back_freed_memory)
