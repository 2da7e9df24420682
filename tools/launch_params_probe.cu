// Does a kernel's parameter block size cost launch time? The box tiles' grad_weight kernel takes
// ~10 KB of __grid_constant__ parameters (WeightGradPlan, 5,848 bytes, and 33 CUtensorMaps), the
// warpgroup tiles ~6 KB, and a host-bound forward + backward on the box tiles ran 100-170 µs slower
// than grad_weight alone showed (session 62). For blocks of 256 bytes to 16 KB this times, per
// launch of a one-block kernel that reads one word of its parameters: the host's time to issue
// `launches` launches back to back, and the GPU's time for them (events).
//   nvcc -std=c++17 -arch=sm_90a -o probe tools/launch_params_probe.cu && ./probe 200
#include <chrono>
#include <cstdio>
#include <cstdlib>

#include <cuda_runtime.h>

template <int kBytes>
struct Params {
  int words[kBytes / 4];
};

template <int kBytes>
__global__ void read_one(const __grid_constant__ Params<kBytes> p, int* out) {
  if (threadIdx.x == 0) *out = p.words[kBytes / 4 - 1];
}

#define CHECK(call)                                                                    \
  do {                                                                                 \
    const cudaError_t error = (call);                                                  \
    if (error != cudaSuccess) {                                                        \
      std::printf("%s: %s\n", #call, cudaGetErrorString(error));                      \
      std::exit(1);                                                                    \
    }                                                                                  \
  } while (0)

template <int kBytes>
void probe(int launches, int* out, cudaStream_t stream) {
  Params<kBytes> p{};
  p.words[kBytes / 4 - 1] = kBytes;
  for (int i = 0; i < 10; ++i) read_one<kBytes><<<1, 32, 0, stream>>>(p, out);
  CHECK(cudaStreamSynchronize(stream));
  cudaEvent_t start, stop;
  CHECK(cudaEventCreate(&start));
  CHECK(cudaEventCreate(&stop));
  CHECK(cudaEventRecord(start, stream));
  const auto host_start = std::chrono::steady_clock::now();
  for (int i = 0; i < launches; ++i) read_one<kBytes><<<1, 32, 0, stream>>>(p, out);
  const auto host_stop = std::chrono::steady_clock::now();
  CHECK(cudaEventRecord(stop, stream));
  CHECK(cudaEventSynchronize(stop));
  float gpu_ms = 0;
  CHECK(cudaEventElapsedTime(&gpu_ms, start, stop));
  const double host_us = std::chrono::duration<double, std::micro>(host_stop - host_start).count();
  std::printf("| %6d | %8.2f | %8.2f |\n", kBytes, host_us / launches, 1e3 * gpu_ms / launches);
  CHECK(cudaEventDestroy(start));
  CHECK(cudaEventDestroy(stop));
}

int main(int argc, char** argv) {
  const int launches = argc > 1 ? std::atoi(argv[1]) : 200;  // (well within the launch queue)
  int* out = nullptr;
  CHECK(cudaMalloc(&out, sizeof(int)));
  cudaStream_t stream;
  CHECK(cudaStreamCreate(&stream));
  std::printf("| param bytes | host µs a launch | GPU µs a launch |\n|---|---|---|\n");
  probe<256>(launches, out, stream);
  probe<4096>(launches, out, stream);
  probe<6144>(launches, out, stream);
  probe<10240>(launches, out, stream);
  probe<16384>(launches, out, stream);
  CHECK(cudaFree(out));
  return 0;
}
