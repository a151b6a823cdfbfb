// 16-byte memory primitives Numba cannot express (it has no float4 loads).
// Numba ABI: extern "C" __device__ int f(int* ret, args...); the int return is the status.
// Under LTO these inline into the calling kernel; `dst` is a cuda.local.array that stays in
// registers (checked in tests/test_sass.py: no LDL/STL).
typedef unsigned int u32;

// PTX ISA 9.7.9.8 (ld), vector .v4.f32, global state space, L1-cached (.ca is the default).
extern "C" __device__ int ldg_f32x4(int* ret, float* dst, const float* base, long long idx) {
    float a, b, c, d;
    asm volatile("ld.global.v4.f32 {%0,%1,%2,%3}, [%4];\n"
                 : "=f"(a), "=f"(b), "=f"(c), "=f"(d) : "l"(base + idx));
    dst[0] = a; dst[1] = b; dst[2] = c; dst[3] = d;
    return 0;
}

// PTX ISA 9.7.9.9 (st), vector .v4.f32, global state space.
extern "C" __device__ int stg_f32x4(int* ret, float* base, long long idx, const float* src) {
    asm volatile("st.global.v4.f32 [%0], {%1,%2,%3,%4};\n"
                 :: "l"(base + idx), "f"(src[0]), "f"(src[1]), "f"(src[2]), "f"(src[3]) : "memory");
    return 0;
}
