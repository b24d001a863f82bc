#pragma once
// Hopper's asynchronous data movement and synchronisation (sm_90): mbarriers with transaction counts, the bulk copy
// engine (cp.async.bulk for contiguous runs, cp.async.bulk.tensor through a TMA tensor map), thread-block clusters
// (multicast, remote arrivals, cluster barriers), named barriers and register reallocation (setmaxnreg, sm_90a).
// Self-contained: NVRTC compiles it without any toolkit header.
#include "gemm/ptx.cuh"

namespace qtune {
namespace device {

// The 128-byte opaque TMA descriptor (CUtensorMap), passed by value as a __grid_constant__ kernel parameter.
struct alignas(64) TensorMap {
  unsigned long long opaque[16];
};

// ---- mbarrier ----
__device__ __forceinline__ void mbarrier_init(u32 barrier, u32 count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(barrier), "r"(count));
}
// Makes initialised barriers visible to the async proxy and to the other CTAs of the cluster.
__device__ __forceinline__ void fence_barrier_init() { asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory"); }
__device__ __forceinline__ void mbarrier_arrive(u32 barrier) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(barrier) : "memory");
}
// Arrives and adds `bytes` to the transactions the current phase waits for.
__device__ __forceinline__ void mbarrier_arrive_expect_tx(u32 barrier, u32 bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(barrier), "r"(bytes) : "memory");
}
// Arrives on the barrier at the same offset in CTA `rank` of the cluster (release at CTA scope, as CUTLASS's cluster
// barriers do: a cluster-scope release on every slot made the clustered kernels 3x slower on the H200, call 2).
__device__ __forceinline__ void mbarrier_arrive_cluster(u32 barrier, u32 rank) {
  asm volatile(
      "{ .reg .b32 remote; mapa.shared::cluster.u32 remote, %0, %1; "
      "mbarrier.arrive.shared::cluster.b64 _, [remote]; }" ::"r"(barrier),
      "r"(rank)
      : "memory");
}
// Arrives once this thread's earlier cp.async copies have landed (counts as one of the expected arrivals).
__device__ __forceinline__ void cp_async_mbarrier_arrive(u32 barrier) {
  asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];" ::"r"(barrier) : "memory");
}
// Waits until the phase with parity `parity` has completed.
__device__ __forceinline__ void mbarrier_wait(u32 barrier, u32 parity) {
  asm volatile(
      "{\n.reg .pred done;\nwait:\nmbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n@!done bra wait;\n}" ::"r"(barrier),
      "r"(parity)
      : "memory");
}

// ---- bulk copies (global -> shared, completing on an mbarrier of the destination CTA) ----
__device__ __forceinline__ void bulk_copy(u32 shared, const void* global, u32 bytes, u32 barrier) {
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(shared),
               "l"(global), "r"(bytes), "r"(barrier)
               : "memory");
}
// The same bytes to the same offset in every CTA of `cta_mask`, each completing on its own barrier at `barrier`.
__device__ __forceinline__ void bulk_copy_multicast(u32 shared, const void* global, u32 bytes, u32 barrier, unsigned short cta_mask) {
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes.multicast::cluster [%0], [%1], %2, [%3], %4;" ::"r"(shared),
      "l"(global), "r"(bytes), "r"(barrier), "h"(cta_mask)
      : "memory");
}
// One box of a 2-D tensor map at element coordinates (x inner, y outer); out-of-bounds elements are zero-filled.
__device__ __forceinline__ void tensor_copy_2d(u32 shared, const TensorMap& map, int x, int y, u32 barrier) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];" ::"r"(shared),
      "l"(reinterpret_cast<u64>(&map)), "r"(x), "r"(y), "r"(barrier)
      : "memory");
}
__device__ __forceinline__ void tensor_copy_2d_multicast(u32 shared, const TensorMap& map, int x, int y, u32 barrier,
                                                         unsigned short cta_mask) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes.multicast::cluster [%0], [%1, {%2, %3}], [%4], %5;" ::"r"(
          shared),
      "l"(reinterpret_cast<u64>(&map)), "r"(x), "r"(y), "r"(barrier), "h"(cta_mask)
      : "memory");
}
__device__ __forceinline__ void prefetch_tensor_map(const TensorMap& map) {
  asm volatile("prefetch.tensormap [%0];" ::"l"(reinterpret_cast<u64>(&map)) : "memory");
}

// ---- clusters ----
__device__ __forceinline__ u32 cluster_rank() {
  u32 rank;
  asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(rank));
  return rank;
}
// Every thread of every CTA of the cluster.
__device__ __forceinline__ void cluster_sync() {
  asm volatile("barrier.cluster.arrive.release.aligned;\nbarrier.cluster.wait.acquire.aligned;" ::: "memory");
}

// ---- named barriers and registers ----
// A barrier over `threads` threads (whole warps) with id `id` (0 is __syncthreads).
__device__ __forceinline__ void named_barrier_sync(int id, int threads) {
  asm volatile("bar.sync %0, %1;" ::"r"(id), "r"(threads) : "memory");
}
// Counts this warp's threads towards barrier `id` without waiting (the waiting side calls named_barrier_sync).
__device__ __forceinline__ void named_barrier_arrive(int id, int threads) {
  asm volatile("bar.arrive %0, %1;" ::"r"(id), "r"(threads) : "memory");
}
template <int REGISTERS>
__device__ __forceinline__ void release_registers() {
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;" ::"n"(REGISTERS));
}
template <int REGISTERS>
__device__ __forceinline__ void claim_registers() {
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;" ::"n"(REGISTERS));
}

}  // namespace device
}  // namespace qtune
