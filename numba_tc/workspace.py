"""Scratch device memory for plans that need it: split-K partial sums, operands copied to a
pitch TMA can read.

One buffer per (device, stream, host thread), grown by doubling when a plan needs more, so that
work on two streams never shares scratch (two streams running the same plan at once would
otherwise write each other's partial sums), nor two threads on one stream (their launches can
interleave between a split-K kernel and its fix-up: the legacy default stream is every thread's).
A call being captured into a CUDA graph gets scratch of its own, kept for that graph alone: a
replay may run on any stream, beside eager calls or other graphs. Buffers are never freed while
the process lives: a graph keeps the address it was given (and an allocation during a capture
is allowed for that reason, ``driver.mem_alloc_during_capture``). What this costs: at most twice
the largest need of each stream and thread, the sizes outgrown, and each captured call's scratch.
"""
from __future__ import annotations

import threading

from . import driver

__all__ = ["get", "carve", "ALIGN"]

ALIGN = 256                       # every region a plan carves out starts on this boundary
_BUFFERS: dict = {}               # (device, stream, thread) -> (address, bytes)
_KEPT: list = []                  # outgrown buffers and captured calls' scratch (graphs use them)
_LOCK = threading.Lock()


def _round(nbytes: int) -> int:
    return -(-nbytes // ALIGN) * ALIGN


def get(device: int, stream: int, nbytes: int) -> int:
    """The address of at least ``nbytes`` of scratch for work this thread enqueues on ``stream``
    of ``device`` (whose context is current). The contents are undefined; the same buffer comes
    back to every plan this thread runs on that stream, so a plan may only use it between its
    own launches. Under a capture, new scratch that nothing else will use."""
    if driver.stream_is_capturing(stream):
        addr = driver.mem_alloc_during_capture(_round(max(nbytes, 1)))
        with _LOCK:
            _KEPT.append((addr, nbytes))
        return addr
    key = (device, stream, threading.get_ident())
    hit = _BUFFERS.get(key)
    if hit is not None and hit[1] >= nbytes:
        return hit[0]
    size = _round(max(nbytes, 2 * hit[1] if hit else 0, 1 << 20))
    addr = driver.mem_alloc(size)
    with _LOCK:
        if hit is not None:
            _KEPT.append(hit)
        _BUFFERS[key] = (addr, size)
    return addr


def carve(*sizes: int):
    """Offsets of consecutive regions of ``sizes`` bytes, each ``ALIGN``-aligned, and the total."""
    offsets, total = [], 0
    for s in sizes:
        offsets.append(total)
        total += _round(s)
    return offsets, total
