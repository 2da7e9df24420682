// The planner: which kernel, tile, chunk and stages run a problem on a given GPU (docs/design.md
// §4). Plain C++: no torch, no CUDA, no device queries, no driver calls, no allocation; the device
// arrives as DeviceLimits and each operand's memory as TensorFacts, so a CPU test can ask what any
// shape gets on any card (torch.ops.convt._plan). The kernels' compile-time sizes that the planner
// must know live here too, and the kernel headers take them from here.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

#include "problem.h"

namespace convt {

// An environment variable that overrides a cost model's choice: `never` or `always` (an A/B of both
// choices in one build: tools/ab.py's `name=folder,VAR=VALUE`); anything else, or unset, leaves it.
// The planner reads its overrides at every plan; the CUDA launcher reads CONVT_OVERLAP_LAUNCHES.
enum class PlanOverride { kModel, kNever, kAlways };
PlanOverride read_plan_override(const char* variable);

// ---- the device -----------------------------------------------------------------------------------

struct DeviceLimits {
  int sm_count;
  int64_t smem_per_block_optin;     // the most dynamic shared memory one block may take
  int64_t smem_per_sm;
  int64_t reserved_smem_per_block;  // what the runtime keeps of an SM's shared memory per block
  bool wgmma;                       // sm_90 with this library's sm_90a kernels (wgmma)
  bool tma;                         // and the driver's tensor maps (TMA)
  static DeviceLimits h100();
  static DeviceLimits a100();
  int64_t smem_one_block() const { return smem_per_block_optin; }
  // for each of two blocks on one SM
  int64_t smem_two_blocks() const;
  int64_t blocks_per_sm(int64_t smem_bytes) const;
};

// How float32 products are formed: TF32 (operands rounded to nearest TF32), or 3xTF32 (each operand
// split into big + small TF32 parts; float32 accuracy); 16-bit types multiply as they are.
enum class Math { kTF32, k3xTF32, k16Bit };
// The one place a dtype and PyTorch's TF32 setting become a math mode (element_size 2: 16-bit).
inline Math math_for(int element_size, bool tf32_allowed) {
  return element_size == 2 ? Math::k16Bit : tf32_allowed ? Math::kTF32 : Math::k3xTF32;
}

// An operand as the kernels see it in memory: element size and how its data pointer is aligned
// (the largest power of two dividing the address, up to 256).
struct TensorFacts {
  int element_size;
  int64_t alignment;
};

// ---- kernel sizes the planner must know ------------------------------------------------------------

constexpr int64_t kGemmIndexLimit = int64_t(1) << 30;  // positions, offsets and strides in 32-bit ints
constexpr int64_t kMaxDeinterleavedPhases = 1024;  // the copy stages a position's phases in shared memory
constexpr int kNarrowPipelinedMacs = 192;         // MACs an element of `in` up to which narrow problems pipeline
// The rows of a pipelined tile for a group of at most 64 rows: the fewest of 16, 32 and 64 that hold
// them (wgmma's N: a narrow output pads to 16 rows, not 64)
constexpr int pipelined_narrow_rows(int64_t rows_per_group) { return rows_per_group <= 16 ? 16 : rows_per_group <= 32 ? 32 : 64; }
// The fraction of the SMs that a pipelined plan's parts must reach where the alternative is a
// two-buffer plan (plan_gemm): those run their parts at a fraction of the pipelined kernel's rate, so
// that a pipelined plan on half the SMs beats them (docs/design.md §4.5)
constexpr double kPipelinedLeastFill = 0.5;
// MACs an output element takes (C_in/groups x a phase's taps) from which a strided forward runs on
// pipelined tiles with strided stores rather than on warp tiles (choose_gemm_plan)
constexpr int64_t kStridedStoreMacs = 128;
// ... and in place of the warpgroup tiles (their staged output stores whole rows) from this many:
// 205 MACs an output ran a bf16 forward 0.75x as fast pipelined, 450 and more 1.1-1.7x as fast
// (H200, docs/perf/2026-12-04-v105-planner.md)
constexpr int64_t kStridedStoreWarpgroupMacs = 256;
// MACs an output (C_in/groups x a step's taps) up to which a strided problem is bound by its stores
// (choose_gemm_plan: staged warp tiles first; 3-4 MACs an output ran 1.4-2.1x faster staged than on
// the warpgroup or pipelined tiles, 6-16 MACs at stride 2 0.6-1.2x; H200,
// docs/perf/2026-12-04-v105-planner.md), and kPhaseStridedStoreBoundMacs at strides above 2 on more
// than 16 rows a group in TF32 and 16-bit, where each phase's stores land out_step apart, a sector
// taking one element a store whatever the MACs (docs/perf/2026-12-05-store-bound-refit.md); in
// 3xTF32 at stride 2 too (its staged tiles ran 1.1-2.4x faster than the per-phase plan on 20 layers
// of 6-24 MACs an output, strides 2-5, more than 16 rows a group; 16 rows or fewer 0.4-0.9x), but
// only where its phases do not merge: the merge is weighed against the unstaged plan, as v108
// measured it (plan_data_over_groups).
constexpr int64_t kStoreBoundMacs = 4, kPhaseStridedStoreBoundMacs = 32;
// Staged warp tiles in place of warpgroup tiles' phase-strided stores (choose_gemm_plan) where an
// output of a reached phase takes at most kStagedFewMacs MACs (C_in/groups x its taps) and some
// phase no tap reaches, or at most kStagedWarpTileMacs and half the phases or more: what staging
// saves (strided stores, the bias of the tapless phases a position at a time) grows with that share
// and what it costs (the warp tiles' MMA rate below the warpgroup tiles') with the MACs (H200:
// 1,280-6,144 MACs ran 1.2-1.8x slower staged, 800 0.59-0.70x; at 1-3 of 5 tapless phases up to
// 237 MACs 0.21-1.05x, from 476 1.13-1.6x: docs/perf/2026-12-02-staged-tapless-share.md)
constexpr int64_t kStagedWarpTileMacs = 1024, kStagedFewMacs = 256;
// ... except where two or more out phases are reached and a group has at least
// kTaplessPipelinedChannels input channels (two full 64-channel chunks, so that a tile's steps
// pipeline): there the pipelined tiles with strided stores, which read x by TMA at the tensor cores'
// rate (H100: 1.1-2.1x the staged tiles' speed on 6 of 6 such layers, 0.66-0.91x at 30-96 channels;
// one reached phase (K = 1, or a dilation a multiple of the stride) stays staged, 0.4-1.1x there:
// docs/perf/2026-12-05-tapless-pipelined.md)
constexpr int64_t kTaplessPipelinedChannels = 128;
// The time of a pipelined 128 x 256 tile over a 128 x 128 one (plan_pipelined): at least
// kWideTileTimeLeast, at most kWideTileTime, or kWideTileTimeOneTap at one tap a step, whose short
// steps' fixed costs the wide tile spreads over twice the MACs (docs/design.md §4.5: measured 0.8-2.7x
// a wave, median 1.75, over 108 layers and dtypes on an H200)
constexpr double kWideTileTimeLeast = 1.5, kWideTileTimeOneTap = 1.6, kWideTileTime = 1.8;
// Column tiles a row of x must span for the pipelined forward to take it as TMA boxes of several
// channel phases (GemmPlan::map_row_phases; plan_pipelined_steps): a row's first and last tiles
// read past its ends and go row by row, at two windows a row (docs/design.md §3.6)
constexpr int kPhaseBoxLeastColumnTiles = 6;
// MACs a grad_y element feeds, from which grad_input copies it: 4-byte elements and 16-bit ones at 8
// merged phases (8-way conflicts), 16-bit ones at 2 or 4 (whose in-place fragment loads move half the
// words, so their bank conflicts cost less)
constexpr int64_t kDeinterleaveReuse = 1024, kDeinterleaveReuse16 = 1536;
constexpr int kDeinterleaveConflictPhases = 8;
// grad_input also copies grad_y deinterleaved where its per-phase plan reads grad_y element by element
// on unpipelined tiles and the copy's plan pipelines: on warpgroup tiles, and on mma.sync tiles of at
// least kDeinterleaveWarpChannels C_in per group over kDeinterleaveWarpWaves waves of tiles or more
// (narrower or fewer tiles: the copy's pass over grad_y outweighs what the pipelined tiles save)
constexpr int64_t kDeinterleaveWarpChannels = 32, kDeinterleaveWarpWaves = 8;
constexpr int kFragmentWords = 32 * 4;                 // one m16 x k-step A fragment: 4 words per lane
constexpr int kMaxGemmTaps = 128;
constexpr int kMaxStagedStep = 8;                      // the largest out_step whose outputs are staged
constexpr int kMaxGemmXRow = 4096;                     // positions of one staged x row
constexpr int kPipelineConsumers = 2;                  // consumer warpgroups of the pipelined kernels
constexpr int kTapBoxPositions = 64;                  // positions of a tap box (GemmPlan::tap_boxes): one wgmma M
constexpr int kMaxPipelineStages = 4;
// grad_weight (grad_weight_gemm.cuh): positions per item, taps per tap group (wide: where a phase
// has more taps, TF32 and 16-bit only)
constexpr int kGradWPositions = 64;
constexpr int kGradWGroupTaps = 4, kGradWWideGroupTaps = 8;
constexpr int64_t kGradWScratchBytes = int64_t(64) << 20;  // the most its partial sums may take
// Elements per staged grad_weight row, in 32-bit words ≡ 4 (mod 8): the 8 rows x 4 columns of a
// fragment load hit 32 different banks. gy: kGradWPositions plus 4 floats or 8 16-bit values; the
// window: window_row_elements plus 4 more 16-bit values.
CONVT_HOST_DEVICE constexpr int grad_w_gy_row(int element_size) { return kGradWPositions + (element_size == 2 ? 8 : 4); }
CONVT_HOST_DEVICE constexpr int grad_w_window_row(int window_row_elements, int element_size) {
  return window_row_elements + (element_size == 2 ? 4 : 0);
}
// grad_weight's warpgroup tiles (grad_weight_wgmma.cuh)
constexpr int kWgmmaBlockCo = 64, kWgmmaBlockCi = 64;  // M and N of a tile
constexpr int kWgmmaRowBytes = 128;                    // x_s rows of a swizzle atom
constexpr int kWgmmaOnesRows = 8;                      // the ones column's rows (16-bit grad_bias)
// blocks an SM by the tap slots (registers: 32 accumulators a slot)
CONVT_HOST_DEVICE constexpr int wgmma_min_blocks(int taps) { return taps <= 3 ? 3 : 2; }
// depthwise kernels (depthwise.cuh)
constexpr int kDwThreads = 256, kDwPerThread = 8, kDwSegment = kDwThreads * kDwPerThread;  // outputs per block
constexpr int kDwMaxTaps = 16;
constexpr int kDwMostRowGroups = 8;  // (DepthwisePlan::row_groups: groups of 32 threads or more)
// Groups of at most kDwMaxInChannels input channels whose C_in/groups x C_out/groups is at most
// kDwMaxGroupProducts run on the depthwise kernels: tensor-core tiles would pad both to 16 or more.
// The forward's thread visits every tap of every input channel of its group for each output (Cig *
// K steps), so it takes them only up to kDwMaxForwardInChannels, and while the tiles would pad
// C_out/groups eight times or more (at most kDwMaxForwardOutChannels); one input channel a group
// always.
constexpr int kDwMaxInChannels = 8, kDwMaxGroupProducts = 16, kDwMaxForwardInChannels = 4, kDwMaxForwardOutChannels = 2;
CONVT_HOST_DEVICE constexpr bool depthwise_channels(int64_t in_per_group, int64_t out_per_group, bool forward) {
  return in_per_group == 1 ||
         (in_per_group <= kDwMaxInChannels && in_per_group * out_per_group <= kDwMaxGroupProducts &&
          (!forward || (in_per_group <= kDwMaxForwardInChannels && out_per_group <= kDwMaxForwardOutChannels)));
}

// ---- the implicit GEMM of the forward and grad_input (docs/design.md §3) ----------------------------

// A_t[row, ch] = w[group_stride*g + row_stride*row + channel_stride*ch + tap_stride*t].
struct GemmWeight {
  int64_t group_stride, row_stride, channel_stride, tap_stride;
  int64_t taps;      // K: packed taps from K on are zero
  int64_t dilation;  // merged rows (row_phases > 1): position t*stride + r is tap (t*stride + r) / dilation where it divides, else zero
  // Groups merged into one GEMM group (DataPlan::merged_groups > 1): A is block-diagonal, nonzero where
  // row / group_rows == channel / group_channels (the original groups' rows and channels), and the
  // output-channel side (forward: rows, grad_input: channels; co_rows) indexes W modulo its group's
  // count, W's C_out/groups being per original group. 0: no merge.
  int64_t group_rows = 0, group_channels = 0;
  bool co_rows = false;
};

// The tile shapes, in one table that the planner walks and the launcher maps to instantiations.
enum class GemmFamily {
  kWarpTiles,       // implicit_gemm_kernel on mma.sync warps
  kWarpgroupTiles,  // implicit_gemm_kernel on wgmma warpgroups (sm_90a)
  kPipelined,       // pipelined_gemm_kernel: a producer warpgroup and two consumers (sm_90a)
};
struct GemmTileShape {
  GemmFamily family;
  int block_m, block_n;
  bool one_accumulator;  // too many registers for 3xTF32's two accumulators
};
inline constexpr GemmTileShape kGemmTileShapes[] = {
    {GemmFamily::kWarpTiles, 16, 256, false},       {GemmFamily::kWarpTiles, 32, 128, false},
    {GemmFamily::kWarpTiles, 64, 128, false},       {GemmFamily::kWarpTiles, 128, 64, false},
    {GemmFamily::kWarpTiles, 64, 256, true},        {GemmFamily::kWarpTiles, 128, 128, true},
    {GemmFamily::kWarpgroupTiles, 128, 128, true},  {GemmFamily::kPipelined, 16, 256, false},
    {GemmFamily::kPipelined, 32, 256, false},       {GemmFamily::kPipelined, 64, 256, false},
    {GemmFamily::kPipelined, 128, 128, false},      {GemmFamily::kPipelined, 128, 256, true},
};
constexpr int kGemmTileShapeCount = int(sizeof(kGemmTileShapes) / sizeof(kGemmTileShapes[0]));
// The index of a shape in kGemmTileShapes (-1: none)
constexpr int gemm_tile_index(GemmFamily family, int block_m, int block_n) {
  for (int i = 0; i < kGemmTileShapeCount; ++i)
    if (kGemmTileShapes[i].family == family && kGemmTileShapes[i].block_m == block_m && kGemmTileShapes[i].block_n == block_n)
      return i;
  return -1;
}

// One problem of the implicit GEMM and its plan: the fields the kernels read (implicit_gemm.cuh's
// GemmProblem adds the dividers and the tensor map that the launcher builds from these).
struct GemmPlan {
  // ---- the problem ----
  int64_t batch, groups, rows_per_group, channels_per_group;
  int64_t in_batch_stride, in_channel_stride, in_length_stride;
  int in_length;              // positions of `in`
  int out_length;             // positions of `out` (contiguous (N, groups*rows_per_group, out_length))
  int out_step, in_step;      // docs/design.md §3
  // The phases some tap reaches: out_phase_value[0, out_phases) and in_phase_value[0, in_phases),
  // an in phase once per run of at most step_taps taps (set_steps).
  int out_phases, in_phases;
  int out_phase_value[kMaxGemmTaps], in_phase_value[kMaxGemmTaps];
  int taps;
  // The taps grouped by phase pair (out_phase, in_phase): pair q = out_phase * in_phases + in_phase
  // owns weight slots [pair_begin[q], pair_begin[q + 1]); slot i holds tap step_tap[i] (the pack
  // kernel's map) at offset slot_offset[i] (the kernels' x window). Pairs <= 2 * taps: one of
  // out_phases and the real in phases is 1, and the phases' tap counts differ by at most one
  // (k * dilation mod stride cycles), so out_phases * ceil(most taps of a phase / step_taps) <= taps
  // + out_phases. 16-bit: the kernels take this struct by value, and its size is kept small
  // (docs/design.md §3.7).
  int16_t step_tap[kMaxGemmTaps], pair_begin[2 * kMaxGemmTaps + 1];
  int slot_offset[kMaxGemmTaps];
  int first_offset, last_offset;  // min and max of slot_offset
  // Merged phases (docs/design.md §3.2): row R of A_t is W's row R / row_phases at tap
  // t*row_phases + R % row_phases, out row R / row_phases at out position col*column_positions + R %
  // row_phases - phase_origin. Merged channels: channel c is in's row c / channel_phases at phase
  // c % channel_phases; x_s holds staged_rows = chunk_channels / channel_phases rows of `in` as they
  // are, from position (first column + first_offset)*channel_phases - channel_origin - lead.
  int row_phases, phase_origin;
  // Out positions a column spans: out_step, or with merged rows the stride: row_phases, except a
  // short filter's (K < stride), whose rows are the K phases with a tap, the launcher filling out
  // with the bias first (the other phases' positions hold it alone).
  int column_positions;
  // Merged rows whose phase is at least stored_row_phases have no tap and are not stored (zero
  // weights' products: a filter of one tap below stride, merged a row per phase); row_phases
  // everywhere else.
  int stored_row_phases;
  int channel_phases, channel_origin, staged_rows;
  // grad_input over grad_y deinterleaved (docs/design.md §3.2): `in` is a copy whose channel
  // (co, r) = co*P + r, P = min(K, stride), holds grad_y[n, co, m*stride + r - padding] at position m
  // (zero outside grad_y; deinterleaved_grad_y), a stride-1 problem whose kernels read it as plain
  // rows. The packed weight's channel c is W's channel c / weight_channel_phases at tap
  // t*weight_channel_phases + c % weight_channel_phases (weight_channel_phases: channel_phases, or P
  // where deinterleaved), zero where that tap is K or past it (zero_taps: K above stride and not a
  // multiple of it, grad_input deinterleaved or a narrow forward merged into rows; DataPlan::exact).
  bool deinterleaved, zero_taps;
  int weight_channel_phases;
  // ---- the plan ----
  int tile_shape;      // index into kGemmTileShapes
  int block_m, block_n;
  bool warpgroups;     // wgmma tiles: ksteps 2 or 4 (slot rows of 64 or 128 bytes)
  int chunk_channels;  // channels per step
  int ksteps;          // mma k-steps per chunk (8 words each): 2, 4 or 8
  int chunks;
  int copy_elements;   // elements per x copy: 16, 8 or 4 bytes' worth (at least 2), or 1
  int lead;            // x_s starts `lead` positions early so that copies stay aligned
  int row_copies;      // copies per channel row of x_s: ceil(x_rows / copy_elements)
  int x_rows;          // positions of x_s
  int x_row_elements;  // elements per channel row of x_s (≡ 8 mod 16: conflict-free B fragments)
  int x_words;         // words of one x_s buffer
  // Warpgroup tiles whose rows do not all start 16-byte aligned: each x_s row holds its window from
  // the window start rounded down to 16 bytes (copy_elements 16 bytes' worth, lead 0).
  bool row_offsets;
  int slot_words;      // words of one tap of w_s: (block_m / 16) * ksteps fragments
  int weight_parts;    // parts of A packed: 1, or 2 for 3xTF32 on pipelined tiles
  int weight_slots;    // taps w_s holds: every (chunk, tap) (resident) or the most of one step
  bool resident;
  bool stage_output;         // y_s holds the tile's outputs (out_step <= kMaxStagedStep)
  int y_row_elements;        // floats per row of y_s: block_n * out_step + one vector of slack
  int row_tiles, col_tiles;  // col_tiles covers the longest out_phase
  // A launch takes row tiles [first_row_tile, first_row_tile + row_tiles) of the problem's (0 and all
  // of them unless the packed weight is split over launches: row_tile_range, launch_row_tiles at a
  // time, set by plan_gemm)
  int first_row_tile, launch_row_tiles;
  // Or, where that leaves launches of too few tiles, launches take ranges of chunks (the reduction
  // split): chunks [first_chunk, first_chunk + chunks) of the problem's, launch_chunks at a time, every
  // row tile; a launch after the first takes no bias and its sums are added to out (run_gemm). Only
  // where the plan has no zero taps, and out is float (4-byte sums: one rounding a launch) or the
  // sums go to an fp32 slice (float_sums: a 16-bit out on warp tiles).
  int first_chunk, launch_chunks;
  int64_t tiles;
  // Blocks walk parts of tiles: with direct stores each out_phase is a part of its own
  // (tile_parts = out_phases * splits); staged output keeps a tile whole. part = (tile * out_phases +
  // out_phase) * splits + split.
  int tile_parts;
  int64_t parts;
  // fp32 sums (docs/design.md §3.8; implicit_gemm_kernel's warp tiles with direct stores of every out
  // phase, no merged phases: sums_in_slices): the parts store their sums, without the bias, into
  // fp32 slices of out's shape (a launch after the first of chunk ranges adds to them), which a second
  // kernel adds in order plus the bias (deterministic). Set by set_splits (a reduction split: where a
  // launch has fewer parts than the SMs hold, each out phase's steps, in_phases * chunks, go in runs
  // of split_steps to `splits` parts, part `split` to slice `split`) and by set_launches (chunk
  // ranges of a 16-bit out, one slice).
  bool float_sums = false;
  int splits = 1, split_steps = 0;
  size_t smem_bytes;
  int stages;  // the pipelined kernel's ring; 0 for implicit_gemm_kernel
  // The pipelined kernel's x_s by TMA (without merged channels): each consumer warpgroup's
  // columns with the halo as one box (position, channel, batch) of staged_rows x x_row_elements;
  // TF32 rounded by the copy. The launcher encodes the map (GemmPlan::in_map_*).
  bool tensor_rows;
  // Rows of no 16-byte multiple (docs/design.md §3.6): the map takes x as super rows of
  // map_row_phases rows back to back (whose length is a 16-byte multiple), each box the rows of one
  // channel phase (channel mod map_row_phases), staged one phase after the other; a tile that reads
  // past a row's ends (where a box holds the neighbouring rows) goes row by row into the same layout.
  // 1: the map is x's own rows. A box's phases start map_phase_elements apart (each 128-byte
  // aligned, as TMA needs); the MMA's k index follows x_s's rows (gemm_mainloop.cuh's set_half_bases).
  int map_row_phases, map_phase_elements;
  // 16-bit tensor_rows of one phase (map_row_phases 1): x_s is a TMA box a step's tap and 64-column
  // subtile (kTapBoxPositions positions x chunk_channels, 128-byte swizzled), which the consumers'
  // wgmma read as A by descriptor (MN-major) where other plans load in^T fragments into registers
  // (docs/design.md §3.6).
  bool tap_boxes;
  // 16-bit or TF32 x with its channels contiguous (channels-last: in_channel_stride 1): x_s is a TMA box a
  // consumer warpgroup of x_row_elements positions x the chunk's channels, 128- or 64-byte swizzled
  // (tensor_rows is set too), which its wgmma read as a K-major A by descriptor from each tap's row
  // on (docs/design.md §3.6).
  bool position_rows;
  // 16-bit tensor_rows read by A's register fragments (no tap boxes, no position rows): each warp's
  // 16 positions of a subtile in the order 0, 8, 1, 9, ... of wgmma's M rows, so that a lane's two
  // rows (M rows g and g + 8) are positions 2g and 2g + 1: at an even tap shift one 4-byte load gives
  // a channel's two values (half the shared-memory wavefronts of 2-byte loads), and the epilogue
  // stores a row's two adjacent positions as one pair (docs/design.md §3.6).
  bool permuted_positions;
};

// The implicit GEMM of the forward (out = y, in = x) or of grad_input (out = grad_x, in = grad_y),
// before any tiling; nullopt where the tensor-core path does not apply (gemm_applies).
bool gemm_applies(const ConvTParams& p, int element_size);
GemmPlan gemm_problem(const ConvTParams& p, bool forward, int step_taps);
// The same with the phases merged into rows (forward) or channels (grad_input), where they merge.
std::optional<GemmPlan> merged_forward_problem(const ConvTParams& p, int step_taps);
std::optional<GemmPlan> merged_grad_input_problem(const ConvTParams& p, int step_taps);
// grad_y deinterleaved (GemmPlan::deinterleaved; WeightPlan::deinterleaved_grad_y for dilation 1):
// the copy is (N, C_out * deinterleaved_phases(p), deinterleaved_row_length(p)), contiguous, and
// tap k of W is the copy's phase k*dilation % stride at shift k*dilation / stride
// (deinterleaved_taps(p) shifts; (shift, phase) pairs of no tap hold zero weights).
bool deinterleaves(const ConvTParams& p);
std::optional<GemmPlan> deinterleaved_grad_input_problem(const ConvTParams& p, int step_taps);
int64_t deinterleaved_phases(const ConvTParams& p);      // min((K - 1) * dilation + 1, stride)
int64_t deinterleaved_taps(const ConvTParams& p);        // ceil(((K - 1) * dilation + 1) / stride)
int64_t deinterleaved_length(const ConvTParams& p);      // positions a copy's row holds: L_in + taps - 1
int64_t deinterleaved_row_length(const ConvTParams& p);  // elements a row takes: 16-byte rows in every dtype
TensorFacts copy_facts(int element_size);                // a copy the op allocates: 256-byte aligned
// x copied into rows of 16-byte multiples (WeightPlan::aligned_x): (N, C_in, aligned_row_length)
int64_t aligned_row_length(int64_t length, int element_size);
// The grad_weight problem over x aligned and/or grad_y deinterleaved: x's strides those of the
// aligned copy; deinterleaved, a stride-1 problem of C_out * P output channels (P = min(K, stride))
// and ceil(K / stride) taps at the dilation over the copy G[n, co*P + r, m] = gy[n, co, m*stride +
// r*dilation - padding] (grad_input's copy at dilation 1), whose weight (C_in, C_out/groups * P,
// taps), contiguous, holds W's tap t*stride + r at channel co*P + r, tap t (docs/design.md §5.5).
// The copy's sizes within the kernels' limits, at stride > 1 (any_stride: at stride 1 too, where the
// copy is grad_y in aligned rows, rows at -padding)
bool weight_deinterleaves(const ConvTParams& p, bool any_stride = false);
// Whether grad_input's deinterleaved copy is grad_weight's too (at dilation 1; a dilated grad_input's
// copy holds its (shift, phase) grid)
inline bool grad_input_copy_serves_grad_weight(const ConvTParams& p) { return p.dilation == 1; }
int64_t weight_deinterleaved_rows(const ConvTParams& p);        // P: min(K, stride)
int64_t weight_deinterleaved_row_length(const ConvTParams& p);  // L_in + (taps - 1) * dilation, to 8 elements
ConvTParams grad_weight_over_copies(const ConvTParams& p, int element_size, bool aligned_x, bool deinterleaved);
// ... and over grad_y copied channels-last by phase: G[n, r, m, co] = gy[n, co, m * stride + r], (N,
// stride, channels_last_phase_length, C_out rounded up to 16 bytes); q's y strides are those of one
// phase's rows, read as (N, C_out, positions) with channel stride 1 (at stride 1: (N, L_out, C_out))
ConvTParams grad_weight_over_channels_last_grad_y(const ConvTParams& p, int element_size);
int64_t channels_last_phase_length(const ConvTParams& p);  // ceil(L_out / stride): rows a phase of the copy
// grad_input's channels-last copy of grad_y (DataPlan::channels_last_grad_y): rows (positions of the
// deinterleaved copy at stride > 1, else L_out) of row_elements (C_out * P, or C_out at stride 1,
// rounded up to 16 bytes); at most kChannelsLastCopyMostPhases phases (the copy's 64-position tiles)
int64_t channels_last_grad_y_rows(const ConvTParams& p);
int64_t channels_last_grad_y_row_elements(const ConvTParams& p, int element_size);
constexpr int64_t kChannelsLastCopyMostPhases = 64;  // (direct.cuh's kChannelsLastTile, static_assert there)
// The box tiles of grad_weight (grad_weight_boxes.cuh; docs/design.md §5.7): a 16-bit problem of any
// stride over x with a tensor map and grad_y copied channels-last (grad_weight_over_channels_last_grad_y),
// or a TF32 stride-1 problem over grad_y's rows (its own, or unrolled by taps) whose every tap's shift
// is a multiple of 16 bytes; C_in per group above 64, at most kMaxBoxTaps taps (a launch carries the
// maps of kBoxWindowTaps of them, whole tap groups: grad_weight_boxes_launch.cuh). Each item is 128
// bytes of x positions (kBoxItemBytes); a tile is 128 ci (two consumer warpgroups, x's boxes as
// wgmma's K-major A) x box_columns columns (box_slots taps x block_co co: boxes of kBoxSlotCo co x 128
// bytes of positions at each tap's shift in its phase's rows, wgmma's N-major B in 16-bit, K-major
// in TF32), each tap through a map whose positions end where its x positions do.
constexpr int kMaxBoxTaps = kMaxGemmTaps, kBoxWindowTaps = 32, kMaxBoxSlots = 4, kMaxBoxStages = 6;
// The box tiles read grad_y K-major (its rows) in TF32, whose wgmma has no N-major B; N-major
// (channels-last) in 16-bit: the planner, the launcher's maps and the kernel alike
constexpr bool box_grad_y_k_major(int element_size) { return element_size == 4; }
// A box plan's launches, in order: body(first_group, groups) for each window of whole tap groups of
// box_slots taps, kBoxWindowTaps taps at most (the planner's box_cost and the launcher alike)
template <typename Body>
inline void for_each_box_launch(int tap_groups, int box_slots, Body&& body) {
  const int window_groups = kBoxWindowTaps / box_slots;
  for (int first_group = 0; first_group < tap_groups; first_group += window_groups)
    body(first_group, std::min(window_groups, tap_groups - first_group));
}
constexpr int kBoxItemBytes = 128, kBoxBlockCi = 128;
constexpr int kBoxSlotCo = 64;  // a grad_y box's co: 128 bytes, the swizzle's row (a slot holds whole boxes)
constexpr int kBoxColumnChoices[] = {64, 128, 256};  // (wgmma's N, one instruction a k-step)
// The tile's epilogue stages its fp32 sums in the stages' bytes (BoxEpilogue): kBoxBlockCi rows of ci
// at this pitch in floats, slot t's co c at t * (block_co + 8) + c, the pitch 8 mod 32 (banks)
constexpr int box_staging_pitch(int box_slots, int block_co) {
  const int columns = box_slots * (block_co + 8);
  return columns + (40 - columns % 32) % 32;
}
// The forward over `batch` elements of x copied into rows of 16-byte multiples (DataPlan::copy_batch)
ConvTParams forward_over_aligned_x(const ConvTParams& p, int element_size, int64_t batch);
// ... and over `batch` elements of x copied channels-last: (batch, L_in, C_in) contiguous, read as
// (batch, C_in, L_in) with channel stride 1 (DataPlan::copy_channels_last)
ConvTParams forward_over_channels_last_x(const ConvTParams& p, int64_t batch);
// grad_y unrolled by taps (WeightPlan::unrolled_grad_y; docs/design.md §5.6): the copy (N, C_out * K,
// unrolled_row_length(p)), contiguous, row (n, co*K + k) at i holding grad_y[n, co, i*stride +
// k*dilation - padding] (zero outside grad_y); grad_weight is then the one-tap stride-1 problem of C_out
// * K output channels over it and x (aligned or not), whose weight (C_in, C_out/groups * K, 1) is W's
// memory. Its copy's bytes at most kUnrolledGradYBytes.
constexpr int64_t kUnrolledGradYBytes = int64_t(1) << 30;
// The MMA work (padded_mma_work's MACs) a copied element costs the planner: written, then read back
// (about the MACs of the grad_weight tiles' pace in the time of 8 bytes at the H100's bandwidth)
constexpr int64_t kCopyElementMacs = 256;
int64_t unrolled_row_length(const ConvTParams& p);  // L_in in 16-byte rows in every dtype
// The copy's blocks (unroll_grad_y_kernel): a block stages one grad_y row's window, the positions j =
// i*stride + k*dilation - padding of `positions` consecutive i (a multiple of 8, at most
// kUnrollPositions) and `taps` consecutive k, `elements` = (positions - 1)*stride + (taps - 1)*dilation
// + 1 of them, read once in order, and writes those taps' rows from shared memory (kUnrollStageBytes
// at most, padded: staged_elements_padded). Positions 0: not even 8 positions fit (a stride of
// hundreds of elements), and there is no copy.
struct UnrollWindow {
  int64_t positions = 0, taps = 0, elements = 0;
};
constexpr int64_t kUnrollStageBytes = 24 * 1024, kUnrollPositions = 512;
// A staged row of `elements` holds element e at e + e / 32 (a pad word every 32: reads at a stride
// of 2, 4, 8, ... elements hit distinct banks)
constexpr int64_t staged_elements_padded(int64_t elements) { return elements + elements / 32 + 1; }
UnrollWindow unroll_window(const ConvTParams& p, int element_size);
bool unrolled_copy_fits(const ConvTParams& p, int element_size);  // a window fits; the copy's rows and bytes within the limits
bool unrolls(const ConvTParams& p, int element_size);                // ... and K > 1 (the tiles' candidate)
ConvTParams grad_weight_over_unrolled(const ConvTParams& p, int element_size, bool aligned_x);
GemmWeight gemm_weight(const ConvTParams& p, bool forward);
// The tiling of a problem and its launches (launch_row_tiles); nullopt: no tensor-core plan fits
std::optional<GemmPlan> plan_gemm(const GemmPlan& problem, const std::optional<GemmPlan>& merged, const TensorFacts& in,
                                  Math math, const DeviceLimits& limits, bool strict_phase_staging = true);
int64_t packed_weight_words(const GemmPlan& g);
// The fp32 slices of a plan with float_sums (0 without), within workspace_bound with the packed weight
int64_t float_sums_bytes(const GemmPlan& g);
// Whether the launcher writes the bias (or zero) over all of out before a plan's launches: where
// some positions no tap reaches are stored by no kernel (merged rows of a short filter's phases
// without a tap; a pipelined tile's unreached out phases beside several reached ones, whose
// epilogue writes the bias of the others only beside a single out phase)
bool bias_first(const GemmPlan& g);
// Which pipelined kernel a pipelined plan takes (pipelined_gemm.cuh): one pair (every tap in each
// step); several pairs (out phases or runs of taps, each out phase of a tile stored before the next);
// or a phase pair: the two out phases of out_step 2 held in two accumulator sets and stored together,
// each column's two positions adjacent (TF32 and 16-bit strided forwards whose phases do not merge).
enum class PipelineForm { kOnePair, kPairs, kPhasePair };
PipelineForm pipeline_form(const GemmPlan& g);
// The workspace of the forward and of grad_input (docs/design.md §8, Memory): the packed weight of
// one launch, and beside it a reduction split's fp32 slices or a batch chunk's copy of x.
// workspace_bound: the whole packed weight (one launch) and kWorkspaceBesideWeightBytes, or
// CONVT_MAX_WORKSPACE_MB (read at every plan) for callers short of memory. Where the whole weight
// packs to more than the bound, launches take ranges of row tiles (each packing its own rows into the
// same buffer, in stream order), GemmPlan::launch_row_tiles of them (at least one), or of chunks.
// row_tile_range: the plan of the launch of row tiles [first, first + count).
constexpr int64_t kWorkspaceBesideWeightBytes = int64_t(16) << 20;
int64_t workspace_bound(const GemmPlan& g);
GemmPlan row_tile_range(const GemmPlan& g, int first, int count);
// The plan of the launch of chunks [first, first + count) (GemmPlan::launch_chunks): every row tile
GemmPlan chunk_range(const GemmPlan& g, int first, int count);
GemmPlan first_launch(const GemmPlan& g);  // the plan of a plan's first launch (its workspace: the largest)
// Waves of the persistent blocks over a plan's launches of launch_row_tiles row tiles each: a launch
// lasts as long as its busiest block, ceil(parts / blocks) parts (docs/design.md §4.5).
int64_t launch_waves(const GemmPlan& g, int launch_row_tiles, const DeviceLimits& limits);

// ---- grad_weight (docs/design.md §5) ------------------------------------------------------------------

struct WeightGradPlan {
  int64_t batch, groups, in_channels_per_group, out_channels_per_group;
  int64_t x_batch_stride, x_channel_stride, x_length_stride;
  int64_t gy_batch_stride, gy_channel_stride, gy_length_stride;
  int length_in, length_out, stride, taps;
  // tap groups: taps group_tap[group_first[q], + group_count[q]) share phase group_phase[q]
  int tap_groups, group_taps;  // group_taps: the most taps of a group, the kernel's kGroupTaps
  int group_phase[kMaxGemmTaps], group_first[kMaxGemmTaps], group_count[kMaxGemmTaps];
  int group_shift_max[kMaxGemmTaps], group_span[kMaxGemmTaps];  // the largest shift, and largest - smallest
  int group_tap[kMaxGemmTaps], group_tap_shift[kMaxGemmTaps];  // tap group_tap[i] has shift group_tap_shift[i] (box tiles: tap i)
  // The window of group q (x_s; gy_s in the warpgroup kernel) takes group_window_copy_count[q] copies
  // per row, starting group_lead[q] positions early so that its copies stay aligned.
  int group_lead[kMaxGemmTaps], group_window_copy_count[kMaxGemmTaps];
  int window_row_elements;     // elements per float window row: room for the widest group's copies
  // elements per copy: 16 or 8 bytes' worth, or 2 (16-bit pairs), where rows are contiguous and
  // aligned; 1: element by element. Warpgroup tiles: gy in 16-byte chunks, or 1.
  int x_copy_elements, gy_copy_elements;
  int element_size;            // bytes of an x and grad_y element
  bool warpgroups;            // grad_weight_wgmma_kernel's tiles (64 x 64, items of x positions)
  int block_ci, block_co;     // ci and co per tile
  // groups a tile takes (1, or on mma.sync tiles over groups of at most half their ci and co: that
  // many consecutive groups, whose ci and co rows are consecutive; the products across groups are
  // computed and not stored, docs/design.md §5.1)
  int packed_groups;
  int ci_tiles, co_tiles;     // per tile's groups
  int64_t tiles;              // ceil(groups / packed_groups) * ci_tiles * co_tiles * tap_groups
  // items per batch element: ceil(longest phase / kGradWPositions); warpgroups: ceil(L_in / kGradWPositions)
  int64_t chunks_per_row;
  int64_t items;               // batch * chunks_per_row (< kGemmIndexLimit)
  int64_t slices;              // item ranges; partial holds one grad_w per slice
  // the order of a slice's partial sums (mma.sync and warpgroup tiles): taps first,
  // (k * groups*Cig + g*Cig + ci) * Cog + co, so that a warp's stores of one tap run along co
  // (docs/design.md §5.1); else grad_w's own, ((g*Cig + ci) * Cog + co) * taps + k
  bool taps_first;
  // grad_bias: sums_bias; the tap groups of q's phase: group_phase_groups[q] of them, q the
  // group_phase_index[q]-th; bias_slots per co row
  int sums_bias, bias_slots;
  int group_phase_groups[kMaxGemmTaps], group_phase_index[kMaxGemmTaps];
  size_t smem_bytes;
  // merged phases (warpgroup tiles): block_co co of stride rows each; phase_origin = padding mod stride
  bool merged;
  int phase_origin;
  // pipelined warpgroup tiles (0: not): the ring's stages; x by TMA, boxes of 64 channels x 128 bytes
  int stages;
  // the box tiles (grad_weight_boxes.cuh; box_columns 0: not them): 128 ci x box_columns columns, tap
  // slot t of box_slots and co c at column t * block_co + c; tap k in tap group k / box_slots
  int box_columns, box_slots;
};

// The box tiles of a problem over grad_y channels-last (16-bit) or a stride-1 problem over grad_y's
// rows (TF32; the constants beside kMaxBoxTaps), or nullopt
std::optional<WeightGradPlan> plan_grad_weight_boxes(const ConvTParams& q, const TensorFacts& x, const TensorFacts& grad_y,
                                                     const DeviceLimits& limits);

// ---- depthwise (docs/design.md §6) -----------------------------------------------------------------

// The staged row segment of the depthwise forward (x) or grad_input (grad_y) kernel.
struct DepthwisePlan {
  int64_t shift_min, shift_max;
  int64_t staged;     // elements of the staged row segment
  // A block takes co_block of a row's Cog output channels (co_blocks of them; all of them, one
  // block, unless the rows and segments alone would leave the SMs idle: a narrow input with a wide
  // channel multiplier); grad_input's co blocks sum into partial[co block] (DepthwisePlan's user
  // adds them: sum_slices).
  int co_block, co_blocks;
  // Rows a block (depthwise.cuh's DwRowGroup): row groups of kDwThreads / row_groups threads, each
  // taking one row's segment of segment() outputs (inputs), so that short rows fill a block
  int row_groups;
  CONVT_HOST_DEVICE int segment() const { return kDwSegment / row_groups; }
  int weights;        // w[ci, co, :] staged per row: co_block * K values per input channel, then co_block biases in the forward
  // The forward: 1, each output visits every tap (those of other phases skipped); above 1, only its
  // phase's taps, tap_step = stride / gcd(dilation, stride) apart (plan_depthwise)
  int tap_step;
  size_t smem_bytes;  // every row group's weights (and biases), then every row group's row segment
};

// ---- packed taps (docs/design.md §3.9) --------------------------------------------------------------

// A forward whose output columns a group, C_out/groups x K, are few (narrow outputs): one GEMM over
// the input channels whose columns are the (co, tap) pairs, Y[q, co * K + tap] = sum_ci x[ci, q] *
// w[ci, co, tap], on mma.sync tiles of kPackedTapsRows input positions, then each output sums its taps'
// Y from shared memory. The fused GEMM pads C_out/groups to 16 rows and multiplies each x element by
// them K times; here an x element takes C_out/groups x K columns once (rounded up to 8), so narrow
// outputs stream x at its bandwidth. packed_taps.cuh.
constexpr int kPackedTapsRows = 256;     // input positions a block: 8 warps of 32 rows (two m16 tiles)
constexpr int kPackedTapsThreads = 256;  // one position of a stage's rows a thread
constexpr int kPackedTapsChunk = 32;     // input channels a stage
constexpr int kPackedTapsMostColumns = 64;
// A stage's shared memory: x rows of kPackedTapsXRow elements by channel (16 bytes of padding:
// conflict-free fragments), then w rows of packed_taps_w_row elements by (co, tap) column; the
// epilogue's Y rows of columns + 4 floats reuse the two stages
constexpr int kPackedTapsXRow = kPackedTapsRows + 8;
// rows of a (co, tap) operand in shared memory: 4 floats or 8 16-bit elements of padding (conflict-free fragments)
constexpr int packed_operand_row(int elements, int element_size) { return elements + (element_size == 4 ? 4 : 8); }
constexpr int packed_taps_w_row(int element_size) { return packed_operand_row(kPackedTapsChunk, element_size); }
constexpr int packed_taps_stage_elements(int columns, int element_size) {
  return kPackedTapsChunk * kPackedTapsXRow + columns * packed_taps_w_row(element_size);
}
constexpr int packed_taps_sum_row(int columns) { return columns + 4; }
constexpr int64_t packed_taps_smem_bytes(int columns, int element_size) {
  return std::max<int64_t>(2 * int64_t(packed_taps_stage_elements(columns, element_size)) * element_size,
                           int64_t(kPackedTapsRows) * packed_taps_sum_row(columns) * 4);
}
// grad_input of a narrow output (packed_taps_grad_input.cuh): the same (co, tap) columns as the
// GEMM's reduction, grad_x[ci, q] = sum_j G[q, j] w[ci, j] with G[q, co * K + tap] = grad_y[co, q x
// stride - padding + tap x dilation], gathered once a block into shared memory (kPackedTapsRows
// positions), then kPackedGradInputChunk input channels a pass. Its rows (G's and w's) are
// packed_operand_row elements: 16 bytes of padding in 16-bit, 4 floats in float32 (conflict-free
// fragments); 16-bit columns are at least 16 (mma k16). The epilogue stages the block's accumulators
// kPackedGradInputPassChannels channels at a time as floats (rows of kPackedGradInputStageRow:
// conflict-free fragment writes), so that stores run along whole channel rows of the block's
// positions (16-bit in 4-byte pairs: a store instruction is 128 bytes of one row).
constexpr int kPackedGradInputChunk = 64;
constexpr int kPackedGradInputPassChannels = 32;
constexpr int kPackedGradInputStageRow = kPackedTapsRows + 4;
constexpr int64_t packed_grad_input_smem_bytes(int columns, int element_size) {
  return int64_t(kPackedTapsRows + kPackedGradInputChunk) * packed_operand_row(columns, element_size) * element_size +
         int64_t(kPackedGradInputPassChannels) * kPackedGradInputStageRow * 4;
}
struct PackedTapsPlan {
  int columns;             // C_out/groups x K rounded up to 8, 16, 32 or 64 (mma n8 tiles; grad_input's k-steps)
  int64_t outputs;         // positions a block stores: the forward's (kPackedTapsRows - 2) x stride - (K - 1) x
                           // dilation + 1 outputs; grad_input's kPackedTapsRows input positions
  int64_t blocks_per_row;  // a row's blocks: ceil(L_out or L_in / outputs)
  int64_t blocks;          // N x groups x blocks_per_row
  int64_t chunks;          // ceil(C_in/groups / kPackedTapsChunk), grad_input's / kPackedGradInputChunk
  size_t smem_bytes;       // packed_taps_smem_bytes, packed_grad_input_smem_bytes
};

// ---- whole passes ---------------------------------------------------------------------------------------

enum class Kernel {
  kNone,              // not asked for
  kGemm,              // implicit GEMM on tensor cores (GemmPlan::tile_shape says which)
  kDepthwise,         // depthwise.cuh
  kDirect,            // direct.cuh: one thread per output (float64, and where no tensor-core form exists)
  kPackedTaps,        // packed_taps.cuh, packed_taps_grad_input.cuh: narrow outputs, the (co, tap) pairs as a GEMM dimension
  kGradWeightGemm,    // grad_weight_gemm.cuh (mma.sync)
  kGradWeightWgmma,   // grad_weight_wgmma.cuh
  kGradWeightBoxes,   // grad_weight_boxes.cuh
  kGradBiasRowSums,   // grad_bias from row sums of grad_y, then a fixed-order pass
  kGradBiasFromGradWeight,  // grad_bias summed by the grad_weight kernel
};
const char* kernel_name(Kernel kernel);
const char* gemm_family_name(int tile_shape);  // "warp", "warpgroup" or "pipelined"

// The forward, or grad_input, of one problem
struct DataPlan {
  Kernel kernel = Kernel::kNone;
  GemmPlan gemm{};
  GemmWeight weight{};
  DepthwisePlan depthwise{};
  PackedTapsPlan packed_taps{};
  // gemm.zero_taps (docs/design.md §3.2): products of zero weights and `in` reach the outputs, exact
  // only where `in` is finite. The deinterleave copy (grad_input) flags a non-finite element, the
  // merged forward's epilogue a non-finite sum (Launch::nonfinite), and the exact plan (per
  // phase, on `in` as it is, the same weight) runs behind that flag: its kernels return at once
  // where the flag is clear (no host sync). A zero-tap plan is taken only where an exact one exists.
  GemmPlan exact{};
  // The forward over copies of x in rows of 16-byte multiples (forward_over_aligned_x), copy_batch
  // batch elements at a time within the forward's workspace bound; 0: over x as it is (plan_forward).
  // copy_channels_last: the copies hold x channels-last (forward_over_channels_last_x, 16-bit or
  // TF32: the pipelined kernel's position rows) instead.
  int64_t copy_batch = 0;
  bool copy_channels_last = false;
  // grad_input over grad_y copied channels-last (plan_grad_input): (N, channels_last_grad_y_rows,
  // channels_last_grad_y_row_elements), at stride > 1 deinterleaved (launch_deinterleave_grad_y_channels_last),
  // read by position rows; gemm's `in` strides are the copy's
  bool channels_last_grad_y = false;
  // Where plan_grad_input weighed that copy: the model's seconds over it and over grad_y (else 0),
  // which explain shows (copy_ns, grad_y_ns) for refits against measured times
  double copy_seconds = 0, grad_y_seconds = 0;
  // merged_groups original groups of few channels run as one GEMM group (plan_data; GemmWeight's
  // group_rows): gemm's groups are groups / merged_groups, its rows and channels merged_groups times
  int64_t merged_groups = 1;
};
struct WeightPlan {
  Kernel kernel = Kernel::kNone;
  WeightGradPlan gemm{};
  int64_t depthwise_slices = 0;  // kDepthwise: slices of its rows
  // The pipelined warpgroup kernel over copies where it does not plan on the tensors as they are
  // (grad_weight_over_copies): x copied into aligned rows (a tensor map) and/or grad_y deinterleaved
  // (16-byte chunks of one phase). `problem` is the problem the kernels solve: p, or p over copies.
  bool aligned_x = false, deinterleaved_grad_y = false;
  bool unrolled_grad_y = false;  // grad_y unrolled by taps (grad_weight_over_unrolled)
  bool channels_last_grad_y = false;  // grad_y copied channels-last (grad_weight_over_channels_last_grad_y)
  ConvTParams problem{};
  // Where the box tiles were weighed against the other tiles (plan_grad_weight_pass):
  // their estimated times, box_tiles_seconds and grad_weight_tiles_seconds (else 0), which explain
  // shows (box_ns, tiles_ns) for refits of the two models against measured times
  double box_seconds = 0, tiles_seconds = 0;
};
// grad_bias's row sums (kGradBiasRowSums, direct.cuh's grad_y_row_sums_kernel): a warp a grad_y row
// (`warp_rows`), or a block of kRowSumBlockThreads threads a row segment, a row in `segments`
// segments; each thread keeps kRowSumLoads loads in flight. The planner prices both forms
// (plan_grad_bias_row_sums).
constexpr int kRowSumBlockThreads = 256, kRowSumLoads = 4;
struct RowSumsPlan {
  bool warp_rows = false;
  int64_t segments = 1;
};
struct BackwardPlan {
  DataPlan grad_input;
  WeightPlan grad_weight;
  Kernel grad_bias = Kernel::kNone;
  RowSumsPlan grad_bias_rows{};  // where grad_bias is kGradBiasRowSums
};

// A layer whose stride and dilation share a factor step = gcd(stride, dilation) > 1 (docs/design.md
// §2.1): its taps reach only the out positions first + m*step (first = -padding mod step), which are
// the layer at stride/step, dilation/step and padding (padding + first)/step over positions m; the
// others hold the bias alone. The front end (convt.cpp) runs the forward, and grad_input with
// grad_weight, as the reduced layer's where shared_step says (CONVT_SHARED_STEP=always: both, on
// any device, as the CPU tests run it; =never: neither):
// - the forward on CUDA where the reduced layer takes at least kSharedStepForwardMacs MACs a reached
//   output (C_in/groups x K / (stride/step)): its scratch adds 2 x element_size bytes a reached output
//   (written, read back), some 400 MACs' time at an H100's or H200's ridge point in 16-bit (~100 MACs
//   a byte) and in TF32 (~50 a byte, 4-byte elements) alike; below it the layer's own plan, storing
//   its tapless phases' bias, wins;
// - the backward on CUDA where C_in/groups >= kSharedStepBackwardChannels: grad_y's reached positions
//   copied out, the reduced layer's grad_input and grad_weight (all phases reached: merged,
//   deinterleaved and pipelined plans); narrower inputs' reduced passes ran slower.
// (H200 A/B of 20 layers, 16-bit and TF32: docs/perf/2026-12-03-shared-step.md)
constexpr int64_t kSharedStepForwardMacs = 400, kSharedStepBackwardChannels = 32;
struct SharedStep {
  int64_t step, first;
  int64_t stride, padding, dilation;  // the reduced layer's
  bool forward, backward;             // which passes run as the reduced layer's
  // out positions of the reduced layer (those of first + m*step below length_out)
  int64_t positions(int64_t length_out) const { return length_out > first ? (length_out - first + step - 1) / step : 0; }
};
std::optional<SharedStep> shared_step(const ConvTParams& p, bool cuda);
// The forward's scratch for the reduced layer's outputs (a window of them at a time): half the
// workspace bound beside a packed weight (kWorkspaceBesideWeightBytes, or CONVT_MAX_WORKSPACE_MB)
int64_t shared_step_scratch_bytes();

// `x` is the forward's input, `grad_y` the backward's grad_output (its rows are read at y's strides).
DataPlan plan_forward(const ConvTParams& p, const TensorFacts& x, Math math, const DeviceLimits& limits);
DataPlan plan_grad_input(const ConvTParams& p, const TensorFacts& grad_y, Math math, const DeviceLimits& limits);
BackwardPlan plan_backward(const ConvTParams& p, const TensorFacts& x, const TensorFacts& grad_y, Math math,
                           bool grad_input, bool grad_weight, bool grad_bias, const DeviceLimits& limits);

// The current CUDA device's limits; set by the CUDA library when it is built (else nullptr)
extern DeviceLimits (*current_cuda_device_limits)();

// A plan as "key=value" pairs
std::string describe(const DataPlan& plan);
std::string describe(const WeightPlan& plan);
std::string describe_grad_bias(const BackwardPlan& plan);

}  // namespace convt
