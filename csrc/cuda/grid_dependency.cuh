// Programmatic dependent launch (sm_90): a kernel launched with Launch::overlap may start while the
// kernel before it in the stream still runs, so its launch and its blocks' start hide behind that
// kernel's last wave. Invariant: every kernel of this package calls begin_dependent_grid() before it
// reads or writes global memory (or returns), so an overlapped launch never sees a predecessor's
// partial results. Without the launch attribute (or before sm_90) both instructions do nothing.
#pragma once

namespace convt::cuda {

// Waits until the grid before this one has completed and its writes are visible, then lets the next
// grid of the stream launch (its blocks take SMs as room frees up and wait here in turn). Waiting
// first keeps the chain transitive: a grid completes only after its own predecessor did.
__device__ __forceinline__ void begin_dependent_grid() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

}  // namespace convt::cuda
