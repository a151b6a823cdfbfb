"""A launch plan: the kernel launches that compute one problem, decided once and replayed.

A ladder's host code turns a problem (normalised operands, a device, an epilogue) into ``Step``s:
a kernel, its grid, block, shared memory, cluster, and ``args(pa, pb, pc, *ep)``, which builds
the parameter values from the run-time values: the operands' addresses, then the epilogue's
(``epilogue.Epilogue.slots``: its arrays' addresses, alpha and beta, the user's scalars). Those are
the only things that change between calls that share a plan; TMA tensor maps are encoded from
the addresses (``tensormap.encode``). A step that needs scratch memory (split-K partial sums,
an operand copied to a readable pitch) says how many bytes (``workspace``); its ``args`` then
takes the scratch address first: ``args(ws, pa, pb, pc, *ep)`` (``workspace.get``: one buffer
per device and stream). ``calls`` keeps plans in
a cache keyed by what decides them (device, array kind, dtypes, shapes, strides, address
alignment, variant, output dtype), so a repeated call is a lookup and the launches.
"""
from __future__ import annotations

import threading
from typing import Callable, Sequence, Tuple, Union

from . import driver, workspace
from .intrinsics import SIMULATOR

__all__ = ["Step", "Plan", "operand_args"]


def operand_args(a, b, c) -> Callable:
    """``Step.args`` of a kernel whose parameters are (A, B, C, M, N, K, lda, ldb, ldc, then the
    epilogue's values), for normalised operands ``a``, ``b``, ``c``."""
    m, n, k, lda, ldb, ldc = c.rows, c.cols, a.cols, a.ld, b.ld, c.ld
    return lambda pa, pb, pc, *ep: (pa, pb, pc, m, n, k, lda, ldb, ldc, *ep)


class Step:
    """One kernel launch of a plan."""
    __slots__ = ("kernel", "grid", "block", "smem", "cluster", "args", "fn", "workspace", "label", "dependent",
                 "_local", "_dims")

    def __init__(self, kernel, grid: Union[int, Tuple[int, int]], block: Union[int, Tuple[int, int]],
                 args: Callable, smem: int = 0, cluster: int = 1, fn=None, workspace: int = 0, label: str = "",
                 dependent: bool = False):
        """``dependent``: launched as a programmatic dependent of the step before it (its kernel
        calls ``grid_dep_wait`` before it reads that step's output; ``driver.launch``)."""
        self.kernel, self.grid, self.block, self.smem, self.cluster = kernel, grid, block, smem, cluster
        self.dependent = dependent
        self.args, self.fn, self.workspace = args, fn, workspace
        self.label = label or (kernel.key[0] if kernel.key else kernel.fn.__name__)  # what explain() shows
        self._local = threading.local()
        self._dims = (driver.dims(grid), driver.dims(block))

    def params(self) -> driver.Params:
        """This thread's parameter buffer for the step (a launch reads it synchronously)."""
        p = getattr(self._local, "p", None)
        if p is None:
            p = self._local.p = driver.Params(self.kernel.params)
        return p

    def run(self, values: tuple, stream: int) -> None:
        """Launch with run-time ``values`` (pa, pb, pc, then the epilogue's; the scratch address
        first if the step has ``workspace``): the parameters are built and packed only when the
        values differ from this thread's last launch of the step (a repeated call reuses them)."""
        p = self.params()
        if p.last != values:
            p.pack(self.args(*values))
            p.last = values
        grid, block = self._dims
        driver.launch(self.fn, grid, block, self.smem, stream, p.addr, self.cluster, self.dependent)

    def __repr__(self):
        return (f"Step({self.kernel.name}, grid={self.grid}, block={self.block}, smem={self.smem}, "
                f"cluster={self.cluster})")


class Plan:
    """The steps of one problem on one device; ``swap``: the operands' roles are exchanged
    (a column-major C is computed as C^T = B^T A^T, written row-major)."""
    __slots__ = ("steps", "device", "swap", "epilogue", "workspace", "variant")

    def __init__(self, steps: Sequence[Step], device: int, swap: bool):
        self.steps, self.device, self.swap = list(steps), device, swap
        self.workspace = max((st.workspace for st in self.steps), default=0)
        self.variant = ""         # the variant's name (``calls`` sets it; explain() shows it)
        self.epilogue = None      # the epilogue's spec, in the kernel's coordinates (``calls`` sets it)
        if not SIMULATOR:
            for st in self.steps:
                if st.fn is None:
                    st.fn = driver.load(st.kernel, device)

    def describe(self) -> str:
        """The variant and each launch's label, e.g. "hopper: 128x256 split-K 4; fixup"."""
        return f"{self.variant}: " + "; ".join(st.label for st in self.steps)

    def run(self, values: tuple, stream: int) -> None:
        """Enqueue the steps on ``stream`` (inside ``driver.on_device(self.device)``); ``values``:
        the addresses of A, B and C (flat arrays under the simulator), then the epilogue's values."""
        if self.swap:
            values = (values[1], values[0]) + values[2:]
        if SIMULATOR:
            for st in self.steps:
                st.kernel.simulator[st.grid, st.block](*st.args(*values))
            return
        if self.workspace:
            with_ws = (workspace.get(self.device, stream, self.workspace),) + values
            for st in self.steps:
                st.run(with_ws if st.workspace else values, stream)
            return
        for st in self.steps:
            st.run(values, stream)
