// Does compute-sanitizer's racecheck take mbarrier arrive/wait as ordering? One producer warp writes
// a ring of shared-memory stages with ordinary stores and arrives on the stage's `full` mbarrier
// (release); 4 consumer warps wait on it (acquire), read, and arrive on `empty`; the producer waits
// on `empty` before it rewrites the stage. Correct by the PTX memory model. Mode 1 orders the same
// accesses with bar.sync instead (the control). On an H100 (session 20, CUDA 13.0) both modes compute
// the right sums, racecheck reports hazards in mode 0 and none in mode 1: it does not model mbarrier
// ordering, which is why it flags the pipelined kernels (pipelined_gemm.cuh, grad_weight_wgmma.cuh),
// whose stages only mbarriers order.
//   nvcc -arch=sm_90a -o probe tools/racecheck_probe.cu
//   ./probe 0 && ./probe 1
//   compute-sanitizer --tool racecheck ./probe 0; compute-sanitizer --tool racecheck ./probe 1
#include <cstdio>
#include <cstdint>
#include <cstdlib>

constexpr int kStages = 4, kWords = 256, kItems = 64, kConsumers = 128;

__device__ __forceinline__ uint32_t smem(const void* p) { return static_cast<uint32_t>(__cvta_generic_to_shared(p)); }
__device__ __forceinline__ void init(uint64_t* b, int n) { asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(smem(b)), "r"(n) : "memory"); }
__device__ __forceinline__ void arrive(uint64_t* b) { asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(smem(b)) : "memory"); }
__device__ __forceinline__ void wait(uint64_t* b, uint32_t parity) {
  uint32_t done = 0;
  while (!done)
    asm volatile("{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}\n"
                 : "=r"(done) : "r"(smem(b)), "r"(parity) : "memory");
}

__global__ void ring(float* out, int use_bar_sync) {
  __shared__ float stage[kStages][kWords];
  __shared__ uint64_t full[kStages], empty[kStages];
  const int lane = threadIdx.x % 32;
  const bool producer = threadIdx.x >= kConsumers;
  if (threadIdx.x == 0) {
    for (int s = 0; s < kStages; ++s) init(full + s, 32), init(empty + s, kConsumers / 32);
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  __syncthreads();
  float sum = 0.0f;
  if (use_bar_sync) {  // control: one stage, block barriers around each item
    for (int item = 0; item < kItems; ++item) {
      if (producer) for (int w = lane; w < kWords; w += 32) stage[0][w] = float(item + w);
      __syncthreads();
      if (!producer) sum += stage[0][(threadIdx.x * 7) % kWords];
      __syncthreads();
    }
  } else {
    int s = 0;
    uint32_t parity = 0;
    for (int item = 0; item < kItems; ++item) {
      if (producer) {
        wait(empty + s, parity ^ 1);
        for (int w = lane; w < kWords; w += 32) stage[s][w] = float(item + w);
        arrive(full + s);
      } else {
        wait(full + s, parity);
        sum += stage[s][(threadIdx.x * 7) % kWords];
        __syncwarp();
        if (lane == 0) arrive(empty + s);
      }
      if (++s == kStages) s = 0, parity ^= 1;
    }
  }
  if (!producer) out[threadIdx.x] = sum;
}

int main(int argc, char** argv) {
  const int mode = argc > 1 ? atoi(argv[1]) : 0;
  float* out;
  cudaMalloc(&out, kConsumers * sizeof(float));
  ring<<<1, kConsumers + 32>>>(out, mode);
  float host[kConsumers];
  cudaMemcpy(host, out, sizeof(host), cudaMemcpyDeviceToHost);
  // thread t read word (7t) % kWords of every item: sum over items of item + word
  const int word = 0;  // thread 0
  float expected = 0.0f;
  for (int item = 0; item < kItems; ++item) expected += float(item + word);
  printf("mode %d: %s (thread 0 sum %g, expected %g)\n", mode, host[0] == expected ? "ok" : "WRONG", host[0], expected);
  return host[0] == expected ? 0 : 1;
}
