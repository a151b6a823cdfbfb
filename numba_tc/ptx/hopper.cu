// Hopper (sm_90a) primitives: mbarrier, TMA, wgmma, setmaxnreg; one small function per instruction.
//
// Same conventions as mma.cu: Numba ABI (extern "C" __device__ int f(T* ret, ...)), shared memory
// as 32-bit shared-window byte addresses, global memory (tensor maps) as 64-bit addresses, the
// accumulator a cuda.local.array passed as pointer + element offset (registers after LTO inlining).
// Arguments that PTX needs as immediates (wgmma transpose flags, wait_group and setmaxnreg counts)
// are plain ints picked by a switch: the kernels pass compile-time constants and, inlined under
// LTO, only one branch is left.
//
// wgmma and setmaxnreg exist only on sm_90a: linking this file for plain sm_90 fails
// (tests/test_sass_hopper.py checks that the arch gate is real).
typedef unsigned int u32;
typedef unsigned long long u64;

// ---------------------------------------------------------------------------------------------
// mbarrier (PTX ISA 9.7.13.15): a 64-bit shared-memory barrier with an arrival count and a
// transaction (byte) count; a phase completes when both reach zero, and its parity flips.
// ---------------------------------------------------------------------------------------------
extern "C" __device__ int mbar_init(int* ret, int bar, int count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" :: "r"(bar), "r"(count) : "memory");
    return 0;
}
// Make the initialised barriers visible to the async proxy (TMA) and the rest of the cluster.
extern "C" __device__ int mbar_fence_init(int* ret) {
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    return 0;
}
// One arrival, and expect `bytes` more of transactions in this phase (the TMA loads' size).
extern "C" __device__ int mbar_expect_tx(int* ret, int bar, int bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" :: "r"(bar), "r"(bytes) : "memory");
    return 0;
}
extern "C" __device__ int mbar_arrive(int* ret, int bar) {
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" :: "r"(bar) : "memory");
    return 0;
}
// Arrive on the barrier at the same offset in CTA `cta` of the cluster (mapa + remote arrive).
// Default (.release.cta) semantics on purpose: it releases a stage whose only readers were
// wgmma's async-proxy reads, already complete (wgmma.wait_group), so there is nothing to order;
// .release.cluster would put a MEMBAR.ALL.GPU before every arrival (seen in SASS: the 2-CTA
// kernel ran at 0.4x of the 1-CTA one).
extern "C" __device__ int mbar_arrive_cluster(int* ret, int bar, int cta) {
    asm volatile("{\n .reg .b32 remote;\n mapa.shared::cluster.u32 remote, %0, %1;\n"
                 " mbarrier.arrive.shared::cluster.b64 _, [remote];\n}"
                 :: "r"(bar), "r"(cta) : "memory");
    return 0;
}
// Block until the phase with this parity has completed (try_wait suspends in hardware a while).
extern "C" __device__ int mbar_wait(int* ret, int bar, int parity) {
    u32 done = 0;
    while (!done) {
        asm volatile("{\n .reg .pred p;\n mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
                     " selp.u32 %0, 1, 0, p;\n}" : "=r"(done) : "r"(bar), "r"(parity) : "memory");
    }
    return 0;
}

// ---------------------------------------------------------------------------------------------
// TMA: cp.async.bulk.tensor (PTX ISA 9.7.9.25.5.1). A 2-D box at element coordinates (c0 = the
// contiguous dimension, c1 = rows) through a tensor map in global memory, landing in shared
// memory as the map's swizzle says and completing `bytes` on the mbarrier. Parts of the box
// outside the tensor are zero-filled (ragged edges cost nothing).
// ---------------------------------------------------------------------------------------------
extern "C" __device__ int tma_load_2d(int* ret, int dst, u64 tmap, int c0, int c1, int bar) {
    asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes"
                 " [%0], [%1, {%2, %3}], [%4];"
                 :: "r"(dst), "l"(tmap), "r"(c0), "r"(c1), "r"(bar) : "memory");
    return 0;
}
// The same box delivered to every CTA of the cluster in `mask` (same shared offset, and each
// CTA's own mbarrier at the same offset).
extern "C" __device__ int tma_load_2d_multicast(int* ret, int dst, u64 tmap, int c0, int c1, int bar, int mask) {
    asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes.multicast::cluster"
                 " [%0], [%1, {%2, %3}], [%4], %5;"
                 :: "r"(dst), "l"(tmap), "r"(c0), "r"(c1), "r"(bar), "h"((unsigned short)mask) : "memory");
    return 0;
}
// A 3-D box (c2: the batch of a batched product, whose map's third dimension is the batch).
extern "C" __device__ int tma_load_3d(int* ret, int dst, u64 tmap, int c0, int c1, int c2, int bar) {
    asm volatile("cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes"
                 " [%0], [%1, {%2, %3, %4}], [%5];"
                 :: "r"(dst), "l"(tmap), "r"(c0), "r"(c1), "r"(c2), "r"(bar) : "memory");
    return 0;
}
// Shared -> global box store (bulk_group completion); elements outside the tensor are not written.
extern "C" __device__ int tma_store_2d(int* ret, u64 tmap, int c0, int c1, int src) {
    asm volatile("cp.async.bulk.tensor.2d.global.shared::cta.bulk_group [%0, {%1, %2}], [%3];"
                 :: "l"(tmap), "r"(c0), "r"(c1), "r"(src) : "memory");
    return 0;
}
extern "C" __device__ int tma_store_3d(int* ret, u64 tmap, int c0, int c1, int c2, int src) {
    asm volatile("cp.async.bulk.tensor.3d.global.shared::cta.bulk_group [%0, {%1, %2, %3}], [%4];"
                 :: "l"(tmap), "r"(c0), "r"(c1), "r"(c2), "r"(src) : "memory");
    return 0;
}
extern "C" __device__ int tma_store_commit(int* ret) {
    asm volatile("cp.async.bulk.commit_group;" ::: "memory");
    return 0;
}
// Wait until at most n (0..7) of this thread's bulk store groups still read shared memory.
extern "C" __device__ int tma_store_wait_read(int* ret, int n) {
    switch (n) {
        case 0: asm volatile("cp.async.bulk.wait_group.read 0;" ::: "memory"); break;
        case 1: asm volatile("cp.async.bulk.wait_group.read 1;" ::: "memory"); break;
        case 2: asm volatile("cp.async.bulk.wait_group.read 2;" ::: "memory"); break;
        case 3: asm volatile("cp.async.bulk.wait_group.read 3;" ::: "memory"); break;
        case 4: asm volatile("cp.async.bulk.wait_group.read 4;" ::: "memory"); break;
        case 5: asm volatile("cp.async.bulk.wait_group.read 5;" ::: "memory"); break;
        case 6: asm volatile("cp.async.bulk.wait_group.read 6;" ::: "memory"); break;
        default: asm volatile("cp.async.bulk.wait_group.read 7;" ::: "memory"); break;
    }
    return 0;
}
// Wait until this thread's bulk stores are complete (before the block exits).
extern "C" __device__ int tma_store_wait_all(int* ret) {
    asm volatile("cp.async.bulk.wait_group 0;" ::: "memory");
    return 0;
}
extern "C" __device__ int tma_prefetch_map(int* ret, u64 tmap) {
    asm volatile("prefetch.tensormap [%0];" :: "l"(tmap) : "memory");
    return 0;
}
// Order this thread's generic-proxy shared-memory writes before later async-proxy (TMA) reads.
extern "C" __device__ int fence_proxy_async(int* ret) {
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
    return 0;
}

// Programmatic dependent launch (griddepcontrol.wait, PTX ISA 9.7.13; sm_90+), for the launches of
// one plan: a kernel launched as a dependent of the one before it is set up while that one ends
// (no launch gap), and waits here before it reads what that one wrote (all of it done and
// visible). A no-op in a kernel launched without the attribute. (The kernels before do not
// signal early with griddepcontrol.launch_dependents: their dependents then started sooner but
// ran 7-14% slower, benchmarks/results/pdl_ab_trigger_h100.log.)
extern "C" __device__ int grid_dep_wait(int* ret) {
    asm volatile("griddepcontrol.wait;" ::: "memory");
    return 0;
}

// fp32 bits rounded to tf32 to nearest, ties to even (cvt.rn.tf32.f32, PTX ISA 9.7.9.21; .rn is
// sm_90+): what TMA does to a FLOAT32 operand it loads as TFLOAT32, for one copied otherwise.
extern "C" __device__ int tf32_rn(u32* ret, u32 x) {
    asm("cvt.rn.tf32.f32 %0, %1;" : "=r"(*ret) : "f"(__uint_as_float(x)));
    return 0;
}

// bar.sync with an id and a thread count (PTX ISA 9.7.13.1): a barrier for one warpgroup of
// the block (id 0 is __syncthreads).
extern "C" __device__ int named_barrier(int* ret, int id, int nthreads) {
    asm volatile("bar.sync %0, %1;" :: "r"(id), "r"(nthreads) : "memory");
    return 0;
}

// bar.arrive (PTX ISA 9.7.13.1): count this warp in barrier id's nthreads without waiting, the
// producer's half of a producer-consumer pair whose other half bar.syncs.
extern "C" __device__ int named_barrier_arrive(int* ret, int id, int nthreads) {
    asm volatile("bar.arrive %0, %1;" :: "r"(id), "r"(nthreads) : "memory");
    return 0;
}

// ---------------------------------------------------------------------------------------------
// Cluster special registers (PTX ISA 10.x: %cluster_ctarank, %cluster_nctarank) and the
// cluster-wide barrier (barrier.cluster, 9.7.13.4).
// ---------------------------------------------------------------------------------------------
extern "C" __device__ int cluster_ctarank(int* ret) {
    u32 r;
    asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(r));
    *ret = (int)r;
    return 0;
}
extern "C" __device__ int cluster_sync(int* ret) {
    asm volatile("barrier.cluster.arrive.release.aligned;\nbarrier.cluster.wait.acquire.aligned;" ::: "memory");
    return 0;
}

// A float of CTA `cta` of the cluster at the offset of `p[off]` in this CTA's shared memory
// (mapa.shared::cluster, PTX ISA 9.7.9.15; ld.shared::cluster, 9.7.9.8: distributed shared
// memory). The caller orders it after the other CTA's stores with cluster_sync.
extern "C" __device__ int lds_cluster_f32(float* ret, const float* p, int off, int cta) {
    unsigned local = (unsigned)__cvta_generic_to_shared(p + off), remote;
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(remote) : "r"(local), "r"(cta));
    asm volatile("ld.shared::cluster.f32 %0, [%1];" : "=f"(*ret) : "r"(remote) : "memory");
    return 0;
}

// ---------------------------------------------------------------------------------------------
// wgmma (PTX ISA 9.7.15): warpgroup-wide (128 threads) D[64 x N] (+)= A[64 x 16] * B[16 x N],
// A and B read from shared memory through 64-bit matrix descriptors (9.7.15.5.1; packed by
// numba_tc.layout.wgmma_desc), fp32 accumulators in registers (fragment map:
// numba_tc.layout.wgmma_d_fragment). kind 0: f16 inputs, 1: bf16. ta / tb: the operand is
// MN-major in shared memory (imm-trans-a / imm-trans-b; 16-bit types only). scale_d 0: D = A*B.
// ---------------------------------------------------------------------------------------------
extern "C" __device__ int wgmma_fence(int* ret) {
    asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
    return 0;
}
extern "C" __device__ int wgmma_commit(int* ret) {
    asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
    return 0;
}
// Wait until at most n wgmma groups of this warpgroup are pending (n: 0..3).
extern "C" __device__ int wgmma_wait(int* ret, int n) {
    switch (n) {
        case 0: asm volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory"); break;
        case 1: asm volatile("wgmma.wait_group.sync.aligned 1;" ::: "memory"); break;
        case 2: asm volatile("wgmma.wait_group.sync.aligned 2;" ::: "memory"); break;
        case 3: asm volatile("wgmma.wait_group.sync.aligned 3;" ::: "memory"); break;
        default: asm volatile("wgmma.wait_group.sync.aligned 4;" ::: "memory"); break;
    }
    return 0;
}

// The accumulator register lists: D<N> is "{%0, .., %(N/2-1)}", ACC<N>(d, o) binds them to
// d[o], .., d[o + N/2 - 1]; the descriptors and scale-d follow as %(N/2), %(N/2+1), %(N/2+2).
#define D8 "{%0,%1,%2,%3}"
#define ACC8(d, o) "+f"(d[o + 0]), "+f"(d[o + 1]), "+f"(d[o + 2]), "+f"(d[o + 3])
#define D16 "{%0,%1,%2,%3,%4,%5,%6,%7}"
#define ACC16(d, o) ACC8(d, o), ACC8(d, o + 4)
#define D32 "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15}"
#define ACC32(d, o) ACC16(d, o), ACC16(d, o + 8)
#define D64 "{" \
    "%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15," \
    "%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31" \
    "}"
#define ACC64(d, o) \
    "+f"(d[o + 0]), "+f"(d[o + 1]), "+f"(d[o + 2]), "+f"(d[o + 3]), "+f"(d[o + 4]), "+f"(d[o + 5]), "+f"(d[o + 6]), "+f"(d[o + 7]), \
    "+f"(d[o + 8]), "+f"(d[o + 9]), "+f"(d[o + 10]), "+f"(d[o + 11]), "+f"(d[o + 12]), "+f"(d[o + 13]), "+f"(d[o + 14]), "+f"(d[o + 15]), \
    "+f"(d[o + 16]), "+f"(d[o + 17]), "+f"(d[o + 18]), "+f"(d[o + 19]), "+f"(d[o + 20]), "+f"(d[o + 21]), "+f"(d[o + 22]), "+f"(d[o + 23]), \
    "+f"(d[o + 24]), "+f"(d[o + 25]), "+f"(d[o + 26]), "+f"(d[o + 27]), "+f"(d[o + 28]), "+f"(d[o + 29]), "+f"(d[o + 30]), "+f"(d[o + 31])
#define D128 "{" \
    "%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15," \
    "%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31," \
    "%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47," \
    "%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63" \
    "}"
#define ACC128(d, o) \
    "+f"(d[o + 0]), "+f"(d[o + 1]), "+f"(d[o + 2]), "+f"(d[o + 3]), "+f"(d[o + 4]), "+f"(d[o + 5]), "+f"(d[o + 6]), "+f"(d[o + 7]), \
    "+f"(d[o + 8]), "+f"(d[o + 9]), "+f"(d[o + 10]), "+f"(d[o + 11]), "+f"(d[o + 12]), "+f"(d[o + 13]), "+f"(d[o + 14]), "+f"(d[o + 15]), \
    "+f"(d[o + 16]), "+f"(d[o + 17]), "+f"(d[o + 18]), "+f"(d[o + 19]), "+f"(d[o + 20]), "+f"(d[o + 21]), "+f"(d[o + 22]), "+f"(d[o + 23]), \
    "+f"(d[o + 24]), "+f"(d[o + 25]), "+f"(d[o + 26]), "+f"(d[o + 27]), "+f"(d[o + 28]), "+f"(d[o + 29]), "+f"(d[o + 30]), "+f"(d[o + 31]), \
    "+f"(d[o + 32]), "+f"(d[o + 33]), "+f"(d[o + 34]), "+f"(d[o + 35]), "+f"(d[o + 36]), "+f"(d[o + 37]), "+f"(d[o + 38]), "+f"(d[o + 39]), \
    "+f"(d[o + 40]), "+f"(d[o + 41]), "+f"(d[o + 42]), "+f"(d[o + 43]), "+f"(d[o + 44]), "+f"(d[o + 45]), "+f"(d[o + 46]), "+f"(d[o + 47]), \
    "+f"(d[o + 48]), "+f"(d[o + 49]), "+f"(d[o + 50]), "+f"(d[o + 51]), "+f"(d[o + 52]), "+f"(d[o + 53]), "+f"(d[o + 54]), "+f"(d[o + 55]), \
    "+f"(d[o + 56]), "+f"(d[o + 57]), "+f"(d[o + 58]), "+f"(d[o + 59]), "+f"(d[o + 60]), "+f"(d[o + 61]), "+f"(d[o + 62]), "+f"(d[o + 63])
#define D192 "{" \
    "%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15," \
    "%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31," \
    "%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47," \
    "%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63," \
    "%64,%65,%66,%67,%68,%69,%70,%71,%72,%73,%74,%75,%76,%77,%78,%79," \
    "%80,%81,%82,%83,%84,%85,%86,%87,%88,%89,%90,%91,%92,%93,%94,%95" \
    "}"
#define ACC192(d, o) ACC128(d, o), ACC64(d, o + 64)
#define D256 "{" \
    "%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15," \
    "%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31," \
    "%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47," \
    "%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63," \
    "%64,%65,%66,%67,%68,%69,%70,%71,%72,%73,%74,%75,%76,%77,%78,%79," \
    "%80,%81,%82,%83,%84,%85,%86,%87,%88,%89,%90,%91,%92,%93,%94,%95," \
    "%96,%97,%98,%99,%100,%101,%102,%103,%104,%105,%106,%107,%108,%109,%110,%111," \
    "%112,%113,%114,%115,%116,%117,%118,%119,%120,%121,%122,%123,%124,%125,%126,%127" \
    "}"
#define ACC256(d, o) \
    "+f"(d[o + 0]), "+f"(d[o + 1]), "+f"(d[o + 2]), "+f"(d[o + 3]), "+f"(d[o + 4]), "+f"(d[o + 5]), "+f"(d[o + 6]), "+f"(d[o + 7]), \
    "+f"(d[o + 8]), "+f"(d[o + 9]), "+f"(d[o + 10]), "+f"(d[o + 11]), "+f"(d[o + 12]), "+f"(d[o + 13]), "+f"(d[o + 14]), "+f"(d[o + 15]), \
    "+f"(d[o + 16]), "+f"(d[o + 17]), "+f"(d[o + 18]), "+f"(d[o + 19]), "+f"(d[o + 20]), "+f"(d[o + 21]), "+f"(d[o + 22]), "+f"(d[o + 23]), \
    "+f"(d[o + 24]), "+f"(d[o + 25]), "+f"(d[o + 26]), "+f"(d[o + 27]), "+f"(d[o + 28]), "+f"(d[o + 29]), "+f"(d[o + 30]), "+f"(d[o + 31]), \
    "+f"(d[o + 32]), "+f"(d[o + 33]), "+f"(d[o + 34]), "+f"(d[o + 35]), "+f"(d[o + 36]), "+f"(d[o + 37]), "+f"(d[o + 38]), "+f"(d[o + 39]), \
    "+f"(d[o + 40]), "+f"(d[o + 41]), "+f"(d[o + 42]), "+f"(d[o + 43]), "+f"(d[o + 44]), "+f"(d[o + 45]), "+f"(d[o + 46]), "+f"(d[o + 47]), \
    "+f"(d[o + 48]), "+f"(d[o + 49]), "+f"(d[o + 50]), "+f"(d[o + 51]), "+f"(d[o + 52]), "+f"(d[o + 53]), "+f"(d[o + 54]), "+f"(d[o + 55]), \
    "+f"(d[o + 56]), "+f"(d[o + 57]), "+f"(d[o + 58]), "+f"(d[o + 59]), "+f"(d[o + 60]), "+f"(d[o + 61]), "+f"(d[o + 62]), "+f"(d[o + 63]), \
    "+f"(d[o + 64]), "+f"(d[o + 65]), "+f"(d[o + 66]), "+f"(d[o + 67]), "+f"(d[o + 68]), "+f"(d[o + 69]), "+f"(d[o + 70]), "+f"(d[o + 71]), \
    "+f"(d[o + 72]), "+f"(d[o + 73]), "+f"(d[o + 74]), "+f"(d[o + 75]), "+f"(d[o + 76]), "+f"(d[o + 77]), "+f"(d[o + 78]), "+f"(d[o + 79]), \
    "+f"(d[o + 80]), "+f"(d[o + 81]), "+f"(d[o + 82]), "+f"(d[o + 83]), "+f"(d[o + 84]), "+f"(d[o + 85]), "+f"(d[o + 86]), "+f"(d[o + 87]), \
    "+f"(d[o + 88]), "+f"(d[o + 89]), "+f"(d[o + 90]), "+f"(d[o + 91]), "+f"(d[o + 92]), "+f"(d[o + 93]), "+f"(d[o + 94]), "+f"(d[o + 95]), \
    "+f"(d[o + 96]), "+f"(d[o + 97]), "+f"(d[o + 98]), "+f"(d[o + 99]), "+f"(d[o + 100]), "+f"(d[o + 101]), "+f"(d[o + 102]), "+f"(d[o + 103]), \
    "+f"(d[o + 104]), "+f"(d[o + 105]), "+f"(d[o + 106]), "+f"(d[o + 107]), "+f"(d[o + 108]), "+f"(d[o + 109]), "+f"(d[o + 110]), "+f"(d[o + 111]), \
    "+f"(d[o + 112]), "+f"(d[o + 113]), "+f"(d[o + 114]), "+f"(d[o + 115]), "+f"(d[o + 116]), "+f"(d[o + 117]), "+f"(d[o + 118]), "+f"(d[o + 119]), \
    "+f"(d[o + 120]), "+f"(d[o + 121]), "+f"(d[o + 122]), "+f"(d[o + 123]), "+f"(d[o + 124]), "+f"(d[o + 125]), "+f"(d[o + 126]), "+f"(d[o + 127])

// One wgmma: OP is the shape and types after m64nN ("k16.f32.bf16.bf16"), IMM the transpose
// immediates that follow the scales (16-bit types) or nothing (fp8).
#define WGMMA_ASM(N, OP, IMM, NA, NB, NS)                                                      \
    asm volatile("{\n .reg .pred p;\n setp.ne.b32 p, %" NS ", 0;\n"                            \
                 " wgmma.mma_async.sync.aligned.m64n" #N OP " " D##N ","                         \
                 " %" NA ", %" NB ", p, 1, 1" IMM ";\n}"                                         \
                 : ACC##N(d, o) : "l"(da), "l"(db), "r"(scale_d))

// The widths built, each with the asm operand numbers that follow its N/2 accumulators: the
// descriptors of A and B, then scale-d.
#define WGMMA_SHAPES(X) X(64, "32", "33", "34") X(128, "64", "65", "66") X(192, "96", "97", "98")     \
    X(256, "128", "129", "130")

#define WGMMA(N, NA, NB, NS)                                                                     \
extern "C" __device__ int wgmma_m64n##N##k16(int* ret, float* d, int o, u64 da, u64 db,          \
                                             int scale_d, int kind, int ta, int tb) {           \
    switch (kind * 4 + ta * 2 + tb) {                                                          \
        case 0: WGMMA_ASM(N, "k16.f32.f16.f16", ", 0, 0", NA, NB, NS); break;                  \
        case 1: WGMMA_ASM(N, "k16.f32.f16.f16", ", 0, 1", NA, NB, NS); break;                  \
        case 2: WGMMA_ASM(N, "k16.f32.f16.f16", ", 1, 0", NA, NB, NS); break;                  \
        case 3: WGMMA_ASM(N, "k16.f32.f16.f16", ", 1, 1", NA, NB, NS); break;                  \
        case 4: WGMMA_ASM(N, "k16.f32.bf16.bf16", ", 0, 0", NA, NB, NS); break;                \
        case 5: WGMMA_ASM(N, "k16.f32.bf16.bf16", ", 0, 1", NA, NB, NS); break;                \
        case 6: WGMMA_ASM(N, "k16.f32.bf16.bf16", ", 1, 0", NA, NB, NS); break;                \
        default: WGMMA_ASM(N, "k16.f32.bf16.bf16", ", 1, 1", NA, NB, NS); break;               \
    }                                                                                          \
    return 0;                                                                                  \
}
WGMMA_SHAPES(WGMMA)
// Narrow widths, 16-bit inputs only: a swapped decode product's few rows of C (hopper.SWAP_CONFIGS).
WGMMA(8, "4", "5", "6")
WGMMA(16, "8", "9", "10")
WGMMA(32, "16", "17", "18")
#undef WGMMA

// fp8 (PTX ISA 9.7.15.5, .e4m3 / .e5m2 inputs): D[64 x N] (+)= A[64 x 32] * B[32 x N], both operands
// K-major in shared memory (8-bit types have no transpose immediates), a k32 step 32 bytes of K as
// a 16-bit k16 step is. kind = 2 * (A is e5m2) + (B is e5m2): mixed formats are allowed.
#define WGMMA8(N, NA, NB, NS)                                                                    \
extern "C" __device__ int wgmma_m64n##N##k32_f8(int* ret, float* d, int o, u64 da, u64 db,      \
                                                int scale_d, int kind) {                        \
    switch (kind) {                                                                            \
        case 0: WGMMA_ASM(N, "k32.f32.e4m3.e4m3", "", NA, NB, NS); break;                      \
        case 1: WGMMA_ASM(N, "k32.f32.e4m3.e5m2", "", NA, NB, NS); break;                      \
        case 2: WGMMA_ASM(N, "k32.f32.e5m2.e4m3", "", NA, NB, NS); break;                      \
        default: WGMMA_ASM(N, "k32.f32.e5m2.e5m2", "", NA, NB, NS); break;                     \
    }                                                                                          \
    return 0;                                                                                  \
}
WGMMA_SHAPES(WGMMA8)
#undef WGMMA8

// tf32 (PTX ISA 9.7.15.5, .tf32 inputs): D[64 x N] (+)= A[64 x 8] * B[8 x N] from fp32 values in
// shared memory (the tensor core reads their tf32 bits), both operands K-major (32-bit types have
// no transpose immediates), a k8 step 32 bytes of K as a 16-bit k16 step is.
#define WGMMA_TF32(N, NA, NB, NS)                                                                \
extern "C" __device__ int wgmma_m64n##N##k8_tf32(int* ret, float* d, int o, u64 da, u64 db,     \
                                                 int scale_d) {                                 \
    WGMMA_ASM(N, "k8.f32.tf32.tf32", "", NA, NB, NS);                                          \
    return 0;                                                                                  \
}
WGMMA_SHAPES(WGMMA_TF32)
#undef WGMMA_TF32

// tf32 with A from registers (PTX ISA 9.7.15.5, "Register fragments and shared memory matrix
// layouts", A of .tf32: a warp's 16 rows as mma.m16n8k8's A fragment, four .b32 registers a0..a3):
// A may then lie mn-major in shared memory, since the warp loads it there itself; B is K-major
// from its descriptor. The registers hold tf32 values already (TMA's TFLOAT32 loads round).
#define WGMMA_TF32_RS(N, A0, A1, A2, A3, NB, NS)                                                 \
extern "C" __device__ int wgmma_m64n##N##k8_tf32_rs(int* ret, float* d, int o, u32 a0, u32 a1,  \
                                                    u32 a2, u32 a3, u64 db, int scale_d) {      \
    asm volatile("{\n .reg .pred p;\n setp.ne.b32 p, %" NS ", 0;\n"                              \
                 " wgmma.mma_async.sync.aligned.m64n" #N "k8.f32.tf32.tf32 " D##N ","              \
                 " {%" A0 ", %" A1 ", %" A2 ", %" A3 "}, %" NB ", p, 1, 1;\n}"                      \
                 : ACC##N(d, o) : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "l"(db), "r"(scale_d));  \
    return 0;                                                                                  \
}
// the asm operand numbers after the N/2 accumulators: a0..a3, B's descriptor, scale-d
WGMMA_TF32_RS(64, "32", "33", "34", "35", "36", "37")
WGMMA_TF32_RS(128, "64", "65", "66", "67", "68", "69")
WGMMA_TF32_RS(192, "96", "97", "98", "99", "100", "101")
WGMMA_TF32_RS(256, "128", "129", "130", "131", "132", "133")
#undef WGMMA_TF32_RS
#undef WGMMA_ASM
#undef WGMMA_SHAPES

// ---------------------------------------------------------------------------------------------
// setmaxnreg (PTX ISA 9.7.17.1): a warpgroup hands registers back (dec) or takes them (inc) so
// that a producer warpgroup can run small and consumers large. n: a multiple of 8 in 24..256.
// ---------------------------------------------------------------------------------------------
#define REG_CASE(OP, N) case N: asm volatile("setmaxnreg." OP ".sync.aligned.u32 " #N ";"); break;
#define REG_CASES(OP) REG_CASE(OP, 24) REG_CASE(OP, 32) REG_CASE(OP, 40) REG_CASE(OP, 48)          \
    REG_CASE(OP, 56) REG_CASE(OP, 64) REG_CASE(OP, 72) REG_CASE(OP, 80) REG_CASE(OP, 88)        \
    REG_CASE(OP, 96) REG_CASE(OP, 104) REG_CASE(OP, 112) REG_CASE(OP, 120) REG_CASE(OP, 128)   \
    REG_CASE(OP, 136) REG_CASE(OP, 144) REG_CASE(OP, 152) REG_CASE(OP, 160) REG_CASE(OP, 168)  \
    REG_CASE(OP, 176) REG_CASE(OP, 184) REG_CASE(OP, 192) REG_CASE(OP, 200) REG_CASE(OP, 208)  \
    REG_CASE(OP, 216) REG_CASE(OP, 224) REG_CASE(OP, 232) REG_CASE(OP, 240) REG_CASE(OP, 248)  \
    REG_CASE(OP, 256)
extern "C" __device__ int setmaxnreg_inc(int* ret, int n) {
    switch (n) { REG_CASES("inc") default: break; }
    return 0;
}
extern "C" __device__ int setmaxnreg_dec(int* ret, int n) {
    switch (n) { REG_CASES("dec") default: break; }
    return 0;
}
#undef REG_CASES
#undef REG_CASE
