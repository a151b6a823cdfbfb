"""The product with a quantized weight, ``quant.gemm``: the checks, the streaming kernel's
configuration for a problem (``pick``), and the calls planned once and kept on the weight.

A decoder calls the same products every token, and a token's products take a few microseconds
of GPU each, so a call's host cost is part of its speed. A call is planned once per kind of
input (``calls.operand_facts``: shape, strides, dtype, address mod 32, device; with an epilogue
or ``out``, their facts too) and kept in the weight's ``plans`` (``QuantizedWeight`` is frozen:
its arrays' addresses are part of the plan; ``quant`` imports this module, not the reverse). A repeated plain call (no epilogue, no ``out``,
no ``stream``) is the input's facts, one dictionary lookup, the result's allocation and one
launch (``_Call.launch``): no imports, no argument dictionaries, no kernel lookups.
"""
from __future__ import annotations

import math
import sys

from . import driver, runtime
from .calls import _epilogue_facts, operand_facts, product
from .arrays import address, array_kind, describe, dtype_name, new_like
from .intrinsics import SIMULATOR
from .qformat import ACT_DTYPES, TILE_N, Format
from .schedule import cdiv

__all__ = ["gemm", "pick", "explain", "SMALL_ROWS"]

SMALL_ROWS = 64          # x of at most this many rows: the streaming kernel (``qgemm.MAX_ROWS``)
SMS = 132                # SMs ``pick`` plans for where it is not told (an H100 / H200)
SMEM_PER_SM = 228 * 1024  # shared memory of an SM (each resident block also reserves 1 KiB)
# per n8 tiles of x: (tm, u, stages): x's pieces and the accumulators grow with the tiles of x,
# so the shape keeps a stage of weight near a stage of x (the L2 reads of x per weight byte)
# and the registers within the launch bounds (tests/test_sass_quant.py: no spills)
SHAPES = {1: (2, 2, 4), 2: (4, 2, 3), 4: (2, 1, 4), 8: (1, 1, 3)}
_FILL = 1.5              # a stage's worth of latency before a warp's first sums (the model's)
_PLAIN_ARGS = (None, 1.0, 0.0, None, None, None, ())      # (c, alpha, beta, bias, activation, epilogue, args)


def pick(m: int, n: int, k: int, fmt: Format, sms: int = SMS, group_k: int = 128, xv: int = 16):
    """(``qgemm.QConfig``, n8 tiles of x) of the streaming kernel for an M x K x N product.

    A tile of x per 8 rows; the warp's shape from ``SHAPES`` (fewer chunks a stage where small
    groups would put many scales in registers); the blocks an SM holds from the rings' shared
    memory (``qgemm.smem_bytes``: every warp keeps ``stages`` stages in flight, so the bytes in
    flight grow with the warps resident); then the parts of K per tile (warps per block, up to
    ``MAX_SPLIT`` blocks a cluster) that finish soonest by a model: the waves the parts make
    over the resident warps (one or fewer: every warp's copies in flight at once; more: in
    turn), the stages of a part, and one and a half for a wave's first copies."""
    from .qgemm import MAX_SPLIT, SMEM_SM, QConfig, smem_bytes, x_rows
    nt = 1 if m <= 8 else 2 if m <= 16 else 4 if m <= 32 else 8
    xg = x_rows(m, nt)
    tm, u, stages = SHAPES[nt]
    while u > 1 and _scale_registers(tm, u, fmt, group_k) > 16:
        u //= 2                                    # (small groups: a stage's scales in registers)
    while tm > 1 and _scale_registers(tm, u, fmt, group_k) > 16:
        tm //= 2
    groups = cdiv(cdiv(n, TILE_N), tm)
    nit = cdiv(cdiv(k, fmt.chunk_k), u)            # stages of a tile group's K
    best = None
    for warps in (2, 4, 8):
        st = stages
        while st > 2 and smem_bytes(QConfig(tm, warps, u, 1, 1, st), fmt, nt, xv, group_k, xg) > SMEM_SM:
            st -= 1
        smem = smem_bytes(QConfig(tm, warps, u, 1, 1, st), fmt, nt, xv, group_k, xg)
        bps = min(SMEM_PER_SM // (smem + 1024), 2048 // (32 * warps), 32)
        if smem > SMEM_SM or bps < 1:
            continue
        for split in range(1, MAX_SPLIT + 1):
            if split > 1 and warps < 4:
                continue
            ip = cdiv(nit, warps * split)           # stages per part
            if split > 1 and cdiv(nit, ip) <= warps * (split - 1):
                continue                             # (a block of the cluster would have no part)
            waves = groups * split / (sms * bps)
            t = ip + _FILL if waves <= 1 else waves * ip + _FILL * math.ceil(waves)
            cost = (t, split, -warps)
            if best is None or cost < best[0]:
                best = (cost, QConfig(tm, warps, u, split, bps, st))
    return best[1], nt


def _scale_registers(tm: int, u: int, fmt: Format, group_k: int) -> int:
    """Registers the double-buffered scales (and zero points) of an iteration take."""
    groups = max(1, u * fmt.chunk_k // group_k)
    return 2 * (2 * tm * groups) * (2 if fmt.zeros else 1)


def _chunks_per_part(cfg, kcv: int) -> int:
    return cdiv(cdiv(kcv, cfg.u), cfg.parts) * cfg.u


def _x_access(k: int, fmt: Format, m: int, lda: int, align: int) -> int:
    """``qgemm.X_ACCESS`` for x: 16- or 8-byte loads of a thread's runs where K is whole chunks
    and the rows start that aligned, else element by element."""
    if k % fmt.chunk_k == 0:
        for v in (16, 8):
            if align % v == 0 and (m == 1 or lda % (v // 2) == 0):
                return v
    return 0


class _Call:
    """One product planned for a weight and a kind of input: the launch (or the large
    product's closure), the result's shape and type, the weight's addresses and the bound
    epilogue (without a call's arrays)."""
    __slots__ = ("plan", "bound", "m", "n", "odt", "dev", "large", "kind", "weight", "tdt")

    def __init__(self, plan, bound, m, n, odt, dev, large, kind, weight):
        self.plan, self.bound, self.m, self.n, self.odt, self.dev = plan, bound, m, n, odt, dev
        self.large, self.kind, self.weight = large, kind, weight
        self.tdt = None
        if kind == "torch":
            import torch
            self.tdt = getattr(torch, odt)

    def launch(self, x, px, out=None, po=0, stream=None, run=None, epi=_PLAIN_ARGS):
        """The product of ``x`` (at ``px``) on the caller's current stream (or ``stream``), into
        a new result (or ``out`` at ``po``); ``run``: the epilogue's run-time values, ``epi``: the
        call's epilogue arguments (for the large product's ``gemm``)."""
        with driver.on_device(self.dev):
            st = runtime.current_stream(self.kind, self.dev) if stream is None else runtime.stream_handle(stream)
            if self.large is not None:
                return self.large(x, out, st, stream, epi)
            if out is None:
                if self.tdt is not None:
                    out = x.new_empty((self.m, self.n), dtype=self.tdt)
                    po = out.data_ptr()
                else:
                    out = new_like(self.kind, x, self.m, self.n, self.odt, handle=st, device=self.dev)
                    po = address(out, self.kind)
            if self.plan is not None:
                ep = (0,) if self.bound is None else self.bound.values(self.bound.spec, run)
                self.plan.run((px,) + self.weight + (po,) + ep, st)
        return out


def _needs_grad(x, bias) -> bool:
    torch = sys.modules.get("torch")
    return torch.is_grad_enabled() and (x.requires_grad or getattr(bias, "requires_grad", False))


def gemm(x, qw, *, out=None, out_dtype=None, stream=None, c=None, alpha: float = 1.0,
         beta: float = 0.0, bias=None, activation=None, epilogue=None, epilogue_args=(), config=None):
    """``x @ w.T`` (``F.linear``'s product) with the quantized weight ``qw`` of w (N, K), fused
    with ``numba_tc.gemm``'s epilogue: ``epilogue(act(alpha * x @ w.T + beta * c + bias), row,
    col, *epilogue_args)`` (bias of length N per column, as ``nn.Linear``'s).

    x: (M, K) bfloat16 or float16, a GPU array (torch, CuPy, Numba) of ``qw``'s kind and device,
    rows of unit stride. M <= 64 (decoding): the weight-streaming kernel (``qgemm``); larger: the
    weight dequantized to x's type in one pass into a temporary, then ``numba_tc.gemm``. The
    result: (M, N) of x's type (or ``out_dtype`` float32), new or ``out`` (row-major). Runs on
    the caller's current stream (or ``stream``), caches plans on the weight, never
    synchronizes. ``config``: a ``qgemm.QConfig`` (benchmarks, tests), else ``pick``'s.
    Inference only: torch tensors that need a gradient raise TypeError."""
    kind = array_kind(x)
    if kind == "numpy" or SIMULATOR:
        raise TypeError("quant.gemm takes GPU arrays (torch, CuPy, Numba); for NumPy see quant.reference")
    plans = getattr(qw, "plans", None)
    if type(plans) is not dict:
        raise TypeError(f"qw must be a QuantizedWeight (quant.quantize), got {type(qw).__name__}")
    fx, px = operand_facts(x, kind)
    plain = (c is None and bias is None and activation is None and epilogue is None and alpha == 1.0
             and beta == 0.0 and not epilogue_args)
    if plain and out is None and config is None:                  # a decoder's call: the short path
        hit = plans.get((fx, out_dtype))
        if hit is not None:
            if kind == "torch" and _needs_grad(x, None):
                _no_grad()
            return hit.launch(x, px, stream=stream)
    if qw.kind != kind:
        raise TypeError(f"x is a {kind} array but the weight's arrays are {qw.kind}: use one kind")
    if kind == "torch" and _needs_grad(x, bias):
        _no_grad()
    fo, po = (None, 0) if out is None else operand_facts(out, kind)
    ekey, run = (None, None)
    if not plain:
        ekey, run = _epilogue_facts(kind, c, alpha, beta, bias, activation, epilogue, epilogue_args)
    short = plain and out is None and config is None
    key = (fx, out_dtype) if short else (fx, fo, dtype_name(out_dtype) if out_dtype is not None else None,
                                          ekey, config)
    cacheable = plain or run is not None          # (an epilogue whose facts could not be read: no cache)
    try:
        hit = qw.plans.get(key) if cacheable else None
    except TypeError:                             # (an unhashable argument)
        hit, cacheable = None, False
    epi = (c, alpha, beta, bias, activation, epilogue, epilogue_args)
    if hit is None:
        hit = _plan(x, qw, out, out_dtype, kind, epi, plain, config)
        if hit.bound is not None:
            if run is None:
                run = hit.bound.run
            hit.bound = hit.bound.fixed()         # (the cache keeps no call's arrays)
        if cacheable:
            if len(qw.plans) > 256:
                qw.plans.clear()
            qw.plans[key] = hit
    return hit.launch(x, px, out, po, stream, run, epi)


def explain(x, qw, out_dtype=None) -> str:
    """What a plain ``gemm(x, qw)`` runs (after one such call planned it): the streaming
    kernel's configuration, or the dequantizing pass and the GEMM."""
    hit = qw.plans.get((operand_facts(x, array_kind(x))[0], out_dtype))
    if hit is None:
        return "(not planned yet)"
    if hit.large is not None:
        return f"dequantize {qw.fmt.name}; gemm"
    return "" if hit.plan is None else hit.plan.describe()


def _no_grad():
    raise TypeError("quantized products are for inference: run them under torch.no_grad() "
                    "(a QuantizedWeight has no gradient)")


def _plan(x, qw, out, out_dtype, kind, epi_args, plain, config) -> _Call:
    """Check a call and plan it."""
    from .epilogue import PLAIN
    from .epilogue_args import bind
    from .plan import Plan, Step
    from .qgemm import MAX_ROWS, qgemm_kernel, smem_bytes, words_aligned, x_rows
    _, shape, strides, dt, _ = describe(x, "x")
    if len(shape) != 2:
        raise ValueError(f"x must be 2-D (rows, K), got shape {tuple(shape)}")
    if dt not in ACT_DTYPES:
        raise TypeError(f"x has dtype {dt}; quantized products take {' or '.join(ACT_DTYPES)} activations")
    m, k = (int(v) for v in shape)
    if k != qw.k:
        raise ValueError(f"x has K = {k} but the weight is {qw.n}x{qw.k} (out_features x in_features)")
    if m > 1 and strides[1] != 1 or (m == 1 and k > 1 and strides[1] != 1):
        raise ValueError(f"x must have unit stride along K, got strides {tuple(strides)}")
    lda = int(strides[0]) if m > 1 else k
    odt = dt if out_dtype is None else dtype_name(out_dtype)
    if odt not in (dt, "float32"):
        raise TypeError(f"out_dtype {odt}: the result of {dt} activations is {dt} or float32")
    n = qw.n
    ldc = n
    if out is not None:
        _, oshape, ostr, odt2, _ = describe(out, "out")
        if tuple(oshape) != (m, n):
            raise ValueError(f"out has shape {tuple(oshape)}, expected {(m, n)}")
        if out_dtype is not None and odt2 != odt:
            raise TypeError(f"out has dtype {odt2} but out_dtype={odt}")
        odt = odt2
        if odt not in (dt, "float32"):
            raise TypeError(f"out has dtype {odt}; the result of {dt} activations is {dt} or float32")
        if n > 1 and ostr[1] != 1:
            raise ValueError("out must be row-major (unit stride along N)")
        ldc = int(ostr[0]) if m > 1 else n
    dev = runtime.device_of(x, kind)
    for name, a in zip(("packed", "scales", "zeros"), qw.arrays()):
        if a is not None and runtime.device_of(a, kind) != dev:
            raise ValueError(f"the weight's {name} is on device {runtime.device_of(a, kind)}, x on {dev}")
    weight = tuple(0 if a is None else address(a, kind) for a in qw.arrays())
    bound = None
    if not plain:
        bound = bind(kind, m, n, dt, odt, dev, *epi_args, k=k)
    if m > MAX_ROWS or m > SMALL_ROWS:
        return _Call(None, bound, m, n, odt, dev, _large(qw, dt, kind, dev, odt), kind, weight)
    if m == 0:
        return _Call(None, bound, m, n, odt, dev, None, kind, weight)
    fmt = qw.fmt
    with driver.on_device(dev):
        sms = driver.sm_count(dev)
    xv = _x_access(k, fmt, m, lda, operand_facts(x, kind)[0][3])
    cfg, nt = pick(m, n, k, fmt, sms, qw.group_k, xv)
    cfg = config if config is not None else cfg
    np_, kp, kc = qw.padded
    kcv = cdiv(k, fmt.chunk_k)
    cpp = _chunks_per_part(cfg, kcv)
    ntiles = np_ // TILE_N
    spec = bound.spec if bound is not None else None
    xg = x_rows(m, nt)
    wa = words_aligned(n, weight[1], weight[2])
    kern = qgemm_kernel(cfg, fmt, dt, qw.scale_dtype, odt, nt, qw.group_k, xv, spec or PLAIN, xg, wa)
    smem = smem_bytes(cfg, fmt, nt, xv, qw.group_k, xg)
    groups = qw.groups
    grid = cdiv(ntiles, cfg.tm) * cfg.split

    def args(px, pp, ps, pz, pc, *ep):
        return (px, pp, ps, pz, pc, m, n, k, lda, ldc, kc, kcv, cpp, ntiles, groups, *ep)
    with driver.on_device(dev):
        plan = Plan([Step(kern, grid, cfg.threads, args, smem=smem, cluster=cfg.split,
                          label=f"qgemm {fmt.name} {cfg} nt={nt} x{xv}")], dev, False)
    plan.variant = "quant"
    return _Call(plan, bound, m, n, odt, dev, None, kind, weight)


def _large(qw, dt, kind, dev, odt):
    """The product of many rows: the weight dequantized to ``dt`` into a temporary (Npad x Kpad,
    row-major), then ``numba_tc.gemm`` on its (K, N) view with the epilogue."""
    from .plan import Plan, Step
    from .qgemm import DEQUANT_THREADS, dequant_kernel
    np_, kp, kc = qw.padded
    ntiles = np_ // TILE_N
    kern = dequant_kernel(qw.fmt, dt, qw.scale_dtype, qw.group_k)
    grid = cdiv(ntiles * kc * 32, DEQUANT_THREADS)
    n, k = qw.n, qw.k
    pw_args = tuple(0 if a is None else address(a, kind) for a in qw.arrays())

    def args(pp, ps, pz, pw):
        return (pp, ps, pz, pw, n, kp, kc, ntiles, qw.groups)
    with driver.on_device(dev):
        plan = Plan([Step(kern, grid, DEQUANT_THREADS, args, label=f"dequantize {qw.fmt.name}")], dev, False)

    def run(x, out, st, stream, epi):
        c, alpha, beta, bias, activation, epilogue, epilogue_args = epi
        w = new_like(kind, x, np_, kp, dt, handle=st, device=dev)
        plan.run(pw_args + (address(w, kind),), st)
        wt = w[:n, :k].T
        return product(x, wt, out=out, out_dtype=odt, stream=st if stream is None else stream, c=c, alpha=alpha,
                       beta=beta, bias=bias, activation=activation, epilogue=epilogue, epilogue_args=epilogue_args)
    return run
