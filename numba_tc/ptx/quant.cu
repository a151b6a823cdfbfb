// Quantized weights (qgemm.py): packed codes to mma.sync A fragments in registers, and the copies
// and loads that stream the packed weight, its scales and x. One small function per job; Numba ABI as in mma.cu
// (extern "C" __device__ int f(T* ret, args...), fragments as pointer + element offset, global
// addresses as 64-bit integers). Kind: 1 = fp16, 2 = bf16 (the activations' type).
typedef unsigned int u32;
typedef long long i64;
typedef unsigned long long u64;

// 16 bytes of the packed weight (PTX ISA 9.7.9.8 ld: .global.nc, .L1::no_allocate, .v4.u32,
// .L2::cache_hint with a policy from createpolicy, 9.7.9.17): each byte is read once, so it
// bypasses L1 and is first out of L2 (the dequantizing pass; the streaming kernel copies with
// cp.async into shared memory).
extern "C" __device__ int ldg_stream_v4(int* ret, u32* f, int off, i64 gaddr) {
    u64 pol;
    asm("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(pol));
    asm("ld.global.nc.L1::no_allocate.L2::cache_hint.v4.u32 {%0,%1,%2,%3}, [%4], %5;\n"
        : "=r"(f[off]), "=r"(f[off + 1]), "=r"(f[off + 2]), "=r"(f[off + 3]) : "l"(gaddr), "l"(pol));
    return 0;
}

// 4 and 8 bytes global -> shared without a register round trip (cp.async.ca, PTX ISA
// 9.7.9.25.3; 16-byte copies are mma.cu's cp_async16): a word holding a lane's scale or zero
// point (only `src_bytes` read, the rest zero-filled: never past an array's end), and half of a
// piece of x whose rows are 8-byte aligned. Completed by cp_async_wait (mma.cu).
extern "C" __device__ int cp_async4(int* ret, int saddr, i64 gaddr, int src_bytes) {
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n"
                 :: "r"(saddr), "l"(gaddr), "r"(src_bytes) : "memory");
    return 0;
}
extern "C" __device__ int cp_async8(int* ret, int saddr, i64 gaddr) {
    asm volatile("cp.async.ca.shared.global [%0], [%1], 8;\n" :: "r"(saddr), "l"(gaddr) : "memory");
    return 0;
}

// A scale from the word a lane copied (cp_async4): kind 0 the word is a float32; 1 (fp16), 2
// (bf16): its 16-bit half `hi` (the scale's address bit 1), widened exactly (cvt.f32.f16).
extern "C" __device__ int word_scale(float* ret, u32 w, int hi, int kind) {
    if (kind == 0) { *ret = __uint_as_float(w); return 0; }
    unsigned short v = (unsigned short)(hi ? w >> 16 : w);
    if (kind == 1) asm("cvt.f32.f16 %0, %1;" : "=f"(*ret) : "h"(v));
    else *ret = __uint_as_float(((u32)v) << 16);
    return 0;
}

// One byte (ld.global.nc.u8, PTX ISA 9.7.9.8): a zero point.
extern "C" __device__ int ldg_u8(u32* ret, i64 gaddr) {
    unsigned short v;
    asm("ld.global.nc.u8 %0, [%1];\n" : "=h"(v) : "l"(gaddr));
    *ret = v;
    return 0;
}

// Two floats to one bf16x2 / f16x2 word, lo in the low half (cvt.rn.bf16x2.f32 / cvt.rn.f16x2.f32,
// PTX ISA 9.7.9.21: the first source goes to the upper half).
extern "C" __device__ int pack16x2(u32* ret, float lo, float hi, int kind) {
    if (kind == 1) asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(*ret) : "f"(hi), "f"(lo));
    else asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(*ret) : "f"(hi), "f"(lo));
    return 0;
}

// Eight 4-bit codes to the four A registers of one m16n8k16 step (layout "magic": register r
// holds nibbles r and r + 4), each the exact integer q - z. lop3 (PTX ISA 9.7.8.6, (a & b) | c =
// 0xEA) puts a nibble in the low mantissa bits of the magic number M (bf16 128 = 0x4300, fp16
// 1024 = 0x6400), giving M + q exactly; adding nz = -(M + z) (fma.rn.bf16x2 by 1, add.rn.f16x2:
// 9.7.4.x) leaves q - z exactly. nz0: rows g (registers 0, 2), nz1: rows g + 8 (1, 3).
extern "C" __device__ int dq_int4(int* ret, u32* f, int off, u32 q, u32 nz0, u32 nz1, int kind) {
    const u32 mask = 0x000f000f, ex = kind == 1 ? 0x64006400u : 0x43004300u;
    u32 r[4];
#pragma unroll
    for (int i = 0; i < 4; ++i)
        asm("lop3.b32 %0, %1, %2, %3, 0xEA;" : "=r"(r[i]) : "r"(q >> (4 * i)), "r"(mask), "r"(ex));
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        u32 nz = (i & 1) ? nz1 : nz0;
        if (kind == 1) asm("add.rn.f16x2 %0, %1, %2;" : "=r"(f[off + i]) : "r"(r[i]), "r"(nz));
        else asm("fma.rn.bf16x2 %0, %1, %2, %3;" : "=r"(f[off + i]) : "r"(r[i]), "r"(0x3F803F80u), "r"(nz));
    }
    return 0;
}

// Eight 8-bit codes (two words, layout "bytes": register r holds bytes 2r, 2r + 1) to the four A
// registers of one step, each q - 128 exactly. fp16: prmt (PTX ISA 9.7.8.7) puts a byte under
// the magic 1024 (0x64), then add.rn.f16x2 of -1152. bf16 cannot hold 128 + q exactly, so each
// byte goes under the fp32 magic 2^23 (0x4B000000), 2^23 + 128 is subtracted in fp32, and
// cvt.rn.bf16x2.f32 packs the exact integers.
extern "C" __device__ int dq_int8(int* ret, u32* f, int off, u32 w0, u32 w1, int kind) {
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        u32 w = i < 2 ? w0 : w1;
        u32 lo_sel = (i & 1) ? 2u : 0u;
        if (kind == 1) {
            u32 v;
            asm("prmt.b32 %0, %1, %2, %3;" : "=r"(v) : "r"(w), "r"(0x64646464u), "r"(0x4040u | lo_sel | ((lo_sel + 1) << 8)));
            asm("add.rn.f16x2 %0, %1, %2;" : "=r"(f[off + i]) : "r"(v), "r"(0xE480E480u));
        } else {
            u32 a, b;
            asm("prmt.b32 %0, %1, %2, %3;" : "=r"(a) : "r"(w), "r"(0x4B000000u), "r"(0x7650u | lo_sel));
            asm("prmt.b32 %0, %1, %2, %3;" : "=r"(b) : "r"(w), "r"(0x4B000000u), "r"(0x7650u | (lo_sel + 1)));
            float x = __uint_as_float(a) - 8388736.0f, y = __uint_as_float(b) - 8388736.0f;
            asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(f[off + i]) : "f"(y), "f"(x));
        }
    }
    return 0;
}

// A user format's four A registers of one step (layout "lut": register r = byte r of the word, a
// pair of codes) from the table of code pairs in shared memory, one copy per lane: entry `pair`
// of this lane at `lane_base + 128 * pair` (ld.shared.u32, PTX ISA 9.7.9.8). Per register one
// prmt (byte r), one multiply-add, one load. Volatile: kept after the barrier that ends the fill.
extern "C" __device__ int lut_pairs4(int* ret, u32* f, int off, u32 w, int lane_base) {
#pragma unroll
    for (int r = 0; r < 4; ++r) {
        u32 pair, addr;
        asm("prmt.b32 %0, %1, 0, %2;" : "=r"(pair) : "r"(w), "r"(0x4440 + r));
        asm("mad.lo.u32 %0, %1, 128, %2;" : "=r"(addr) : "r"(pair), "r"(lane_base));
        asm volatile("ld.shared.u32 %0, [%1];" : "=r"(f[off + r]) : "r"(addr));
    }
    return 0;
}
