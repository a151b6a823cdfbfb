"""The Hopper planner's switches: which of its measured choices it makes, for A/B runs and tests.

One frozen ``Policy`` holds them all; a planner takes one (``planner._plan``'s ``plan(...,
policy=)``), by default ``current()``, which ``set_policy`` and ``using`` change for a process or a
block. A policy is a value: equal policies plan alike, so a plan cache keyed by it cannot hand
one policy's plan to another (``Policy.key``).
"""
from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass, fields, replace
from functools import cached_property
from typing import Optional, Union

__all__ = ["Policy", "DEFAULT", "current", "set_policy", "using", "from_environment"]


@dataclass(frozen=True)
class Policy:
    """Each switch: True or None, the planner's measured choice (the default); False, never; the
    others as each says.

    async_b: an n-major tf32 B may be copied k-major by the producer warpgroup's cp.async
    (``operands._b_by_producer``; False: always the transposing pass before the kernel).
    regs_a: a tf32 A mn-major is read through registers, and an n-major B with a k-major A swapped
    into that place (``operands._swaps``; False: the pass).
    slow_rows_copy: of two operands TMA reads slowly, the cost model's choice of one to copy first
    (``operands._slow_rows_copy``); "a" or "b": that one always.
    tail: the tiles of a last, partial round split along K (``cost.pick_tail``); a number: that
    many splits wherever there is such a round.
    swap: a decode product swapped onto narrow tiles (``operands._narrow_swap``); True: wherever it
    may be.
    staged: an epilogue array read at [row, col] staged in shared memory (``planner.staged_config``).
    narrow_pingpong: a batched product of one 128-wide column on ping-pong consumers
    (``tiles.NARROW_N``).
    cost_gpu: the cost model plans with this GPU's figures (a ``cost.GPUS`` entry's name, e.g.
    "H100 SXM") instead of the device's own (None): A/B of one GPU's figures on another.

    ``NUMBA_TC_POLICY`` ("field=value,...", e.g. "tail=False,cost_gpu=H100 SXM") sets the current
    policy when the package is imported, so that an A/B run compares two processes."""
    async_b: bool = True
    regs_a: bool = True
    slow_rows_copy: Union[None, bool, str] = None
    tail: Union[None, bool, int] = None
    swap: Optional[bool] = None
    staged: bool = True
    narrow_pingpong: bool = True
    cost_gpu: Optional[str] = None

    def __post_init__(self):
        for f in ("async_b", "regs_a", "staged", "narrow_pingpong"):
            if not isinstance(getattr(self, f), bool):
                raise ValueError(f"Policy.{f}={getattr(self, f)!r}: True or False")
        if self.slow_rows_copy not in (None, False, "a", "b"):
            raise ValueError(f"Policy.slow_rows_copy={self.slow_rows_copy!r}: None, False, 'a' or 'b'")
        if not (self.tail in (None, False) or (type(self.tail) is int and self.tail >= 2)):
            raise ValueError(f"Policy.tail={self.tail!r}: None, False or a number of splits (2 or more)")
        if self.swap not in (None, False, True):
            raise ValueError(f"Policy.swap={self.swap!r}: None, False or True")
        if self.cost_gpu is not None:
            from .cost import GPUS
            if self.cost_gpu not in [g.name for g in GPUS]:
                raise ValueError(f"Policy.cost_gpu={self.cost_gpu!r}: None or one of {[g.name for g in GPUS]}")

    def replace(self, **changes) -> "Policy":
        return replace(self, **changes)

    @cached_property
    def key(self) -> tuple:
        """The policy as a plan cache's key (its fields' values; made once: a policy is frozen)."""
        return tuple(getattr(self, f.name) for f in fields(self))


DEFAULT = Policy()


def _value(text: str):
    """A policy field's value as ``NUMBA_TC_POLICY`` writes it."""
    return {"None": None, "True": True, "False": False}.get(text, int(text) if text.isdigit() else text)


def from_environment(text: Optional[str]) -> Policy:
    """The policy ``NUMBA_TC_POLICY`` names ("field=value,..."; empty or unset: the default)."""
    if not text:
        return DEFAULT
    names = {f.name for f in fields(Policy)}
    changes = {}
    for part in text.split(","):
        field, sep, value = part.partition("=")
        if not sep or field.strip() not in names:
            raise ValueError(f"NUMBA_TC_POLICY={text!r}: 'field=value,...' with fields {sorted(names)}")
        changes[field.strip()] = _value(value.strip())
    return DEFAULT.replace(**changes)


_CURRENT = [from_environment(os.environ.get("NUMBA_TC_POLICY"))]


def current() -> Policy:
    """The policy planners use when they are given none (its ``key`` is in every plan cache's:
    ``calls``, ``prepared``, ``numba_tc.torch``'s layers)."""
    return _CURRENT[0]


def set_policy(policy: Optional[Policy] = None, **changes) -> Policy:
    """Make ``policy`` (or the current one with ``changes``) current; returns the one before."""
    before = _CURRENT[0]
    _CURRENT[0] = (policy or before).replace(**changes)
    return before


@contextlib.contextmanager
def using(policy: Optional[Policy] = None, **changes):
    """``with using(tail=3):`` the current policy with ``changes`` (or ``policy``) for the block."""
    before = set_policy(policy, **changes)
    try:
        yield _CURRENT[0]
    finally:
        _CURRENT[0] = before
