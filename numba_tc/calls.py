"""A call's path below the public entry (``api``): the operands' facts (kind, shapes, strides,
dtypes, address alignment, device) are the key of a cache of ``_Call``s, with the planner's
``hopper.Policy`` (an A/B of a switch is never answered by a plan made under the other); on a
miss, everything a user can get wrong is checked, with an exception that names the problem, a
variant is picked and its launches planned (``plan.Plan``); on a hit the call allocates the
result, resolves the caller's stream on the operands' device (``runtime``) and enqueues the
launches (``driver``). ``product`` is ``gemm`` without the torch operator's path (``api``
decides that): what ``numba_tc.torch`` and ``prepared`` run.
"""
from __future__ import annotations

import contextlib
import weakref

import numpy as np

from . import arrays, batch, checks, driver, registry, runtime, user_epilogue
from .arrays import array_kind, as_matrix
from .epilogue import PLAIN, Run, element_reads
from .epilogue_args import bind, is_plain, validate, without_function
from .errors import CaptureError, EpilogueError
from .hopper.policy import current as current_policy
from .intrinsics import SIMULATOR
from .plan import Plan
from .registry import candidates, get_variant, input_precision, pick, register
from .runtime import default_device, device_capability

__all__ = ["product", "describe", "operand_facts", "batched_launch", "NO_EPILOGUE"]


class _Problem(checks.Operands):
    """A call's operands checked (``checks.Operands``; with ``epi_args`` on NumPy arrays or under
    the simulator, its epilogue's arguments too, before a GPU is needed), then their device and
    the candidate variants."""

    def __init__(self, a, b, variant, out, out_dtype, allow_tf32, a_cast=False, epi_args=None):
        super().__init__(a, b, variant, out, out_dtype, a_cast)
        if variant != "auto":
            get_variant(variant)                 # unknown names fail before the GPU is touched
        host = self.kind == "numpy" or SIMULATOR
        if epi_args is not None and host:
            validate(self.kind, self.m, self.n, self.dtype, self.out_dtype, None, *epi_args, k=self.k)
        if SIMULATOR:
            checks.simulator_size(self.m, self.n, self.k)
        self.device = default_device() if host else checks.device_of(self.kind, a, b, out)
        cc = device_capability(self.device)
        self.cands = candidates(variant, input_precision(self.dtype, variant, allow_tf32), self.out_dtype, cc)
        self.named = variant != "auto"
        self.a_cast = a_cast
        if a_cast:
            self.cands = [v for v in self.cands if v.a_cast]

    def plan(self, A, B, C, epi=None) -> Plan:
        """The launches; ``epi``: the call's epilogue (``epilogue_args.Bound``), or None."""
        swap = C.trans          # column-major output: C^T = B^T A^T, written row-major
        if swap and epi is not None and epi.spec.scales == "block":
            raise ValueError("block-wise scales need a row-major out: a column-major one is written as "
                             "C^T = B^T A^T, whose operands' blocks are the other way round")
        if swap:
            A, B, C = B.transposed(), A.transposed(), C.transposed()
        if self.a_cast and (swap or not any(v.auto_takes(A, B, C) for v in self.cands)):
            raise _NotFused()
        v = pick(self.cands, A, B, C, self.named)
        spec = None if epi is None else epi.spec.flipped() if swap else epi.spec
        plan = _built(spec, lambda: Plan(v.plan(A, B, C, self.device, **({} if spec is None else {"epi": spec})),
                                         self.device, swap), v.name)
        plan.variant = v.name
        if spec is not None:
            plan.epilogue = spec
        checks.launchable(plan, v.name)
        return plan


def _built(spec, make, variant: str):
    """``make()``, a plan whose kernels are built with the epilogue ``spec`` (or None): a user's
    function is compiled alone before any kernel with it is (``user_epilogue.before_build``), and
    a Numba error building the kernel is an EpilogueError naming the function."""
    user = None if spec is None else spec.user
    try:
        with user_epilogue.before_build(user):
            return make()
    except Exception as e:
        if user is None or not _numba_error(e):
            raise
        raise EpilogueError(f"the epilogue function {user_epilogue.where(user.fn)} does not compile into the "
                            f"{variant!r} kernel:\n{user_epilogue.numba_message(e)}") from None


class _NotFused(Exception):
    """``prepare(..., a_cast=True)`` for a product no variant reads a float32 a for."""


def _numba_error(e: Exception) -> bool:
    return type(e).__module__.startswith("numba")


class _Call:
    """What a repeated call needs: the device, the plan (None for an empty problem; ``zero``:
    K == 0, the result is zeros, before any epilogue), and how to make and check the result."""
    __slots__ = ("device", "plan", "m", "n", "out_dtype", "spans", "zero", "epi")

    def __init__(self, device, plan, m, n, out_dtype, spans, zero=False):
        self.device, self.plan, self.m, self.n, self.out_dtype, self.spans = device, plan, m, n, out_dtype, spans
        self.zero = zero
        self.epi = None           # the epilogue without its arrays (``Bound.fixed``), or None


class _Same:
    """An object as part of a cache key, equal only to itself (two variants may differ only in
    their planner; two functions in what they close over). Held by the key, so that its id is
    never reused by a new object while the entry lives (a dropped variant's plan would run for
    it); with ``weak``, not kept alive by the key (a closure made anew each step must not pin
    what it captured), and once it is gone no new object equals it, even at its address."""
    __slots__ = ("ref", "h")

    def __init__(self, obj, weak: bool = False):
        try:
            self.ref = weakref.ref(obj) if weak else lambda: obj
        except TypeError:                         # (no weak references: held)
            self.ref = lambda: obj
        self.h = id(obj)

    def __hash__(self):
        return self.h

    def __eq__(self, other):
        return isinstance(other, _Same) and self.ref() is not None and self.ref() is other.ref()


def _variant_key(variant):
    return variant if isinstance(variant, str) else _Same(variant)


_CALLS: dict = {}
CALL_CACHE_SIZE = 4096
registry.on_change(_CALLS.clear)


_UNKEYED = object()     # an epilogue whose facts could not be read: checked by ``bind`` every call
_SCALARS = (int, float, np.float64)                 # what alpha and beta may be (``bind``)
_NUMBERS = (int, float, np.float32, np.float64)     # numbers among epilogue_args


def _epilogue_facts(kind, c, alpha, beta, bias, activation, epilogue, epilogue_args, scales=None) -> tuple:
    """(key, run) of a call's epilogue on GPU arrays: ``key``, what decides its checks and kernel
    (its arrays' facts and kinds, which of alpha and beta differ from 1 and 0, the activation,
    the function, the types of its numbers); ``run``, what may change between calls with the
    same key (``epilogue.Run``). (_UNKEYED, None) for arguments ``bind`` would
    refuse, whose errors it then gives. (An unhashable key: ``_gemm_gpu`` does not cache it.)"""
    if type(alpha) not in _SCALARS or type(beta) not in _SCALARS:
        return _UNKEYED, None
    try:
        fc = fb = None
        pc = pb = 0
        if c is not None and beta != 0.0:
            fc, pc = operand_facts(c, kind)
            fc = (type(c), fc)
        if bias is not None:
            fb, pb = operand_facts(bias, kind)
            fb = (type(bias), fb)
        ukey, urun = [], []
        for x in epilogue_args:
            t = type(x)
            if t in _NUMBERS or t is bool:
                ukey.append(t)
                urun.append(x)
            else:
                f, p = operand_facts(x, kind)
                ukey.append((t, f))
                urun.append(p)
        skey = srun = None
        if scales is not None:                    # (one of them None: unkeyed, ``bind`` says so)
            facts = [operand_facts(x, kind) for x in scales]
            skey = tuple((type(x), f) for x, (f, _) in zip(scales, facts))
            srun = tuple(p for _, p in facts)
    except Exception:             # (an argument of another kind, ...)
        return _UNKEYED, None
    key = (alpha != 1.0, beta != 0.0, fc, fb, activation, None if epilogue is None else _Same(epilogue, weak=True),
           type(epilogue_args), tuple(ukey), skey)
    return key, Run(scales=srun, alpha=float(alpha), c=pc, beta=float(beta), bias=pb, user=tuple(urun))


def _cached(cache: dict, key) -> tuple:
    """(the entry cached under ``key`` (whose last part is the epilogue's, ``_epilogue_facts``) or
    None, the key to store a new one under: None for an epilogue whose facts could not be read
    or an unhashable argument, checked on every call)."""
    if key[-1] is _UNKEYED:
        return None, None
    try:
        return cache.get(key), key
    except TypeError:
        return None, None


def _cache_miss(cache: dict, key, epi, make):
    """A miss's entry: ``make()``'s, or for a user epilogue function the entry of its code, when
    another function object with the same code made one (a closure made anew each step shares
    its first call); kept under ``key`` (unless None) and the code's key."""
    by_code = key[:-1] + (epi.key,) if key is not None and epi is not None and epi.spec.user is not None else None
    entry = None if by_code is None else cache.get(by_code)
    if entry is None:
        entry = make()
    if len(cache) >= CALL_CACHE_SIZE:
        cache.clear()
    if by_code is not None:
        cache[by_code] = entry
    if key is not None:
        cache[key] = entry
    return entry


def operand_facts(x, kind: str) -> tuple:
    """What decides a call about one GPU operand, cheaply: (shape, strides, dtype, address
    alignment, device), and its address."""
    if kind == "torch":
        p = x.data_ptr()
        return (x.shape, x.stride(), x.dtype, p & 31, x.get_device()), p
    if kind == "numba":
        facts = arrays.numba_facts(x)
        if facts is not None:
            return facts
    iface = x.__cuda_array_interface__
    p = iface["data"][0]
    return (iface["shape"], iface.get("strides"), iface["typestr"], p & 31, runtime.device_of(x, kind)), p


def product(a, b, variant="auto", out=None, out_dtype=None, stream=None, allow_tf32=False, c=None, alpha=1.0,
            beta=0.0, bias=None, activation=None, epilogue=None, epilogue_args=(), scale_a=None, scale_b=None):
    """``api.gemm``'s product (its arguments, their meaning and errors), without the torch
    operator's path: ``api.gemm`` takes that for tensors that need a gradient or under
    torch.compile, and the operator runs this."""
    scales = None if scale_a is None and scale_b is None else (scale_a, scale_b)
    if batch.is_batched(a, b):
        if scales is not None:
            raise ValueError("scale_a and scale_b: batched fp8 products are not supported yet; call gemm "
                             "per matrix")
        return batch.batched_gemm(a, b, variant, out, out_dtype, stream, allow_tf32, dict(
            c=c, alpha=alpha, beta=beta, bias=bias, activation=activation, epilogue=epilogue,
            epilogue_args=epilogue_args), product, batched_launch)
    kind = array_kind(a)
    epi_args = _epilogue_of(c, alpha, beta, bias, activation, epilogue, epilogue_args, scales)
    if kind == "numpy" or SIMULATOR:
        return _gemm_copying(a, b, variant, out, out_dtype, stream, allow_tf32, epi_args)
    return _gemm_gpu(a, b, variant, out, out_dtype, stream, allow_tf32, kind, epi_args)


def _epilogue_of(c, alpha, beta, bias, activation, epilogue, epilogue_args, scales):
    """A call's epilogue arguments as one tuple (``bind``'s), or None for the plain product."""
    if scales is not None or not is_plain(c, alpha, beta, bias, activation, epilogue):
        return c, alpha, beta, bias, activation, epilogue, epilogue_args, scales
    without_function(epilogue_args)
    return None


def _lookup(a, b, variant, out, out_dtype, allow_tf32, kind, epi_args, a_cast=False) -> tuple:
    """(the cached call for these operands' facts (checked and planned on a miss), this call's
    epilogue values (``epilogue.Run``), the addresses of a, b and out); ``a_cast``: ``prepare``'s."""
    fa, pa = operand_facts(a, kind)
    fb, pb = operand_facts(b, array_kind(b)) if array_kind(b) == kind else (None, 0)
    fo, po = (None, 0) if out is None or array_kind(out) != kind else operand_facts(out, kind)
    ekey, run = (None, None) if epi_args is None else _epilogue_facts(kind, *epi_args)
    key = (_variant_key(variant), out_dtype, (allow_tf32, a_cast), kind, fa, fb, fo, out is None,
           current_policy().key, ekey)
    call, key = _cached(_CALLS, key)
    if call is None:
        epi = None
        if epi_args is not None:                  # checked, described; the cache keeps it without arrays
            pr = _Problem(a, b, variant, out, out_dtype, allow_tf32, a_cast)
            epi = bind(kind, pr.m, pr.n, pr.dtype, pr.out_dtype, pr.device, *epi_args, k=pr.k)
            run = epi.run

        def make():
            new = _prepare(a, b, variant, out, out_dtype, allow_tf32, kind, epi, a_cast)
            new.epi = None if epi is None else epi.fixed()
            return new
        call = _cache_miss(_CALLS, key, epi, make)
    return call, run, pa, pb, po


def _gemm_gpu(a, b, variant, out, out_dtype, stream, allow_tf32, kind, epi_args):
    """A call on GPU arrays (``epi_args``: its epilogue's arguments, or None): the cached call,
    the result, the launches on the caller's stream."""
    if stream is not None:
        checks.stream_for(stream, kind, None)         # (before a plan is made: its device, below)
    if out is not None and epi_args is not None:
        _reads_out(out, epi_args)
    call, run, pa, pb, po = _lookup(a, b, variant, out, out_dtype, allow_tf32, kind, epi_args)
    if out is not None and call.spans is not None:
        sa, sb, so = call.spans
        if _overlap(po, so, pa, sa) or _overlap(po, so, pb, sb):
            raise ValueError("out overlaps a or b: the result would overwrite its own inputs")
    with driver.on_device(call.device):
        st = _stream(kind, call.device, stream)
        if out is None:
            out = arrays.new_like(kind, a, call.m, call.n, call.out_dtype, handle=st, device=call.device)
            po = arrays.address(out, kind)
        if call.plan is None:                     # an empty problem: zeros, or nothing to do
            if call.zero:
                if epi_args is not None:
                    raise ValueError("K == 0 with an epilogue: the product is empty; apply the "
                                     "epilogue to zeros directly")
                arrays.zero_fill(out, kind)
            return out
        call.plan.run(_values(pa, pb, po, call.epi, run, call.plan), st)
    return out


_BATCHED: dict = {}
NO_EPILOGUE = dict(c=None, alpha=1.0, beta=0.0, bias=None, activation=None, epilogue=None, epilogue_args=())


def batched_launch(a0, b0, o0, variant, out_dtype, allow_tf32, bt, epi_kw, rows):
    """The batched kernel's launch for these operands (``batch.batched_gemm``'s planner): a
    callable ``run(a0, b0, o0, stream)``, or None (NumPy, the simulator, a variant without a
    batched kernel, operands it cannot take). Cached, like 2-D calls, by the operands' facts."""
    kind = array_kind(a0)
    if kind == "numpy" or SIMULATOR:
        return None
    epi_args = tuple(epi_kw[k] for k in ("c", "alpha", "beta", "bias", "activation", "epilogue", "epilogue_args"))
    ekey, erun = (None, None) if is_plain(*epi_args[:6]) else _epilogue_facts(kind, *epi_args)
    key = (_variant_key(variant), out_dtype, allow_tf32, kind, bt, operand_facts(a0, kind)[0],
           operand_facts(b0, kind)[0], operand_facts(o0, kind)[0], current_policy().key, ekey)
    hit, key = _cached(_BATCHED, key)
    if hit is None:                               # a miss (a cached (None, None): no batched kernel)
        pr = _Problem(a0, b0, variant, o0, out_dtype, allow_tf32)
        epi = None if ekey is None else bind(kind, rows, pr.n, pr.dtype, pr.out_dtype, pr.device, *epi_args)
        erun = None if epi is None else epi.run
        hit = _cache_miss(_BATCHED, key, epi, lambda: (_batched_plan(pr, a0, b0, o0, bt, epi),
                                                       None if epi is None else epi.fixed()))
    plan, epi = hit
    if plan is None:
        return None

    def run(a0, b0, o0, stream):
        with driver.on_device(plan.device):
            p = (arrays.address(x, kind) for x in (a0, b0, o0))
            plan.run(_values(*p, epi, erun, plan), _stream(kind, plan.device, stream))
    run.describe = plan.describe
    return run


def _stream(kind: str, dev: int, stream) -> int:
    """The raw stream a call on ``dev`` runs on: ``stream``, or the caller's current one."""
    return checks.stream_for(stream, kind, dev) if stream is not None else runtime.current_stream(kind, dev)


def _values(pa: int, pb: int, pc: int, epi, run, plan) -> tuple:
    """A plan's run-time values: the operands' addresses, then the epilogue's (``epi``: bound,
    ``run``: this call's ``epilogue.Run``)."""
    return (pa, pb, pc) + ((0,) if epi is None else epi.values(plan.epilogue, run, plan.swap))


def _batched_plan(pr, a0, b0, o0, bt, epi):
    """The batched kernel's plan, or None (``batched_launch``)."""
    A, B, C = (as_matrix(x, n, described=d) for x, n, d in (
        (a0, "a", pr.desc_a), (b0, "b", pr.desc_b), (o0, "out", pr.desc_out)))
    with driver.on_device(pr.device):
        v = pick(pr.cands, A, B, C, pr.named)
        if not v.batched:
            return None
        spec = PLAIN if epi is None else epi.spec
        steps = _built(spec, lambda: v.plan(A, B, C, pr.device, epi=spec, batch=bt), v.name)
        if steps is None:
            return None
        plan = _built(spec, lambda: Plan(steps, pr.device, False), v.name)
    plan.variant, plan.epilogue = v.name, spec
    return plan


def describe(a, b, variant, out, out_dtype, allow_tf32, epi_args) -> str:
    """``api.explain`` of a 2-D call (``epi_args``: ``_epilogue_of``'s): its plan's description,
    nothing run (the plan is made, so its kernels are compiled or loaded; the call cache is left
    alone)."""
    kind = array_kind(a)
    if kind == "numpy" or SIMULATOR:
        return _explain_copying(a, b, variant, out, out_dtype, allow_tf32, epi_args)
    epi = None
    if epi_args is not None:
        pr = _Problem(a, b, variant, out, out_dtype, allow_tf32)
        epi = bind(kind, pr.m, pr.n, pr.dtype, pr.out_dtype, pr.device, *epi_args, k=pr.k)
    call = _prepare(a, b, variant, out, out_dtype, allow_tf32, kind, epi)
    return "empty: nothing to launch" if call.plan is None else call.plan.describe()


def _explain_copying(a, b, variant, out, out_dtype, allow_tf32, epi_args) -> str:
    """``explain`` of a call ``_gemm_copying`` runs: planned for the operands as they are on the
    device (NumPy arrays as their copies would be, ``arrays.as_copied``), nothing copied or run."""
    pr = _Problem(a, b, variant, out, out_dtype, allow_tf32, epi_args=epi_args)
    m, n, k = pr.m, pr.n, pr.k
    if m == 0 or n == 0 or k == 0:
        return "empty: nothing to launch"
    mat = arrays.as_copied if pr.kind == "numpy" else as_matrix
    A, B = mat(a, "a", described=pr.desc_a), mat(b, "b", described=pr.desc_b)
    C = arrays.Matrix(None, m, n, max(n, 1), False, pr.out_dtype, 0) if out is None else \
        mat(out, "out", described=pr.desc_out)
    with contextlib.nullcontext() if SIMULATOR else driver.on_device(pr.device):
        epi = None if epi_args is None else bind(pr.kind, m, n, pr.dtype, pr.out_dtype, pr.device, *epi_args, k=k)
        return pr.plan(A, B, C, epi).describe()


def _reads_out(out, epi_args) -> None:
    """ValueError when ``out`` overlaps an array the epilogue (``epi_args``) reads
    (``checks.out_aliases``)."""
    c, _, beta, bias, _, fn, args, scales = epi_args
    checks.out_aliases(out, c, beta, bias, args, scales, frozenset() if fn is None else element_reads(fn))


def _overlap(p, span, q, span_q) -> bool:
    return span > 0 and span_q > 0 and p < q + span_q and q < p + span


def _prepare(a, b, variant, out, out_dtype, allow_tf32, kind, epi=None, a_cast=False) -> _Call:
    """Check a GPU call and plan it (a miss of the call cache); ``epi``: its epilogue."""
    pr = _Problem(a, b, variant, out, out_dtype, allow_tf32, a_cast)
    m, n, k = pr.m, pr.n, pr.k
    A, B = as_matrix(a, "a", described=pr.desc_a), as_matrix(b, "b", described=pr.desc_b)
    spans = None
    if out is not None:
        C = as_matrix(out, "out", described=pr.desc_out)
        spans = (A.span_bytes, B.span_bytes, C.span_bytes)
    else:                                         # the result: new, C-contiguous, aligned
        C = arrays.Matrix(None, m, n, max(n, 1), False, pr.out_dtype, 0)
    if out is not None and (C.overlaps(A) or C.overlaps(B)):
        raise ValueError("out overlaps a or b: the result would overwrite its own inputs")
    if m == 0 or n == 0 or k == 0:
        return _Call(pr.device, None, m, n, pr.out_dtype, spans, zero=k == 0)
    with driver.on_device(pr.device):
        plan = pr.plan(A, B, C, epi)
    return _Call(pr.device, plan, m, n, pr.out_dtype, spans)


def _gemm_copying(a, b, variant, out, out_dtype, stream, allow_tf32, epi_args=None):
    """NumPy operands (copied to the device and back on the stream, which is then synchronized),
    and every call under the simulator; ``epi_args``: the epilogue's arguments, if any."""
    pr = _Problem(a, b, variant, out, out_dtype, allow_tf32, epi_args=epi_args)
    m, n, k, kind = pr.m, pr.n, pr.k, pr.kind
    if kind == "numpy":
        result = out if out is not None else np.empty((m, n), dtype=arrays.np_dtype(pr.out_dtype))
        if out is not None and (np.shares_memory(out, a) or np.shares_memory(out, b)):
            raise ValueError("out overlaps a or b: the result would overwrite its own inputs")
    else:
        result = out if out is not None else arrays.new_like(kind, a, m, n, pr.out_dtype)
    if m == 0 or n == 0:
        return result
    if k == 0:
        if epi_args is not None:
            raise ValueError("K == 0 with an epilogue: the product is empty; apply the epilogue to zeros directly")
        arrays.zero_fill(result, kind)
        return result
    st = checks.stream_for(stream, kind, pr.device) if stream is not None else 0
    if kind == "numpy" and not SIMULATOR and runtime.capturing(st):
        raise CaptureError("NumPy operands are copied to the GPU and back with a synchronization, "
                           "which a CUDA graph cannot capture: pass GPU arrays")
    ctx = contextlib.nullcontext() if SIMULATOR else driver.on_device(pr.device)
    with ctx:
        if stream is None and not SIMULATOR:
            st = runtime.current_stream(kind, pr.device)
        nst = 0 if SIMULATOR else runtime.numba_stream(st)
        A = as_matrix(a, "a", stream=nst, described=pr.desc_a)
        B = as_matrix(b, "b", stream=nst, described=pr.desc_b)
        if kind == "numpy":
            dev_out = arrays.device_out(out, m, n, pr.out_dtype, nst)
            C = as_matrix(dev_out, "out", raw_bf16=pr.out_dtype == "bfloat16")
        else:
            C = as_matrix(result, "out", described=pr.desc_out)
            if out is not None and (C.overlaps(A) or C.overlaps(B)):
                raise ValueError("out overlaps a or b: the result would overwrite its own inputs")
            if out is not None and epi_args is not None:
                _reads_out(out, epi_args)
        epi = None if epi_args is None else bind(kind, m, n, pr.dtype, pr.out_dtype, pr.device, *epi_args,
                                                   stream=nst, k=pr.k)
        plan = pr.plan(A, B, C, epi)
        handle = (lambda x: x.data) if SIMULATOR else (lambda x: x.ptr)
        try:
            plan.run(_values(handle(A), handle(B), handle(C), epi, None, plan), st)
        except Exception as e:        # (the simulator: an exception in a device thread)
            fn = epi.spec.user.fn if epi is not None and epi.spec.user is not None else None
            if fn is None or not SIMULATOR or not user_epilogue.raised_in(e, fn):
                raise
            raise EpilogueError(f"the epilogue function {user_epilogue.where(fn)} raised {type(e).__name__} in "
                                f"the simulator's kernel: {e}") from None
        if kind == "numpy":
            host = arrays.to_host(dev_out, pr.out_dtype, stream=nst)
            if not SIMULATOR:
                nst.synchronize()
            result[...] = host
    return result


def _register_builtin():
    from . import gemv, hopper, simt, tensorcore
    for v in simt.RUNGS + tensorcore.RUNGS + hopper.RUNGS + gemv.RUNGS:
        register(v)


_register_builtin()
