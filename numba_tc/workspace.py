"""Scratch device memory for plans that need it: split-K partial sums, operands copied to a
pitch TMA can read.

One buffer per (device, stream), grown by doubling when a plan needs more, so that work on two
streams never shares scratch (two streams running the same plan at once would otherwise write
each other's partial sums). Buffers are never freed while the process lives: a CUDA graph
captured on a stream keeps the address it was given, and replays after the buffer grew must
still find it there (and an allocation during a capture is allowed for the same reason,
``driver.mem_alloc_during_capture``). What this costs: at most twice the largest need of each stream, plus the
sizes outgrown.
"""
from __future__ import annotations

import threading

from . import driver

__all__ = ["get", "carve", "ALIGN"]

ALIGN = 256                       # every region a plan carves out starts on this boundary
_BUFFERS: dict = {}               # (device, stream) -> (address, bytes)
_KEPT: list = []                  # outgrown buffers (a captured graph may still use them)
_LOCK = threading.Lock()


def get(device: int, stream: int, nbytes: int) -> int:
    """The address of at least ``nbytes`` of scratch for work on ``stream`` of ``device`` (whose
    context is current). The contents are undefined; the same buffer comes back to every plan
    on that stream, so a plan may only use it between its own launches."""
    key = (device, stream)
    hit = _BUFFERS.get(key)
    if hit is not None and hit[1] >= nbytes:
        return hit[0]
    with _LOCK:
        hit = _BUFFERS.get(key)
        if hit is not None and hit[1] >= nbytes:
            return hit[0]
        size = max(nbytes, 2 * hit[1] if hit else 0, 1 << 20)
        size = -(-size // ALIGN) * ALIGN
        addr = driver.mem_alloc_during_capture(size)
        if hit is not None:
            _KEPT.append(hit)
        _BUFFERS[key] = (addr, size)
        return addr


def carve(*sizes: int):
    """Offsets of consecutive regions of ``sizes`` bytes, each ``ALIGN``-aligned, and the total."""
    offsets, total = [], 0
    for s in sizes:
        offsets.append(total)
        total += -(-s // ALIGN) * ALIGN
    return offsets, total
