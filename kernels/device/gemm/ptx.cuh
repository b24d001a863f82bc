#pragma once
// Thin wrappers over the PTX instructions the GEMM uses. Self-contained: NVRTC compiles it without any toolkit header.

namespace qtune {
namespace device {

typedef unsigned int u32;
typedef unsigned long long u64;

__device__ __forceinline__ u32 shared_address(const void* pointer) {
  u32 address;
  asm("{ .reg .u64 a; cvta.to.shared.u64 a, %1; cvt.u32.u64 %0, a; }" : "=r"(address) : "l"(pointer));
  return address;
}

// ---- asynchronous copies (sm_80+) ----
__device__ __forceinline__ void cp_async_16(u32 shared, const void* global) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(shared), "l"(global));
}
// Streams data that is read once (weights): evict it from L2 first so activations stay resident.
__device__ __forceinline__ void cp_async_16_stream(u32 shared, const void* global, u64 policy) {
  asm volatile("cp.async.cg.shared.global.L2::cache_hint [%0], [%1], 16, %2;" ::"r"(shared), "l"(global), "l"(policy));
}
__device__ __forceinline__ u64 evict_first_policy() {
  u64 policy;
  asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(policy));
  return policy;
}
// 4 bytes, zero-filled when `valid` is false (then nothing is read; `global` must still be a mapped address).
__device__ __forceinline__ void cp_async_4_zfill(u32 shared, const void* global, bool valid) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;" ::"r"(shared), "l"(global), "r"(valid ? 4 : 0));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;"); }
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;" ::"n"(N));
}

// ---- global -> shared copies of the mma pipeline: cp.async from sm_80; Turing (sm_75) has none, so there a copy goes
// through registers (a non-volatile load the compiler may batch, then a shared store) and commit/wait are no-ops ----
__device__ __forceinline__ void ld_global_nc_128(u32 (&r)[4], const void* global) {
  asm("ld.global.nc.v4.b32 {%0,%1,%2,%3}, [%4];" : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "l"(global));
}
__device__ __forceinline__ void copy_16(u32 shared, const void* global) {
#if __CUDA_ARCH__ >= 800
  cp_async_16(shared, global);
#else
  u32 r[4];
  ld_global_nc_128(r, global);
  asm volatile("st.shared.v4.b32 [%0], {%1,%2,%3,%4};" ::"r"(shared), "r"(r[0]), "r"(r[1]), "r"(r[2]), "r"(r[3]));
#endif
}
__device__ __forceinline__ void copy_16_stream(u32 shared, const void* global, u64 policy) {
#if __CUDA_ARCH__ >= 800
  cp_async_16_stream(shared, global, policy);
#else
  copy_16(shared, global);
#endif
}
__device__ __forceinline__ void copy_4_zfill(u32 shared, const void* global, bool valid) {
#if __CUDA_ARCH__ >= 800
  cp_async_4_zfill(shared, global, valid);
#else
  u32 value = 0;
  if (valid) asm("ld.global.nc.b32 %0, [%1];" : "=r"(value) : "l"(global));
  asm volatile("st.shared.b32 [%0], %1;" ::"r"(shared), "r"(value));
#endif
}
__device__ __forceinline__ void copy_commit() {
#if __CUDA_ARCH__ >= 800
  cp_async_commit();
#endif
}
template <int N>
__device__ __forceinline__ void copy_wait() {
#if __CUDA_ARCH__ >= 800
  cp_async_wait<N>();
#endif
}
// The L2 evict-first policy of copy_16_stream (createpolicy is sm_80's; 0 where copies go through registers).
__device__ __forceinline__ u64 copy_stream_policy() {
#if __CUDA_ARCH__ >= 800
  return evict_first_policy();
#else
  return 0;
#endif
}

// ---- shared memory loads ----
__device__ __forceinline__ void ldmatrix_x4(u32 (&r)[4], u32 address) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(address));
}
__device__ __forceinline__ void ldmatrix_x2(u32& r0, u32& r1, u32 address) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0,%1}, [%2];" : "=r"(r0), "=r"(r1) : "r"(address));
}
__device__ __forceinline__ void ld_shared_32(u32* r, u32 address) {
  asm volatile("ld.shared.b32 %0, [%1];" : "=r"(r[0]) : "r"(address));
}
__device__ __forceinline__ void ld_shared_64(u32* r, u32 address) {
  asm volatile("ld.shared.v2.b32 {%0,%1}, [%2];" : "=r"(r[0]), "=r"(r[1]) : "r"(address));
}
__device__ __forceinline__ void ld_shared_128(u32* r, u32 address) {
  asm volatile("ld.shared.v4.b32 {%0,%1,%2,%3}, [%4];" : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(address));
}
__device__ __forceinline__ float ld_shared_f32(u32 address) {
  float value;
  asm volatile("ld.shared.f32 %0, [%1];" : "=f"(value) : "r"(address));
  return value;
}
__device__ __forceinline__ void ld_shared_f32x2(float (&r)[2], u32 address) {
  asm volatile("ld.shared.v2.f32 {%0,%1}, [%2];" : "=f"(r[0]), "=f"(r[1]) : "r"(address));
}
__device__ __forceinline__ void ld_shared_f32x4(float* r, u32 address) {
  asm volatile("ld.shared.v4.f32 {%0,%1,%2,%3}, [%4];" : "=f"(r[0]), "=f"(r[1]), "=f"(r[2]), "=f"(r[3]) : "r"(address));
}
__device__ __forceinline__ void st_shared_f32(u32 address, float value) {
  asm volatile("st.shared.f32 [%0], %1;" ::"r"(address), "f"(value) : "memory");
}
__device__ __forceinline__ void st_shared_f32x4(u32 address, const float* r) {
  asm volatile("st.shared.v4.f32 [%0], {%1,%2,%3,%4};" ::"r"(address), "f"(r[0]), "f"(r[1]), "f"(r[2]), "f"(r[3]) : "memory");
}
__device__ __forceinline__ void st_shared_128(u32 address, u32 a, u32 b, u32 c, u32 d) {
  asm volatile("st.shared.v4.b32 [%0], {%1,%2,%3,%4};" ::"r"(address), "r"(a), "r"(b), "r"(c), "r"(d));
}

// ---- global memory ----
// L2-coherent load (bypasses L1) for data other CTAs wrote during this kernel (split-K partial sums).
__device__ __forceinline__ void ld_global_cg_f32x4(float (&r)[4], const void* pointer) {
  asm volatile("ld.global.cg.v4.f32 {%0,%1,%2,%3}, [%4];" : "=f"(r[0]), "=f"(r[1]), "=f"(r[2]), "=f"(r[3]) : "l"(pointer));
}
__device__ __forceinline__ void st_global_f32x4(void* pointer, float a, float b, float c, float d) {
  asm volatile("st.global.v4.f32 [%0], {%1,%2,%3,%4};" ::"l"(pointer), "f"(a), "f"(b), "f"(c), "f"(d));
}
__device__ __forceinline__ void st_global_32(void* pointer, u32 value) {
  asm volatile("st.global.b32 [%0], %1;" ::"l"(pointer), "r"(value));
}
__device__ __forceinline__ u32 ld_global_32(const void* pointer) {
  u32 value;
  asm volatile("ld.global.nc.b32 %0, [%1];" : "=r"(value) : "l"(pointer));
  return value;
}
__device__ __forceinline__ float ld_global_f32(const void* pointer) {
  float value;
  asm volatile("ld.global.nc.f32 %0, [%1];" : "=f"(value) : "l"(pointer));
  return value;
}

// ---- bit manipulation ----
template <int LUT>
__device__ __forceinline__ u32 lop3(u32 a, u32 b, u32 c) {
  u32 d;
  asm("lop3.b32 %0, %1, %2, %3, %4;" : "=r"(d) : "r"(a), "r"(b), "r"(c), "n"(LUT));
  return d;
}
// (a & b) | c in one instruction.
__device__ __forceinline__ u32 and_or(u32 a, u32 b, u32 c) { return lop3<(0xF0 & 0xCC) | 0xAA>(a, b, c); }
__device__ __forceinline__ u32 prmt(u32 a, u32 b, u32 selector) {
  u32 d;
  asm("prmt.b32 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(selector));
  return d;
}

// ---- packed half / bfloat16 arithmetic (bit patterns in u32) ----
__device__ __forceinline__ u32 hsub2_f16(u32 a, u32 b) {
  u32 d;
  asm("sub.f16x2 %0, %1, %2;" : "=r"(d) : "r"(a), "r"(b));
  return d;
}
__device__ __forceinline__ u32 hadd2_f16(u32 a, u32 b) {
  u32 d;
  asm("add.f16x2 %0, %1, %2;" : "=r"(d) : "r"(a), "r"(b));
  return d;
}
__device__ __forceinline__ u32 hmul2_f16(u32 a, u32 b) {
  u32 d;
  asm("mul.f16x2 %0, %1, %2;" : "=r"(d) : "r"(a), "r"(b));
  return d;
}
__device__ __forceinline__ u32 hfma2_f16(u32 a, u32 b, u32 c) {
  u32 d;
  asm("fma.rn.f16x2 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(c));
  return d;
}
// bf16x2 add/sub/mul need sm_90; fma exists from sm_80, so everything is an fma.
__device__ __forceinline__ u32 hfma2_bf16(u32 a, u32 b, u32 c) {
  u32 d;
  asm("fma.rn.bf16x2 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(c));
  return d;
}
__device__ __forceinline__ u32 hsub2_bf16(u32 a, u32 b) { return hfma2_bf16(b, 0xBF80BF80u, a); }  // a + b * -1
__device__ __forceinline__ u32 hadd2_bf16(u32 a, u32 b) { return hfma2_bf16(b, 0x3F803F80u, a); }  // a + b * 1
__device__ __forceinline__ u32 hmul2_bf16(u32 a, u32 b) { return hfma2_bf16(a, b, 0x80008000u); }  // a * b + -0

// Two f32 -> packed pair; `lo` lands in the low 16 bits.
__device__ __forceinline__ u32 pack_f16x2(float lo, float hi) {
  u32 d;
#if __CUDA_ARCH__ >= 800
  asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(d) : "f"(hi), "f"(lo));
#else
  // The packed conversion is sm_80's: Turing converts the two halves one by one.
  asm("{ .reg .b16 l, h; cvt.rn.f16.f32 l, %1; cvt.rn.f16.f32 h, %2; mov.b32 %0, {l, h}; }" : "=r"(d) : "f"(lo), "f"(hi));
#endif
  return d;
}
__device__ __forceinline__ u32 pack_bf16x2(float lo, float hi) {
  u32 d;
  asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(d) : "f"(hi), "f"(lo));
  return d;
}
__device__ __forceinline__ float f16_to_f32(unsigned short h) {
  float f;
  asm("{ .reg .b16 t; mov.b16 t, %1; cvt.f32.f16 %0, t; }" : "=f"(f) : "h"(h));
  return f;
}
__device__ __forceinline__ float bf16_to_f32(unsigned short h) { return __uint_as_float(static_cast<u32>(h) << 16); }

// ---- tensor-core mma.sync: D += A * B, A row-major 16 x K, B column-major K x 8 ----
//
// Turing (sm_75) has no m16n8k16/m16n8k32/m16n8k64: each is built from the shapes it has, on the same fragments. A and
// B registers 0 hold the first K half and registers 2/1 the second (A registers 1 and 3 are rows 8-15), so
//   m16n8k16 f16 = m16n8k8 on {a0,a1} x b0 + m16n8k8 on {a2,a3} x b1, and
//   m16n8k32 s8 / m16n8k64 s4 = m8n8k16 / m8n8k32 of (a0, b0) + (a2, b1) into d0-d1 (rows 0-7) and of (a1, b0) +
//   (a3, b1) into d2-d3 (rows 8-15).
__device__ __forceinline__ void mma_f16(float (&d)[4], const u32 (&a)[4], u32 b0, u32 b1) {
#if __CUDA_ARCH__ >= 800
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
#else
  asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5}, {%6}, {%0,%1,%2,%3};"
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
               : "r"(a[0]), "r"(a[1]), "r"(b0));
  asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5}, {%6}, {%0,%1,%2,%3};"
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
               : "r"(a[2]), "r"(a[3]), "r"(b1));
#endif
}
__device__ __forceinline__ void mma_bf16(float (&d)[4], const u32 (&a)[4], u32 b0, u32 b1) {
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
// Turing's m8n8 integer MMA: d[0..1] += a (8 rows) x b (8 columns), K of 16 s8 or 32 s4 values per register pair.
#define QTUNE_MMA_M8N8(SHAPE_TYPES, d0, d1, a, b)                                                                  \
  asm volatile("mma.sync.aligned." SHAPE_TYPES " {%0,%1}, {%2}, {%3}, {%0,%1};" : "+r"(d0), "+r"(d1) : "r"(a), "r"(b))
__device__ __forceinline__ void mma_s8(int (&d)[4], const u32 (&a)[4], u32 b0, u32 b1) {
#if __CUDA_ARCH__ >= 800
  asm volatile("mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
               : "+r"(d[0]), "+r"(d[1]), "+r"(d[2]), "+r"(d[3])
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
#else
  QTUNE_MMA_M8N8("m8n8k16.row.col.s32.s8.s8.s32", d[0], d[1], a[0], b0);
  QTUNE_MMA_M8N8("m8n8k16.row.col.s32.s8.s8.s32", d[0], d[1], a[2], b1);
  QTUNE_MMA_M8N8("m8n8k16.row.col.s32.s8.s8.s32", d[2], d[3], a[1], b0);
  QTUNE_MMA_M8N8("m8n8k16.row.col.s32.s8.s8.s32", d[2], d[3], a[3], b1);
#endif
}
__device__ __forceinline__ void mma_s4(int (&d)[4], const u32 (&a)[4], u32 b0, u32 b1) {
#if __CUDA_ARCH__ >= 800
  asm volatile("mma.sync.aligned.m16n8k64.row.col.s32.s4.s4.s32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
               : "+r"(d[0]), "+r"(d[1]), "+r"(d[2]), "+r"(d[3])
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
#else
  QTUNE_MMA_M8N8("m8n8k32.row.col.s32.s4.s4.s32", d[0], d[1], a[0], b0);
  QTUNE_MMA_M8N8("m8n8k32.row.col.s32.s4.s4.s32", d[0], d[1], a[2], b1);
  QTUNE_MMA_M8N8("m8n8k32.row.col.s32.s4.s4.s32", d[2], d[3], a[1], b0);
  QTUNE_MMA_M8N8("m8n8k32.row.col.s32.s4.s4.s32", d[2], d[3], a[3], b1);
#endif
}
#undef QTUNE_MMA_M8N8
// fp8 MMA (sm_89 and later), A and B each e4m3 or e5m2. Declared everywhere so templates parse; the kernel
// static_asserts the architecture before it uses them.
template <bool A_E5M2, bool B_E5M2>
__device__ __forceinline__ void mma_fp8(float (&d)[4], const u32 (&a)[4], u32 b0, u32 b1) {
#if __CUDA_ARCH__ >= 890
  if constexpr (!A_E5M2 && !B_E5M2) {
    asm volatile("mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  } else if constexpr (!A_E5M2 && B_E5M2) {
    asm volatile("mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e5m2.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  } else if constexpr (A_E5M2 && !B_E5M2) {
    asm volatile("mma.sync.aligned.m16n8k32.row.col.f32.e5m2.e4m3.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  } else {
    asm volatile("mma.sync.aligned.m16n8k32.row.col.f32.e5m2.e5m2.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
#endif
}
// Two f16 -> two e4m3 / e5m2 (sm_89 and later; exact for the small integers it is used on). The value from the low
// half lands in the low byte.
template <bool E5M2>
__device__ __forceinline__ u32 f16x2_to_fp8x2(u32 h) {
  unsigned short d = 0;
#if __CUDA_ARCH__ >= 890
  if constexpr (E5M2) {
    asm("cvt.rn.satfinite.e5m2x2.f16x2 %0, %1;" : "=h"(d) : "r"(h));
  } else {
    asm("cvt.rn.satfinite.e4m3x2.f16x2 %0, %1;" : "=h"(d) : "r"(h));
  }
#endif
  return d;
}

// Two e4m3 / e5m2 -> two f16, exact (sm_89 and later). The low byte lands in the low half.
template <bool E5M2>
__device__ __forceinline__ u32 fp8x2_to_f16x2(unsigned short pair) {
  u32 h = 0;
#if __CUDA_ARCH__ >= 890
  if constexpr (E5M2) {
    asm("cvt.rn.f16x2.e5m2x2 %0, %1;" : "=r"(h) : "h"(pair));
  } else {
    asm("cvt.rn.f16x2.e4m3x2 %0, %1;" : "=r"(h) : "h"(pair));
  }
#endif
  return h;
}

}  // namespace device
}  // namespace qtune
