// Tensor-core primitives of the mma.sync ladder (sm_80+), one small function per instruction.
//
// Numba ABI: extern "C" __device__ int f(T* ret, args...); *ret is the value Numba sees.
// Addresses are plain integers so that one declaration serves every element type:
//   shared memory: a 32-bit shared-window byte address (`saddr`, from smem_addr)
//   global memory: a 64-bit generic byte address (`gaddr`, the kernel's pointer argument + offset)
// Fragments and accumulators are cuda.local.array's passed as pointer + element offset; under LTO
// the calls inline, the offsets fold to constants and the arrays live in registers
// (tests/test_sass_tensorcore.py checks: no LDL/STL).
typedef unsigned int u32;
typedef unsigned short u16;
typedef long long i64;
typedef unsigned long long u64;

// cvta.to.shared (PTX ISA 9.7.9.16): the 32-bit shared-window address of a shared array.
extern "C" __device__ int smem_addr(int* ret, const u32* p) {
    *ret = (int)__cvta_generic_to_shared(p);
    return 0;
}

// ---------------------------------------------------------------------------------------------
// ldmatrix (PTX ISA 9.7.14.5.15): x1/x2/x4 8x8 b16 matrices, lane l gives the row address of
// matrix l/8 (row l%8); with .trans each matrix is delivered transposed.
// ---------------------------------------------------------------------------------------------
#define LDSM(NAME, SHAPE)                                                                        \
extern "C" __device__ int NAME(int* ret, u32* f, int off, int saddr) {                        \
    asm volatile("ldmatrix.sync.aligned.m8n8." SHAPE ".shared.b16 {%0,%1,%2,%3}, [%4];\n"    \
                 : "=r"(f[off]), "=r"(f[off + 1]), "=r"(f[off + 2]), "=r"(f[off + 3])          \
                 : "r"(saddr));                                                                \
    return 0;                                                                                  \
}
LDSM(ldsm_x4, "x4")
LDSM(ldsm_x4_t, "x4.trans")
#undef LDSM

extern "C" __device__ int ldsm_x2(int* ret, u32* f, int off, int saddr) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0,%1}, [%2];\n"
                 : "=r"(f[off]), "=r"(f[off + 1]) : "r"(saddr));
    return 0;
}
extern "C" __device__ int ldsm_x2_t(int* ret, u32* f, int off, int saddr) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0,%1}, [%2];\n"
                 : "=r"(f[off]), "=r"(f[off + 1]) : "r"(saddr));
    return 0;
}
extern "C" __device__ int ldsm_x1(int* ret, u32* f, int off, int saddr) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x1.shared.b16 {%0}, [%1];\n" : "=r"(f[off]) : "r"(saddr));
    return 0;
}
extern "C" __device__ int ldsm_x1_t(int* ret, u32* f, int off, int saddr) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x1.trans.shared.b16 {%0}, [%1];\n" : "=r"(f[off]) : "r"(saddr));
    return 0;
}

// ---------------------------------------------------------------------------------------------
// mma.sync (PTX ISA 9.7.14.5.14): D = A * B + D, fp32 accumulate, in place on d[off..off+3].
// m16n8k16 with f16 or bf16 inputs (a: 4 regs, b: 2 regs); m16n8k8 with tf32 inputs (a: 4, b: 2;
// fp32 bit patterns, the tensor core reads the top 19 bits).
// ---------------------------------------------------------------------------------------------
#define MMA(NAME, INSTR)                                                                         \
extern "C" __device__ int NAME(int* ret, float* d, int doff, const u32* a, int aoff,          \
                               const u32* b, int boff) {                                       \
    asm volatile(INSTR " {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"              \
                 : "+f"(d[doff]), "+f"(d[doff + 1]), "+f"(d[doff + 2]), "+f"(d[doff + 3])      \
                 : "r"(a[aoff]), "r"(a[aoff + 1]), "r"(a[aoff + 2]), "r"(a[aoff + 3]),         \
                   "r"(b[boff]), "r"(b[boff + 1]));                                            \
    return 0;                                                                                  \
}
MMA(mma_f16_m16n8k16, "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32")
MMA(mma_bf16_m16n8k16, "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32")
MMA(mma_tf32_m16n8k8, "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32")
#undef MMA

// cvt.rna.tf32.f32 (PTX ISA 9.7.9.21): fp32 bit patterns rounded to tf32 (nearest, ties away),
// in place on f[off..off+n-1]. Without it the tensor core truncates, which doubles the error and
// biases it toward zero.
extern "C" __device__ int round_tf32(int* ret, u32* f, int off, int n) {
    for (int i = 0; i < n; ++i)
        asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(f[off + i]) : "f"(__uint_as_float(f[off + i])));
    return 0;
}

// ---------------------------------------------------------------------------------------------
// cp.async (PTX ISA 9.7.9.25.3): 16 bytes global -> shared without a register round trip, L1
// bypassed (.cg). Only `src_bytes` (0..16) are read; the rest of the 16 is zero-filled, which is
// how tiles past a matrix edge are padded (src_bytes = 0 reads nothing).
// ---------------------------------------------------------------------------------------------
extern "C" __device__ int cp_async16(int* ret, int saddr, i64 gaddr, int src_bytes) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n"
                 :: "r"(saddr), "l"(gaddr), "r"(src_bytes) : "memory");
    return 0;
}
extern "C" __device__ int cp_async_commit(int* ret) {
    asm volatile("cp.async.commit_group;\n" ::: "memory");
    return 0;
}
// cp.async.wait_group N: N must be an immediate; with n a compile-time constant the chain folds.
extern "C" __device__ int cp_async_wait(int* ret, int n) {
    if (n <= 0)      asm volatile("cp.async.wait_group 0;\n" ::: "memory");
    else if (n == 1) asm volatile("cp.async.wait_group 1;\n" ::: "memory");
    else if (n == 2) asm volatile("cp.async.wait_group 2;\n" ::: "memory");
    else if (n == 3) asm volatile("cp.async.wait_group 3;\n" ::: "memory");
    else if (n == 4) asm volatile("cp.async.wait_group 4;\n" ::: "memory");
    else if (n == 5) asm volatile("cp.async.wait_group 5;\n" ::: "memory");
    else             asm volatile("cp.async.wait_group 6;\n" ::: "memory");
    return 0;
}

// The synchronous twin of cp_async16 (rungs without cp.async): a 16-byte global load through
// registers (ld.global.v4, PTX ISA 9.7.9.8) and a 16-byte shared store, same zero-fill rule.
extern "C" __device__ int copy16(int* ret, int saddr, i64 gaddr, int src_bytes) {
    u32 x = 0, y = 0, z = 0, ww = 0;
    if (src_bytes >= 16) {
        asm volatile("ld.global.v4.u32 {%0,%1,%2,%3}, [%4];\n"
                     : "=r"(x), "=r"(y), "=r"(z), "=r"(ww) : "l"(gaddr));
    } else if (src_bytes > 0) {            // a partial chunk: 2-byte pieces (elements are 2 or 4 bytes)
        u32 w[4] = {0, 0, 0, 0};
#pragma unroll
        for (int i = 0; i < 8; ++i) {          // unrolled: w[] stays in registers
            if (2 * i < src_bytes) {
                unsigned short h;
                asm volatile("ld.global.u16 %0, [%1];\n" : "=h"(h) : "l"(gaddr + 2 * i));
                w[i >> 1] |= (u32)h << (16 * (i & 1));
            }
        }
        x = w[0]; y = w[1]; z = w[2]; ww = w[3];
    }
    asm volatile("st.shared.v4.u32 [%0], {%1,%2,%3,%4};\n"
                 :: "r"(saddr), "r"(x), "r"(y), "r"(z), "r"(ww) : "memory");
    return 0;
}

// ---------------------------------------------------------------------------------------------
// Scalar accesses by address (PTX ISA 9.7.9.8 ld / 9.7.9.9 st): the naive rung's global
// fragments, element-wise tile copies when rows are not 16-byte aligned, and the epilogue.
// ---------------------------------------------------------------------------------------------
extern "C" __device__ int ldg_u16(u32* ret, i64 gaddr) {
    u16 v;
    asm volatile("ld.global.u16 %0, [%1];\n" : "=h"(v) : "l"(gaddr));
    *ret = v;
    return 0;
}
extern "C" __device__ int ldg_u32(u32* ret, i64 gaddr) {
    asm volatile("ld.global.u32 %0, [%1];\n" : "=r"(*ret) : "l"(gaddr));
    return 0;
}
// An element of an epilogue input (C for beta, a bias) of kind 1 = fp16, 2 = bf16, as fp32
// (PTX ISA 9.7.9.8 ld, 9.7.9.21 cvt). Not volatile: nothing in the kernel writes what it reads
// before reading it, so the compiler may merge repeated reads (a bias per column) and batch them.
extern "C" __device__ int ldg_in16(float* ret, i64 gaddr, int kind) {
    u16 v;
    asm("ld.global.u16 %0, [%1];\n" : "=h"(v) : "l"(gaddr));
    if (kind == 1) asm("cvt.f32.f16 %0, %1;" : "=f"(*ret) : "h"(v));
    else *ret = __uint_as_float(((u32)v) << 16);
    return 0;
}
// 16 bytes of global memory as four 32-bit words (PTX ISA 9.7.9.8 ld, .v4.u32): eight 16-bit
// inputs at once (the few-rows kernels' loads of B and A). Not volatile, like ldg_in16.
extern "C" __device__ int ldg_v4u32(int* ret, u32* f, int off, i64 gaddr) {
    asm("ld.global.v4.u32 {%0,%1,%2,%3}, [%4];\n"
        : "=r"(f[off]), "=r"(f[off + 1]), "=r"(f[off + 2]), "=r"(f[off + 3]) : "l"(gaddr));
    return 0;
}
// Bytes of two words picked by a selector (PTX ISA 9.7.8.7 prmt, default mode): result byte i is
// byte (sel >> 4i) & 7 of the 8 bytes {b, a} (a's bytes 0-3, b's 4-7). Four words' bytes are
// transposed in four such picks and four more (the fp8 copy's 4 x 4 byte blocks).
extern "C" __device__ int prmt(u32* ret, u32 a, u32 b, u32 sel) {
    asm("prmt.b32 %0, %1, %2, %3;\n" : "=r"(*ret) : "r"(a), "r"(b), "r"(sel));
    return 0;
}
// Four 32-bit words to 16 bytes of global memory (PTX ISA 9.7.9.9 st, .v4.u32): sixteen fp8
// elements at once (the transposing copy's rows).
extern "C" __device__ int stg_v4u32(int* ret, i64 gaddr, const u32* f, int off) {
    asm volatile("st.global.v4.u32 [%0], {%1,%2,%3,%4};\n"
                 :: "l"(gaddr), "r"(f[off]), "r"(f[off + 1]), "r"(f[off + 2]), "r"(f[off + 3]) : "memory");
    return 0;
}
// The 16-bit input in the low (hi = 0) or high half of a word, of kind 1 = fp16, 2 = bf16, as
// fp32 (PTX ISA 9.7.9.21 cvt).
extern "C" __device__ int in16_f32(float* ret, u32 w, int hi, int kind) {
    u16 v = (u16)(hi ? w >> 16 : w);
    if (kind == 1) asm("cvt.f32.f16 %0, %1;" : "=f"(*ret) : "h"(v));
    else *ret = __uint_as_float(((u32)v) << 16);
    return 0;
}
// tanh.approx.f32 (PTX ISA, floating-point instructions: tanh; sm_75+): one MUFU instruction,
// relative error about 2^-11, below a 16-bit product's own; the epilogue's activations use it
// for 16-bit inputs.
extern "C" __device__ int tanh_approx(float* ret, float x) {
    asm("tanh.approx.f32 %0, %1;" : "=f"(*ret) : "f"(x));
    return 0;
}
extern "C" __device__ int lds_u32(u32* ret, int saddr) {
    asm volatile("ld.shared.u32 %0, [%1];\n" : "=r"(*ret) : "r"(saddr));
    return 0;
}
// Two adjacent floats from shared memory (ld.shared.v2.f32, PTX ISA 9.7.9.8): a staged epilogue
// array's column pair (``hopper.staging._stager``), 8 bytes a lane.
extern "C" __device__ int lds_v2f32(int* ret, float* f, int off, int saddr) {
    asm volatile("ld.shared.v2.f32 {%0,%1}, [%2];\n" : "=f"(f[off]), "=f"(f[off + 1]) : "r"(saddr));
    return 0;
}
// Two adjacent floats from global memory to registers (ld.global.v2.f32, PTX ISA 9.7.9.8): a
// staged epilogue array's column pair held in registers (``hopper.staging._stager``), loaded slices
// before the epilogue reads it; volatile, so that it stays where the mainloop issues it.
extern "C" __device__ int ldg_v2f32(int* ret, float* f, int off, i64 gaddr) {
    asm volatile("ld.global.v2.f32 {%0,%1}, [%2];\n" : "=f"(f[off]), "=f"(f[off + 1]) : "l"(gaddr));
    return 0;
}
// 16-byte shared accesses (ld/st.shared.v4): four words to registers, four registers to a
// 16-byte aligned address (the Hopper producer's transposing copy, 4 x 4 fp32 blocks).
extern "C" __device__ int lds_v4u32(int* ret, u32* f, int off, int saddr) {
    asm volatile("ld.shared.v4.u32 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(f[off]), "=r"(f[off + 1]), "=r"(f[off + 2]), "=r"(f[off + 3]) : "r"(saddr) : "memory");
    return 0;
}
extern "C" __device__ int sts_v4u32(int* ret, int saddr, u32 a, u32 b, u32 c, u32 d) {
    asm volatile("st.shared.v4.u32 [%0], {%1,%2,%3,%4};\n" :: "r"(saddr), "r"(a), "r"(b), "r"(c), "r"(d) : "memory");
    return 0;
}
extern "C" __device__ int sts_u16(int* ret, int saddr, u32 v) {
    asm volatile("st.shared.u16 [%0], %1;\n" :: "r"(saddr), "h"((u16)v) : "memory");
    return 0;
}
extern "C" __device__ int sts_u32(int* ret, int saddr, u32 v) {
    asm volatile("st.shared.u32 [%0], %1;\n" :: "r"(saddr), "r"(v) : "memory");
    return 0;
}

// Accumulator -> C element conversions: kind 0 = fp32, 1 = fp16, 2 = bf16 (round to nearest).
__device__ __forceinline__ u32 to_bits(float x, int kind) {
    if (kind == 1) { u16 h; asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(x)); return h; }
    if (kind == 2) { u16 h; asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(h) : "f"(x)); return h; }
    return __float_as_uint(x);
}
// x rounded to the 16-bit type of kind 1 = fp16, 2 = bf16 (to nearest even) and back to fp32:
// a float32 operand read as that type, as autocast's cast of it would make it.
extern "C" __device__ int round_in16(float* ret, float x, int kind) {
    u16 h = (u16)to_bits(x, kind);
    if (kind == 1) asm("cvt.f32.f16 %0, %1;" : "=f"(*ret) : "h"(h));
    else *ret = __uint_as_float(((u32)h) << 16);
    return 0;
}
// C[gaddr] = x in the output type.
extern "C" __device__ int stg_out1(int* ret, i64 gaddr, float x, int kind) {
    if (kind == 0) asm volatile("st.global.f32 [%0], %1;\n" :: "l"(gaddr), "f"(x) : "memory");
    else asm volatile("st.global.u16 [%0], %1;\n" :: "l"(gaddr), "h"((u16)to_bits(x, kind)) : "memory");
    return 0;
}
// C[addr], C[addr + 1 element] = x, y as one 8-byte (fp32) or 4-byte (16-bit) store; the caller
// guarantees the alignment. stg_out2: global (64-bit address); sts_out2: shared (32-bit address,
// for epilogues staged through shared memory).
#define OUT2(NAME, SPACE, ADDR_T, AC)                                                            \
extern "C" __device__ int NAME(int* ret, ADDR_T addr, float x, float y, int kind) {           \
    if (kind == 0) {                                                                           \
        asm volatile("st." SPACE ".v2.f32 [%0], {%1,%2};\n" :: AC(addr), "f"(x), "f"(y) : "memory"); \
    } else {                                                                                   \
        asm volatile("st." SPACE ".u32 [%0], %1;\n"                                            \
                     :: AC(addr), "r"(to_bits(x, kind) | (to_bits(y, kind) << 16)) : "memory"); \
    }                                                                                          \
    return 0;                                                                                  \
}
OUT2(stg_out2, "global", i64, "l")
OUT2(sts_out2, "shared", int, "r")
#undef OUT2
