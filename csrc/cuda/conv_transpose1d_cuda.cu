// CUDA registrations of convt::conv_transpose1d and its backward, and the one place where a problem
// picks its kernel (path, math mode, tile shape).
#include <ATen/ATen.h>
#include <ATen/Dispatch.h>
#include <ATen/OpMathType.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/library.h>

#include <algorithm>
#include <vector>

#include "convt.h"
#include "cuda/depthwise.cuh"
#include "cuda/direct.cuh"
#include "cuda/grad_weight_gemm.cuh"
#include "cuda/grad_weight_wgmma.cuh"
#include "cuda/implicit_gemm.cuh"
#include "cuda/pipelined_gemm.cuh"

namespace convt::cuda {
namespace {

constexpr int kDirectThreads = 256;
constexpr int kReduceThreads = 256;

// Blocks of the row kernels (direct.cuh): positions along x, rows along y.
dim3 row_grid(int64_t rows, int64_t length, int threads) {
  const int64_t position_blocks = std::min<int64_t>((length + threads - 1) / threads, 1 << 20);
  return dim3(unsigned(position_blocks), unsigned(std::min<int64_t>(rows, 65535)));
}

// SMs of the current device
int64_t sm_count() { return at::cuda::getCurrentDeviceProperties()->multiProcessorCount; }

int grid_size(int64_t items, int threads) {
  const int64_t blocks = (items + threads - 1) / threads;
  const int64_t cap = sm_count() * 64;
  return int(std::max<int64_t>(1, std::min(blocks, cap)));
}

template <typename scalar_t>
const scalar_t* data_or_null(const at::Tensor& t) {
  return t.defined() ? t.data_ptr<scalar_t>() : nullptr;
}

// ---- tensor-core implicit GEMM (implicit_gemm.cuh): problems, tiling, launch ----------------------

// Shared memory of the current device for one block alone on an SM, and for each of two (H100: 227 and
// 113 KB; A100: 163 and 81 KB; sm_86/89: 99 and 49 KB).
struct SmemBudgets {
  size_t one_block, two_blocks;
};
SmemBudgets smem_budgets() {
  const cudaDeviceProp* device = at::cuda::getCurrentDeviceProperties();
  const size_t one_block = device->sharedMemPerBlockOptin;
  return {one_block, std::min(one_block, device->sharedMemPerMultiprocessor / 2 - device->reservedSharedMemPerBlock)};
}
constexpr int64_t kGemmIndexLimit = int64_t(1) << 30;  // positions, offsets and strides in 32-bit ints
constexpr int kMaxGemmXRow = 4096;                      // positions of one staged x row

// The tensor-core path covers C_in/groups and C_out/groups >= 8 and up to kMaxGemmTaps taps, with
// every length and tap offset in 32-bit range; the rest goes to the direct kernels.
bool gemm_applies(const ConvTParams& p, at::ScalarType dtype) {
  const int64_t span = p.dilation * (p.kernel_size - 1) + p.padding;
  return dtype != at::kDouble && p.in_channels_per_group >= 8 && p.out_channels_per_group >= 8 &&
         p.in_channels_per_group < kGemmIndexLimit && p.out_channels_per_group < kGemmIndexLimit &&
         p.kernel_size <= kMaxGemmTaps && p.length_in < kGemmIndexLimit && p.length_out < kGemmIndexLimit &&
         p.stride < kGemmIndexLimit && span < kGemmIndexLimit;
}

// The taps of a problem; `forward` picks the roles of the header comment of implicit_gemm.cuh.
void set_taps(GemmProblem& g, const ConvTParams& p, bool forward) {
  // index of `value` in list[0, count), appended when new
  auto index_in = [](int* list, int& count, int value) {
    int index = 0;
    while (index < count && list[index] != value) ++index;
    if (index == count) list[count++] = value;
    return index;
  };
  g.taps = int(p.kernel_size);
  g.out_phases = g.in_phases = 0;
  for (int t = 0; t < g.taps; ++t) {
    const Tap tap = tap_of(t, p.stride, p.padding, p.dilation);
    g.tap_offset[t] = int(forward ? -tap.shift : tap.shift);
    g.tap_out_phase[t] = index_in(g.out_phase_value, g.out_phases, forward ? int(tap.phase) : 0);
    g.tap_in_phase[t] = index_in(g.in_phase_value, g.in_phases, forward ? 0 : int(tap.phase));
  }
  int next = 0;  // taps grouped by phase pair
  for (int pair = 0; pair < g.out_phases * g.in_phases; ++pair) {
    g.pair_begin[pair] = next;
    for (int t = 0; t < g.taps; ++t)
      if (g.tap_out_phase[t] * g.in_phases + g.tap_in_phase[t] == pair) g.step_tap[next++] = t;
  }
  g.pair_begin[g.out_phases * g.in_phases] = next;
  g.first_offset = *std::min_element(g.tap_offset, g.tap_offset + g.taps);
  g.last_offset = *std::max_element(g.tap_offset, g.tap_offset + g.taps);
}

// The forward (out = y, in = x, rows = C_out/groups, channels = C_in/groups) or grad_input (out =
// grad_x, in = grad_y, rows = C_in/groups, channels = C_out/groups) as one GemmProblem, and its A.
GemmProblem gemm_problem(const ConvTParams& p, bool forward) {
  GemmProblem g{};
  g.batch = p.batch, g.groups = p.groups;
  g.rows_per_group = forward ? p.out_channels_per_group : p.in_channels_per_group;
  g.channels_per_group = forward ? p.in_channels_per_group : p.out_channels_per_group;
  g.in_batch_stride = forward ? p.x_batch_stride : p.y_batch_stride;
  g.in_channel_stride = forward ? p.x_channel_stride : p.y_channel_stride;
  g.in_length_stride = forward ? p.x_length_stride : p.y_length_stride;
  g.in_length = int(forward ? p.length_in : p.length_out);
  g.out_length = int(forward ? p.length_out : p.length_in);
  g.out_step = forward ? int(p.stride) : 1;
  g.in_step = forward ? 1 : int(p.stride);
  g.row_phases = g.channel_phases = 1;
  g.weight_parts = 1;
  set_taps(g, p, forward);
  return g;
}
// Where merged phases compute no zero products: dilation 1 and K a multiple of stride > 1, and the
// merged rows or channels (stride x C_out per group) within int range
bool phases_merge(const ConvTParams& p) {
  return p.dilation == 1 && p.stride > 1 && p.kernel_size % p.stride == 0 &&
         p.out_channels_per_group * p.stride < kGemmIndexLimit;
}
// The taps of merged phases: t in [0, taps) at offset first_offset + t * offset_step
void set_merged_taps(GemmProblem& g, int taps, int first_offset, int offset_step) {
  g.taps = taps;
  g.out_phases = g.in_phases = 1;
  g.out_phase_value[0] = g.in_phase_value[0] = 0;
  for (int t = 0; t < g.taps; ++t) {
    g.tap_offset[t] = first_offset + t * offset_step;
    g.tap_out_phase[t] = g.tap_in_phase[t] = 0;
    g.step_tap[t] = t;
  }
  g.pair_begin[0] = 0, g.pair_begin[1] = g.taps;
  g.first_offset = std::min(g.tap_offset[0], g.tap_offset[taps - 1]);
  g.last_offset = std::max(g.tap_offset[0], g.tap_offset[taps - 1]);
}
// The forward with its phases merged into rows, and grad_input with them merged into channels where
// stride divides 8 (implicit_gemm.cuh's header comment). Merged tap t reads x[col - t + padding div
// stride] in the forward, channel (co, r) at column i + t in grad_input.
std::optional<GemmProblem> merged_forward_problem(const ConvTParams& p) {
  if (!phases_merge(p)) return std::nullopt;
  GemmProblem g = gemm_problem(p, /*forward=*/true);
  g.row_phases = int(p.stride);
  g.phase_origin = int(p.padding % p.stride);
  g.rows_per_group *= p.stride;
  g.out_step = 1;
  set_merged_taps(g, int(p.kernel_size / p.stride), int(p.padding / p.stride), -1);
  return g;
}
std::optional<GemmProblem> merged_grad_input_problem(const ConvTParams& p) {
  if (!phases_merge(p) || 8 % p.stride != 0) return std::nullopt;
  GemmProblem g = gemm_problem(p, /*forward=*/false);
  g.channel_phases = int(p.stride);
  g.channel_origin = int(p.padding);
  g.channels_per_group *= p.stride;
  set_merged_taps(g, int(p.kernel_size / p.stride), 0, 1);
  return g;
}
GemmWeight gemm_weight(const ConvTParams& p, bool forward) {  // A_t[row, ch] = w[ci, co, t]
  const int64_t row_stride = forward ? p.w_out_stride : p.w_in_stride;
  const int64_t channel_stride = forward ? p.w_in_stride : p.w_out_stride;
  return {p.in_channels_per_group * p.w_in_stride, row_stride, channel_stride, p.w_tap_stride};
}

// Rows of a (N, C, L) tensor with these element strides are contiguous and start on
// `elements`-element boundaries (so copies of `elements` elements stay aligned).
bool rows_aligned(const at::Tensor& t, int64_t batch_stride, int64_t channel_stride, int64_t length_stride, int elements) {
  return length_stride == 1 && channel_stride % elements == 0 && batch_stride % elements == 0 &&
         reinterpret_cast<uintptr_t>(t.data_ptr()) % (elements * t.element_size()) == 0;
}

// Elements per asynchronous copy of such rows: the widest of `copy_bytes` that moves at least two
// elements and to which every row is contiguous and aligned; else 1 (one element at a time).
int widest_copy(const at::Tensor& t, int64_t batch_stride, int64_t channel_stride, int64_t length_stride,
                std::initializer_list<int> copy_bytes) {
  for (const int bytes : copy_bytes) {
    const int elements = bytes / int(t.element_size());
    if (elements > 1 && rows_aligned(t, batch_stride, channel_stride, length_stride, elements)) return elements;
  }
  return 1;
}

// A driver API function reached through the runtime (the library does not link libcuda); nullptr
// where the driver lacks it
template <typename Function>
Function driver_function(const char* name) {
  void* function = nullptr;
  cudaDriverEntryPointQueryResult found{};
  if (cudaGetDriverEntryPointByVersion(name, &function, 12000, cudaEnableDefault, &found) != cudaSuccess ||
      found != cudaDriverEntryPointSuccess) {
    (void)cudaGetLastError();
    return nullptr;
  }
  return reinterpret_cast<Function>(function);
}

// `t` as a TMA tensor map (cuTensorMapEncodeTiled) of `dims` (innermost first, its elements
// contiguous) with element strides `strides` (of dims 1 on), copied in boxes of `box` elements, zeros
// outside the tensor; float with `tf32` as TFLOAT32, which the copies round to nearest, ties to even
// (probed on the H100, session 19). False where TMA cannot read `t` (its start or a stride not a multiple of 16
// bytes) or the driver refuses the map.
bool encode_tensor_map(CUtensorMap& map, const at::Tensor& t, std::initializer_list<int64_t> dims,
                       std::initializer_list<int64_t> strides, std::initializer_list<int> box, CUtensorMapSwizzle swizzle,
                       bool tf32) {
  using EncodeTiled = CUresult (*)(CUtensorMap*, CUtensorMapDataType, cuuint32_t, void*, const cuuint64_t*, const cuuint64_t*,
                                   const cuuint32_t*, const cuuint32_t*, CUtensorMapInterleave, CUtensorMapSwizzle,
                                   CUtensorMapL2promotion, CUtensorMapFloatOOBfill);
  static const auto encode = driver_function<EncodeTiled>("cuTensorMapEncodeTiled");
  static const auto current_context = driver_function<CUresult (*)(CUcontext*)>("cuCtxGetCurrent");
  // The encoder needs a current context, which a thread that has made no runtime call yet lacks
  // (autograd's backward thread: CUDA_ERROR_INVALID_CONTEXT under memcheck, session 20): the
  // runtime's primary context of the current device, which cudaSetDevice makes current
  CUcontext context = nullptr;
  if (!encode || !current_context || current_context(&context) != CUDA_SUCCESS) return false;
  int device = 0;
  if (!context && (cudaGetDevice(&device) != cudaSuccess || cudaSetDevice(device) != cudaSuccess)) {
    (void)cudaGetLastError();
    return false;
  }
  constexpr size_t kMaxRank = 5;
  const size_t rank = dims.size();
  TORCH_INTERNAL_ASSERT(rank <= kMaxRank && strides.size() + 1 == rank && box.size() == rank);
  const int64_t element_size = t.element_size();
  cuuint64_t dim_sizes[kMaxRank], byte_strides[kMaxRank];
  cuuint32_t box_sizes[kMaxRank], steps[kMaxRank];
  std::copy(dims.begin(), dims.end(), dim_sizes);
  std::copy(box.begin(), box.end(), box_sizes);
  std::fill(steps, steps + rank, 1u);
  size_t d = 0;
  for (const int64_t stride : strides) {
    if (stride * element_size % 16 != 0) return false;
    byte_strides[d++] = cuuint64_t(stride * element_size);
  }
  if (reinterpret_cast<uintptr_t>(t.data_ptr()) % 16 != 0) return false;
  const CUtensorMapDataType type = t.scalar_type() == at::kFloat ? (tf32 ? CU_TENSOR_MAP_DATA_TYPE_TFLOAT32 : CU_TENSOR_MAP_DATA_TYPE_FLOAT32)
                                   : t.scalar_type() == at::kHalf ? CU_TENSOR_MAP_DATA_TYPE_FLOAT16
                                                                  : CU_TENSOR_MAP_DATA_TYPE_BFLOAT16;
  return encode(&map, type, cuuint32_t(rank), t.data_ptr(), dim_sizes, byte_strides, box_sizes, steps,
                CU_TENSOR_MAP_INTERLEAVE_NONE, swizzle, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}

// The most taps one reduction step (out_phase, in_phase) uses.
int most_taps_per_step(const GemmProblem& g) {
  int taps = 0;
  for (int pair = 0; pair < g.out_phases * g.in_phases; ++pair) taps = std::max(taps, g.pair_begin[pair + 1] - g.pair_begin[pair]);
  return taps;
}

// Chunk size, shared-memory layout and tile counts for block_m x block_n tiles: the first (chunk, staged
// output) that fits.
std::optional<GemmProblem> plan_gemm_tiles(GemmProblem g, const at::Tensor& in, int block_m, int block_n, bool warpgroups) {
  const int element_size = int(in.element_size());
  const int channels_per_word = 4 / element_size;
  const int64_t channel_words = (g.channels_per_group + channels_per_word - 1) / channels_per_word;
  const int64_t column_positions = int64_t(g.row_phases) * g.out_step;  // out positions a column holds
  const int64_t max_columns = (int64_t(g.out_length) + g.phase_origin + column_positions - 1) / column_positions;
  const int taps_per_step = most_taps_per_step(g);
  g.copy_elements =
      g.in_step == 1 ? widest_copy(in, g.in_batch_stride, g.in_channel_stride, g.in_length_stride, {16, 8, 4}) : 1;
  // Warpgroup tiles load x_s into registers, so a row may sit at its own shift: rows that do not all
  // start 16-byte aligned (kb64's grad_input, grad_y rows of 65538) go in 16-byte chunks from each
  // window start rounded down (row_offsets) instead of narrower copies
  g.row_offsets = warpgroups && g.in_step == 1 && g.in_length_stride == 1 && g.copy_elements * element_size < 16;
  if (g.row_offsets) g.copy_elements = 16 / element_size;
  g.lead = g.row_offsets ? 0 : int(floor_mod(g.first_offset, g.copy_elements));
  g.block_m = block_m;
  g.block_n = block_n;
  g.warpgroups = warpgroups;
  int64_t x_rows = int64_t(g.block_n) + g.last_offset - g.first_offset + g.lead + (g.row_offsets ? g.copy_elements - 1 : 0);
  if (g.channel_phases > 1) {  // merged channels: whole rows of `in` in 16-byte copies (GemmProblem)
    g.copy_elements = widest_copy(in, g.in_batch_stride, g.in_channel_stride, g.in_length_stride, {16});
    if (g.copy_elements * element_size != 16) return std::nullopt;
    g.lead = int(floor_mod(int64_t(g.first_offset) * g.channel_phases - g.channel_origin, g.copy_elements));
    x_rows = (int64_t(g.block_n) + g.last_offset - g.first_offset) * g.channel_phases + g.lead;
  }
  if (x_rows > kMaxGemmXRow) return std::nullopt;  // could not fit in shared memory anyway
  g.x_rows = int(x_rows);
  g.row_copies = (g.x_rows + g.copy_elements - 1) / g.copy_elements;
  const int copied = g.row_copies * g.copy_elements;
  // rows ≡ 8 (mod 16) elements: conflict-free B fragments; merged channels, whose fragments read
  // rows one or two apart, ≡ 16 (mod 32) words
  const int copied_words = copied * element_size / 4;
  g.x_row_elements = g.channel_phases > 1 ? ((copied_words + 15) / 32 * 32 + 16) * 4 / element_size
                                          : std::max(0, (copied - 8 + 15) / 16) * 16 + 8;
  g.row_tiles = int((g.rows_per_group + g.block_m - 1) / g.block_m);
  g.col_tiles = int((max_columns + g.block_n - 1) / g.block_n);
  g.tiles = g.batch * g.groups * g.row_tiles * g.col_tiles;
  const int64_t last_position = (int64_t(g.col_tiles) * g.block_n + g.x_rows) * g.in_step + g.in_step;
  if (g.tiles >= kGemmIndexLimit || last_position >= kGemmIndexLimit || g.batch >= kGemmIndexLimit ||
      g.groups >= kGemmIndexLimit) {
    return std::nullopt;
  }
  const int vector_elements = 16 / element_size;  // y_s rows end in one vector of slack
  g.y_row_elements = g.out_step <= kMaxStagedStep ? g.block_n * g.out_step + vector_elements : 0;
  const SmemBudgets budgets = smem_budgets();
  // Plans in order of preference: (chunk, staged output, two blocks per SM).
  // 64-word chunks halve a tile's serial steps where there are fewer tiles than SMs (such a problem
  // is a chain of step latencies); elsewhere 32-word chunks pipeline better.
  // Staging the output pays when phases interleave (out_step > 1) at two blocks per SM, and at one
  // block per SM when some phases get no tap (kb79 1.12 vs 2.07 ms unstaged; grouped and hifigan_up2
  // with every phase reached were faster unstaged at two blocks). With out_step 1 the direct paired
  // stores were faster (kb74 1.17 vs 1.48 ms). A weight with several chunks stays resident only at
  // two blocks per SM (kb64 at one block: resident 9.98 ms, streamed 6.97 ms).
  // With many tiles, direct stores at one block per SM come last: a second block hides step latencies
  // better than longer chunks do (kb64 128 x 128, H200: 16-word chunks at two blocks TF32 4.84 / bf16
  // 2.37 ms, 32-word chunks at one block 5.25 / 2.77). Staged output keeps its one-block plans ahead
  // (kb79 TF32: staged at one block 0.71 ms, direct at two 2.39).
  const bool few_tiles = g.tiles < sm_count();
  struct Candidate {
    int chunk_words;
    bool stage_output, two_blocks;
  };
  // a chunk more than twice the channels would be mostly padding
  auto mostly_padding = [&](int chunk_words) { return chunk_words > 16 && channel_words <= chunk_words / 2; };
  std::vector<Candidate> candidates;
  for (const int chunk_words : {64, 32, 16}) {
    if (mostly_padding(chunk_words) || (chunk_words == 64 && !few_tiles)) continue;
    if (warpgroups && chunk_words == 64) continue;  // slot rows of 64 or 128 bytes (wgmma.cuh)
    for (const bool stage_output : {true, false})
      for (const bool two_blocks : {true, false})
        if (few_tiles || stage_output || two_blocks) candidates.push_back({chunk_words, stage_output, two_blocks});
  }
  for (const int chunk_words : {32, 16})
    if (!few_tiles && !mostly_padding(chunk_words)) candidates.push_back({chunk_words, false, false});
  for (const Candidate& candidate : candidates) {
    const int chunk_words = candidate.chunk_words;
    g.ksteps = chunk_words / 8;
    g.chunk_channels = chunk_words * channels_per_word;
    g.chunks = int((g.channels_per_group + g.chunk_channels - 1) / g.chunk_channels);
    g.staged_rows = g.chunk_channels / g.channel_phases;  // (merged channels: channel_phases divides 8)
    g.x_words = g.staged_rows * g.x_row_elements * element_size / 4;
    g.slot_words = (g.block_m / 16) * g.ksteps * kFragmentWords;
    const bool stage_output = candidate.stage_output;
    const size_t budget = candidate.two_blocks ? budgets.two_blocks : budgets.one_block;
    if (stage_output && (g.out_step == 1 || g.out_step > kMaxStagedStep)) continue;
    if (stage_output && !candidate.two_blocks && g.out_phases == g.out_step) continue;
    g.stage_output = stage_output;
    auto smem_bytes = [&](int slots, int weight_buffers) {
      const int64_t y_words = stage_output ? int64_t(g.block_m) * g.y_row_elements : 0;
      return size_t(int64_t(weight_buffers) * slots * g.slot_words + 2 * int64_t(g.x_words) + y_words) * 4;
    };
    g.resident = (g.chunks == 1 || candidate.two_blocks) && smem_bytes(g.chunks * g.taps, 1) <= budget;
    g.weight_slots = g.resident ? g.chunks * g.taps : taps_per_step;
    g.smem_bytes = smem_bytes(g.weight_slots, g.resident ? 1 : 2);
    if (g.smem_bytes > budget) continue;
    g.div_col_tiles = Divider(unsigned(g.col_tiles));
    g.div_row_tiles = Divider(unsigned(g.row_tiles));
    g.div_batch = Divider(unsigned(g.batch));
    g.div_groups = Divider(unsigned(g.groups));
    g.div_chunks = Divider(unsigned(g.chunks));
    g.div_in_phases = Divider(unsigned(g.in_phases));
    g.div_row_copies = Divider(unsigned(g.row_copies));
    g.div_row_phases = Divider(unsigned(g.row_phases));
    g.tile_parts = g.stage_output ? 1 : g.out_phases;
    g.parts = g.tiles * g.tile_parts;
    if (g.parts >= kGemmIndexLimit) return std::nullopt;
    g.div_tile_parts = Divider(unsigned(g.tile_parts));
    return g;
  }
  return std::nullopt;
}

// The tile shape: the first of a list (by the rows of a group and the taps of a step) that plans and
// fills the SMs.
// Forward on an H200, ms (TF32 / bf16; session 6, CONVT_TILE experiment over every shape):
//   64 x 256 for 33-64 rows:  kb74 1.10 -> 0.85 / 0.80 -> 0.65, kb79 1.08 -> 0.75 / 0.64 -> 0.65,
//                             hifigan_up2 0.74 -> 0.75 / 0.41 -> 0.40 (64 x 128 before)
//   128 x 128 for > 64 rows with more than 2 taps a step: kb64 6.85 -> 6.27 / 3.41 -> 3.19 (64 x 128)
//   128 x 64 for > 64 rows with at most 2 taps (strided upsampling): hifigan_up1 1.68 / 0.91, EnCodec
//                             0.83 / 0.48 against 128 x 128's 1.73 / 0.96 and 1.02 / 0.51
//   32 x 128 for <= 32 rows:  hifigan_up3 0.58 / 0.31, grouped 0.41 / 0.28 (32 x 256: 0.53 / 0.34, 0.55 / 0.23)
// 3xTF32 keeps 32-row warp tiles (64 x 128 in place of 64 x 256 and 128 x 128).
// On sm_90, 128 x 128 warpgroup tiles (wgmma) come first for > 64 rows (session 12, H200: kb64
// 3.82 -> 3.32 / 2.14 -> 1.87, hifigan_up1 1.02 -> 0.74 / 0.68 -> 0.38); 64 x 128 warpgroup tiles
// for 33-64 rows lost to 64 x 256 mma.sync tiles (kb74 0.81 -> 0.83 / 0.61 -> 0.67, kb79 TF32
// 0.66 -> 0.93) though hifigan_up2 gained (0.475 -> 0.391 / 0.301 -> 0.218), so they are not used;
// the pipelined kernel's 64 x 256 warpgroup tiles (plan_pipelined) come first where they plan.
struct TileShape {
  int block_m, block_n;
  bool warpgroups;
};
// Warpgroup tiles (wgmma) run on sm_90 devices when the library was built for sm_90a.
bool wgmma_usable() {
  const cudaDeviceProp* device = at::cuda::getCurrentDeviceProperties();
  return wgmma_built() && device->major == 9 && device->minor == 0;
}
// The pipelined kernel's plan (pipelined_gemm.cuh) with tiles of block_m rows x block_n columns for a warpgroup
// problem whose steps all read one phase pair from contiguous rows in 16-byte chunks (out_step 1, or
// in 3xTF32 one out phase of a strided forward, kb79: 1.17 -> 0.93 ms on the H100, session 21, where
// TF32 (0.66 -> 0.88) and bf16 (0.58 -> 0.72) lose to implicit_gemm_kernel's staged output; in_step
// 1 unless its channels merge phases): 32-word chunks where three stages fit in one block's
// shared memory, else 16-word chunks with as many stages as fit (two at least). 3xTF32 stages A's
// big and small parts. Float x_s without merged channels comes by TMA where `in` has a tensor map
// (GemmProblem::tensor_rows; allow_tensor_rows false: not), TF32 rounded by the copy (H100, session
// 21, forward ms: 3xTF32 kb64 4.03 -> 3.91, EnCodec 0.390 -> 0.374, hifigan_up1 0.632 -> 0.609; but
// bf16 kb64 1.39 -> 1.41 and kb74 0.597 -> 0.612: 16-bit keeps the bulk row copies).
std::optional<GemmProblem> plan_pipelined_tiles(const GemmProblem& problem, const at::Tensor& in, int block_m, int block_n,
                                                Math math, bool allow_tensor_rows = true) {
  auto plan = plan_gemm_tiles(problem, in, block_m, block_n, /*warpgroups=*/true);
  const int element_size = int(in.element_size());
  if (!plan || plan->out_phases != 1 || plan->in_phases != 1 || (plan->out_step != 1 && math != Math::k3xTF32) ||
      (plan->in_step != 1 && plan->channel_phases == 1) || plan->copy_elements * element_size != 16) {
    return std::nullopt;
  }
  GemmProblem g = *plan;
  g.weight_parts = math == Math::k3xTF32 ? 2 : 1;
  // a consumer warpgroup's box: its columns and the halo from the lead (TMA boxes start at 16-byte
  // multiples), rows ≡ 8 (mod 32) words (conflict-free fragment loads, as plan_gemm_tiles's rows), at
  // most 256 positions (TMA)
  const int box_lead = int(floor_mod(g.first_offset, g.copy_elements));
  const int box_row_elements = 8 + (g.block_n / kPipelineConsumers + g.last_offset - g.first_offset + box_lead - 8 + 31) / 32 * 32;
  g.tensor_rows = allow_tensor_rows && element_size == 4 && g.channel_phases == 1 && g.in_length_stride == 1 &&
                  box_row_elements <= 256;
  if (g.tensor_rows) g.lead = box_lead, g.row_offsets = false, g.x_row_elements = box_row_elements;
  const int channels_per_word = 4 / element_size;
  const int64_t channel_words = (g.channels_per_group + channels_per_word - 1) / channels_per_word;
  const size_t budget = smem_budgets().one_block;
  for (const int chunk_words : {32, 16}) {
    if (chunk_words == 32 && channel_words <= 16) continue;  // mostly padding
    g.ksteps = chunk_words / 8;
    g.chunk_channels = chunk_words * channels_per_word;
    g.chunks = int((g.channels_per_group + g.chunk_channels - 1) / g.chunk_channels);
    g.staged_rows = g.chunk_channels / g.channel_phases;
    g.x_words = (g.tensor_rows ? kPipelineConsumers : 1) * g.staged_rows * g.x_row_elements * element_size / 4;
    g.slot_words = (g.block_m / 16) * g.ksteps * kFragmentWords;
    const size_t stage_bytes = size_t(g.weight_parts * g.taps * g.slot_words + g.x_words) * 4 + 2 * sizeof(uint64_t);  // and its mbarriers
    const int stages = int(std::min<size_t>(kMaxPipelineStages, budget / stage_bytes));
    if (stages < (chunk_words == 32 ? 3 : 2)) continue;
    g.stages = stages;
    g.smem_bytes = stages * stage_bytes;
    g.weight_slots = g.taps;
    g.resident = g.stage_output = false;
    g.tile_parts = 1;
    g.parts = g.tiles;
    g.div_chunks = Divider(unsigned(g.chunks));
    g.div_tile_parts = Divider(1u);
    // (a box of a group's last chunk reads the next group's rows, whose Inf or NaN would turn the
    // zero weights' products into NaN: only where chunks end with the groups)
    if (g.tensor_rows && (g.groups > 1 && g.channels_per_group % g.staged_rows != 0 ||
                          !encode_tensor_map(g.in_map, in, {g.in_length, g.groups * g.channels_per_group, g.batch},
                                             {g.in_channel_stride, g.in_batch_stride}, {g.x_row_elements, g.staged_rows, 1},
                                             CU_TENSOR_MAP_SWIZZLE_NONE, /*tf32=*/math == Math::kTF32))) {
      return plan_pipelined_tiles(problem, in, block_m, block_n, math, /*allow_tensor_rows=*/false);
    }
    return g;
  }
  return std::nullopt;
}

// The pipelined plan of a problem that has one and fills the SMs: tiles of 256 columns (two
// subtiles a consumer warpgroup: the weight, streamed from L2 for every tile, serves twice the
// columns; H100, session 18: kb64 TF32 forward 2.84 -> 2.33 ms, hifigan_up1 0.385 -> 0.319) unless
// they pad the columns by more than a sixteenth over 128-column tiles (hifigan_up0's 862 columns:
// 0.262 against 0.239 ms). The strided forward's 16-bit merged rows too since the producer's four
// warps stage them (H100, session 22, bf16 forward ms on implicit_gemm_kernel -> here: hifigan_up0
// 0.164 -> 0.125, up1 0.247 -> 0.209, up3 0.236 -> 0.191, EnCodec 0.184 -> 0.180; but up2 0.200 ->
// 0.212, 0.231 on 128 x 128 tiles). 3xTF32 (two accumulators a subtile) takes 128 columns.
// Groups of 33-64 rows take tiles of 64 x 256 (H100, session 20, forward ms before -> after:
// kb74 bf16 0.730 -> 0.593, 3xTF32 2.317 -> 1.405; hifigan_up3 TF32 0.393 -> 0.273, 3xTF32 0.608 ->
// 0.357); TF32 kb74 too since the epilogue loads its bias before storing (session 21: 0.871 on
// mma.sync's 64 x 256 tiles, 0.677 here).
std::optional<GemmProblem> plan_pipelined(const GemmProblem& problem, const at::Tensor& in, Math math) {
  if (problem.rows_per_group <= 64) {
    const auto plan = plan_pipelined_tiles(problem, in, 64, 256, math);
    return plan && plan->parts >= sm_count() ? plan : std::nullopt;
  }
  const auto narrow = plan_pipelined_tiles(problem, in, 128, 128, math);
  const auto wide = math == Math::k3xTF32 ? std::nullopt : plan_pipelined_tiles(problem, in, 128, 256, math);
  if (wide && wide->parts >= sm_count() && (!narrow || 16 * int64_t(wide->col_tiles) * 256 <= 17 * int64_t(narrow->col_tiles) * 128))
    return wide;
  if (narrow && narrow->parts >= sm_count()) return narrow;
  return std::nullopt;
}

// A problem whose phases merge (merged) runs merged on warpgroup tiles where those fill the SMs;
// warpgroup problems run pipelined where that plans. 3xTF32 takes warpgroup tiles only pipelined.
std::optional<GemmProblem> plan_gemm(const GemmProblem& g, const std::optional<GemmProblem>& merged, const at::Tensor& in,
                                     Math math) {
  const bool wide_warp_tiles = math != Math::k3xTF32;
  const bool pipelined = wgmma_usable();
  const bool warpgroups = wide_warp_tiles && pipelined;  // implicit_gemm_kernel's warpgroup tiles
  if (merged && pipelined && merged->rows_per_group > 32) {
    if (auto plan = plan_pipelined(*merged, in, math)) return plan;
    if (warpgroups && merged->rows_per_group > 64) {
      const auto plan = plan_gemm_tiles(*merged, in, 128, 128, /*warpgroups=*/true);
      if (plan && plan->parts >= sm_count()) return plan;
    }
  }
  if (pipelined && g.rows_per_group > 32) {
    if (auto plan = plan_pipelined(g, in, math)) return plan;
  }
  std::vector<TileShape> shapes;
  if (warpgroups && g.rows_per_group > 64) shapes.push_back({128, 128, true});
  if (g.rows_per_group <= 32) {
    shapes.push_back({32, 128});
  } else if (g.rows_per_group <= 64) {
    if (wide_warp_tiles) shapes.push_back({64, 256});
    shapes.push_back({64, 128});
    shapes.push_back({32, 128});
  } else if (most_taps_per_step(g) > 2) {
    if (wide_warp_tiles) shapes.push_back({128, 128});
    shapes.push_back({64, 128});
  } else {
    shapes.push_back({128, 64});
    shapes.push_back({64, 128});
  }
  // a shape whose work parts (tiles, or with direct stores their out_phases) do not fill the SMs gives
  // way to the next, smaller one (`small` TF32: 64 x 256 0.041 ms, 64 x 128 0.030; H100, session 20,
  // 64 x 128 -> 32 x 128: TF32 0.017 -> 0.015, 3xTF32 0.020 -> 0.017, bf16 0.015 -> 0.016)
  std::optional<GemmProblem> plan;
  for (const TileShape& shape : shapes) {
    if (auto shape_plan = plan_gemm_tiles(g, in, shape.block_m, shape.block_n, shape.warpgroups)) {
      plan = shape_plan;
      if (plan->parts >= sm_count()) break;
    }
  }
  return plan;
}

// The pipelined kernel of a planned tile shape by the phases it merges
template <typename T, Math kMath, int kBlockM, int kSubtiles>
auto pipelined_kernel(const GemmProblem& g) {
  return g.row_phases > 1       ? pipelined_gemm_kernel<T, kMath, Merge::kRows, kBlockM, kSubtiles>
         : g.channel_phases > 1 ? pipelined_gemm_kernel<T, kMath, Merge::kChannels, kBlockM, kSubtiles>
                                : pipelined_gemm_kernel<T, kMath, Merge::kNone, kBlockM, kSubtiles>;
}
// The kernel of a planned tile shape (plan_gemm's list)
template <typename T, Math kMath>
auto gemm_kernel(const GemmProblem& g) {
  if (g.stages) {
    if (g.block_m == 64) return pipelined_kernel<T, kMath, 64, 2>(g);
    if constexpr (kMath != Math::k3xTF32) {
      if (g.block_n == 256) return pipelined_kernel<T, kMath, 128, 2>(g);
    }
    return pipelined_kernel<T, kMath, 128, 1>(g);
  }
  if constexpr (kMath != Math::k3xTF32) {
    if (g.warpgroups && g.row_phases > 1) {
      return g.row_offsets ? implicit_gemm_kernel<T, kMath, 4, 2, true, true, Merge::kRows>
                           : implicit_gemm_kernel<T, kMath, 4, 2, true, false, Merge::kRows>;
    }
    if (g.warpgroups && g.channel_phases > 1) return implicit_gemm_kernel<T, kMath, 4, 2, true, false, Merge::kChannels>;
    if (g.warpgroups) return g.row_offsets ? implicit_gemm_kernel<T, kMath, 4, 2, true, true> : implicit_gemm_kernel<T, kMath, 4, 2, true>;
    if (g.block_m == 64 && g.block_n == 256) return implicit_gemm_kernel<T, kMath, 4, 1>;
    if (g.block_m == 128 && g.block_n == 128) return implicit_gemm_kernel<T, kMath, 4, 2>;
  }
  if (g.block_m == 128) return implicit_gemm_kernel<T, kMath, 2, 4>;
  return g.block_m == 64 ? implicit_gemm_kernel<T, kMath, 2, 2> : implicit_gemm_kernel<T, kMath, 1, 2>;
}

// Packs A (pack_gemm_weight_kernel), then runs persistent tile blocks.
template <typename T, Math kMath>
void launch_gemm(const GemmProblem& g, const at::Tensor& in, const at::Tensor& w, const GemmWeight& a,
                 const at::Tensor& bias, const at::Tensor& out) {
  auto as_t = [](const at::Tensor& tensor) { return reinterpret_cast<T*>(tensor.data_ptr()); };
  const auto stream = at::cuda::getCurrentCUDAStream();
  const int64_t words = g.groups * g.row_tiles * g.chunks * int64_t(g.weight_parts) * g.taps * g.slot_words;
  const at::Tensor packed = at::empty({words}, w.options().dtype(at::kInt));
  uint32_t* packed_w = reinterpret_cast<uint32_t*>(packed.data_ptr());
  pack_gemm_weight_kernel<T, kMath><<<grid_size(words, kDirectThreads), kDirectThreads, 0, stream>>>(as_t(w), packed_w, g, a, words);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  const auto kernel = gemm_kernel<T, kMath>(g);
  const int threads = g.stages ? kPipelineThreads : kGemmThreads;
  C10_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(g.smem_bytes)));
  int blocks_per_sm = 0;
  C10_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks_per_sm, kernel, threads, g.smem_bytes));
  const int64_t resident_blocks = int64_t(std::max(blocks_per_sm, 1)) * sm_count();
  const unsigned blocks = unsigned(std::min(g.parts, resident_blocks));  // persistent: each block walks parts of tiles
  kernel<<<blocks, threads, g.smem_bytes, stream>>>(as_t(in), packed_w, bias.defined() ? as_t(bias) : nullptr,
                                                  as_t(out), g);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

// float32 follows PyTorch's convolution setting: TF32 when cuDNN may use it, else 3xTF32.
bool tf32_allowed() { return at::globalContext().allowTF32CuDNN(); }

// Runs `problem` on tensor cores when a plan fits; false sends the caller to the direct kernels.
bool run_gemm(const GemmProblem& problem, const std::optional<GemmProblem>& merged, const at::Tensor& in,
              const at::Tensor& w, const GemmWeight& a, const at::Tensor& bias, const at::Tensor& out) {
  const Math math = in.scalar_type() != at::kFloat ? Math::k16Bit : tf32_allowed() ? Math::kTF32 : Math::k3xTF32;
  const auto plan = plan_gemm(problem, merged, in, math);
  if (!plan) return false;
  switch (in.scalar_type()) {
    case at::kFloat:
      math == Math::kTF32 ? launch_gemm<float, Math::kTF32>(*plan, in, w, a, bias, out)
                          : launch_gemm<float, Math::k3xTF32>(*plan, in, w, a, bias, out);
      return true;
    case at::kHalf: launch_gemm<__half, Math::k16Bit>(*plan, in, w, a, bias, out); return true;
    case at::kBFloat16: launch_gemm<__nv_bfloat16, Math::k16Bit>(*plan, in, w, a, bias, out); return true;
    default: return false;
  }
}

// grad_w = the sum of partial's slices (each grad_w.numel() elements of grad_w's accumulation type),
// added in a fixed order: the second pass of the sliced grad_weight and grad_bias reductions.
void sum_slices(const at::Tensor& partial, const at::Tensor& grad_w, int64_t slices) {
  const auto stream = at::cuda::getCurrentCUDAStream();
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, grad_w.scalar_type(), "convt_sum_slices", [&] {
    using acc_t = at::opmath_type<scalar_t>;
    const int64_t elements = grad_w.numel();
    sum_slices_kernel<scalar_t, acc_t><<<grid_size(elements, 32), 32 * kSumWarps, 0, stream>>>(
        partial.data_ptr<acc_t>(), grad_w.data_ptr<scalar_t>(), elements, slices);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  });
}

// ---- tensor-core grad_weight (grad_weight_gemm.cuh) --------------------------------------------

constexpr int64_t kWgScratchBytes = int64_t(64) << 20;  // the most partial sums may take

// x [batch][channels][positions] as a tensor map of boxes of 64 channels x 128 bytes of positions,
// swizzled as wgmma's B (128-byte rows), for the pipelined grad_weight (TF32 or 16-bit; float rounded
// by the copies: H100, session 19, kb64 grad_weight 2.25 -> 1.98 ms without the consumers' rounding pass)
bool encode_x_map(CUtensorMap& map, const at::Tensor& x, const ConvTParams& p) {
  const int64_t element_size = x.element_size();
  return p.x_length_stride == 1 &&
         encode_tensor_map(map, x, {p.length_in, p.in_channels, p.batch}, {p.x_channel_stride, p.x_batch_stride},
                           {int(kWgmmaRowBytes / element_size), kWgmmaBlockCi, 1}, CU_TENSOR_MAP_SWIZZLE_128B, /*tf32=*/true);
}

// with_bias: grad_bias may come along (sums_bias: in warpgroup tiles, else in TF32 only; see the
// kernels' header comments); one_pass: the math is TF32 or 16-bit, not 3xTF32, so tap groups of up
// to kWgWideGroupTaps and warpgroup tiles may be planned; merge: the plan with merged phases
// (warpgroup tiles only, grad_weight_wgmma.cuh), or none
std::optional<WeightGradProblem> plan_grad_weight(const ConvTParams& p, const at::Tensor& x, const at::Tensor& grad_y,
                                                  bool with_bias, bool one_pass, bool merge) {
  if (!gemm_applies(p, x.scalar_type())) return std::nullopt;
  WeightGradProblem g{};
  // warpgroup tiles (grad_weight_wgmma.cuh) where their 64 x 64 tiles are full
  g.warpgroups = one_pass && wgmma_usable() && p.in_channels_per_group > 32 && p.out_channels_per_group > 32;
  g.merged = merge && g.warpgroups && phases_merge(p) && p.stride <= kWgmmaBlockCo;  // (a tile: at least a co's rows)
  if (merge && !g.merged) return std::nullopt;
  g.batch = p.batch, g.groups = p.groups, g.cig = p.in_channels_per_group, g.cog = p.out_channels_per_group;
  g.x_batch_stride = p.x_batch_stride, g.x_channel_stride = p.x_channel_stride, g.x_length_stride = p.x_length_stride;
  g.gy_batch_stride = p.y_batch_stride, g.gy_channel_stride = p.y_channel_stride, g.gy_length_stride = p.y_length_stride;
  g.length_in = int(p.length_in), g.length_out = int(p.length_out), g.stride = int(p.stride), g.taps = int(p.kernel_size);
  // the taps of each phase in order of k (so of shift), phases in order of their first tap; merged,
  // one phase of the merged taps t (k = t*stride of phase 0, shift t - padding div stride)
  std::vector<std::vector<int>> phase_taps;
  std::vector<int64_t> phase_of;
  int tap_shift[kMaxGemmTaps] = {};
  if (g.merged) {
    g.phase_origin = int(p.padding % p.stride);
    phase_of.push_back(0);
    phase_taps.emplace_back();
    for (int k = 0; k < g.taps; k += g.stride) {
      phase_taps[0].push_back(k);
      tap_shift[k] = int(k / p.stride - p.padding / p.stride);
    }
  }
  for (int k = 0; k < g.taps && !g.merged; ++k) {
    const Tap tap = tap_of(k, p.stride, p.padding, p.dilation);
    tap_shift[k] = int(tap.shift);
    const auto known = std::find(phase_of.begin(), phase_of.end(), tap.phase);
    if (known == phase_of.end()) {
      phase_of.push_back(tap.phase);
      phase_taps.push_back({k});
    } else {
      phase_taps[known - phase_of.begin()].push_back(k);
    }
  }
  // cut into groups of up to group_taps: kWgWideGroupTaps where a phase has more than kWgGroupTaps
  // taps and the caller allows (each group stages its own copy of x and grad_y)
  size_t most_taps = 0;
  for (const auto& taps : phase_taps) most_taps = std::max(most_taps, taps.size());
  // (warpgroup tiles: the most taps of a phase, up to kWgGroupTaps: every group has that many slots)
  g.group_taps = g.warpgroups ? int(std::min(most_taps, size_t(kWgGroupTaps)))
                 : one_pass && most_taps > size_t(kWgGroupTaps) ? kWgWideGroupTaps : kWgGroupTaps;
  int max_span = 0, next = 0;
  for (size_t phase = 0; phase < phase_taps.size(); ++phase) {
    const std::vector<int>& taps = phase_taps[phase];
    for (size_t begin = 0; begin < taps.size(); begin += g.group_taps) {
      const size_t end = std::min(taps.size(), begin + g.group_taps);
      const int q = g.tap_groups++;
      g.group_phase[q] = int(phase_of[phase]), g.group_first[q] = next, g.group_count[q] = int(end - begin);
      g.group_shift_max[q] = tap_shift[taps[end - 1]];
      g.group_span[q] = g.group_shift_max[q] - tap_shift[taps[begin]];
      max_span = std::max(max_span, g.group_span[q]);
      for (size_t i = begin; i < end; ++i, ++next) {
        g.group_tap[next] = taps[i];
        g.group_tap_shift[next] = tap_shift[taps[i]];
      }
    }
  }
  // the groups of a phase are consecutive: count and number them for grad_bias's turns
  int phases_with_taps = 0;
  for (int q = 0; q < g.tap_groups; ++q) {
    const bool first_of_phase = q == 0 || g.group_phase[q] != g.group_phase[q - 1];
    phases_with_taps += first_of_phase;
    g.group_phase_index[q] = first_of_phase ? 0 : g.group_phase_index[q - 1] + 1;
  }
  for (int q = g.tap_groups - 1; q >= 0; --q)
    g.group_phase_groups[q] = q + 1 < g.tap_groups && g.group_phase[q + 1] == g.group_phase[q] ? g.group_phase_groups[q + 1]
                                                                                               : g.group_phase_index[q] + 1;
  // copies of 16 or 8 bytes, or of 4 (16-bit pairs): the kernel's sizes (8 bytes: float rows of an
  // even length not divisible by 4, such as kb64's grad_y, went element by element before). Warpgroup
  // tiles copy gy in 16-byte chunks from each window start's aligned-down address where the rows are
  // contiguous positions (stride 1) of whole 32-bit words (16-bit: the windows' offsets share a
  // parity): H100 kb64 fwd+bwd TF32 12.55 -> 11.52 ms, bf16 7.05 -> 5.98 (8-byte and pair copies before).
  const int element_size = int(x.element_size());
  g.x_copy_elements = widest_copy(x, g.x_batch_stride, g.x_channel_stride, g.x_length_stride, {16, 8, 4});
  if (g.warpgroups) {  // (merged: any contiguous rows, whose 16-bit pairs load value by value)
    const bool chunks = g.merged ? g.gy_length_stride == 1
                                 : g.stride == 1 && rows_aligned(grad_y, g.gy_batch_stride, g.gy_channel_stride,
                                                                 g.gy_length_stride, 4 / element_size);
    g.gy_copy_elements = chunks ? 16 / element_size : 1;
  } else {
    g.gy_copy_elements =
        g.stride == 1 ? widest_copy(grad_y, g.gy_batch_stride, g.gy_channel_stride, g.gy_length_stride, {16, 8, 4}) : 1;
  }
  // the window: x from m0 - shift_max, its start moved back by the lead to a multiple of the copy
  // size; in warpgroup tiles gy from i0 + shift_min, in chunks from up to a chunk less one before it
  // (merged: stride elements a position)
  const int window_vector = g.warpgroups ? g.gy_copy_elements : g.x_copy_elements;
  const int position_elements = g.merged ? g.stride : 1;
  for (int q = 0; q < g.tap_groups; ++q) {
    g.group_lead[q] = g.warpgroups ? 0 : int(floor_mod(-g.group_shift_max[q], window_vector));
    const int elements = (kWgPositions + g.group_span[q]) * position_elements + (g.warpgroups ? window_vector - 1 : g.group_lead[q]);
    g.group_window_copies[q] = Divider(unsigned((elements + window_vector - 1) / window_vector));
  }
  // whole copies of the widest window (its start < window_vector into the first), ≡ 4 (mod 32), in
  // warpgroup tiles ≡ 4 (mod 16): conflict-free fragments (H100: at mod 32 kb64 TF32's gy chunks left
  // room for two blocks an SM instead of three; at mod 16 kb74 TF32 fwd+bwd went 3.52 -> 3.84 ms).
  // Merged: rows of words ≡ 4 * stride (mod 32), a fragment's positions x phases of a co in 4 *
  // stride consecutive words (max_span is the slots' less one: 16-bit pairs read past a group's last tap)
  const int copied = ((kWgPositions + max_span) * position_elements + 2 * (window_vector - 1)) / window_vector * window_vector;
  if (g.merged) {
    const int words = (copied * element_size + 3) / 4, residue = 4 * g.stride % 32;
    g.window_row_elements = ((words - residue + 31) / 32 * 32 + residue) * 4 / element_size;
  } else {
    const int row_multiple = g.warpgroups ? 16 : 32;
    g.window_row_elements = (copied - 4 + row_multiple - 1) / row_multiple * row_multiple + 4;
  }
  if (g.window_row_elements > 1024) return std::nullopt;
  // 32-co tiles where C_out per group is at most 32 (hifigan_up3 TF32 fwd+bwd 1.61 -> 1.39 ms,
  // grouped 1.48 -> 1.33), else 64
  g.block_co = g.merged ? kWgmmaBlockCo / g.stride : g.cog > 32 ? 64 : 32;  // (merged: co of stride rows each)
  g.co_tiles = int((g.cog + g.block_co - 1) / g.block_co);
  // grad_bias comes along where every phase has a tap, so that no row-sum pass is left: in warpgroup
  // tiles from tap slot 0's A values (grad_weight_wgmma.cuh; 16-bit: each x_s buffer holds the ones
  // column's rows too, kWgmmaXBytesOf)
  if (g.warpgroups) g.sums_bias = with_bias && (g.merged || phases_with_taps == g.stride);
  const size_t ones_bytes = g.warpgroups && g.sums_bias && element_size == 2 ? size_t(kWgmmaOnesRows * kWgPositions * element_size) : 0;
  // a buffer of gy and x rows of block_ci ci, in the input's type (warpgroup tiles: x rows of
  // kWgPositions, gy the window)
  const int64_t window_elements = g.merged ? g.window_row_elements : wg_window_row(g.window_row_elements, element_size);
  auto buffer_bytes = [&](int block_ci) {
    const int64_t elements = g.warpgroups ? block_ci * kWgPositions + g.block_co * window_elements
                                          : g.block_co * wg_gy_row(element_size) + block_ci * window_elements;
    return size_t(elements * element_size);
  };
  // Pipelined warpgroup tiles (64 co x 128 ci, grad_weight_wgmma.cuh's kPipelined) where gy goes in
  // chunks, C_in per group fills more than one consumer warpgroup, two stages fit (a stage: a
  // buffer, the ones rows and two mbarriers) and x has a tensor map; else 64-ci tiles where C_in per
  // group > 32 (H200 fwd+bwd: kb64 TF32 23.2 -> 20.9 ms, hifigan_up1 bf16 5.86 -> 4.76, EnCodec bf16
  // 3.32 -> 2.65), 32-ci tiles where it is at most 32 (64-ci tiles, half empty there: kb74 TF32 5.43
  // -> 6.80, grouped 1.55 -> 1.86)
  const size_t stage_bytes = buffer_bytes(2 * kWgmmaBlockCi) + 2 * ones_bytes + 2 * sizeof(uint64_t);
  const bool pipelined = g.warpgroups && g.gy_copy_elements * element_size == 16 && g.cig > kWgmmaBlockCi &&
                         smem_budgets().one_block / stage_bytes >= 2 && encode_x_map(g.x_map, x, p);
  g.block_ci = pipelined ? 2 * kWgmmaBlockCi : g.cig > 32 ? 64 : 32;  // (64 x 64 for warpgroup tiles, which need C_in and C_out per group > 32)
  g.ci_tiles = int((g.cig + g.block_ci - 1) / g.block_ci);
  g.tiles = g.groups * g.ci_tiles * g.co_tiles * g.tap_groups;
  // items: chunks of the phase positions m (of the longest phase), in warpgroup tiles of the x positions
  const int64_t item_positions = g.warpgroups ? p.length_in : phase_length(0, p.length_out, p.stride);
  g.chunks_per_row = (item_positions + kWgPositions - 1) / kWgPositions;
  g.items = g.batch * g.chunks_per_row;
  if (g.items >= kGemmIndexLimit) return std::nullopt;
  g.div_chunks_per_row = Divider(unsigned(g.chunks_per_row));
  if (pipelined) {  // as many stages as fit
    g.stages = int(std::min<size_t>(kMaxPipelineStages, smem_budgets().one_block / stage_bytes));
    g.smem_bytes = g.stages * stage_bytes;
  } else {  // two buffers
    g.smem_bytes = 2 * (buffer_bytes(g.block_ci) + ones_bytes);
  }
  if (g.smem_bytes > smem_budgets().one_block) return std::nullopt;  // wide tap groups (dilation in the hundreds)
  // Slices, within the scratch budget: about six blocks per SM in all (twelve of the two-warp 32 x 32
  // tiles); warpgroup tiles at most two full waves of the blocks an SM holds (the slices are equal
  // work: a third wave of a few blocks takes as long as a full one)
  const int64_t weight_elements = g.groups * g.cig * g.cog * g.taps;
  auto blocks_per_sm = [device = at::cuda::getCurrentDeviceProperties()](size_t smem_bytes) {
    return int64_t(device->sharedMemPerMultiprocessor / (smem_bytes + device->reservedSharedMemPerBlock));
  };
  if (g.warpgroups) {
    const int64_t resident = sm_count() * (g.stages > 0 ? 1 : std::min<int64_t>(wgmma_min_blocks(g.group_taps), blocks_per_sm(g.smem_bytes)));
    g.slices = std::clamp<int64_t>(2 * resident / g.tiles, 1, g.items);
  } else {
    const int64_t target_blocks = sm_count() * std::max(6, 24 / ((g.block_ci / 16) * (g.block_co / 32)));
    g.slices = std::clamp<int64_t>((target_blocks + g.tiles - 1) / g.tiles, 1, g.items);
  }
  g.slices = std::max<int64_t>(1, std::min(g.slices, kWgScratchBytes / 4 / weight_elements));
  if (g.tiles * g.slices >= kGemmIndexLimit) return std::nullopt;
  // grad_bias in the mma.sync kernel: in TF32's rounding pass, into slots (floats, after the buffers)
  // where they leave as many blocks per SM room in shared memory (session 9: grouped TF32 went from 6
  // to 5 blocks, fwd+bwd 1.327 -> 1.357 ms)
  if (g.warpgroups) return g;
  g.bias_slots = g.gy_copy_elements > 1 ? kWgPositions / g.gy_copy_elements : 32;
  const size_t with_slots = g.smem_bytes + size_t(g.block_co * g.bias_slots * 4);
  g.sums_bias = with_bias && element_size == 4 && phases_with_taps == g.stride && with_slots <= smem_budgets().one_block &&
                blocks_per_sm(with_slots) == blocks_per_sm(g.smem_bytes);
  if (g.sums_bias) g.smem_bytes = with_slots;
  return g;
}

// grad_w, and grad_bias too where the plan sums it
template <typename T, Math kMath>
void launch_grad_weight(const WeightGradProblem& g, const at::Tensor& x, const at::Tensor& grad_y, const at::Tensor& grad_w,
                        const at::Tensor& grad_bias) {
  auto as_t = [](const at::Tensor& tensor) { return reinterpret_cast<T*>(tensor.data_ptr()); };
  const auto stream = at::cuda::getCurrentCUDAStream();
  const int64_t elements = grad_w.numel();
  const at::Tensor partial = at::empty({g.slices * elements}, grad_w.options().dtype(at::kFloat));
  // bias_partial[slice][phase][co] (warpgroup tiles) or [slice][ci tile][tap group][co]
  const int64_t bias_slices = !g.sums_bias ? 0 : g.warpgroups ? g.slices * g.stride : g.slices * g.ci_tiles * g.tap_groups;
  const at::Tensor bias_partial =
      bias_slices > 0 ? at::empty({bias_slices * grad_bias.numel()}, grad_w.options().dtype(at::kFloat)) : at::Tensor();
  // the kernel of the tile, (ci warps, co warps) = (block_ci / 16, block_co / 32), and of the group taps
  auto tile_kernel = [&](auto group_taps) {
    constexpr int kTaps = decltype(group_taps)::value;
    const bool wide_ci = g.block_ci == 64, wide_co = g.block_co == 64;
    return wide_ci ? (wide_co ? grad_weight_gemm_kernel<T, kMath, 4, 2, kTaps> : grad_weight_gemm_kernel<T, kMath, 4, 1, kTaps>)
                   : (wide_co ? grad_weight_gemm_kernel<T, kMath, 2, 2, kTaps> : grad_weight_gemm_kernel<T, kMath, 2, 1, kTaps>);
  };
  auto kernel = tile_kernel(std::integral_constant<int, kWgGroupTaps>{});
  int threads = 32 * (g.block_ci / 16) * (g.block_co / 32);
  if constexpr (kMath != Math::k3xTF32) {
    if (g.group_taps == kWgWideGroupTaps) kernel = tile_kernel(std::integral_constant<int, kWgWideGroupTaps>{});
    if (g.warpgroups) {
      auto wgmma_kernel = [&](auto sums_bias, auto merged, auto pipelined) {
        constexpr bool kSumsBias = decltype(sums_bias)::value, kMerged = decltype(merged)::value;
        constexpr bool kPipelined = decltype(pipelined)::value;
        return g.group_taps == 1   ? grad_weight_wgmma_kernel<T, 1, kSumsBias, kMerged, kPipelined>
               : g.group_taps == 2 ? grad_weight_wgmma_kernel<T, 2, kSumsBias, kMerged, kPipelined>
               : g.group_taps == 3 ? grad_weight_wgmma_kernel<T, 3, kSumsBias, kMerged, kPipelined>
                                   : grad_weight_wgmma_kernel<T, 4, kSumsBias, kMerged, kPipelined>;
      };
      auto with_bias = [&](auto merged, auto pipelined) {
        return g.sums_bias ? wgmma_kernel(std::true_type{}, merged, pipelined) : wgmma_kernel(std::false_type{}, merged, pipelined);
      };
      auto with_merged = [&](auto pipelined) {
        return g.merged ? with_bias(std::true_type{}, pipelined) : with_bias(std::false_type{}, pipelined);
      };
      kernel = g.stages > 0 ? with_merged(std::true_type{}) : with_merged(std::false_type{});
      threads = g.stages > 0 ? kPipelineThreads : kWgmmaThreads;
    }
  }
  C10_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(g.smem_bytes)));
  kernel<<<unsigned(g.tiles * g.slices), threads, g.smem_bytes, stream>>>(
      as_t(x), as_t(grad_y), partial.data_ptr<float>(), bias_slices > 0 ? bias_partial.data_ptr<float>() : nullptr, g);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  sum_slices(partial, grad_w, g.slices);
  if (bias_slices > 0) sum_slices(bias_partial, grad_bias, bias_slices);
}

// grad_weight on tensor cores when a plan fits (weight: false sends the caller to the direct
// kernel), with grad_bias (if defined) where the plan takes it along (bias).
struct GradWeightRun {
  bool weight, bias;
};
GradWeightRun run_grad_weight(const ConvTParams& p, const at::Tensor& x, const at::Tensor& grad_y, const at::Tensor& grad_w,
                              const at::Tensor& grad_bias) {
  const bool strict = x.scalar_type() == at::kFloat && !tf32_allowed();  // 3xTF32: no wide tap groups
  // merged phases where they plan, else per phase
  auto plan = plan_grad_weight(p, x, grad_y, grad_bias.defined() && !strict, !strict, /*merge=*/true);
  if (!plan) plan = plan_grad_weight(p, x, grad_y, grad_bias.defined() && !strict, !strict, /*merge=*/false);
  if (!plan) return {false, false};
  const GradWeightRun run{true, plan->sums_bias != 0};
  switch (x.scalar_type()) {
    case at::kFloat:
      tf32_allowed() ? launch_grad_weight<float, Math::kTF32>(*plan, x, grad_y, grad_w, grad_bias)
                     : launch_grad_weight<float, Math::k3xTF32>(*plan, x, grad_y, grad_w, grad_bias);
      return run;
    case at::kHalf: launch_grad_weight<__half, Math::k16Bit>(*plan, x, grad_y, grad_w, grad_bias); return run;
    case at::kBFloat16: launch_grad_weight<__nv_bfloat16, Math::k16Bit>(*plan, x, grad_y, grad_w, grad_bias); return run;
    default: return {false, false};
  }
}

// ---- depthwise (depthwise.cuh) -----------------------------------------------------------------

// The staged row segment of the forward (x) or grad_input (grad_y) kernel; nullopt when the
// depthwise kernels do not apply or the segment does not fit in a block's shared memory (grad_input
// stages about kDwSegment * stride elements: fp32 to stride 27 on an H100, 11 on sm_86/89).
std::optional<DepthwiseArgs> depthwise_args(const ConvTParams& p, bool forward, size_t element_size) {
  // (phases of an output segment, first_phase + t, are ints in the kernels)
  if (p.in_channels_per_group != 1 || p.kernel_size > kDwMaxTaps || p.stride >= kGemmIndexLimit) return std::nullopt;
  DepthwiseArgs a{};
  a.shift_min = tap_of(0, p.stride, p.padding, p.dilation).shift;  // shifts grow with k
  a.shift_max = tap_of(p.kernel_size - 1, p.stride, p.padding, p.dilation).shift;
  const int64_t span = a.shift_max - a.shift_min;
  a.staged = forward ? (kDwSegment - 1) / p.stride + 2 + span : (kDwSegment + span) * p.stride;
  const size_t acc_size = std::max<size_t>(element_size, 4);  // at::opmath_type: float, or double
  const int64_t weights = p.out_channels_per_group * (p.kernel_size + (forward ? 1 : 0));
  if (weights >= kGemmIndexLimit) return std::nullopt;
  a.weights = int(weights);
  a.smem_bytes = size_t(a.weights) * acc_size + size_t(a.staged) * element_size;
  if (a.smem_bytes > smem_budgets().one_block) return std::nullopt;
  return a;
}

// Slices of the depthwise grad_weight rows: about sixteen blocks per SM in all (four waves of four
// resident blocks, so the last wave's idle share is small), each slice at least four block-widths
// of inputs long.
int64_t depthwise_grad_weight_slices(const ConvTParams& p) {
  const int64_t weight_rows = p.in_channels * p.out_channels_per_group;
  const int64_t target_blocks = sm_count() * 16;
  const int64_t longest = std::max<int64_t>(1, p.length_in / (4 * kDwThreads));
  return std::clamp<int64_t>((target_blocks + weight_rows - 1) / weight_rows, 1, longest);
}

template <typename Kernel>
dim3 depthwise_grid(const ConvTParams& p, int64_t length, Kernel kernel, size_t smem) {
  C10_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
  return dim3(unsigned((length + kDwSegment - 1) / kDwSegment), unsigned(std::min<int64_t>(p.batch * p.in_channels, 65535)));
}

// ---- the ops -------------------------------------------------------------------------------------

void forward(const at::Tensor& x, const at::Tensor& w, const std::optional<at::Tensor>& bias, const at::Tensor& y,
             const ConvTArgs& args) {
  const c10::cuda::CUDAGuard guard(x.device());
  const ConvTParams p = make_params(x, w, y, args);
  const auto stream = at::cuda::getCurrentCUDAStream();
  const at::Tensor bias_c = bias.has_value() && bias->defined() ? bias->contiguous() : at::Tensor();  // read as bias[co]
  if (gemm_applies(p, x.scalar_type()) && run_gemm(gemm_problem(p, /*forward=*/true), merged_forward_problem(p), x, w,
                                                     gemm_weight(p, /*forward=*/true), bias_c, y)) {
    return;
  }
  const auto depthwise = depthwise_args(p, /*forward=*/true, x.element_size());
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, x.scalar_type(), "conv_transpose1d_cuda_direct", [&] {
    using acc_t = at::opmath_type<scalar_t>;
    if (depthwise) {
      const size_t smem = depthwise->smem_bytes;
      auto kernel = depthwise_forward_kernel<scalar_t, acc_t>;
      kernel<<<depthwise_grid(p, p.length_out, kernel, smem), kDwThreads, smem, stream>>>(
          x.data_ptr<scalar_t>(), w.data_ptr<scalar_t>(), data_or_null<scalar_t>(bias_c), y.data_ptr<scalar_t>(), p,
          *depthwise);
      C10_CUDA_KERNEL_LAUNCH_CHECK();
      return;
    }
    forward_direct_kernel<scalar_t, acc_t>
        <<<row_grid(p.batch * p.out_channels, p.length_out, kDirectThreads), kDirectThreads, 0, stream>>>(
            x.data_ptr<scalar_t>(), w.data_ptr<scalar_t>(), data_or_null<scalar_t>(bias_c), y.data_ptr<scalar_t>(), p);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  });
}

void backward(const at::Tensor& grad_y, const at::Tensor& x, const at::Tensor& w, const ConvTArgs& args,
              const at::Tensor& grad_x, const at::Tensor& grad_w, const at::Tensor& grad_bias) {
  const c10::cuda::CUDAGuard guard(x.device());
  const ConvTParams p = make_params(x, w, grad_y, args);
  const auto stream = at::cuda::getCurrentCUDAStream();
  const bool grad_x_on_tensor_cores = grad_x.defined() && gemm_applies(p, x.scalar_type()) &&
                                     run_gemm(gemm_problem(p, /*forward=*/false), merged_grad_input_problem(p), grad_y, w,
                                              gemm_weight(p, /*forward=*/false), at::Tensor(), grad_x);
  const GradWeightRun tensor_cores =
      grad_w.defined() ? run_grad_weight(p, x, grad_y, grad_w, grad_bias) : GradWeightRun{false, false};
  const bool grad_w_on_tensor_cores = tensor_cores.weight;
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, x.scalar_type(), "conv_transpose1d_backward_cuda", [&] {
    using acc_t = at::opmath_type<scalar_t>;
    const auto depthwise = depthwise_args(p, /*forward=*/false, x.element_size());
    if (grad_x.defined() && !grad_x_on_tensor_cores && depthwise) {
      const size_t smem = depthwise->smem_bytes;
      auto kernel = depthwise_grad_input_kernel<scalar_t, acc_t>;
      kernel<<<depthwise_grid(p, p.length_in, kernel, smem), kDwThreads, smem, stream>>>(
          grad_y.data_ptr<scalar_t>(), w.data_ptr<scalar_t>(), grad_x.data_ptr<scalar_t>(), p, *depthwise);
      C10_CUDA_KERNEL_LAUNCH_CHECK();
    } else if (grad_x.defined() && !grad_x_on_tensor_cores) {
      grad_input_direct_kernel<scalar_t, acc_t>
          <<<row_grid(p.batch * p.in_channels, p.length_in, kDirectThreads), kDirectThreads, 0, stream>>>(
          grad_y.data_ptr<scalar_t>(), w.data_ptr<scalar_t>(), grad_x.data_ptr<scalar_t>(), p);
      C10_CUDA_KERNEL_LAUNCH_CHECK();
    }
    if (grad_w.defined() && !grad_w_on_tensor_cores && p.in_channels_per_group == 1 && p.kernel_size <= kDwMaxTaps) {
      const int64_t slices = depthwise_grad_weight_slices(p);
      const int64_t blocks = p.in_channels * p.out_channels_per_group * slices;
      const at::Tensor partial =
          at::empty({slices * grad_w.numel()}, grad_w.options().dtype(c10::CppTypeToScalarType<acc_t>::value));
      depthwise_grad_weight_kernel<scalar_t, acc_t><<<grid_size(blocks * kDwThreads, kDwThreads), kDwThreads, 0, stream>>>(
          grad_y.data_ptr<scalar_t>(), x.data_ptr<scalar_t>(), partial.data_ptr<acc_t>(), p, slices);
      C10_CUDA_KERNEL_LAUNCH_CHECK();
      sum_slices(partial, grad_w, slices);
    } else if (grad_w.defined() && !grad_w_on_tensor_cores) {
      grad_weight_direct_kernel<scalar_t, acc_t, kReduceThreads>
          <<<grid_size(grad_w.numel() * kReduceThreads, kReduceThreads), kReduceThreads, 0, stream>>>(
              grad_y.data_ptr<scalar_t>(), x.data_ptr<scalar_t>(), grad_w.data_ptr<scalar_t>(), p);
      C10_CUDA_KERNEL_LAUNCH_CHECK();
    }
    if (grad_bias.defined() && !tensor_cores.bias) {
      const int64_t rows = p.batch * p.out_channels;
      const at::Tensor row_sums = at::empty({rows}, grad_y.options().dtype(c10::CppTypeToScalarType<acc_t>::value));
      grad_y_row_sums_kernel<scalar_t, acc_t, kReduceThreads>
          <<<grid_size(rows * kReduceThreads, kReduceThreads), kReduceThreads, 0, stream>>>(
              grad_y.data_ptr<scalar_t>(), row_sums.data_ptr<acc_t>(), p);
      C10_CUDA_KERNEL_LAUNCH_CHECK();
      sum_slices(row_sums, grad_bias, p.batch);  // row_sums[n][co]: one slice per batch element
    }
  });
}

}  // namespace

TORCH_LIBRARY_IMPL(convt, CUDA, m) {
  m.impl("conv_transpose1d", TORCH_FN(forward_op<forward>));
  m.impl("conv_transpose1d_backward", TORCH_FN(backward_op<backward>));
}

}  // namespace convt::cuda
