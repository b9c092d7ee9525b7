"""Process limits a server sets for itself at start: open files, and how the allocator gives memory back.

Shared by every serving process (webhook workers, insights): each one's connection cap is only
worth something if the kernel lets it hold that many descriptors, and its memory budget only if
what a burst allocated goes back to the system once the burst is over.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
import resource

log = logging.getLogger(__name__)


def raise_open_file_limit() -> int:
    """Raise the soft RLIMIT_NOFILE to the hard limit; returns the soft limit now in force.

    Container runtimes start processes with a soft limit of 1024 (the hard one is usually
    1048576): one client holding 1,000 connections would otherwise take every descriptor,
    and the kubelet's probes and kube-apiserver would be refused. The per-process connection
    caps (kube.connections) are what bound connections; this only stops the kernel's limit
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


# glibc's mallopt parameters (malloc.h).
_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3
_M_ARENA_MAX = -8

# Blocks from this size on get their own mapping, unmapped the moment they are freed.
MMAP_THRESHOLD = 128 * 1024


def bound_allocator() -> bool:
    """Make glibc give freed memory back: a fixed mmap threshold, one trim threshold, two arenas.

    Left to itself, glibc raises its mmap threshold to the largest block ever freed (up to
    32 MiB): after one 256 KiB TLS read buffer is freed, every later one is carved from the heap,
    and a burst of connections leaves the heap fragmented and never trimmed (measured in
    bench.insights_attack: RSS stayed at its peak after the connections closed). Setting the
    threshold turns that adjustment off. Threads (reviews run in an executor) would each get an
    arena of their own, 64 MiB of address space and memory that is trimmed separately; two are
    enough. False where the C library is not glibc (nothing to do).
    """
    name = ctypes.util.find_library("c")
    if name is None:
        return False
    try:
        libc = ctypes.CDLL(name)
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    return all(
        mallopt(param, value) == 1
        for param, value in (
            (_M_MMAP_THRESHOLD, MMAP_THRESHOLD),
            (_M_TRIM_THRESHOLD, 2 * MMAP_THRESHOLD),
            (_M_ARENA_MAX, 2),
        )
    )
