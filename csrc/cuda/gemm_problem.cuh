// The implicit GEMM's kernel parameters and block shapes (docs/design.md §3), shared by
// implicit_gemm.cuh, pipelined_gemm.cuh and their pieces: gemm_scheduler.cuh (which tile and step),
// gemm_loader.cuh (global -> shared), gemm_mainloop.cuh (the MMA) and gemm_epilogue.cuh
// (accumulators -> out).
#pragma once

#include <ATen/cuda/detail/IntegerDivider.cuh>
#include <cuda.h>  // CUtensorMap

#include "plan.h"
#include "problem.h"

namespace convt::cuda {

// implicit_gemm_kernel's tile shapes (docs/design.md §3.7): 8 warps in a kWarpsM x (8 / kWarpsM)
// grid, each with kWarpTilesM m16 x kWarpTilesN n8 mma tiles: 16 x 256 (<1, 1>), 32 x 128 (<1, 2>), 64 x 128 (<2, 2>),
// 128 x 64 (<2, 4>), 64 x 256 (<4, 1>) or 128 x 128 (<4, 2>) rows x columns. The 64-row warp tiles
// are for TF32 and 16-bit only: 3xTF32's two sets of accumulators would spill.
// Warpgroup tiles (wgmma, sm_90a; TF32 and 16-bit, docs/design.md §3.5): 128 x 128 (<4, 2>), out^T =
// in^T A^T: each of the two warpgroups computes 64 columns x the 128 rows, in^T (64 columns x 8 or
// 16 channels) from registers loaded out of x_s, A^T from the step's weight slot in shared memory.
constexpr int kGemmWarps = 8, kGemmThreads = 32 * kGemmWarps;
constexpr int kWarpTilesN = 4;
template <int kWarpTilesM, int kWarpsM>
constexpr int kBlockMOf = kWarpsM * kWarpTilesM * 16;
template <int kWarpsM>
constexpr int kBlockNOf = kGemmWarps / kWarpsM * kWarpTilesN * 8;

// pipelined_gemm_kernel's block (docs/design.md §3.6): kPipelineConsumers consumer warpgroups and a
// producer warpgroup of four warps
constexpr int kPipelineConsumerThreads = 128 * kPipelineConsumers;
constexpr int kPipelineProducerWarps = 4, kPipelineProducerThreads = 32 * kPipelineProducerWarps;
constexpr int kPipelineThreads = kPipelineConsumerThreads + kPipelineProducerThreads;
// Registers a thread: the producer warpgroup gives up most of its share to the consumers (an SM
// quarter's register file holds two consumer warps and one producer warp: 2 * 232 + 40 <= 512 a lane)
constexpr int kProducerRegisters = 40, kConsumerRegisters = 232;

using Divider = at::cuda::detail::IntDivider<unsigned int>;

// The kernels' parameters: the plan (plan.h), and the dividers and tensor map that the launcher
// builds from it (make_gemm_problem).
struct GemmProblem : GemmPlan {
  Divider div_col_tiles, div_row_tiles, div_batch, div_groups, div_chunks, div_in_phases, div_row_copies, div_tile_parts;
  Divider div_row_phases, div_ksteps, div_weight_channel_phases, div_splits;
  const int* gate;     // Launch::gate: the kernels return at once where it is set and *gate is 0
  int* nonfinite;      // Launch::nonfinite: set to 1 where a merged-row epilogue holds an Inf or NaN sum
  float* slices;       // float_sums: the fp32 slices, `splits` of out's shape (GemmPlan::float_sums)
  CUtensorMap in_map;  // tensor_rows: `in` as (position, channel, batch)
};
static_assert(sizeof(GemmProblem) <= 4096, "the GEMM kernels' parameter block stays small (docs/design.md §3.7)");

// Which phases a warpgroup problem merges (docs/design.md §3.2): into rows (row_phases, the
// forward) or into channels (channel_phases, grad_input)
enum class Merge { kNone, kRows, kChannels };

}  // namespace convt::cuda
