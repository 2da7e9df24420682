// The planner (plan.h; its rules and their reasons: docs/design.md §4).
#include "plan.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <limits>
#include <mutex>
#include <numeric>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <vector>

namespace convt {

// ---- the device -----------------------------------------------------------------------------------

DeviceLimits (*current_cuda_device_limits)() = nullptr;

DeviceLimits DeviceLimits::h100() { return {132, 232448, 233472, 1024, true, true}; }
DeviceLimits DeviceLimits::a100() { return {108, 166912, 167936, 1024, false, false}; }

int64_t DeviceLimits::smem_two_blocks() const {
  return std::min(smem_per_block_optin, smem_per_sm / 2 - reserved_smem_per_block);
}
int64_t DeviceLimits::blocks_per_sm(int64_t smem_bytes) const {
  return smem_per_sm / (smem_bytes + reserved_smem_per_block);
}

PlanOverride read_plan_override(const char* variable) {
  const char* text = std::getenv(variable);
  if (text == nullptr) return PlanOverride::kModel;
  return std::strcmp(text, "never") == 0 ? PlanOverride::kNever : std::strcmp(text, "always") == 0 ? PlanOverride::kAlways
                                                                                                    : PlanOverride::kModel;
}

namespace {

// A planner variable that sets a model's number: a whole number from 1 to `most` (`unit` names it in
// the error), or nullopt where it is unset or empty. Anything else is an error that names the variable.
std::optional<int64_t> read_whole_number(const char* variable, int64_t most, const char* unit) {
  const char* text = std::getenv(variable);
  if (text == nullptr || *text == '\0') return std::nullopt;
  char* end = nullptr;
  const long long value = std::strtoll(text, &end, 10);
  if (*end != '\0' || value < 1 || value > most) {
    throw std::invalid_argument(std::string("convt: ") + variable + " must be a whole number of " + unit + ", 1 or more; got '" +
                                text + "'");
  }
  return int64_t(value);
}
// CONVT_TAP_BOXES: the pipelined kernel's tap boxes (GemmPlan::tap_boxes). Read at every plan.
PlanOverride tap_boxes_override() { return read_plan_override("CONVT_TAP_BOXES"); }
// CONVT_POSITION_ROWS: the pipelined kernel's position rows (GemmPlan::position_rows). Read at every plan.
PlanOverride position_rows_override() { return read_plan_override("CONVT_POSITION_ROWS"); }

// CONVT_PERMUTED_POSITIONS: GemmPlan::permuted_positions wherever they apply (the model), or never
// (read_plan_override). Read at every plan.
PlanOverride permuted_positions_override() { return read_plan_override("CONVT_PERMUTED_POSITIONS"); }

// Rows of a (N, C, L) operand with these element strides are contiguous and start on
// `elements`-element boundaries (so copies of `elements` elements stay aligned).
bool rows_aligned(const TensorFacts& t, int64_t batch_stride, int64_t channel_stride, int64_t length_stride, int elements) {
  return length_stride == 1 && channel_stride % elements == 0 && batch_stride % elements == 0 &&
         t.alignment % (int64_t(elements) * t.element_size) == 0;
}

// Elements per asynchronous copy of such rows: the widest of `copy_bytes` that moves at least two
// elements and to which every row is contiguous and aligned; else 1 (one element at a time).
int widest_copy(const TensorFacts& t, int64_t batch_stride, int64_t channel_stride, int64_t length_stride,
                std::initializer_list<int> copy_bytes) {
  for (const int bytes : copy_bytes) {
    const int elements = bytes / t.element_size;
    if (elements > 1 && rows_aligned(t, batch_stride, channel_stride, length_stride, elements)) return elements;
  }
  return 1;
}

// What cuTensorMapEncodeTiled accepts for a (length, channels, batch) operand with contiguous
// positions: a 16-byte aligned start, strides of 16-byte multiples below 2^40 bytes, sizes up to 2^32.
bool tensor_map_fits(const TensorFacts& t, int64_t length, int64_t channels, int64_t batch, int64_t channel_stride,
                     int64_t batch_stride) {
  const int64_t es = t.element_size;
  auto stride_fits = [&](int64_t stride) { return stride * es % 16 == 0 && stride * es < (int64_t(1) << 40); };
  auto size_fits = [](int64_t size) { return size >= 1 && size <= (int64_t(1) << 32); };
  return t.alignment % 16 == 0 && stride_fits(channel_stride) && stride_fits(batch_stride) && size_fits(length) &&
         size_fits(channels) && size_fits(batch);
}

// The steps' taps (docs/design.md §3.3): the taps of each (out phase, in phase) in order of k, cut
// into runs of at most step_taps, so that a step's weight slots fit in shared memory however long
// the filter. Run j of in phase v is an in phase of its own, (v, j): in_phase_value lists v once per
// run, and a step reads the in phase's positions for just the run's taps. Tap t is at offset
// tap_offset[t], out phase out_phase_value[tap_out_phase[t]] and in phase value tap_in_value[t].
void set_steps(GemmPlan& g, const int* tap_offset, const int* tap_out_phase, const int* tap_in_value, int step_taps) {
  if (g.taps > kMaxGemmTaps) throw std::logic_error("convt: a GEMM problem of more than kMaxGemmTaps taps (a planner bug)");
  int values[kMaxGemmTaps], value_count = 0, runs[kMaxGemmTaps] = {};
  int rank[kMaxGemmTaps];  // of tap t among the earlier taps of its (out phase, in phase value)
  for (int t = 0; t < g.taps; ++t) {
    int v = 0;
    while (v < value_count && values[v] != tap_in_value[t]) ++v;
    if (v == value_count) values[value_count++] = tap_in_value[t];
    rank[t] = 0;
    for (int u = 0; u < t; ++u) rank[t] += tap_out_phase[u] == tap_out_phase[t] && tap_in_value[u] == tap_in_value[t];
    runs[v] = std::max(runs[v], rank[t] / step_taps + 1);
  }
  int first_run[kMaxGemmTaps];  // in phase (values[v], j) is first_run[v] + j
  g.in_phases = 0;
  for (int v = 0; v < value_count; ++v) {
    first_run[v] = g.in_phases;
    for (int j = 0; j < runs[v]; ++j) g.in_phase_value[g.in_phases++] = values[v];
  }
  int tap_in_phase[kMaxGemmTaps];
  for (int t = 0; t < g.taps; ++t) {
    const int v = int(std::find(values, values + value_count, tap_in_value[t]) - values);
    tap_in_phase[t] = first_run[v] + rank[t] / step_taps;
  }
  static_assert(2 * kMaxGemmTaps + 1 <= INT16_MAX, "step_tap and pair_begin are 16-bit");
  int next = 0;  // taps grouped by phase pair
  for (int pair = 0; pair < g.out_phases * g.in_phases; ++pair) {
    g.pair_begin[pair] = int16_t(next);
    for (int t = 0; t < g.taps; ++t)
      if (tap_out_phase[t] * g.in_phases + tap_in_phase[t] == pair) {
        g.slot_offset[next] = tap_offset[t];
        g.step_tap[next++] = int16_t(t);
      }
  }
  g.pair_begin[g.out_phases * g.in_phases] = int16_t(next);
  g.first_offset = *std::min_element(tap_offset, tap_offset + g.taps);
  g.last_offset = *std::max_element(tap_offset, tap_offset + g.taps);
}

// set_steps again with runs of at most step_taps (the taps' offsets and phases as g has them)
void split_steps(GemmPlan& g, int step_taps) {
  int tap_offset[kMaxGemmTaps], tap_out_phase[kMaxGemmTaps], tap_in_value[kMaxGemmTaps];
  for (int pair = 0; pair < g.out_phases * g.in_phases; ++pair)
    for (int slot = g.pair_begin[pair]; slot < g.pair_begin[pair + 1]; ++slot) {
      const int t = g.step_tap[slot];
      tap_offset[t] = g.slot_offset[slot];
      tap_out_phase[t] = pair / g.in_phases;
      tap_in_value[t] = g.in_phase_value[pair % g.in_phases];
    }
  set_steps(g, tap_offset, tap_out_phase, tap_in_value, step_taps);
}

// The taps of a problem; `forward` picks the roles of docs/design.md §3.
void set_taps(GemmPlan& g, const ConvTParams& p, bool forward, int step_taps) {
  g.taps = int(p.kernel_size);
  g.out_phases = 0;
  int tap_offset[kMaxGemmTaps], tap_out_phase[kMaxGemmTaps], tap_in_value[kMaxGemmTaps];
  for (int t = 0; t < g.taps; ++t) {
    const Tap tap = tap_of(t, p.stride, p.padding, p.dilation);
    const int out_value = forward ? int(tap.phase) : 0;
    int o = 0;
    while (o < g.out_phases && g.out_phase_value[o] != out_value) ++o;
    if (o == g.out_phases) g.out_phase_value[g.out_phases++] = out_value;
    tap_offset[t] = int(forward ? -tap.shift : tap.shift);
    tap_out_phase[t] = o;
    tap_in_value[t] = forward ? 0 : int(tap.phase);
  }
  set_steps(g, tap_offset, tap_out_phase, tap_in_value, step_taps);
}

// Where merged phases compute no zero products: dilation 1 and K a multiple of stride > 1, and the
// merged rows (stride x C_out per group) within int range
bool phases_merge(const ConvTParams& p) {
  return p.dilation == 1 && p.stride > 1 && p.kernel_size % p.stride == 0 &&
         p.out_channels_per_group * p.stride < kGemmIndexLimit;
}

// The taps of merged phases: t in [0, taps) at offset first_offset + t * offset_step
void set_merged_taps(GemmPlan& g, int taps, int first_offset, int offset_step, int step_taps) {
  g.taps = taps;
  g.out_phases = 1;
  g.out_phase_value[0] = 0;
  int tap_offset[kMaxGemmTaps], tap_out_phase[kMaxGemmTaps], tap_in_value[kMaxGemmTaps];
  for (int t = 0; t < g.taps; ++t) {
    tap_offset[t] = first_offset + t * offset_step;
    tap_out_phase[t] = tap_in_value[t] = 0;
  }
  set_steps(g, tap_offset, tap_out_phase, tap_in_value, step_taps);
}

// The most taps one reduction step (out_phase, in_phase) uses: at most the step_taps of set_steps.
int most_taps_per_step(const GemmPlan& g) {
  int taps = 0;
  for (int pair = 0; pair < g.out_phases * g.in_phases; ++pair) taps = std::max(taps, int(g.pair_begin[pair + 1] - g.pair_begin[pair]));
  return taps;
}

// Chunk size, shared-memory layout and tile counts for one of kGemmTileShapes (warp or warpgroup
// tiles of implicit_gemm_kernel): the first (chunk, staged output, blocks per SM) that fits.
std::optional<GemmPlan> plan_gemm_tiles(GemmPlan g, const TensorFacts& in, int tile_shape, const DeviceLimits& limits) {
  const GemmTileShape& shape = kGemmTileShapes[tile_shape];
  const bool warpgroups = shape.family != GemmFamily::kWarpTiles;
  const int element_size = in.element_size;
  const int channels_per_word = 4 / element_size;
  const int64_t channel_words = (g.channels_per_group + channels_per_word - 1) / channels_per_word;
  const int64_t max_columns = (int64_t(g.out_length) + g.phase_origin + g.column_positions - 1) / g.column_positions;
  const int taps_per_step = most_taps_per_step(g);
  g.copy_elements =
      g.in_step == 1 ? widest_copy(in, g.in_batch_stride, g.in_channel_stride, g.in_length_stride, {16, 8, 4}) : 1;
  // Warpgroup tiles load x_s into registers, so a row may sit at its own shift: rows that do not all
  // start 16-byte aligned go in 16-byte chunks from each window start rounded down (row_offsets)
  g.row_offsets = warpgroups && g.in_step == 1 && g.in_length_stride == 1 && g.copy_elements * element_size < 16;
  if (g.row_offsets) g.copy_elements = 16 / element_size;
  g.lead = g.row_offsets ? 0 : int(floor_mod(g.first_offset, g.copy_elements));
  g.tile_shape = tile_shape;
  g.block_m = shape.block_m;
  g.block_n = shape.block_n;
  g.warpgroups = warpgroups;
  int64_t x_rows = int64_t(g.block_n) + g.last_offset - g.first_offset + g.lead + (g.row_offsets ? g.copy_elements - 1 : 0);
  if (g.channel_phases > 1) {  // merged channels: whole rows of `in` in 16-byte copies
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
  // Candidates in order of preference: (chunk, staged output, two blocks per SM) (docs/design.md
  // §4.2). 64-word chunks only where there are fewer tiles than SMs (each tile is then a chain of
  // step latencies); staged output only where phases interleave; with many tiles, direct stores at
  // one block per SM come last.
  const bool few_tiles = g.tiles < limits.sm_count;
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
    const int64_t budget = candidate.two_blocks ? limits.smem_two_blocks() : limits.smem_one_block();
    if (stage_output && (g.out_step == 1 || g.out_step > kMaxStagedStep)) continue;
    if (stage_output && !candidate.two_blocks && g.out_phases == g.out_step) continue;
    g.stage_output = stage_output;
    auto smem_bytes = [&](int slots, int weight_buffers) {
      const int64_t y_words = stage_output ? int64_t(g.block_m) * g.y_row_elements : 0;
      return int64_t(weight_buffers) * slots * g.slot_words * 4 + (2 * int64_t(g.x_words) + y_words) * 4;
    };
    // a weight of several chunks stays resident only at two blocks per SM
    g.resident = (g.chunks == 1 || candidate.two_blocks) && smem_bytes(g.chunks * g.taps, 1) <= budget;
    g.weight_slots = g.resident ? g.chunks * g.taps : taps_per_step;
    const int64_t bytes = smem_bytes(g.weight_slots, g.resident ? 1 : 2);
    if (bytes > budget) continue;
    g.smem_bytes = size_t(bytes);
    g.tile_parts = g.stage_output ? 1 : g.out_phases;
    g.parts = g.tiles * g.tile_parts;
    if (g.parts >= kGemmIndexLimit) return std::nullopt;
    return g;
  }
  return std::nullopt;
}

// Row tiles a launch takes: within the workspace bound (workspace_bound), the count whose launches
// take the fewest waves (launch_waves), the largest of those (each launch packs its weight first and
// costs a launch's latency).
int fewest_wave_launch_row_tiles(const GemmPlan& g, const DeviceLimits& limits) {
  const int64_t row_tile_bytes = 4 * packed_weight_words(g) / g.row_tiles;
  const int most = int(std::clamp<int64_t>(workspace_bound(g) / row_tile_bytes, 1, g.row_tiles));
  if (most == g.row_tiles) return most;  // one launch
  int best = most;
  int64_t best_waves = launch_waves(g, most, limits);
  for (int count = most - 1; count >= 1; --count) {
    const int64_t waves = launch_waves(g, count, limits);
    if (waves < best_waves) best = count, best_waves = waves;
  }
  return best;
}

// A tile's fixed time (prologue and epilogue; in a launch after the first of a chunk split, its
// sums' addition to out as long again) in units of its mainloop's work for one tap and channel of a
// chunk (3xTF32: three MMAs a product). Fitted to H200 timings of both launch forms on 33 cells
// (docs/perf/2026-11-29-chunk-ranges.md); the fit's error reaches 1.3x, so chunk ranges take the
// place of row ranges only where the model gives them at most kChunkRangeMargin of the time.
constexpr double kTileFixedWork = 400;
constexpr double kChunkRangeMargin = 0.75;

// A tile's time over `chunks` of the reduction (units of kTileFixedWork)
double tile_time(const GemmPlan& g, int chunks, bool later_chunks, Math math) {
  const double math_cost = math == Math::k3xTF32 ? 3 : 1;
  return double(chunks) * g.taps * g.chunk_channels * math_cost + kTileFixedWork * (later_chunks ? 2 : 1);
}

// CONVT_GEMM_SPLITS: the reduction split (set_splits) where it applies (read_plan_override); `never`
// also keeps 16-bit outs off chunk ranges (no fp32 sums at all). Read at every plan: the tests force
// it on small layers.
PlanOverride gemm_splits_override() { return read_plan_override("CONVT_GEMM_SPLITS"); }

// CONVT_PIPELINED_SPLITS=never: no fp32 sums on the pipelined tiles (v101's planner: their plans
// that do not reach half the SMs give way to the warp tiles; read_plan_override). Read at every plan.
PlanOverride pipelined_splits_override() { return read_plan_override("CONVT_PIPELINED_SPLITS"); }

// Whether a plan's parts can store fp32 sums into slices of out's shape (GemmPlan::float_sums), with
// direct stores of every out phase (the slices then hold every out position) and no merged phases:
// implicit_gemm_kernel's warp tiles, or pipelined_gemm_kernel on one pair at out_step 1 (a part a run
// of chunks)
bool sums_in_slices(const GemmPlan& g) {
  const GemmFamily family = kGemmTileShapes[g.tile_shape].family;
  const bool one_pair = family == GemmFamily::kPipelined && g.out_step == 1 && g.out_phases * g.in_phases == 1 &&
                        pipelined_splits_override() != PlanOverride::kNever;
  return (family == GemmFamily::kWarpTiles || one_pair) && !g.stage_output && g.out_phases == g.out_step && g.row_phases == 1 &&
         g.channel_phases == 1;
}
int64_t out_elements(const GemmPlan& g) { return g.batch * g.groups * g.rows_per_group * int64_t(g.out_length); }

// Chunks a launch of chunk ranges takes (GemmPlan::launch_chunks): the most within the workspace
// bound, each over every row tile; 0 where ranges of chunks do not apply: a 16-bit out (a rounding a
// launch) unless its sums can go to an fp32 slice (sums_in_slices, the slice within the bound too),
// one chunk, or one chunk over every row tile above the bound. (Zero taps too: the launches' sums
// are whole before the gated exact plan runs over them, and a gated-off launch adds nothing.)
int chunk_range_size(const GemmPlan& g, const TensorFacts& in) {
  if (g.chunks == 1) return 0;
  if (in.element_size != 4 && (!sums_in_slices(g) || gemm_splits_override() == PlanOverride::kNever)) return 0;
  const int64_t room = workspace_bound(g) - (in.element_size != 4 ? 4 * out_elements(g) : 0);
  const int64_t chunk_bytes = 4 * packed_weight_words(g) / g.chunks;
  return int(std::clamp<int64_t>(room / chunk_bytes, 0, g.chunks));
}

// The time of launches of row-tile ranges: waves of whole tiles
double row_range_time(const GemmPlan& g, int launch_row_tiles, Math math, const DeviceLimits& limits) {
  return double(launch_waves(g, launch_row_tiles, limits)) * tile_time(g, g.chunks, false, math);
}

// The time of launches of chunk ranges: each launch every row tile over its chunks, a later one's
// sums added to out too
double chunk_range_time(const GemmPlan& g, int launch_chunks, Math math, const DeviceLimits& limits) {
  double tile_times = 0;
  for (int first = 0; first < g.chunks; first += launch_chunks)
    tile_times += tile_time(g, std::min(launch_chunks, g.chunks - first), first > 0, math);
  return double(launch_waves(g, g.row_tiles, limits)) * tile_times;
}

// The launches of a plan whose packed weight exceeds workspace_bound (docs/design.md §4.5):
// ranges of row tiles (fewest_wave_launch_row_tiles), or ranges of chunks over every row tile
// (chunk_range_size) where a single row tile packs more than the bound or those take at most
// kChunkRangeMargin of the time.
void set_launches(GemmPlan& g, const TensorFacts& in, Math math, const DeviceLimits& limits) {
  g.launch_row_tiles = fewest_wave_launch_row_tiles(g, limits);
  g.first_chunk = 0, g.launch_chunks = g.chunks, g.float_sums = false;
  const int launch_chunks = chunk_range_size(g, in);
  if (4 * packed_weight_words(g) <= workspace_bound(g) || launch_chunks == 0) return;  // (one launch, or row ranges only)
  const bool row_tile_fits = 4 * packed_weight_words(g) / g.row_tiles <= workspace_bound(g);
  if (!row_tile_fits ||
      chunk_range_time(g, launch_chunks, math, limits) <= kChunkRangeMargin * row_range_time(g, g.launch_row_tiles, math, limits)) {
    g.launch_row_tiles = g.row_tiles, g.launch_chunks = launch_chunks;
    g.float_sums = in.element_size != 4;  // (a 16-bit out: the launches' sums in one fp32 slice)
  }
}

// The reduction split (GemmPlan::splits, docs/design.md §3.8) of a plan in one launch whose sums can
// go to fp32 slices (sums_in_slices), where its parts do not fill the
// SMs: the split whose waves of parts take the least time by tile_time (a part: its share of an out
// phase's steps and a tile's fixed work; the slices' sum a tile's fixed work more), within the
// workspace bound together with the packed weight; taken where that is at most kSplitMargin of the
// unsplit time (`always`: the best split of two or more wherever one applies).
constexpr double kSplitMargin = 0.75;
void set_splits(GemmPlan& g, Math math, const DeviceLimits& limits) {
  const PlanOverride override = gemm_splits_override();
  const int phase_steps = g.in_phases * g.chunks;
  if (override == PlanOverride::kNever || !sums_in_slices(g) || g.launch_row_tiles != g.row_tiles ||
      g.launch_chunks != g.chunks || phase_steps < 2) {
    return;
  }
  const int64_t blocks = limits.sm_count * std::max<int64_t>(1, limits.blocks_per_sm(int64_t(g.smem_bytes)));
  if (g.parts >= blocks && override != PlanOverride::kAlways) return;
  const int64_t slice_bytes = 4 * out_elements(g);
  const int64_t room = workspace_bound(g) - 4 * packed_weight_words(g);
  const double phase_work = (tile_time(g, g.chunks, false, math) - kTileFixedWork) / g.out_phases;
  auto time = [&](int split_steps) {
    const int64_t splits = (phase_steps + split_steps - 1) / split_steps;
    const int64_t waves = (g.parts * splits + blocks - 1) / blocks;
    return double(waves) * (phase_work * split_steps / phase_steps + kTileFixedWork) + (splits > 1 ? kTileFixedWork : 0.0);
  };
  int best_steps = phase_steps;
  double best_time = override == PlanOverride::kAlways ? std::numeric_limits<double>::infinity() : kSplitMargin * time(phase_steps);
  for (int split_steps = phase_steps - 1; split_steps >= 1; --split_steps) {
    const int64_t splits = (phase_steps + split_steps - 1) / split_steps;
    if (splits * slice_bytes > room || g.parts * splits >= kGemmIndexLimit) break;
    const double split_time = time(split_steps);
    if (split_time < best_time) best_steps = split_steps, best_time = split_time;
  }
  if (best_steps == phase_steps) return;
  g.float_sums = true;
  g.split_steps = best_steps;
  g.splits = (phase_steps + best_steps - 1) / best_steps;
  g.tile_parts = g.out_phases * g.splits;
  g.parts = g.tiles * g.tile_parts;
}

// The waves of whole tiles that a plan's launches as set_launches makes them take as long as
double planned_launch_waves(GemmPlan g, const TensorFacts& in, Math math, const DeviceLimits& limits) {
  set_launches(g, in, math, limits);
  const double time = g.launch_chunks < g.chunks ? chunk_range_time(g, g.launch_chunks, math, limits)
                                                 : row_range_time(g, g.launch_row_tiles, math, limits);
  return time / tile_time(g, g.chunks, false, math);
}

// The rows x's tensor map groups into one (GemmPlan::map_row_phases): 1 where x's rows are 16-byte
// multiples; else the fewest rows back to back whose length is one, 2 or 4 (16-bit rows of an odd
// length would need 8, whose boxes do not pay: plan_pipelined_steps), where the channels (and each
// group's) are whole super rows of them; 0 where no map fits
int tensor_map_row_phases(const GemmPlan& g, const TensorFacts& in, int64_t channels) {
  if (tensor_map_fits(in, g.in_length, channels, g.batch, g.in_channel_stride, g.in_batch_stride)) return 1;
  for (const int phases : {2, 4}) {
    const int64_t super_row = phases * int64_t(g.in_length);
    if (g.in_channel_stride != g.in_length || super_row >= kGemmIndexLimit) break;
    if (super_row * in.element_size % 16 == 0 && channels % phases == 0 && g.channels_per_group % phases == 0 &&
        tensor_map_fits(in, super_row, channels / phases, g.batch, super_row, g.in_batch_stride)) {
      return phases;
    }
  }
  return 0;
}

// The pipelined kernel's plan (pipelined_gemm.cuh) for one of its tile shapes and the taps in runs
// as the problem has them: 32-word chunks where three stages fit in one block's shared memory, else
// 16-word chunks with as many stages as fit (two at least). 3xTF32 stages A's big and small parts.
// x_s without merged channels comes by TMA where the operand has a tensor map (TF32 rounded by the
// copy): one box a consumer warpgroup, where row by row each staged row is a bulk copy of its own,
// and those copies, not the MMA, set the pace of short steps.
std::optional<GemmPlan> plan_pipelined_steps(const GemmPlan& problem, const TensorFacts& in, int tile_shape, Math math,
                                             const DeviceLimits& limits, bool allow_tensor_rows = true) {
  auto plan = plan_gemm_tiles(problem, in, tile_shape, limits);
  const int element_size = in.element_size;
  // 16-bit or TF32 x with its channels contiguous (channels-last): position rows by TMA, whatever its
  // rows' copies would be (3xTF32 splits its A in registers)
  const int64_t all_channels = int64_t(problem.groups) * problem.channels_per_group;
  const bool channels_inner = allow_tensor_rows && limits.tma && (element_size == 2 || math == Math::kTF32) &&
                              problem.channel_phases == 1 &&
                              problem.in_channel_stride == 1 && problem.in_length_stride > 1 &&
                              position_rows_override() != PlanOverride::kNever &&
                              tensor_map_fits(in, all_channels, problem.in_length, problem.batch, problem.in_length_stride,
                                              problem.in_batch_stride);
  if (!plan || (plan->copy_elements * element_size != 16 && !channels_inner)) return std::nullopt;
  GemmPlan g = *plan;
  g.weight_parts = math == Math::k3xTF32 ? 2 : 1;
  // a consumer warpgroup's box: its columns and the halo from the lead (TMA boxes start at 16-byte
  // multiples), rows ≡ 8 (mod 32) words (conflict-free fragment loads), at most 256 positions (TMA)
  // (a box starts at a 16-byte multiple of its super row: channel phase j's rows sit (j * in_length)
  // mod copy_elements positions late in x_s, the box that much wider)
  const int64_t channels = g.groups * g.channels_per_group;
  const int map_row_phases = tensor_map_row_phases(g, in, channels);
  // Boxes of several channel phases (2 * phases TMA copies a step) beat the rows' bulk copies on
  // 256-column tiles over rows of kPhaseBoxLeastColumnTiles tiles or more, at 2 phases, or 4 in
  // float with 2 taps a step or more (whose MMA outlasts the copies; measured on an H200: 16-bit at 4
  // or 8 phases and one-tap float steps at 4 ran up to 1.25x the rows' time, 128-column tiles 1.1-1.35x)
  const bool phase_boxes_pay = g.block_n == 256 && g.col_tiles >= kPhaseBoxLeastColumnTiles &&
                               (map_row_phases == 2 || (map_row_phases == 4 && element_size == 4 && most_taps_per_step(g) >= 2));
  const int box_lead = int(floor_mod(g.first_offset, g.copy_elements)), phase_shift = map_row_phases > 1 ? g.copy_elements - 1 : 0;
  const int box_row_elements =
      8 + (g.block_n / kPipelineConsumers + g.last_offset - g.first_offset + box_lead + phase_shift - 8 + 31) / 32 * 32;
  g.tensor_rows = allow_tensor_rows && limits.tma && g.channel_phases == 1 && g.in_length_stride == 1 &&
                  box_row_elements <= 256 && (map_row_phases == 1 || phase_boxes_pay);
  g.map_row_phases = g.tensor_rows ? map_row_phases : 1;
  if (g.tensor_rows) g.lead = box_lead, g.row_offsets = false, g.x_row_elements = box_row_elements;
  // (a TMA box starts at a 16-byte multiple of its row, and wgmma's A at one of its swizzled rows:
  // tap boxes where every tap's offset is a multiple of copy_elements, as at one tap a phase)
  const bool taps_aligned =
      std::all_of(g.slot_offset, g.slot_offset + g.taps, [&](int offset) { return floor_mod(offset, g.copy_elements) == 0; });
  g.tap_boxes = g.tensor_rows && element_size == 2 && g.map_row_phases == 1 && taps_aligned &&
                tap_boxes_override() != PlanOverride::kNever;
  if (channels_inner) {  // a box a consumer warpgroup: its columns and their halo, in whole swizzle atoms
    const int box_positions = (g.block_n / kPipelineConsumers + g.last_offset - g.first_offset + 7) / 8 * 8;
    if (box_positions > 256) return std::nullopt;
    g.tensor_rows = g.position_rows = true, g.tap_boxes = false;
    g.map_row_phases = 1, g.lead = 0, g.row_offsets = false, g.x_row_elements = box_positions;
  }
  g.permuted_positions = element_size == 2 && g.tensor_rows && !g.tap_boxes && !g.position_rows && g.out_step == 1 &&
                         g.row_phases == 1 && permuted_positions_override() != PlanOverride::kNever;
  const int channels_per_word = 4 / element_size;
  const int64_t channel_words = (g.channels_per_group + channels_per_word - 1) / channels_per_word;
  const int64_t budget = limits.smem_one_block();
  for (const int chunk_words : {32, 16}) {
    if (chunk_words == 32 && channel_words <= 16) continue;  // mostly padding
    g.ksteps = chunk_words / 8;
    g.chunk_channels = chunk_words * channels_per_word;
    g.chunks = int((g.channels_per_group + g.chunk_channels - 1) / g.chunk_channels);
    g.staged_rows = g.chunk_channels / g.channel_phases;
    // (a box's channel phases each from a 128-byte boundary; a half k-step's channels lie in one
    // phase, set_half_bases: 16 or 32 16-bit rows a chunk over 2 phases, 16 or 32 float rows over 4)
    const int phase_rows = g.staged_rows / g.map_row_phases, row_elements_128 = 128 / element_size;
    g.map_phase_elements = (phase_rows * g.x_row_elements + row_elements_128 - 1) / row_elements_128 * row_elements_128;
    g.slot_words = (g.block_m / 16) * g.ksteps * kFragmentWords;
    g.weight_slots = most_taps_per_step(g);  // a step's taps: one run
    const int tap_box_words = kTapBoxPositions * g.chunk_channels * element_size / 4;
    g.x_words = g.tap_boxes     ? g.weight_slots * (g.block_n / kTapBoxPositions) * tap_box_words
                : g.tensor_rows ? kPipelineConsumers * g.map_row_phases * g.map_phase_elements * element_size / 4
                                : g.staged_rows * g.x_row_elements * element_size / 4;
    const int64_t stage_bytes = int64_t(g.weight_parts * g.weight_slots * g.slot_words + g.x_words) * 4 + 2 * 8;  // and its mbarriers
    const int stages = int(std::min<int64_t>(kMaxPipelineStages, budget / stage_bytes));
    // (tap boxes and position rows: three stages at least, or shorter runs of taps,
    // plan_pipelined_tiles: the consumers keep a stage's wgmma running into the next one's)
    if (stages < (chunk_words == 32 || g.tap_boxes || g.position_rows ? 3 : 2)) continue;
    g.stages = stages;
    g.smem_bytes = size_t(stages * stage_bytes);
    g.resident = g.stage_output = false;
    // a part a tile's out phase (kPairs, as implicit_gemm_kernel's direct stores: a strided problem's
    // phases on as many SMs); a phase pair keeps its two out phases together. Not in 3xTF32: its
    // merge and staging rules (strict_wide_merge_pays' narrowed tiles, the staged warp tiles) were
    // measured against whole-tile parts, and with phase parts its long filters left the merged plan
    // for slower per-phase ones (docs/perf/2026-12-06-phase-parts.md)
    g.tile_parts = pipeline_form(g) == PipelineForm::kPairs && math != Math::k3xTF32 ? g.out_phases : 1;
    g.parts = g.tiles * g.tile_parts;
    if (g.parts >= kGemmIndexLimit) return std::nullopt;
    // (a box of a group's last chunk would read the next group's rows, whose Inf or NaN would turn
    // the zero weights' products into NaN: TMA only where chunks end with the groups)
    if (g.tensor_rows && g.groups > 1 && g.channels_per_group % g.staged_rows != 0) {
      return plan_pipelined_steps(problem, in, tile_shape, math, limits, /*allow_tensor_rows=*/false);
    }
    return g;
  }
  return std::nullopt;
}

// The pipelined plan of a warpgroup problem whose steps all read the same x: in_step 1 unless its
// channels merge phases, so that every in phase is a run of taps at in phase value 0. Strided out
// positions (out_step > 1): in 3xTF32 with one out phase or every phase of out_step reached, in TF32
// and 16-bit as a phase pair (out_step 2, both phases: adjacent pair stores), and in any math with
// `strided_stores` (the epilogue stores 4 bytes or 2 out_step apart, those of unreached phases the
// launcher's bias first: bias_first). Strided stores lose to the warpgroup tiles' staged
// output, but not to the warp tiles' mma.sync (choose_gemm_plan; docs/design.md §3.6).
// A step is one run of taps of one out phase over one chunk: the taps in runs as long as the stages
// fit, up to most_run_taps, a phase's taps in one run first. Only where a row tile's packed weight
// stays within the workspace bound (the two-buffer kernels' smaller tiles pack less).
std::optional<GemmPlan> plan_pipelined_tiles(const GemmPlan& problem, const TensorFacts& in, int tile_shape, Math math,
                                             const DeviceLimits& limits, bool strided_stores,
                                             int most_run_taps = kMaxGemmTaps) {
  const bool phase_pair = problem.out_step == 2 && problem.out_phases == 2;
  // (3xTF32 and a phase pair hold two accumulator sets, 64 floats each a thread: no one-accumulator tile)
  if (kGemmTileShapes[tile_shape].one_accumulator && (math == Math::k3xTF32 || phase_pair)) return std::nullopt;
  if ((problem.out_step != 1 && math != Math::k3xTF32 && !phase_pair && !strided_stores) ||
      (problem.out_phases != 1 && problem.out_phases != problem.out_step && !strided_stores) ||
      (problem.in_step != 1 && problem.channel_phases == 1) ||
      !std::all_of(problem.in_phase_value, problem.in_phase_value + problem.in_phases, [](int v) { return v == 0; })) {
    return std::nullopt;
  }
  GemmPlan whole = problem;
  split_steps(whole, kMaxGemmTaps);
  const int longest_run = most_taps_per_step(whole);
  for (const int run_taps : {kMaxGemmTaps, 32, 16, 8, 4, 2, 1}) {
    // (kMaxGemmTaps: the phases' whole runs)
    if (run_taps == kMaxGemmTaps ? longest_run > most_run_taps : run_taps >= longest_run || run_taps > most_run_taps) continue;
    GemmPlan runs = whole;  // (split at kMaxGemmTaps already)
    if (run_taps < kMaxGemmTaps) split_steps(runs, run_taps);
    auto plan = plan_pipelined_steps(runs, in, tile_shape, math, limits);
    // (a row tile's weight above the workspace bound: only where launches take ranges of chunks)
    if (plan && 4 * packed_weight_words(*plan) / plan->row_tiles > workspace_bound(*plan) && chunk_range_size(*plan, in) == 0) {
      return std::nullopt;
    }
    if (plan) return plan;
  }
  return std::nullopt;
}

// 16 and 32-row tiles take runs of at most kNarrowTileRunTaps taps: their weight slots are small, so
// the longest runs that fit would fill a stage with a long filter's slots and leave two stages, too
// few to hide a step's copies behind the MMA; shorter runs restage x a run but keep 3 or more.
constexpr int kNarrowTileRunTaps = 16;

// CONVT_STRIDED_STORES_FIRST=never: a strided problem's pipelined plan with strided stores tried in
// place of the warp tiles only, not of the warpgroup tiles, and on 256-column tiles too (v104's
// planner; read_plan_override).
PlanOverride strided_stores_first_override() { return read_plan_override("CONVT_STRIDED_STORES_FIRST"); }

// CONVT_STORE_BOUND=never: no staged warp tiles for store-bound strided problems ahead of the other
// plans (v104's planner; read_plan_override). Read at every plan.
PlanOverride store_bound_override() { return read_plan_override("CONVT_STORE_BOUND"); }

// CONVT_NARROWER_PIPELINED=never: no row tiles narrower than the rows call for (v104's planner;
// read_plan_override). Read at every plan.
PlanOverride narrower_pipelined_override() { return read_plan_override("CONVT_NARROWER_PIPELINED"); }

// The pipelined plan of a problem that has one and fills the SMs, or at least kPipelinedLeastFill of them
// (choose_gemm_plan takes that only in place of a two-buffer plan): groups of at most 64 rows take 16,
// 32 or 64 x 256 tiles (pipelined_narrow_rows); others 128 x 128 or 128 x 256 tiles. The waves of their launches (launch_waves) decide
// where their ratio is beyond what the wide tile's time can make up: at most kWideTileTimeLeast times
// the wide tile's waves, 128 columns; more than kWideTileTime times (kWideTileTimeOneTap at one tap a
// step), 256. In between, the columns they pad: 256 unless they pad more than a sixteenth over 128
// (a quarter where steps of 3 or more taps stream that many weight slots a chunk, which the wide
// tile halves a MAC). 3xTF32 and phase pairs (two accumulator sets a subtile) take 128 columns.
// Where neither fills the SMs, the 128 x 128 tiles also where a reduction split (set_splits, which
// plan_data then sets) brings their parts to kPipelinedLeastFill of them: a long reduction on few
// tiles (wide channels on short rows), which otherwise went to the warp tiles' mma.sync.
std::optional<GemmPlan> plan_pipelined(const GemmPlan& problem, const TensorFacts& in, Math math, const DeviceLimits& limits,
                                       bool strided_stores) {
  auto fills = [&](const std::optional<GemmPlan>& plan) { return plan && plan->parts >= limits.sm_count; };
  auto half_fills = [&](const std::optional<GemmPlan>& plan) { return plan && plan->parts >= kPipelinedLeastFill * limits.sm_count; };
  auto split_half_fills = [&](const std::optional<GemmPlan>& plan) {
    if (!plan || !sums_in_slices(*plan)) return false;
    GemmPlan split = *plan;
    set_launches(split, in, math, limits);
    set_splits(split, math, limits);
    return split.splits > 1 && half_fills(split);
  };
  // Row tiles narrower than the rows call for, down to 16, where those do not reach half the SMs
  // (kPipelinedLeastFill): more parts, each over the whole reduction
  auto narrower_tiles = [&](int rows) -> std::optional<GemmPlan> {
    if (narrower_pipelined_override() == PlanOverride::kNever) return std::nullopt;
    // (strided stores above 16 rows, as choose_gemm_plan takes them)
    for (int narrower = rows / 2; narrower >= (strided_stores ? 32 : 16); narrower /= 2) {
      const auto plan = plan_pipelined_tiles(problem, in, gemm_tile_index(GemmFamily::kPipelined, narrower, 256), math, limits,
                                             strided_stores, narrower <= 32 ? kNarrowTileRunTaps : kMaxGemmTaps);
      if (half_fills(plan) && plan->stages >= 3) return plan;  // (two stages: long filters in 3xTF32 ran 0.5-0.75x)
    }
    return std::nullopt;
  };
  if (problem.rows_per_group <= 64) {
    const int rows = pipelined_narrow_rows(problem.rows_per_group);
    const auto plan = plan_pipelined_tiles(problem, in, gemm_tile_index(GemmFamily::kPipelined, rows, 256), math, limits,
                                           strided_stores, rows <= 32 ? kNarrowTileRunTaps : kMaxGemmTaps);
    return half_fills(plan) ? plan : narrower_tiles(rows);
  }
  const auto narrow = plan_pipelined_tiles(problem, in, gemm_tile_index(GemmFamily::kPipelined, 128, 128), math, limits, strided_stores);
  // (strided stores: 128 columns, whose stores a thread's row spans half as far; 256-column strided
  // plans ran 0.6-0.9x the 128-column ones' speed on an H200, docs/perf/2026-12-04-v105-planner.md)
  const bool narrow_stores =
      strided_stores && problem.out_step > 1 && strided_stores_first_override() != PlanOverride::kNever;
  const auto wide = narrow_stores ? std::nullopt
                                  : plan_pipelined_tiles(problem, in, gemm_tile_index(GemmFamily::kPipelined, 128, 256), math, limits, strided_stores);
  if (!fills(wide)) return half_fills(narrow) || split_half_fills(narrow) ? narrow : narrower_tiles(128);
  if (!fills(narrow)) return wide;
  auto waves = [&](const GemmPlan& g) { return planned_launch_waves(g, in, math, limits); };
  const int taps = most_taps_per_step(*wide);
  const double wave_ratio = waves(*narrow) / waves(*wide);
  if (wave_ratio <= kWideTileTimeLeast) return narrow;
  if (wave_ratio > (taps <= 1 ? kWideTileTimeOneTap : kWideTileTime)) return wide;
  const int64_t wide_columns = 256 * int64_t(wide->col_tiles), narrow_columns = 128 * int64_t(narrow->col_tiles);
  const bool pads_little = 16 * wide_columns <= 17 * narrow_columns || (taps >= 3 && 4 * wide_columns <= 5 * narrow_columns);
  return pads_little ? wide : narrow;
}

}  // namespace

// The tensor-core path covers any C_in/groups and C_out/groups (channels pad to the k-step and rows
// to the tile in shared memory and registers, never in memory) and up to kMaxGemmTaps taps, with
// every length and tap offset in 32-bit range, in float32 and 16-bit types; the rest goes to the
// direct kernels.
bool gemm_applies(const ConvTParams& p, int element_size) {
  const int64_t span = p.dilation * (p.kernel_size - 1) + p.padding;
  return element_size <= 4 &&
         p.in_channels_per_group < kGemmIndexLimit && p.out_channels_per_group < kGemmIndexLimit &&
         p.kernel_size <= kMaxGemmTaps && p.length_in < kGemmIndexLimit && p.length_out < kGemmIndexLimit &&
         p.stride < kGemmIndexLimit && span < kGemmIndexLimit;
}

// The forward (out = y, in = x, rows = C_out/groups, channels = C_in/groups) or grad_input (out =
// grad_x, in = grad_y, rows = C_in/groups, channels = C_out/groups) as one GEMM problem.
GemmPlan gemm_problem(const ConvTParams& p, bool forward, int step_taps) {
  GemmPlan g{};
  g.batch = p.batch, g.groups = p.groups;
  g.rows_per_group = forward ? p.out_channels_per_group : p.in_channels_per_group;
  g.channels_per_group = forward ? p.in_channels_per_group : p.out_channels_per_group;
  g.in_batch_stride = forward ? p.x_batch_stride : p.y_batch_stride;
  g.in_channel_stride = forward ? p.x_channel_stride : p.y_channel_stride;
  g.in_length_stride = forward ? p.x_length_stride : p.y_length_stride;
  g.in_length = int(forward ? p.length_in : p.length_out);
  g.out_length = int(forward ? p.length_out : p.length_in);
  g.out_step = forward ? int(p.stride) : 1;
  g.column_positions = g.out_step;
  g.in_step = forward ? 1 : int(p.stride);
  g.row_phases = g.stored_row_phases = g.channel_phases = g.weight_channel_phases = g.map_row_phases = 1;
  g.weight_parts = 1;
  g.tile_shape = -1;
  set_taps(g, p, forward, step_taps);
  return g;
}

// The forward with its phases merged into rows, and grad_input with them merged into channels where
// stride divides 8 (docs/design.md §3.2). Merged tap t reads x[col - t + padding div stride] in the
// forward, channel (co, r) at column i + t in grad_input.
// K < stride (dilation 1) merges too: rows (co, r), r < K, hold tap r, out positions stride apart a
// column (GemmPlan::column_positions), the phases without a tap holding the bias alone (the launcher
// fills out with it first). x is read once rather than once a phase, on the pipelined kernel, with
// no MMA work added (the rows are the phases with a tap). K = 1 (one row a channel: no merged rows)
// keeps a row per phase, those without the tap not stored, where that pads little: a narrow output
// (its rows in one tile). A wide one would run stride x its MACs (CONVT_ONE_TAP_MERGE=always: at
// stride 2 too, as before v121).
PlanOverride one_tap_merge_override() { return read_plan_override("CONVT_ONE_TAP_MERGE"); }
bool merges_short_filter(const ConvTParams& p) {
  return p.dilation == 1 && p.stride > 1 && p.kernel_size < p.stride && p.out_channels_per_group * p.stride < kGemmIndexLimit &&
         (p.kernel_size > 1 || p.out_channels_per_group * p.stride <= 64 ||
          (p.stride <= 2 && one_tap_merge_override() == PlanOverride::kAlways));
}
// K above stride and not a multiple of it (dilation 1) merges with zero taps: ceil(K / stride) taps,
// zero where t*stride + r >= K. 0 x Inf of x would put NaN where torch has none, so the per-phase
// plan stays as the exact one, run where the merged plan's sums hold Inf or NaN (DataPlan::exact). A narrow
// output (its merged rows in one 64-row tile) reads x once a phase per phase; a wide one merges where
// the zero taps add at most half the MACs (plan_data takes it only where the per-phase plan does not
// run pipelined: its strided outputs go to the two-buffer kernels, whose staging and block barriers
// run it at a fraction of the pipelined kernel's rate).
// A dilated filter merges the same way for a narrow output where its taps reach two or more phases:
// merged tap t, row (co, r) holds tap (t*stride + r) / dilation where dilation divides it, else zero,
// ceil(((K - 1) * dilation + 1) / stride) taps (x read once rather than once a phase reached).
bool narrow_merged_rows(const ConvTParams& p) { return p.out_channels_per_group * p.stride <= 64; }
// Taps k and k + tap_phase_period share a phase (their distance times the dilation is a multiple of
// the stride); the first min(K, period) taps reach distinct phases
int64_t tap_phase_period(const ConvTParams& p) { return p.stride / std::gcd(p.dilation, p.stride); }
int64_t phases_reached(const ConvTParams& p) { return std::min(p.kernel_size, tap_phase_period(p)); }
int64_t zero_tap_merged_taps(const ConvTParams& p) { return ((p.kernel_size - 1) * p.dilation + p.stride) / p.stride; }
bool merges_with_zero_taps(const ConvTParams& p) {
  if (p.stride == 1 || p.out_channels_per_group * p.stride >= kGemmIndexLimit || zero_tap_merged_taps(p) > kMaxGemmTaps) return false;
  if (p.dilation > 1) return narrow_merged_rows(p) && phases_reached(p) > 1;
  const int64_t padded_taps = zero_tap_merged_taps(p) * p.stride;
  return p.kernel_size > p.stride && p.kernel_size % p.stride != 0 &&
         (narrow_merged_rows(p) || 2 * padded_taps <= 3 * p.kernel_size);
}
// CONVT_ZERO_TAP_MERGE=always|never overrides plan_data's choice between a zero-tap merged forward
// and its per-phase plan (read_plan_override; read at every plan): an A/B of that rule on one build.
PlanOverride zero_tap_merge_override() { return read_plan_override("CONVT_ZERO_TAP_MERGE"); }
std::optional<GemmPlan> merged_forward_problem(const ConvTParams& p, int step_taps) {
  const bool short_filter = merges_short_filter(p), zero_taps = merges_with_zero_taps(p);
  if (!phases_merge(p) && !short_filter && !zero_taps) return std::nullopt;
  GemmPlan g = gemm_problem(p, /*forward=*/true, step_taps);
  g.row_phases = int(short_filter && p.kernel_size > 1 ? p.kernel_size : p.stride);
  g.stored_row_phases = int(short_filter ? p.kernel_size : p.stride);
  g.column_positions = int(p.stride);
  g.phase_origin = int(p.padding % p.stride);
  g.rows_per_group *= g.row_phases;
  g.out_step = 1;
  g.zero_taps = zero_taps;
  const int64_t taps = short_filter ? 1 : zero_tap_merged_taps(p);  // (K / stride where phases merge)
  set_merged_taps(g, int(taps), int(p.padding / p.stride), -1, step_taps);
  return g;
}
std::optional<GemmPlan> merged_grad_input_problem(const ConvTParams& p, int step_taps) {
  if (!phases_merge(p) || 8 % p.stride != 0) return std::nullopt;
  GemmPlan g = gemm_problem(p, /*forward=*/false, step_taps);
  g.channel_phases = g.weight_channel_phases = int(p.stride);
  g.channel_origin = int(p.padding);
  g.channels_per_group *= p.stride;
  set_merged_taps(g, int(p.kernel_size / p.stride), 0, 1, step_taps);
  return g;
}

// The same taps over grad_y deinterleaved (a copy, docs/design.md §3.2): tap k = t*stride + r reads
// grad_y[(i + t)*stride + r - padding], the copy's channel (co, r) at position i + t, for any stride
// and grad_y layout (dilation 1). r < min(K, stride); t < ceil(K / stride). grad_input only where
// every (t, r) is a tap (K a multiple of stride, or K < stride): a zero weight would turn an Inf of
// grad_y into NaN at positions it does not reach.
// (either copy, grad_input's or grad_weight's: rows of `length` positions padded to 16 bytes in every
// dtype; its sizes within the kernels' limits, `rows` a channel at `taps` shifts)
int64_t deinterleaved_row_elements(int64_t length) { return (length + 7) / 8 * 8; }
bool deinterleaved_copy_fits(const ConvTParams& p, int64_t rows, int64_t taps, int64_t length) {
  return rows <= kMaxDeinterleavedPhases && taps <= kMaxGemmTaps && length < kGemmIndexLimit &&
         p.out_channels_per_group * rows < kGemmIndexLimit;
}
int64_t deinterleaved_phases(const ConvTParams& p) { return std::min((p.kernel_size - 1) * p.dilation + 1, p.stride); }
int64_t deinterleaved_taps(const ConvTParams& p) { return ((p.kernel_size - 1) * p.dilation + p.stride) / p.stride; }
int64_t deinterleaved_length(const ConvTParams& p) { return p.length_in + deinterleaved_taps(p) - 1; }
int64_t deinterleaved_row_length(const ConvTParams& p) { return deinterleaved_row_elements(deinterleaved_length(p)); }
TensorFacts copy_facts(int element_size) { return {element_size, 256}; }
bool deinterleaves(const ConvTParams& p) {
  return p.stride > 1 && deinterleaved_copy_fits(p, deinterleaved_phases(p), deinterleaved_taps(p), deinterleaved_length(p));
}
constexpr int64_t kDeinterleavedDilatedTaps = 16;  // (below it the copy and zero taps cost more than they save: CHANGELOG v58)
std::optional<GemmPlan> deinterleaved_grad_input_problem(const ConvTParams& p, int step_taps) {
  if (!deinterleaves(p)) return std::nullopt;
  // A dilated filter's taps reach the phases k*dilation % stride: every phase where dilation and
  // stride are coprime (else the copy would hold phases no tap reads); its (shift, phase) grid holds
  // taps * phases weights for K taps, taken up to twice K (as K above stride does undilated) or, for
  // a filter of kDeinterleavedDilatedTaps taps or more, where the copy's channels fit one 64-channel
  // chunk (a narrow output, whose MMA work is small beside its reads of grad_y: the reads the copy
  // saves grow with K; below it the copy and the zero taps cost more than they save)
  if (p.dilation > 1) {
    const int64_t grid = deinterleaved_taps(p) * deinterleaved_phases(p);
    const bool narrow = p.kernel_size >= kDeinterleavedDilatedTaps && p.out_channels_per_group * deinterleaved_phases(p) <= 64;
    if (std::gcd(p.dilation, p.stride) != 1 || (grid > 2 * p.kernel_size && !narrow)) return std::nullopt;
  }
  GemmPlan g = gemm_problem(p, /*forward=*/false, step_taps);
  g.deinterleaved = true;
  // (t, r) pairs that are no tap: K not a multiple of stride above it, or dilated positions between taps
  g.zero_taps = deinterleaved_taps(p) * deinterleaved_phases(p) > p.kernel_size;
  g.weight_channel_phases = int(deinterleaved_phases(p));
  g.channels_per_group *= g.weight_channel_phases;
  g.in_step = 1;
  g.in_length = int(deinterleaved_length(p));
  g.in_length_stride = 1;
  g.in_channel_stride = deinterleaved_row_length(p);
  g.in_batch_stride = p.out_channels * g.weight_channel_phases * g.in_channel_stride;
  set_merged_taps(g, int(deinterleaved_taps(p)), 0, 1, step_taps);
  return g;
}

int64_t aligned_row_length(int64_t length, int element_size) {
  const int64_t vector = 16 / element_size;
  return (length + vector - 1) / vector * vector;
}

namespace {
// q as the stride-1 problem over a contiguous copy of grad_y (deinterleaved or unrolled): `rows` copy
// rows a channel of q, `taps` taps, rows of `length` positions `row_length` apart; the weight
// (C_in, C_out/groups * rows, taps) contiguous
ConvTParams over_grad_y_copy(ConvTParams q, int64_t rows, int64_t taps, int64_t length, int64_t row_length) {
  q.out_channels *= rows;
  q.out_channels_per_group *= rows;
  q.kernel_size = taps;
  q.length_out = length;
  q.stride = q.dilation = 1;
  q.padding = 0;
  q.y_length_stride = 1;
  q.y_channel_stride = row_length;
  q.y_batch_stride = q.out_channels * row_length;
  q.w_tap_stride = 1;
  q.w_out_stride = taps;
  q.w_in_stride = q.out_channels_per_group * taps;
  return q;
}
}  // namespace

// grad_weight's copy (grad_weight_over_copies): row r of a channel holds the phase of taps k = r + t*stride,
// which read it at shifts t*dilation (tap k at x position i: gy[(i + t*dilation)*stride + r*dilation - padding])
int64_t weight_deinterleaved_rows(const ConvTParams& p) { return std::min(p.kernel_size, p.stride); }
int64_t weight_deinterleaved_taps(const ConvTParams& p) { return (p.kernel_size + p.stride - 1) / p.stride; }
int64_t weight_deinterleaved_length(const ConvTParams& p) { return p.length_in + (weight_deinterleaved_taps(p) - 1) * p.dilation; }
int64_t weight_deinterleaved_row_length(const ConvTParams& p) { return deinterleaved_row_elements(weight_deinterleaved_length(p)); }
bool weight_deinterleaves(const ConvTParams& p, bool any_stride) {
  return (p.stride > 1 || any_stride) &&
         deinterleaved_copy_fits(p, weight_deinterleaved_rows(p), weight_deinterleaved_taps(p), weight_deinterleaved_length(p));
}

ConvTParams grad_weight_over_copies(const ConvTParams& p, int element_size, bool aligned_x, bool deinterleaved) {
  ConvTParams q = p;
  if (aligned_x) {
    q.x_length_stride = 1;
    q.x_channel_stride = aligned_row_length(p.length_in, element_size);
    q.x_batch_stride = p.in_channels * q.x_channel_stride;
  }
  if (deinterleaved) {
    q = over_grad_y_copy(q, weight_deinterleaved_rows(p), weight_deinterleaved_taps(p), weight_deinterleaved_length(p),
                         weight_deinterleaved_row_length(p));
    q.dilation = p.dilation;  // (the taps of a row t*dilation apart)
  }
  return q;
}

ConvTParams grad_weight_over_channels_last_grad_y(const ConvTParams& p, int element_size) {
  ConvTParams q = p;
  q.y_channel_stride = 1;
  q.y_length_stride = aligned_row_length(p.out_channels, element_size);
  q.y_batch_stride = p.stride * channels_last_phase_length(p) * q.y_length_stride;
  return q;
}

int64_t channels_last_phase_length(const ConvTParams& p) { return (p.length_out + p.stride - 1) / p.stride; }

ConvTParams forward_over_aligned_x(const ConvTParams& p, int element_size, int64_t batch) {
  ConvTParams q = grad_weight_over_copies(p, element_size, /*aligned_x=*/true, /*deinterleaved=*/false);
  q.batch = batch;
  return q;
}

ConvTParams forward_over_channels_last_x(const ConvTParams& p, int64_t batch) {
  ConvTParams q = p;
  q.batch = batch;
  q.x_channel_stride = 1;
  q.x_length_stride = p.in_channels;
  q.x_batch_stride = p.in_channels * p.length_in;
  return q;
}

int64_t unrolled_row_length(const ConvTParams& p) { return (p.length_in + 7) / 8 * 8; }

UnrollWindow unroll_window(const ConvTParams& p, int element_size) {
  // (the most elements whose padded row fits kUnrollStageBytes)
  const int64_t most_elements = (kUnrollStageBytes / element_size - 1) * 32 / 33;
  UnrollWindow window;
  window.positions = std::min({unrolled_row_length(p), kUnrollPositions, ((most_elements - 1) / p.stride + 1) / 8 * 8});
  if (window.positions < 8) return UnrollWindow{};
  window.taps = std::min(p.kernel_size, 1 + (most_elements - 1 - (window.positions - 1) * p.stride) / p.dilation);
  window.elements = (window.positions - 1) * p.stride + (window.taps - 1) * p.dilation + 1;
  return window;
}

bool unrolled_copy_fits(const ConvTParams& p, int element_size) {
  return unroll_window(p, element_size).positions > 0 && p.out_channels * p.kernel_size < kGemmIndexLimit &&
         p.batch * p.out_channels * p.kernel_size * unrolled_row_length(p) * element_size <= kUnrolledGradYBytes;
}

bool unrolls(const ConvTParams& p, int element_size) { return p.kernel_size > 1 && unrolled_copy_fits(p, element_size); }

ConvTParams grad_weight_over_unrolled(const ConvTParams& p, int element_size, bool aligned_x) {
  return over_grad_y_copy(grad_weight_over_copies(p, element_size, aligned_x, /*deinterleaved=*/false), p.kernel_size,
                          /*taps=*/1, p.length_in, unrolled_row_length(p));
}

GemmWeight gemm_weight(const ConvTParams& p, bool forward) {  // A_t[row, ch] = w[ci, co, t]
  const int64_t row_stride = forward ? p.w_out_stride : p.w_in_stride;
  const int64_t channel_stride = forward ? p.w_in_stride : p.w_out_stride;
  return {p.in_channels_per_group * p.w_in_stride, row_stride, channel_stride, p.w_tap_stride, p.kernel_size, p.dilation};
}

namespace {

// A pipelined plan g of a group of 8-32 rows (an output of 8-32 channels a group forward, an input of
// 8-32 grad_input) runs in place of the warp tiles where, over several out phases, an output takes
// at least kNarrowRowsPipelinedMacs MACs (below that the strided stores outweigh the MMA), and where
// its phases' taps split into several runs (kNarrowTileRunTaps), which stage x again for each run,
// only where a staged element of x feeds at least kRestagedXProducts MMA products a run (32-row
// tiles, or 16-row tiles in 3xTF32: three products a MAC), as the warp tiles stage x once for every
// tap. The thresholds are fitted (docs/perf/2026-12-02-narrow-rows-pipelined.md).
// CONVT_NARROW_ROWS_PIPELINED=always|never takes every such plan or none (read at every plan).
constexpr int64_t kNarrowRowsPipelinedMacs = 32;
constexpr int kRestagedXProducts = 512;
bool narrow_rows_pipelined(const GemmPlan& g) {
  const PlanOverride choice = read_plan_override("CONVT_NARROW_ROWS_PIPELINED");
  if (choice != PlanOverride::kModel) return choice == PlanOverride::kAlways;
  GemmPlan whole = g;
  split_steps(whole, kMaxGemmTaps);
  const int run_taps = most_taps_per_step(g), products = g.weight_parts == 2 ? 3 : 1;  // (3xTF32: big and small parts)
  if (most_taps_per_step(whole) > run_taps && g.block_m * run_taps * products < kRestagedXProducts) return false;
  return g.out_phases == 1 || g.channels_per_group * g.taps >= kNarrowRowsPipelinedMacs * g.out_phases;
}

// CONVT_GEMM_TILE=FAMILY:MxN[:unmerged] (FAMILY warp, warpgroup or pipelined; a shape of
// kGemmTileShapes): that tile on the merged problem where there is one (warpgroup and pipelined
// tiles; on the problem itself with `unmerged`, and warp tiles always), with strided stores on
// 32 rows and more, wherever it plans, whatever it fills: an A/B of the tile choice on one build
// (tools/override_screen.py). Unset or empty: the model's choice; anything else is an error that
// names the variable. Read at every plan.
struct ForcedTile {
  int shape;
  bool unmerged;
};
std::optional<ForcedTile> forced_gemm_tile() {
  const char* text = std::getenv("CONVT_GEMM_TILE");
  if (text == nullptr || *text == '\0') return std::nullopt;
  char family[16] = {}, merge[16] = {};
  int block_m = 0, block_n = 0;
  const int fields = std::sscanf(text, "%15[a-z]:%dx%d:%15s", family, &block_m, &block_n, merge);
  const GemmFamily families[] = {GemmFamily::kWarpTiles, GemmFamily::kWarpgroupTiles, GemmFamily::kPipelined};
  const char* names[] = {"warp", "warpgroup", "pipelined"};
  int shape = -1;
  for (int i = 0; i < 3 && fields >= 3; ++i)
    if (std::strcmp(family, names[i]) == 0) shape = gemm_tile_index(families[i], block_m, block_n);
  if (shape < 0 || (fields == 4 && std::strcmp(merge, "unmerged") != 0)) {
    throw std::invalid_argument(std::string("convt: CONVT_GEMM_TILE must be warp|warpgroup|pipelined:MxN[:unmerged] naming a tile "
                                            "shape of the planner; got '") + text + "'");
  }
  return ForcedTile{shape, fields == 4};
}

// A problem whose phases merge runs merged on warpgroup tiles where those fill the SMs (more than 32
// merged rows, or a narrow output); warpgroup problems run pipelined where that plans, on at least
// half the SMs where none fills them; then the warp tiles by the rows of a group and the taps of a
// step, the first that fills the SMs (else the last that plans), a strided problem's pipelined in
// their place where that pays (docs/design.md §4.5). 3xTF32 takes warpgroup tiles only pipelined,
// and no 64-row warp tiles (two accumulators would spill).
std::optional<GemmPlan> choose_gemm_plan(const GemmPlan& g, const std::optional<GemmPlan>& merged, const TensorFacts& in,
                                         Math math, const DeviceLimits& limits, bool strict_phase_staging) {
  if (const auto forced = forced_gemm_tile()) {  // (only the forms the model below takes)
    const GemmTileShape& shape = kGemmTileShapes[forced->shape];
    if (shape.one_accumulator && math == Math::k3xTF32) return std::nullopt;
    const bool on_merged = merged && !forced->unmerged && shape.family != GemmFamily::kWarpTiles;
    const GemmPlan& problem = on_merged ? *merged : g;
    if (shape.family != GemmFamily::kPipelined) return plan_gemm_tiles(problem, in, forced->shape, limits);
    const bool strided_stores = !on_merged && problem.out_step > 1 && shape.block_m > 16 && problem.rows_per_group > 16;
    return plan_pipelined_tiles(problem, in, forced->shape, math, limits, strided_stores);
  }
  const bool one_accumulator = math != Math::k3xTF32;
  const bool pipelined = limits.wgmma;
  // A pipelined plan (that `pays`, where given) that fills the SMs is taken at once; the first one on
  // at least half of them (kPipelinedLeastFill) is kept and taken in place of any two-buffer plan
  std::optional<GemmPlan> half_filling;
  auto pipelined_plan = [&](const GemmPlan& problem, bool strided_stores,
                            bool (*pays)(const GemmPlan&) = nullptr) -> std::optional<GemmPlan> {
    auto plan = plan_pipelined(problem, in, math, limits, strided_stores);
    if (plan && pays && !pays(*plan)) return std::nullopt;
    if (plan && plan->parts < limits.sm_count) {
      if (!half_filling) half_filling = plan;
      return std::nullopt;
    }
    return plan;
  };
  // A strided problem of at most kStoreBoundMacs MACs an output (kPhaseStridedStoreBoundMacs where
  // its phases are stored apart) whose phases do not merge is bound by its stores: warp tiles that
  // stage whole output rows (64 x 128, else 32 x 128) where they fill the SMs, in place of every plan
  // that stores each phase out_step apart (merged phases, which read x once, ran 1.1-2x faster than
  // staged rows); where none fills them, the one of most parts (32 x 128): whatever share of the
  // SMs they filled (15-97 %), staged rows ran 1.3-6x faster than phase-strided stores
  // (docs/perf/2026-12-05-staged-part-fill.md; CONVT_STAGED_PART_FILL=never: only those that fill them)
  const bool staged_part_fill = read_plan_override("CONVT_STAGED_PART_FILL") != PlanOverride::kNever;
  auto staged_warp_tiles = [&]() -> std::optional<GemmPlan> {
    std::optional<GemmPlan> part_filling;
    for (const int rows : {64, 32}) {
      if (rows == 64 && g.rows_per_group <= 32) continue;
      const auto staged = plan_gemm_tiles(g, in, gemm_tile_index(GemmFamily::kWarpTiles, rows, 128), limits);
      if (!staged || !staged->stage_output) continue;
      if (staged->parts >= limits.sm_count) return staged;
      if (staged_part_fill && (!part_filling || staged->parts > part_filling->parts)) part_filling = staged;
    }
    return part_filling;
  };
  // (CONVT_STAGED_WARP_TILES=never: no staged warp tiles, here or for tapless phases below)
  const PlanOverride staged_rows = read_plan_override("CONVT_STAGED_WARP_TILES");
  const int64_t output_macs = g.channels_per_group * most_taps_per_step(g);
  // (3xTF32 with one input channel a group keeps the pipelined plan that one_channel_gemm_pays
  // weighs against the depthwise kernels)
  const bool strict = math == Math::k3xTF32;
  const bool phase_strided_stores =
      g.rows_per_group > 16 && (strict ? strict_phase_staging && g.out_step > 1 && g.channels_per_group > 1 : g.out_step > 2);
  const int64_t store_bound_macs = phase_strided_stores ? kPhaseStridedStoreBoundMacs : kStoreBoundMacs;
  if (!merged && g.out_step > 1 && output_macs <= store_bound_macs && store_bound_override() != PlanOverride::kNever &&
      staged_rows != PlanOverride::kNever) {
    if (auto staged = staged_warp_tiles()) return staged;
  }
  const bool warpgroups = one_accumulator && pipelined;  // implicit_gemm_kernel's warpgroup tiles
  const int warpgroup_tiles = gemm_tile_index(GemmFamily::kWarpgroupTiles, 128, 128);
  // (a narrow output, fewer than 8 rows a phase, reads x once merged instead of once a phase, which
  // outweighs the rows its 64-row tiles pad: x is the problem's large operand)
  // (rows counted a row per phase of a column: a short filter's compact rows as the stride's)
  const int64_t merged_rows = merged ? merged->rows_per_group / merged->row_phases * merged->column_positions : 0;
  if (merged && pipelined && (merged_rows > 32 || g.rows_per_group < 8)) {
    if (auto plan = pipelined_plan(*merged, false)) return plan;
    if (warpgroups && merged->rows_per_group > 64) {
      const auto plan = plan_gemm_tiles(*merged, in, warpgroup_tiles, limits);
      if (plan && plan->parts >= limits.sm_count && !half_filling) return plan;
    }
  }
  if (pipelined && g.rows_per_group > 32) {
    if (auto plan = pipelined_plan(g, false)) return plan;
  }
  // Groups of 8-32 rows on the pipelined kernel's 16 or 32-row tiles where that pays
  if (pipelined && g.rows_per_group >= 8 && g.rows_per_group <= 32) {
    if (auto plan = pipelined_plan(g, false, narrow_rows_pipelined)) return plan;
  }
  // A narrow problem (fewer than 8 rows) is bound by streaming `in`, which the pipelined kernel does at
  // full rate and the warp tiles do not, as long as its 16-row tiles' padded MMA work stays below
  // that: kNarrowPipelinedMacs MACs an element of `in` (16 rows x the taps of a step). 3xTF32's three
  // products a MAC are not counted: the warp tiles pad the same 16 rows and make the same products,
  // with mma.sync where the pipelined kernel has wgmma.
  if (pipelined && g.rows_per_group < 8 && pipelined_narrow_rows(g.rows_per_group) * most_taps_per_step(g) <= kNarrowPipelinedMacs) {
    if (auto plan = pipelined_plan(g, false)) return plan;
  }
  if (half_filling) return half_filling;
  auto warp_tiles = [](int block_m, int block_n) { return gemm_tile_index(GemmFamily::kWarpTiles, block_m, block_n); };
  std::vector<int> shapes;
  if (warpgroups && g.rows_per_group > 64) shapes.push_back(warpgroup_tiles);
  if (g.rows_per_group <= 16) {  // (half the padded rows of 32-row tiles)
    shapes.push_back(warp_tiles(16, 256));
    shapes.push_back(warp_tiles(32, 128));
  } else if (g.rows_per_group <= 32) {
    shapes.push_back(warp_tiles(32, 128));
  } else if (g.rows_per_group <= 64) {
    shapes.push_back(warp_tiles(64, 256));
    shapes.push_back(warp_tiles(64, 128));
    shapes.push_back(warp_tiles(32, 128));
  } else if (most_taps_per_step(g) > 2) {
    shapes.push_back(warp_tiles(128, 128));
    shapes.push_back(warp_tiles(64, 128));
  } else {
    shapes.push_back(warp_tiles(128, 64));
    shapes.push_back(warp_tiles(64, 128));
  }
  // a shape whose work parts do not fill the SMs gives way to the next, smaller one; the warp tiles
  // of a strided problem of more than 16 rows to a pipelined plan: a phase pair (TF32 and 16-bit,
  // adjacent pair stores), or strided stores where an output takes at least kStridedStoreMacs MACs
  // (the stores' cost spread over them)
  const bool phase_pair = math != Math::k3xTF32 && g.out_step == 2 && g.out_phases == 2;
  const bool strided_stores = pipelined && g.out_step > 1 && g.rows_per_group > 16 &&
                              (phase_pair || g.channels_per_group * g.taps >= kStridedStoreMacs * g.out_phases);
  std::optional<GemmPlan> plan;
  bool strided_tried = false;
  for (const int shape : shapes) {
    if (kGemmTileShapes[shape].one_accumulator && !one_accumulator) continue;
    if (strided_stores && !strided_tried &&
        (kGemmTileShapes[shape].family == GemmFamily::kWarpTiles ||
         (strided_stores_first_override() != PlanOverride::kNever &&
          g.channels_per_group * g.taps >= kStridedStoreWarpgroupMacs * g.out_phases))) {
      strided_tried = true;
      if (auto strided = pipelined_plan(g, /*strided_stores=*/true)) return strided;
      if (half_filling) return half_filling;
    }
    if (auto shape_plan = plan_gemm_tiles(g, in, shape, limits)) {
      plan = shape_plan;
      if (plan->parts >= limits.sm_count) break;
    }
  }
  // A strided problem on tiles that store each phase out_step apart, some of whose out phases no tap
  // reaches, of few MACs an output (kStagedFewMacs; kStagedWarpTileMacs where half the phases or
  // more are tapless), writes whole output rows from staged rows on warp tiles (64 x 128, else
  // 32 x 128 (32 x 128 alone for up to 32 rows), that fill the SMs), whose staged output fits where
  // the wider tiles' would not, rather than storing each phase out_step apart and the bias at the
  // others a position at a time (docs/perf/2026-12-02-staged-tapless-share.md;
  // CONVT_STAGED_WARP_TILES=never|always)
  const bool tapless_phases = g.out_step > 2 && g.out_phases < g.out_step;
  const bool staged_pays =
      staged_rows == PlanOverride::kAlways ||
      (staged_rows == PlanOverride::kModel &&
       (output_macs <= kStagedFewMacs || (2 * g.out_phases <= g.out_step && output_macs <= kStagedWarpTileMacs)));
  if (plan && !plan->stage_output && tapless_phases && staged_pays) {
    // (CONVT_TAPLESS_PIPELINED=never: staged tiles whatever the reached phases and channels)
    // (TF32 and 16-bit: the screen's maths; on at least half the SMs, as half_filling)
    const bool strided_pipelined = pipelined && one_accumulator && g.out_phases >= 2 && g.rows_per_group > 16 &&
                                   g.channels_per_group >= kTaplessPipelinedChannels &&
                                   read_plan_override("CONVT_TAPLESS_PIPELINED") != PlanOverride::kNever;
    if (strided_pipelined) {
      const auto strided = plan_pipelined(g, in, math, limits, /*strided_stores=*/true);
      if (strided && strided->parts >= kPipelinedLeastFill * limits.sm_count) return strided;
    }
    if (auto staged = staged_warp_tiles()) return staged;
  }
  return plan;
}

}  // namespace

std::optional<GemmPlan> plan_gemm(const GemmPlan& g, const std::optional<GemmPlan>& merged, const TensorFacts& in, Math math,
                                  const DeviceLimits& limits, bool strict_phase_staging) {
  auto plan = choose_gemm_plan(g, merged, in, math, limits, strict_phase_staging);
  if (plan) set_launches(*plan, in, math, limits);
  return plan;
}

PipelineForm pipeline_form(const GemmPlan& g) {
  if (g.out_step == 2 && g.out_phases == 2 && g.weight_parts == 1) return PipelineForm::kPhasePair;
  return g.out_phases * g.in_phases > 1 ? PipelineForm::kPairs : PipelineForm::kOnePair;
}

bool bias_first(const GemmPlan& g) {
  const bool pipelined = kGemmTileShapes[g.tile_shape].family == GemmFamily::kPipelined;
  return (g.row_phases > 1 && g.stored_row_phases < g.column_positions) ||
         (pipelined && g.out_phases > 1 && g.out_phases < g.out_step);
}

int64_t float_sums_bytes(const GemmPlan& g) {
  return g.float_sums ? 4 * g.splits * out_elements(g) : 0;
}

int64_t packed_weight_words(const GemmPlan& g) {
  return g.groups * g.row_tiles * g.chunks * int64_t(g.weight_parts) * g.taps * g.slot_words;
}

namespace {
// CONVT_MAX_WORKSPACE_MB in bytes (read at every call), or nullopt where it is not set
std::optional<int64_t> max_workspace_bytes() {
  const std::optional<int64_t> megabytes = read_whole_number("CONVT_MAX_WORKSPACE_MB", int64_t(1) << 40, "megabytes");
  return megabytes ? std::optional<int64_t>(*megabytes << 20) : std::nullopt;
}
}  // namespace

// By default the whole packed weight (the weight's size, twice in 3xTF32's two parts, and its tiles'
// padding) is within the bound: one launch, whose waves the plan's tiles fill as launches of ranges
// cannot (12 launches of 40 tiles on 132 SMs for a 768 → 768, K 95 layer's 112 MB of bf16 weight).
int64_t workspace_bound(const GemmPlan& g) {
  return max_workspace_bytes().value_or(4 * packed_weight_words(g) + kWorkspaceBesideWeightBytes);
}

std::optional<SharedStep> shared_step(const ConvTParams& p, bool cuda) {
  const int64_t step = std::gcd(p.stride, p.dilation);
  const PlanOverride reduce = read_plan_override("CONVT_SHARED_STEP");
  if (step == 1 || reduce == PlanOverride::kNever || (!cuda && reduce != PlanOverride::kAlways)) return std::nullopt;
  const int64_t first = floor_mod(-p.padding, step);
  SharedStep shared{step, first, p.stride / step, (p.padding + first) / step, p.dilation / step, true, true};
  if (reduce == PlanOverride::kModel) {
    shared.forward = p.in_channels_per_group * p.kernel_size >= kSharedStepForwardMacs * shared.stride;
    shared.backward = p.in_channels_per_group >= kSharedStepBackwardChannels;
  }
  if (!shared.forward && !shared.backward) return std::nullopt;
  return shared;
}

int64_t shared_step_scratch_bytes() { return max_workspace_bytes().value_or(kWorkspaceBesideWeightBytes) / 2; }

int64_t launch_waves(const GemmPlan& g, int launch_row_tiles, const DeviceLimits& limits) {
  // (the pipelined kernel's 384 threads take an SM's registers: one block an SM)
  const int64_t blocks_per_sm = g.stages > 0 ? 1 : std::max<int64_t>(1, limits.blocks_per_sm(int64_t(g.smem_bytes)));
  const int64_t blocks = limits.sm_count * blocks_per_sm;
  const int64_t row_tile_parts = g.parts / g.row_tiles;
  auto waves = [&](int64_t row_tiles) { return (row_tiles * row_tile_parts + blocks - 1) / blocks; };
  return g.row_tiles / launch_row_tiles * waves(launch_row_tiles) + waves(g.row_tiles % launch_row_tiles);
}

GemmPlan row_tile_range(const GemmPlan& g, int first, int count) {
  GemmPlan launch = g;
  launch.first_row_tile = first;
  launch.row_tiles = count;
  launch.tiles = g.batch * g.groups * count * g.col_tiles;
  launch.parts = launch.tiles * g.tile_parts;
  return launch;
}

GemmPlan chunk_range(const GemmPlan& g, int first, int count) {
  GemmPlan launch = g;
  launch.first_chunk = first;
  launch.chunks = count;
  return launch;
}

GemmPlan first_launch(const GemmPlan& g) {
  return g.launch_chunks < g.chunks ? chunk_range(g, 0, g.launch_chunks) : row_tile_range(g, 0, g.launch_row_tiles);
}

// ---- grad_weight -------------------------------------------------------------------------------------

namespace {

// The tap slots of a warpgroup tile (group_taps, at most kGradWGroupTaps): every tap group has that
// many. least_work (the pipelined kernel, whose producer makes a tile's copies): a phase of n taps
// takes ceil(n / slots) tiles of slots + kGradWTileFixedTaps units of work each (a tile's set-up,
// counted as MMA work for that many taps); the fewest units, ties to more slots (fewer tiles): K 5
// in groups of 3 and 2 (8 units), not 4 and 1 (10). Else (the unpipelined kernel: its threads
// make a tile's copies and wait on them) the most taps a phase has.
constexpr int kGradWTileFixedTaps = 1;
int warpgroup_group_taps(const std::vector<std::vector<int>>& phase_taps, bool least_work) {
  size_t most_taps = 0;
  for (const auto& taps : phase_taps) most_taps = std::max(most_taps, taps.size());
  if (!least_work) return int(std::min(most_taps, size_t(kGradWGroupTaps)));
  int best = 1;
  int64_t best_units = std::numeric_limits<int64_t>::max();
  for (int slots = int(std::min(most_taps, size_t(kGradWGroupTaps))); slots >= 1; --slots) {
    int64_t units = 0;
    for (const auto& taps : phase_taps) units += int64_t(taps.size() + slots - 1) / slots * (slots + kGradWTileFixedTaps);
    if (units < best_units) best = slots, best_units = units;
  }
  return best;
}

// The least items a slice of mma.sync tiles holds: a block's fixed work (staging its first item,
// storing its partial sums, the sum of the slices over them) is worth several items, so short
// reductions over few tiles (16,256,256,5,702,g16: 8 tiles) take fewer slices than would fill the
// SMs with blocks of one item each. CONVT_GRAD_WEIGHT_SLICE_ITEMS (a whole number, read at every
// plan) sets it; 1 is v121's planner.
constexpr int64_t kGradWSliceLeastItems = 4;
int64_t grad_weight_slice_items() {
  return read_whole_number("CONVT_GRAD_WEIGHT_SLICE_ITEMS", int64_t(1) << 30, "items").value_or(kGradWSliceLeastItems);
}

// The slices of warpgroup tiles' items: about two waves of the blocks resident at once; pipelined
// (one block an SM: waves as the model counts them) where those leave a wave less than
// kGradWWaveFill full, the count whose waves end first, a block's time its ceil(items / slices)
// items plus kGradWSliceFixedItems (filling its pipeline, storing its sums), up to four waves'
// worth. 192 tiles on 132 SMs: 2 slices, 3 waves of half-tiles, not 2 waves of whole tiles.
constexpr double kGradWWaveFill = 0.9;
constexpr int64_t kGradWSliceFixedItems = 4;
int64_t warpgroup_slices(int64_t tiles, int64_t items, int64_t resident, bool pipelined) {
  auto waves = [&](int64_t slices) { return (tiles * slices + resident - 1) / resident; };
  const int64_t two_waves = std::clamp<int64_t>(2 * resident / tiles, 1, items);
  if (!pipelined || double(tiles * two_waves) >= kGradWWaveFill * double(waves(two_waves) * resident)) return two_waves;
  auto time = [&](int64_t slices) { return waves(slices) * ((items + slices - 1) / slices + kGradWSliceFixedItems); };
  int64_t best = two_waves;
  for (int64_t slices = 1; slices <= std::clamp<int64_t>(4 * resident / tiles, 1, items); ++slices)
    if (time(slices) < time(best)) best = slices;
  return best;
}

// grad_w's elements (every group's)
int64_t grad_weight_elements(const WeightGradPlan& g) {
  return g.groups * g.in_channels_per_group * g.out_channels_per_group * g.taps;
}

// CONVT_GRAD_WEIGHT_PIPELINED: the pipelined warpgroup tiles for any C_in and C_out per group
// (plan_grad_weight): always: wherever they plan (on the tensors or over copies); never: only where
// warpgroup_channels; else (the model) with merged phases where the channels would take the
// mma.sync tiles. Read at every plan.
PlanOverride grad_weight_pipelined_override() { return read_plan_override("CONVT_GRAD_WEIGHT_PIPELINED"); }

// Channels a group that take warpgroup tiles (grad_weight_wgmma.cuh) by themselves: where their 64 x 64
// tiles are full, and for any C_out per group where C_in per group exceeds 64, so that narrow outputs
// pipeline: their empty tile rows cost MMA work only, and they are bound by reading x
bool warpgroup_channels(const ConvTParams& p) {
  return p.in_channels_per_group > 32 && (p.out_channels_per_group > 32 || p.in_channels_per_group > 64);
}

// The tiles' partial sums taps first (WeightGradPlan::taps_first): a warp's store instruction of one
// tap puts its 32 values in 8-16 sectors on mma.sync tiles, 4-8 on warpgroup tiles, where grad_w's
// own order puts each in a sector of its own once taps >= 8 (1,256,256,16,19512,g4 bf16: 34.6 MB of
// partial sums). Only with CONVT_GRAD_WEIGHT_TAPS_FIRST=always (read at every plan), else grad_w's
// order: it paid on mma.sync tiles and lost on merged warpgroup tiles of wide strides, in sample
// (docs/perf/2026-12-06-taps-first.md), so no rule is taken until one is timed on fresh layers.
bool grad_weight_taps_first() { return read_plan_override("CONVT_GRAD_WEIGHT_TAPS_FIRST") == PlanOverride::kAlways; }

// with_bias: grad_bias may come along (in warpgroup tiles, else in TF32 only; grad_weight_gemm.cuh);
// one_pass: the math is TF32 or 16-bit, not 3xTF32, so tap groups of up to kGradWWideGroupTaps and
// warpgroup tiles may be planned; merge: the plan with merged phases (warpgroup tiles only), or none;
// least_work_slots: warpgroup_group_taps's; any_channels: warpgroup tiles, pipelined where they can
// be, whatever C_in and C_out per group
std::optional<WeightGradPlan> plan_grad_weight_tiles(const ConvTParams& p, const TensorFacts& x, const TensorFacts& grad_y,
                                                     bool with_bias, bool one_pass, bool merge, bool least_work_slots,
                                                     bool any_channels, const DeviceLimits& limits) {
  if (!gemm_applies(p, x.element_size)) return std::nullopt;
  WeightGradPlan g{};
  g.taps_first = grad_weight_taps_first();
  g.warpgroups = one_pass && limits.wgmma && (any_channels || warpgroup_channels(p));
  g.merged = merge && g.warpgroups && phases_merge(p) && p.stride <= kWgmmaBlockCo;  // (a tile: at least a co's rows)
  if (merge && !g.merged) return std::nullopt;
  g.batch = p.batch, g.groups = p.groups;
  g.in_channels_per_group = p.in_channels_per_group, g.out_channels_per_group = p.out_channels_per_group;
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
  // cut into groups of up to group_taps: kGradWWideGroupTaps where a phase has more than
  // kGradWGroupTaps taps and the math allows (each group stages its own copy of x and grad_y);
  // warpgroup tiles: warpgroup_group_taps
  size_t most_taps = 0;
  for (const auto& taps : phase_taps) most_taps = std::max(most_taps, taps.size());
  g.group_taps = g.warpgroups ? warpgroup_group_taps(phase_taps, least_work_slots)
                 : one_pass && most_taps > size_t(kGradWGroupTaps) ? kGradWWideGroupTaps : kGradWGroupTaps;
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
  // copies of 16 or 8 bytes, or of 4 (16-bit pairs). Warpgroup tiles copy gy in 16-byte chunks from
  // each window start's aligned-down address where the rows are contiguous and the window's
  // positions consecutive (stride 1, or merged); a lane's 16-bit pairs then start at its rows' own
  // parity (grad_weight_wgmma_mainloop.cuh)
  const int element_size = x.element_size;
  g.element_size = element_size;
  g.x_copy_elements = widest_copy(x, g.x_batch_stride, g.x_channel_stride, g.x_length_stride, {16, 8, 4});
  if (g.warpgroups) {
    const bool chunks = g.gy_length_stride == 1 && (g.merged || g.stride == 1);
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
    const int elements = (kGradWPositions + g.group_span[q]) * position_elements + (g.warpgroups ? window_vector - 1 : g.group_lead[q]);
    g.group_window_copy_count[q] = (elements + window_vector - 1) / window_vector;
  }
  // whole copies of the widest window (its start < window_vector into the first), ≡ 4 (mod 32), in
  // warpgroup tiles ≡ 4 (mod 16): conflict-free fragments. Merged: rows of words ≡ 4 * stride
  // (mod 32), a fragment's positions x phases of a co in 4 * stride consecutive words
  const int copied = ((kGradWPositions + max_span) * position_elements + 2 * (window_vector - 1)) / window_vector * window_vector;
  if (g.merged) {
    const int words = (copied * element_size + 3) / 4, residue = 4 * g.stride % 32;
    g.window_row_elements = ((words - residue + 31) / 32 * 32 + residue) * 4 / element_size;
  } else {
    const int row_multiple = g.warpgroups ? 16 : 32;
    g.window_row_elements = (copied - 4 + row_multiple - 1) / row_multiple * row_multiple + 4;
  }
  if (g.window_row_elements > 1024) return std::nullopt;
  // 32-co tiles where C_out per group is at most 32, else 64 (merged: co of stride rows each)
  g.block_co = g.merged ? kWgmmaBlockCo / g.stride : g.warpgroups || g.out_channels_per_group > 32 ? 64 : 32;
  g.co_tiles = int((g.out_channels_per_group + g.block_co - 1) / g.block_co);
  // grad_bias comes along where every phase has a tap, so that no row-sum pass is left: in warpgroup
  // tiles from tap slot 0's A values (16-bit: each x_s buffer holds the ones column's rows too)
  if (g.warpgroups) g.sums_bias = with_bias && (g.merged || phases_with_taps == g.stride);
  const int64_t ones_bytes = g.warpgroups && g.sums_bias && element_size == 2 ? int64_t(kWgmmaOnesRows) * kGradWPositions * element_size : 0;
  // a buffer of gy and x rows of block_ci ci, in the input's type (warpgroup tiles: x rows of
  // kGradWPositions, gy the window)
  const int64_t window_elements = g.merged ? g.window_row_elements : grad_w_window_row(g.window_row_elements, element_size);
  auto buffer_bytes = [&](int block_ci) {
    const int64_t elements = g.warpgroups ? block_ci * kGradWPositions + g.block_co * window_elements
                                          : g.block_co * grad_w_gy_row(element_size) + block_ci * window_elements;
    return elements * element_size;
  };
  // Pipelined warpgroup tiles (64 co x 128 ci) where gy goes in chunks, C_in per group fills more
  // than one consumer warpgroup, two stages fit (a stage: a buffer, the ones rows and two mbarriers)
  // and x has a tensor map; else 64-ci tiles where C_in per group > 32, 32-ci tiles where it is at
  // most 32 (64-ci tiles would be half empty)
  const int64_t stage_bytes = buffer_bytes(2 * kWgmmaBlockCi) + 2 * ones_bytes + 2 * 8;
  const bool x_map = limits.tma && g.x_length_stride == 1 &&
                     tensor_map_fits(x, p.length_in, p.in_channels, p.batch, p.x_channel_stride, p.x_batch_stride);
  const bool pipelined = g.warpgroups && g.gy_copy_elements * element_size == 16 &&
                         (g.in_channels_per_group > kWgmmaBlockCi || any_channels) &&
                         limits.smem_one_block() / stage_bytes >= 2 && x_map;
  g.block_ci = pipelined ? 2 * kWgmmaBlockCi : g.in_channels_per_group > 32 ? 64 : 32;
  g.ci_tiles = int((g.in_channels_per_group + g.block_ci - 1) / g.block_ci);
  // mma.sync tiles over small groups take several (a group's ci and co each at most half a tile's):
  // fewer tiles, each staging only real rows, the padding of one group's tile taken by its neighbours
  g.packed_groups = g.warpgroups ? 1
                                 : int(std::clamp<int64_t>(std::min(g.block_ci / g.in_channels_per_group,
                                                                    g.block_co / g.out_channels_per_group),
                                                           1, g.groups));
  g.tiles = (g.groups + g.packed_groups - 1) / g.packed_groups * g.ci_tiles * g.co_tiles * g.tap_groups;
  // items: chunks of the phase positions m (of the longest phase), in warpgroup tiles of the x positions
  const int64_t item_positions = g.warpgroups ? p.length_in : phase_length(0, p.length_out, p.stride);
  g.chunks_per_row = (item_positions + kGradWPositions - 1) / kGradWPositions;
  g.items = g.batch * g.chunks_per_row;
  if (g.items >= kGemmIndexLimit) return std::nullopt;
  int64_t smem_bytes = 0;
  if (pipelined) {  // as many stages as fit
    g.stages = int(std::min<int64_t>(kMaxPipelineStages, limits.smem_one_block() / stage_bytes));
    smem_bytes = g.stages * stage_bytes;
  } else {  // two buffers
    smem_bytes = 2 * (buffer_bytes(g.block_ci) + ones_bytes);
  }
  if (smem_bytes > limits.smem_one_block()) return std::nullopt;  // wide tap groups (dilation in the hundreds)
  // Slices, within the scratch budget: about six blocks per SM in all (twelve of the two-warp 32 x 32
  // tiles), each of at least grad_weight_slice_items items; warpgroup tiles as warpgroup_slices has them
  const int64_t weight_elements = grad_weight_elements(g);
  if (g.warpgroups) {
    const int64_t resident =
        limits.sm_count * (g.stages > 0 ? 1 : std::min<int64_t>(wgmma_min_blocks(g.group_taps), limits.blocks_per_sm(smem_bytes)));
    g.slices = warpgroup_slices(g.tiles, g.items, resident, g.stages > 0);
  } else {
    const int64_t target_blocks = limits.sm_count * std::max(6, 24 / ((g.block_ci / 16) * (g.block_co / 32)));
    g.slices = std::clamp<int64_t>((target_blocks + g.tiles - 1) / g.tiles, 1, std::max<int64_t>(1, g.items / grad_weight_slice_items()));
  }
  g.slices = std::max<int64_t>(1, std::min(g.slices, kGradWScratchBytes / 4 / weight_elements));
  if (g.tiles * g.slices >= kGemmIndexLimit) return std::nullopt;
  g.smem_bytes = size_t(smem_bytes);
  if (g.warpgroups) return g;
  // grad_bias in the mma.sync kernel: in TF32's rounding pass, into slots (floats, after the buffers)
  // where they leave as many blocks per SM room in shared memory
  g.bias_slots = g.gy_copy_elements > 1 ? kGradWPositions / g.gy_copy_elements : 32;
  const int64_t with_slots = smem_bytes + int64_t(g.block_co) * g.bias_slots * 4;
  g.sums_bias = with_bias && element_size == 4 && phases_with_taps == g.stride && with_slots <= limits.smem_one_block() &&
                limits.blocks_per_sm(with_slots) == limits.blocks_per_sm(smem_bytes);
  if (g.sums_bias) g.smem_bytes = size_t(with_slots);
  return g;
}

// The plan with warpgroup tap slots of least work where it pipelines, else with the most taps a
// phase has (warpgroup_group_taps)
std::optional<WeightGradPlan> plan_grad_weight(const ConvTParams& p, const TensorFacts& x, const TensorFacts& grad_y,
                                               bool with_bias, bool one_pass, bool merge, const DeviceLimits& limits) {
  // Merged phases on the pipelined tiles where the channels would take the mma.sync ones: a tile's
  // rows are the phases of 64 / stride co, so few co fill it, and grad_y comes in 16-byte chunks
  // (the mma.sync tiles read a strided grad_y element by element, one item in flight): faster on 40 of
  // 42 fitted cells and 62 of 64 fresh ones, 16-bit and TF32; unmerged, such 128-ci tiles over a few
  // channels ran up to 2.7x slower (docs/perf/2026-12-02-any-channel-pipelined.md).
  const PlanOverride any_channels = grad_weight_pipelined_override();
  if (any_channels == PlanOverride::kAlways || (any_channels == PlanOverride::kModel && merge && !warpgroup_channels(p))) {
    const auto pipelined = plan_grad_weight_tiles(p, x, grad_y, with_bias, one_pass, merge, /*least_work_slots=*/true,
                                                  /*any_channels=*/true, limits);
    if (pipelined && pipelined->stages > 0) return pipelined;
  }
  const auto plan =
      plan_grad_weight_tiles(p, x, grad_y, with_bias, one_pass, merge, /*least_work_slots=*/true, /*any_channels=*/false, limits);
  if (plan && plan->warpgroups && plan->stages == 0)
    return plan_grad_weight_tiles(p, x, grad_y, with_bias, one_pass, merge, /*least_work_slots=*/false, /*any_channels=*/false,
                                  limits);
  return plan;
}

// The MMA work of a grad_weight plan, padding included: every tile's channels, each tap over every
// item's positions
double padded_mma_work(const WeightGradPlan& g) {
  return double(g.tiles / g.tap_groups) * g.block_ci * g.block_co * g.taps * g.items;
}

// A grad_weight plan's time in padded_mma_work's units (an item's MACs over its kGradWPositions
// positions): its MMA work plus its tiles' reads (a tile stages its ci rows of x and co rows of
// grad_y for each item, each tap group again), an element read from L2 kGradWReadElementMacs, and
// on unpipelined tiles kGradWUnpipelinedPace times that (their threads stage each item and wait on
// it). Fitted on an H200 to 26 narrow-output, grouped and long-filter layers timed with and without
// grad_y unrolled (docs/perf/2026-11-30-grad-weight-unrolled.md).
constexpr double kGradWReadElementMacs = kCopyElementMacs / 4.0;  // (L2 about twice HBM's bandwidth; a copy passes HBM twice)
constexpr double kGradWUnpipelinedPace = 2;
constexpr double kUnrolledMargin = 1.1;  // (the fit's close call: 9,557,499,9,121,s6 at 1.05x the model's time, 1.1-1.4x slower)
// An operand that unpipelined 16-bit tiles stage one element at a time (rows not aligned to 4 bytes,
// or grad_y strided) costs, for each of its real rows (a tile's channels that exist), more than the
// vector copies' kGradWReadElementMacs an element: those are ordinary loads, a thread's next issued
// after its store. x's (its positions consecutive across a warp) kGradWElementXPace times as much;
// grad_y's kGradWElementGradYPace at stride 1 and kGradWElementGradYStridePace more for each step of
// the stride up to 16 (a warp's loads spread over that many more sectors). Fitted on an H200 to 76
// bf16 layers timed with and without copies that avoid them (docs/perf/2026-12-04-element-copies.md);
// at stride 1 with several taps grad_y's pace is kGradWElementGradYTapsPace (refit on fresh layers: the
// copy paid on every such layer it moved, not on one-tap layers; v128, docs/perf/2026-12-07-session102.md).
// CONVT_GRAD_WEIGHT_ELEMENT_COPIES=never: no such cost and no copies for it (v100's planner);
// always: the copies of every such operand wherever they plan (plan_grad_weight_tiles_pass). Read at
// every plan. CONVT_GRAD_Y_ELEMENT_PACE_TENTHS sets grad_y's pace at stride 1 in tenths (a screen's
// variable).
constexpr double kGradWElementXPace = 10;
constexpr double kGradWElementGradYPace = 2;
constexpr double kGradWElementGradYTapsPace = 3;
constexpr double kGradWElementGradYStridePace = 0.5;
double grad_y_element_pace(int64_t stride, int64_t taps) {
  const std::optional<int64_t> tenths = read_whole_number("CONVT_GRAD_Y_ELEMENT_PACE_TENTHS", 1000, "tenths");
  if (stride == 1 && tenths) return double(*tenths) / 10;
  if (stride == 1 && taps > 1) return kGradWElementGradYTapsPace;
  return kGradWElementGradYPace + kGradWElementGradYStridePace * double(std::min<int64_t>(stride, 16) - 1);
}
// A copy made for them costs a launch and an allocation besides its bytes: about 5 µs (fitted with the paces)
constexpr double kGradWCopyLaunchMacs = 18e6;
PlanOverride grad_weight_element_copies_override() { return read_plan_override("CONVT_GRAD_WEIGHT_ELEMENT_COPIES"); }
bool copies_x_by_element(const WeightGradPlan& g) { return g.stages == 0 && g.element_size == 2 && g.x_copy_elements == 1; }
bool copies_grad_y_by_element(const WeightGradPlan& g) {
  return g.stages == 0 && g.element_size == 2 && g.gy_copy_elements == 1;
}
double grad_weight_time(const WeightGradPlan& g) {
  double read_rows = g.block_ci + g.block_co;
  if (grad_weight_element_copies_override() != PlanOverride::kNever) {
    const double x_rows = double(std::min<int64_t>(g.block_ci, g.in_channels_per_group * g.packed_groups));
    const double grad_y_rows = double(std::min<int64_t>(g.block_co, g.out_channels_per_group * g.packed_groups));
    const double grad_y_pace = grad_y_element_pace(g.stride, g.taps);
    if (copies_x_by_element(g)) read_rows += (kGradWElementXPace - 1) * x_rows;
    if (copies_grad_y_by_element(g)) read_rows += (grad_y_pace - 1) * grad_y_rows;
  }
  const double work = padded_mma_work(g) + kGradWReadElementMacs * double(g.tiles) * g.items * read_rows;
  return g.stages > 0 ? work : kGradWUnpipelinedPace * work;
}

// The copy of grad_y that a grad_weight problem over copies reads (q: grad_weight_over_copies'
// deinterleaved or grad_weight_over_unrolled's, whose grad_y is that copy, contiguous) in the same
// units: kCopyElementMacs a copied element
double grad_y_copy_time(const ConvTParams& q) {
  return double(kCopyElementMacs) * double(q.batch) * q.y_batch_stride / kGradWPositions;
}

// The copy of x in aligned rows that such a problem reads (grad_weight_over_copies' aligned_x, whose
// x strides are the copy's), in the same units
double x_copy_time(const ConvTParams& q) {
  return double(kCopyElementMacs) * double(q.batch) * q.x_batch_stride / kGradWPositions;
}

}  // namespace

// ---- grad_weight by box tiles (docs/design.md §5.7) ---------------------------------------------------

// The box tiles' cost, in units of one column of one item (128 ci x 64 positions: about 4 clocks of
// an SM's 16-bit tensor cores): an item costs its columns plus
// kBoxItemColumns (A's reads, the boxes' issue and barriers); a block its slice's items plus
// kBoxBlockItems items (filling the ring, the epilogue's stores); a launch its waves of blocks (a
// launch a window of kBoxWindowTaps taps); each slice's partial sums kBoxPartialUnitsPerElement a
// weight element (written, then added up).
constexpr double kBoxItemColumns = 48;
constexpr double kBoxBlockItems = 4;
constexpr double kBoxPartialUnitsPerElement = 0.05;

namespace {
// The box tiles' cost of `tiles` tiles (of `tap_groups` tap groups of `slots` taps) of `columns`
// columns in `slices` slices of `items` items: the waves of each launch's window of tap groups
double box_cost(int64_t tiles, int tap_groups, int slots, int columns, int64_t slices, int64_t items, int64_t weight_elements,
                const DeviceLimits& limits) {
  const int64_t tiles_a_tap_group = tiles / tap_groups;
  int64_t waves = 0;
  for_each_box_launch(tap_groups, slots, [&](int, int groups) {
    waves += (tiles_a_tap_group * groups * slices + limits.sm_count - 1) / limits.sm_count;
  });
  const double block_items = double((items + slices - 1) / slices) + kBoxBlockItems;
  return double(waves) * block_items * (columns + kBoxItemColumns) +
         kBoxPartialUnitsPerElement * double(slices) * double(weight_elements) / limits.sm_count;
}
}  // namespace

std::optional<WeightGradPlan> plan_grad_weight_boxes(const ConvTParams& q, const TensorFacts& x, const TensorFacts& grad_y,
                                                     const DeviceLimits& limits) {
  const int element_size = x.element_size;
  const bool k_major = box_grad_y_k_major(element_size);
  if (!limits.wgmma || !limits.tma || (element_size != 2 && !k_major) || q.in_channels_per_group <= kBoxBlockCi / 2 ||
      q.kernel_size > kMaxBoxTaps || !gemm_applies(q, element_size) || q.x_length_stride != 1 ||
      !tensor_map_fits(x, q.length_in, q.in_channels, q.batch, q.x_channel_stride, q.x_batch_stride))
    return std::nullopt;
  if (k_major) {
    // a stride-1 problem whose every tap's box starts at a 16-byte multiple of its row
    if (q.stride != 1 || q.y_length_stride != 1 ||
        !tensor_map_fits(grad_y, q.length_out, q.out_channels, q.batch, q.y_channel_stride, q.y_batch_stride))
      return std::nullopt;
    for (int k = 0; k < q.kernel_size; ++k)
      if (floor_mod(tap_of(k, q.stride, q.padding, q.dilation).shift, 16 / element_size) != 0) return std::nullopt;
  } else if (q.y_channel_stride != 1 ||
             !tensor_map_fits(grad_y, q.out_channels, q.length_out, q.batch, q.y_length_stride, q.y_batch_stride)) {
    return std::nullopt;
  }
  const int positions = kBoxItemBytes / element_size;  // an item's x positions
  WeightGradPlan g{};
  g.batch = q.batch, g.groups = q.groups;
  g.in_channels_per_group = q.in_channels_per_group, g.out_channels_per_group = q.out_channels_per_group;
  g.x_batch_stride = q.x_batch_stride, g.x_channel_stride = q.x_channel_stride, g.x_length_stride = 1;
  g.gy_batch_stride = q.y_batch_stride, g.gy_channel_stride = 1, g.gy_length_stride = q.y_length_stride;
  g.length_in = int(q.length_in), g.length_out = int(q.length_out), g.stride = 1, g.taps = int(q.kernel_size);
  g.chunks_per_row = (q.length_in + positions - 1) / positions;
  g.items = g.batch * g.chunks_per_row;
  if (g.items >= kGemmIndexLimit) return std::nullopt;
  g.block_ci = kBoxBlockCi, g.packed_groups = 1;
  g.ci_tiles = int((g.in_channels_per_group + kBoxBlockCi - 1) / kBoxBlockCi);
  const int64_t weight_elements = grad_weight_elements(g);
  const int64_t most_slices = std::max<int64_t>(1, std::min(g.items, kGradWScratchBytes / 4 / weight_elements));
  // every (columns, slots, slices): the least cost
  double best_cost = std::numeric_limits<double>::infinity();
  for (const int columns : kBoxColumnChoices) {
    for (int slots = std::min(g.taps, kMaxBoxSlots); slots >= 1; --slots) {  // (ties: more taps a tile, fewer x boxes)
      if (columns % (kBoxSlotCo * slots) != 0) continue;  // (block_co: whole boxes)
      const int block_co = columns / slots;
      const int co_tiles = int((g.out_channels_per_group + block_co - 1) / block_co);
      const int tap_groups = (g.taps + slots - 1) / slots;
      const int64_t tiles = g.groups * g.ci_tiles * co_tiles * tap_groups;
      // (up to about four waves of blocks: more slices only add waves)
      const int64_t slice_bound = std::min(most_slices, (4 * limits.sm_count + tiles - 1) / tiles);
      for (int64_t slices = 1; slices <= slice_bound; ++slices) {
        if (tiles * slices >= kGemmIndexLimit) break;
        const double cost = box_cost(tiles, tap_groups, slots, columns, slices, g.items, weight_elements, limits);
        if (cost < best_cost) {
          best_cost = cost;
          g.box_columns = columns, g.box_slots = slots, g.block_co = block_co;
          g.co_tiles = co_tiles, g.tap_groups = tap_groups, g.tiles = tiles, g.slices = slices;
        }
      }
    }
  }
  if (g.box_columns == 0) return std::nullopt;
  // tap k (tap group k / box_slots) at its shift in its phase's rows (at stride 1, k * dilation - padding)
  for (int k = 0; k < g.taps; ++k) g.group_tap_shift[k] = int(tap_of(k, q.stride, q.padding, q.dilation).shift);
  const int64_t stage_bytes = int64_t(kBoxBlockCi + g.box_columns) * kBoxItemBytes;
  g.stages = int(std::min<int64_t>(kMaxBoxStages, (limits.smem_one_block() - 2 * 8 * kMaxBoxStages) / stage_bytes));
  if (g.stages < 2 || g.stages * stage_bytes < int64_t(kBoxBlockCi) * box_staging_pitch(g.box_slots, g.block_co) * 4) return std::nullopt;
  g.smem_bytes = size_t(g.stages * stage_bytes + 2 * 8 * g.stages);
  return g;
}

namespace {

// ---- depthwise ----------------------------------------------------------------------------------------

// CONVT_DEPTHWISE_PHASE_TAPS: the depthwise forward over its phases' taps only (DepthwisePlan::tap_step)
// wherever the stride and dilation leave taps to skip, or nowhere (read_plan_override). Read at every plan.
PlanOverride depthwise_phase_taps_override() { return read_plan_override("CONVT_DEPTHWISE_PHASE_TAPS"); }
// The phase walk costs each output a table lookup and a loop of unknown step: taken everywhere, it ran
// 1.02-1.2x slower where it skipped 2.5-3.3 of an output's taps (K = 4-5 at strides 2-4) and
// 0.42-0.95x the time where it skipped 8 or more (H200; at this bound 0.898x over 55 strided sweep
// layers in bf16 and TF32, 2 of 112 cells slower by 5 %, at most 1.08x;
// docs/perf/2026-12-01-depthwise-phase-taps.md)
constexpr double kDwLeastSkippedTaps = 4;

// Taps a depthwise forward's output steps by (DepthwisePlan::tap_step): 1, or tap_phase_period where
// that skips at least kDwLeastSkippedTaps of an output's taps
int depthwise_tap_step(const ConvTParams& p) {
  const int64_t tap_step = tap_phase_period(p);
  const PlanOverride phase_taps = depthwise_phase_taps_override();
  if (tap_step == 1 || phase_taps == PlanOverride::kNever) return 1;
  const double skipped = double(p.kernel_size) - double(p.kernel_size) / double(tap_step);
  return phase_taps == PlanOverride::kAlways || skipped >= kDwLeastSkippedTaps ? int(tap_step) : 1;
}

// The staged row segment of the forward (x) or grad_input (grad_y) kernel; nullopt when the
// depthwise kernels do not apply or the segment does not fit in a block's shared memory (grad_input
// stages about kDwSegment * stride elements).
std::optional<DepthwisePlan> plan_depthwise(const ConvTParams& p, bool forward, int element_size, const DeviceLimits& limits) {
  // (phases of an output segment, first_phase + t, are ints in the kernels)
  if (!depthwise_channels(p.in_channels_per_group, p.out_channels_per_group, forward) || p.kernel_size > kDwMaxTaps ||
      p.stride >= kGemmIndexLimit) {
    return std::nullopt;
  }
  DepthwisePlan a{};
  a.shift_min = tap_of(0, p.stride, p.padding, p.dilation).shift;  // shifts grow with k
  a.shift_max = tap_of(p.kernel_size - 1, p.stride, p.padding, p.dilation).shift;
  const int64_t span = a.shift_max - a.shift_min;
  const int64_t acc_size = std::max(element_size, 4);  // float, or double
  // (the forward's rows: (n, group), along L_out; grad_input's: (n, ci), along L_in)
  const int64_t rows = p.batch * (forward ? p.groups : p.in_channels);
  const int64_t length = forward ? p.length_out : p.length_in;
  const int64_t target_blocks = 4 * int64_t(limits.sm_count);
  // Rows a block: the most row groups (at most kDwMostRowGroups, groups of whole warps) whose segment
  // holds a whole row, while the rows' blocks number at least target_blocks: a row shorter than a
  // block's segment left most of its threads idle (a block's time is its loads' latency, short rows or
  // long)
  a.row_groups = 1;
  while (a.row_groups < kDwMostRowGroups && kDwSegment / (2 * a.row_groups) >= length &&
         (rows + 2 * a.row_groups - 1) / (2 * a.row_groups) >= target_blocks) {
    a.row_groups *= 2;
  }
  const int64_t segment = a.segment();
  a.staged = forward ? (segment - 1) / p.stride + 2 + span : (segment + span) * p.stride;
  // the output channels of a block: enough blocks for four of kDwThreads threads an SM (grad_input's
  // co blocks sum into partial: at most 2 * target_blocks * kDwSegment values, since blocks <
  // target_blocks)
  const int64_t blocks = (length + segment - 1) / segment * std::min<int64_t>((rows + a.row_groups - 1) / a.row_groups, 65535);
  const int64_t co_blocks = blocks < target_blocks ? std::min(p.out_channels_per_group, (target_blocks + blocks - 1) / blocks) : 1;
  const int64_t co_block = (p.out_channels_per_group + co_blocks - 1) / co_blocks;
  a.co_block = int(std::min<int64_t>(co_block, kGemmIndexLimit));
  a.co_blocks = int((p.out_channels_per_group + a.co_block - 1) / a.co_block);
  if (a.co_blocks > 65535) return std::nullopt;  // (a grid dimension)
  // forward: the block's rows' weights for each of the group's input channels, and their biases;
  // grad_input: the row's weights for the block's output channels
  const int64_t weights = forward ? a.co_block * (p.in_channels_per_group * p.kernel_size + 1) : a.co_block * p.kernel_size;
  if (weights >= kGemmIndexLimit) return std::nullopt;
  a.weights = int(weights);
  const int64_t staged_rows = forward ? p.in_channels_per_group : 1;
  const int64_t smem_bytes = a.row_groups * (a.weights * acc_size + staged_rows * a.staged * element_size);
  if (smem_bytes > limits.smem_one_block()) return std::nullopt;
  a.smem_bytes = size_t(smem_bytes);
  a.tap_step = forward ? depthwise_tap_step(p) : 1;
  return a;
}

// Slices of the depthwise grad_weight rows: about sixteen blocks per SM in all (four waves of four
// resident blocks, so the last wave's idle share is small), each slice at least four block-widths
// of inputs long.
int64_t depthwise_grad_weight_slices(const ConvTParams& p, const DeviceLimits& limits) {
  const int64_t weight_rows = p.in_channels * p.out_channels_per_group;
  const int64_t target_blocks = limits.sm_count * 16;
  const int64_t longest = std::max<int64_t>(1, p.length_in / (4 * kDwThreads));
  return std::clamp<int64_t>((target_blocks + weight_rows - 1) / weight_rows, 1, longest);
}

// One input channel a group with at least this many outputs may take the GEMM kernels over the
// depthwise ones (one_channel_gemm_pays)
constexpr int64_t kOneChannelGemmLeastRows = 64;
// CONVT_ONE_CHANNEL_GEMM: always (the GEMM wherever it plans, forward and grad_input) or never (the
// depthwise kernels) in place of one_channel_gemm_pays (read_plan_override). Read at every plan.
PlanOverride one_channel_gemm_override() { return read_plan_override("CONVT_ONE_CHANNEL_GEMM"); }
// A forward of one input channel a group pads that channel to the MMA's chunk, work the depthwise
// kernel does not do, while the depthwise forward pays a shared-memory load and a compare a MAC.
// The GEMM's plan pays on the pipelined tiles where an output has MACs enough (K over the phases
// its taps reach) for the padded MMA: TF32 at any, 3xTF32 (three products a MAC) at 3 or more,
// 16-bit at 4 or more or where x's rows come by TMA (tensor_rows; staged row by row, one channel
// costs a chunk of rows' copies). grad_input (one output row a group) keeps the depthwise kernel.
// H200 A/B on the one-channel sweep layers: docs/perf/2026-12-01-v80-planner-rules.md.
bool one_channel_gemm_pays(const ConvTParams& p, const GemmPlan& g, Math math) {
  if (kGemmTileShapes[g.tile_shape].family != GemmFamily::kPipelined) return false;
  const int64_t phases = phases_reached(p);  // an output's MACs: kernel_size / phases
  switch (math) {
    case Math::kTF32: return true;
    case Math::k3xTF32: return p.kernel_size >= 3 * phases;
    case Math::k16Bit: return p.kernel_size >= 4 * phases || g.tensor_rows;
  }
  return false;
}

// A tensor-core SM's MMA rate (16-bit; TF32 half of it, 3xTF32 a sixth), in FLOP/s, and its share of
// HBM's bandwidth in bytes/s (an H100/H200's 3+ TB/s over 132 SMs): the cost models' units
constexpr double kMmaFlopsPerSm16Bit = 4e12;
constexpr double kStoreBytesPerSecondPerSm = 23e9;

// A 3xTF32 wide output merges its zero-tap phases where the per-phase tiles' stores cost more than
// the merged tiles' MMA work, by kStrictWideMergeMargin: a per-phase plan that does not stage its
// outputs stores one every out_step positions (each element its own 32-byte sector, up to 8 floats
// apart: a 1 -> 512, K = 17, stride 8 forward stored at ~0.2 TB/s, 4x the merged plan's time), the
// merged plan stores rows in order and does up to 1.5x the MACs (zero taps; three products a MAC).
// An output's seconds on an SM: per phase, 4 bytes x min(out_step, 8) + the chunk's padded channels
// x K / stride MACs; merged, 4 bytes + those channels x its merged taps. Dense outputs of many
// channels keep their per-phase plans (their MMA work outweighs the stores, and merges ran slower),
// as do per-phase plans that stage their outputs (stored in order: 1.4-1.6x faster than merged on
// the four such layers of 36 screened, H200, docs/perf/2026-12-03-v99.md).
// CONVT_STRICT_WIDE_MERGE=always|never: merged wherever the merged plan pipelines, or never
// (read_plan_override, at every plan).
constexpr double kStrictWideMergeMargin = 2.0;
// (a per-phase plan on pipelined row tiles narrower than its rows (plan_pipelined's narrower tiles,
// taken where wider ones reach less than half the SMs) runs the long reductions of a few wide rows
// on few, narrow parts, at a fraction of the MMA rate; the merged plan's 128-row tiles have a part a
// tile over every phase: merged there, whatever the stores cost; except at stride 2 (the layer's or
// its shared-step reduced layer's), where a phase's stores fill half of each 32-byte sector and the
// merged plan's pass over x is not paid back, as in strict_narrow_merge_pays's stride-2 layers)
bool narrowed_pipelined_tiles(const GemmPlan& g) {
  return kGemmTileShapes[g.tile_shape].family == GemmFamily::kPipelined && g.block_m < pipelined_narrow_rows(g.rows_per_group);
}
bool strict_wide_merge_pays(const ConvTParams& p, const GemmPlan& merged, const std::optional<GemmPlan>& exact) {
  const PlanOverride merge = read_plan_override("CONVT_STRICT_WIDE_MERGE");
  if (merge != PlanOverride::kModel) return merge == PlanOverride::kAlways;
  if (!exact || exact->out_step == 1 || exact->stage_output) return false;
  if (narrowed_pipelined_tiles(*exact) && exact->out_step > 2) return true;
  const double store_seconds = 4.0 / kStoreBytesPerSecondPerSm, mac_seconds = 2.0 / (kMmaFlopsPerSm16Bit / 6);
  const double channels = double(merged.chunk_channels) * double(merged.chunks);
  const double per_phase = store_seconds * double(std::min<int64_t>(exact->out_step, 8)) +
                           mac_seconds * channels * double(p.kernel_size) / double(p.stride);
  const double merged_seconds = store_seconds + mac_seconds * channels * double(merged.taps);
  return kStrictWideMergeMargin * merged_seconds < per_phase;
}

// A 3xTF32 narrow output (narrow_merged_rows) merges its zero-tap phases where the merged tiles'
// MMA work (their rows x merged taps, three products a MAC) is at most the per-phase tiles' (their
// rows x K), except in dense layers at stride 2: there the per-phase plan's tiles hold both phases
// of a column pair already, and the merged plan's extra pass over x (its non-finite check) is not
// paid back (H200: 1.04-1.37x slower on five such layers; grouped ones and strides 3-10, 0.18-0.73x
// the time: docs/perf/2026-12-01-v81-wide-copies.md).
bool strict_narrow_merge_pays(const ConvTParams& p, const GemmPlan& merged, const std::optional<GemmPlan>& exact) {
  if (p.stride == 2 && p.groups == 1) return false;
  const int64_t phase_rows = exact ? exact->block_m : 16;
  return merged.block_m * merged.taps <= phase_rows * p.kernel_size;
}

// The forward or grad_input over the problem's own groups: tensor cores where a plan fits, else
// depthwise, else direct
DataPlan plan_data_over_groups(const ConvTParams& p, const TensorFacts& in, Math math, bool forward, const DeviceLimits& limits) {
  DataPlan plan;
  // one input channel per group, or a few (depthwise_channels): the depthwise kernels where they
  // plan (no channel padding), except one input channel a group with many outputs where the GEMM's
  // plan pays for its padded channel (one_channel_gemm_pays)
  const auto depthwise = plan_depthwise(p, forward, in.element_size, limits);
  const PlanOverride one_channel = one_channel_gemm_override();
  const bool gemm_may_take_one_channel = p.in_channels_per_group == 1 && p.out_channels_per_group >= kOneChannelGemmLeastRows &&
                                         one_channel != PlanOverride::kNever && (forward || one_channel == PlanOverride::kAlways);
  if (depthwise && !gemm_may_take_one_channel) {
    plan.kernel = Kernel::kDepthwise;
    plan.depthwise = *depthwise;
    return plan;
  }
  if (gemm_applies(p, in.element_size)) {
    // every tap in one step where the weight slots fit, else runs of fewer taps a step (set_steps)
    for (const int step_taps : {kMaxGemmTaps, 16, 8, 4, 2, 1}) {
      if (step_taps < kMaxGemmTaps && step_taps >= p.kernel_size) continue;
      const auto merged = forward ? merged_forward_problem(p, step_taps) : merged_grad_input_problem(p, step_taps);
      auto gemm = plan_gemm(gemm_problem(p, forward, step_taps), merged, in, math, limits);
      GemmPlan plan_exact{};
      // The forward merged with zero taps keeps the per-phase plan as the exact one. 3xTF32's merged
      // tiles are bound by their MMA work (three products a MAC, 64 padded rows): it merges only
      // where that work, 64 x ceil(K / stride) a column, is at most the per-phase 16-row tiles' 16 x K.
      // 16-bit tiles merge only where the per-phase ones would pad C_out/groups (below 16 rows): with
      // full rows those are as fast, and the merged plan pays its flag's launches besides. A wide output
      // merges, pipelined, only where its per-phase plan would not run pipelined nor stage its output
      // (store-bound rows written whole, which the merged tiles' row pairs do not match; a fit to
      // two screens, neutral on the layers it moved out of sample: docs/perf/2026-12-07-zero-tap-flag.md);
      // in 3xTF32 (whose strided forwards do) where the per-phase plan's stores cost more
      // (strict_wide_merge_pays).
      // (zero_tap_merge_override: merged wherever the per-phase plan can stand as the exact one, or
      // the per-phase plan alone, without the flag and the gated launches)
      if (gemm && gemm->zero_taps) {
        auto exact = plan_gemm(gemm_problem(p, forward, step_taps), std::nullopt, in, math, limits);
        // 3xTF32 weighs the merge against the per-phase plan without its phase-strided staging (the
        // plan strict_wide_merge_pays and strict_narrow_merge_pays were measured against); the staged
        // plan runs where the phases do not merge
        auto unstaged = exact;
        if (math == Math::k3xTF32 && exact && exact->stage_output) {
          unstaged = plan_gemm(gemm_problem(p, forward, step_taps), std::nullopt, in, math, limits, false);
        }
        // (an exact plan of strided stores counts as the two-buffer plan it replaces)
        auto pipelined = [](const std::optional<GemmPlan>& plan) {
          return plan && kGemmTileShapes[plan->tile_shape].family == GemmFamily::kPipelined &&
                 (plan->out_step == 1 || pipeline_form(*plan) == PipelineForm::kPhasePair);
        };
        // (one input channel a group: there the alternative to the merged plan is the depthwise
        // kernels, one_channel_gemm_pays, not the staged rows)
        auto staged = [&](const std::optional<GemmPlan>& plan) {
          return plan && plan->stage_output && p.in_channels_per_group > 1;
        };
        const PlanOverride merge_override = zero_tap_merge_override();
        const bool merges = merge_override != PlanOverride::kModel ? merge_override == PlanOverride::kAlways
                            : !narrow_merged_rows(p)
                                ? pipelined(gemm) && (math != Math::k3xTF32 ? !pipelined(exact) && !staged(exact)
                                                                            : strict_wide_merge_pays(p, *gemm, unstaged))
                            : math == Math::k3xTF32 ? strict_narrow_merge_pays(p, *gemm, unstaged)
                                                    : math != Math::k16Bit || p.out_channels_per_group < 16;
        // (the exact plan runs over the merged plan's outputs, whose zero taps may have made NaN at
        // positions no tap reaches: it must store every position, so not one that leaves some to the
        // launcher's bias_first; that plan runs alone instead)
        if (unstaged && merges && !bias_first(*unstaged)) {
          plan_exact = *unstaged;
        } else {
          gemm = exact;
        }
      }
      // grad_input over grad_y deinterleaved (the copy costs a pass over grad_y, read and written):
      //  - where the per-phase plan would read grad_y element by element over more than two row
      //    tiles (about two of its passes), or in 3xTF32 (whose two-accumulator tiles stall longer on
      //    element loads) at any row tiles where the phases merge (K below stride keeps the row-tile
      //    rule: its per-phase form reads each grad_y element once);
      //  - where phases merged in place would load their fragments at stride channel_phases in
      //    shared memory (bank conflicts, a cost that grows with the MMA work) and a grad_y element
      //    feeds at least kDeinterleaveReuse MACs (C_in/groups * K/stride; kDeinterleaveReuse16 for
      //    16-bit elements below kDeinterleaveConflictPhases merged phases);
      //  - with zero taps (K above stride, not a multiple of it: up to twice the MMA work) where the
      //    per-phase plan's sector reads exceed the copy's: each of its row tiles reads every 32-byte
      //    sector of grad_y once per phase while a sector holds several of a row's phases, that is
      //    row_tiles * min(stride, 32 / element size) passes over grad_y against the copy's 2 +
      //    row_tiles (at stride 2: more than two row tiles). The per-phase plan stays the exact one
      //    (DataPlan::exact), so it must exist;
      //  - where the per-phase plan reads element by element on unpipelined tiles (warpgroup tiles,
      //    or wide and busy mma.sync ones: kDeinterleaveWarpChannels) and the copy's plan pipelines.
      const auto deinterleaved = forward ? std::nullopt : deinterleaved_grad_input_problem(p, step_taps);
      const bool element_wise = gemm && gemm->in_step > 1 && gemm->channel_phases == 1;
      const bool strict_merging = math == Math::k3xTF32 && phases_merge(p);
      const int64_t reuse = in.element_size == 2 && gemm && gemm->channel_phases < kDeinterleaveConflictPhases
                                ? kDeinterleaveReuse16
                                : kDeinterleaveReuse;
      const bool busy_in_place =
          gemm && gemm->channel_phases > 1 && p.in_channels_per_group * (p.kernel_size / p.stride) >= reuse;
      const auto copy_reads_less = [&](const GemmPlan& g) {
        return g.row_tiles * std::min<int64_t>(p.stride, 32 / in.element_size) > 2 + g.row_tiles;
      };
      const bool model_copies = deinterleaved && (deinterleaved->zero_taps ? element_wise && copy_reads_less(*gemm)
                                                                            : !gemm || busy_in_place ||
                                                                                  (element_wise && (gemm->row_tiles > 2 || strict_merging)));
      // (CONVT_GRAD_INPUT_DEINTERLEAVE=always|never: the copy wherever it plans, zero taps where the
      // per-phase plan stands as the exact one, or nowhere; read at every plan)
      const PlanOverride deinterleave = read_plan_override("CONVT_GRAD_INPUT_DEINTERLEAVE");
      const bool copies = deinterleave == PlanOverride::kModel
                              ? model_copies
                              : deinterleave == PlanOverride::kAlways && deinterleaved && (gemm || !deinterleaved->zero_taps);
      bool unpipelined_element_wise = false;
      if (element_wise && !gemm->zero_taps) {
        const GemmFamily family = kGemmTileShapes[gemm->tile_shape].family;
        unpipelined_element_wise = family == GemmFamily::kWarpgroupTiles ||
                                   (family == GemmFamily::kWarpTiles && p.in_channels_per_group >= kDeinterleaveWarpChannels &&
                                    gemm->tiles >= kDeinterleaveWarpWaves * limits.sm_count);
      }
      if (copies || (deinterleave == PlanOverride::kModel && deinterleaved && unpipelined_element_wise)) {
        auto plan = plan_gemm(*deinterleaved, std::nullopt, copy_facts(in.element_size), math, limits);
        if (plan && (copies || kGemmTileShapes[plan->tile_shape].family == GemmFamily::kPipelined)) {
          if (plan->zero_taps) plan_exact = *gemm;
          gemm = plan;
        }
      }
      if (gemm) {
        if (depthwise && one_channel != PlanOverride::kAlways && !one_channel_gemm_pays(p, *gemm, math)) break;
        plan.kernel = Kernel::kGemm;
        plan.gemm = *gemm;
        set_splits(plan.gemm, math, limits);  // (the main plan only: the exact one runs gated, over every position)
        plan.weight = gemm_weight(p, forward);
        if (gemm->zero_taps) plan.exact = plan_exact;
        return plan;
      }
    }
  }
  if (depthwise) {
    plan.kernel = Kernel::kDepthwise;
    plan.depthwise = *depthwise;
    return plan;
  }
  plan.kernel = Kernel::kDirect;
  return plan;
}

}  // namespace

namespace {
// A pipelined tile's time in seconds, on x's rows one by one (a bulk copy a staged row and step, one
// thread issuing them) or on TMA boxes: each step (a run of taps over a chunk of channels) takes its
// MMAs plus its row staging (the row path's staging does not hide behind the MMAs: wide layers of
// 3-4 taps a step ran at the sum), or the longer of its MMAs and a box step; plus a fixed part. The
// copies' bandwidth is an effective one (small chunks do not reach HBM's). Fitted to an H200 A/B of
// the row path against the copies on 101 bf16 sweep layers (docs/perf/2026-11-30-position-rows.md).
// The model errs by up to 2x a layer in absolute time, so the copies are taken only at
// kAlignedCopyMargin of the time.
constexpr double kRowCopySeconds = 25e-9;
constexpr double kBoxStepSeconds = 0.4e-6;
constexpr double kTileFixedSeconds = 4e-6;
constexpr double kAlignedCopyMargin = 0.9;
// An x copy moves every element twice at its kind's copy_bandwidth(); each batch chunk costs its copy's
// and its GEMM's launches.
constexpr double kChunkLaunchSeconds = 10e-6;
// The copies' effective rates, bytes a second, read and written: the plan over a copy against the
// plan it replaces, each priced by the models here, so a rate also makes up the models' errors. The
// copies themselves run at about 2 TB/s (H200, v104); priced so, against 1 TB/s, the plans that move
// ran 0.97x the time on 51 bf16 training steps over grad_input's channels-last grad_y (below cuDNN
// 13 -> 7) and 0.87x on 7 strict forwards over aligned-row copies of x, while 9 bf16 forwards over
// channels-last copies of x ran 1.12x slower (their position-row plans' share, not the copy, is what
// 1 TB/s makes up; TF32 even) (docs/perf/2026-12-04-v104.md).
enum class CopyKind { kAlignedRows, kChannelsLastX, kChannelsLastGradY };
double copy_bandwidth(CopyKind kind) {
  // (CONVT_COPY_BANDWIDTH_GBPS, a whole number of GB/s read at every plan: every kind's rate, for an
  // A/B of the copies' model in one process)
  const std::optional<int64_t> gigabytes = read_whole_number("CONVT_COPY_BANDWIDTH_GBPS", 1000000, "GB/s");
  if (gigabytes) return double(*gigabytes) * 1e9;
  return kind == CopyKind::kChannelsLastX ? 1e12 : 2e12;
}
// Position rows' share of a box plan's time: bf16 forwards on channels-last x ran 1.07-1.23x faster
// than on the same x's boxes (H200, docs/perf/2026-11-30-position-rows.md)
constexpr double kPositionRowsTimeShare = 0.85;

// Steps of several taps over 16-bit x in TMA boxes of rows (tensor_rows, not position rows or tap
// boxes) read A from shared memory into register fragments, each tap at its own shift (2-byte loads
// and PRMT where the shift is odd), where position rows give wgmma A by descriptor: on 128-row
// tiles their MMA time counts kFragmentTapsTimeFactor times (bf16 forwards and grad_inputs of 3-7
// taps a step on 256-column permuted-position tiles ran 1.1-1.6x the time of position rows over
// channels-last copies, one-tap steps as fast; on 32 and 64-row tiles the copies ran up to 1.9x
// slower; H200, docs/perf/2026-12-04-v105-planner.md). CONVT_FRAGMENT_TAPS=never: no such cost, and
// the forward's copies only where x's plan stages rows (v104's planner).
// Warp tiles (mma.sync, whose A and B always come from register fragments) count it too, and so do
// stride-1 forwards of at least kDenseFragmentLeastTaps taps a step on any tile (staged rows or
// boxes). bf16 on an H100, each plan against the one it replaces: grad_inputs moved off warp tiles
// onto channels-last grad_y 0.63x the time (9 of 9 faster); stride-1 forwards of 7-90 taps moved
// onto copies of x 0.72x (7 of 7); not counted where it lost: 3 and 5-tap forward steps (1.12x,
// 1.48x), grad_inputs on pipelined tiles (1.05x, 26 of 40 slower)
// (docs/perf/2026-12-05-v112-fragment-taps.md). CONVT_FRAGMENT_TAPS_ANY_TILE=never: 128-row tensor
// rows only (v111's planner).
constexpr double kFragmentTapsTimeFactor = 1.4;
constexpr int kDenseFragmentLeastTaps = 6;
PlanOverride fragment_taps_override() { return read_plan_override("CONVT_FRAGMENT_TAPS"); }
PlanOverride fragment_taps_any_tile_override() { return read_plan_override("CONVT_FRAGMENT_TAPS_ANY_TILE"); }
bool fragment_taps(const GemmPlan& g, Math math, bool stride_one_forward) {
  if (math != Math::k16Bit || g.position_rows || g.tap_boxes || most_taps_per_step(g) < 2 ||
      fragment_taps_override() == PlanOverride::kNever) {
    return false;
  }
  if (g.block_m == 128 && g.tensor_rows) return true;
  if (fragment_taps_any_tile_override() == PlanOverride::kNever) return false;
  return kGemmTileShapes[g.tile_shape].family == GemmFamily::kWarpTiles ||
         (stride_one_forward && most_taps_per_step(g) >= kDenseFragmentLeastTaps);
}

double pipelined_tile_seconds(const GemmPlan& g, bool staged_by_rows, Math math, bool stride_one_forward = false) {
  const double flops_per_second =
      (math == Math::k16Bit ? kMmaFlopsPerSm16Bit : math == Math::kTF32 ? kMmaFlopsPerSm16Bit / 2 : kMmaFlopsPerSm16Bit / 6) /
      (fragment_taps(g, math, stride_one_forward) ? kFragmentTapsTimeFactor : 1.0);
  const double staging = staged_by_rows ? g.staged_rows * kRowCopySeconds : kBoxStepSeconds;
  double chunk_seconds = 0;
  for (int pair = 0; pair < g.out_phases * g.in_phases; ++pair) {
    const int taps = g.pair_begin[pair + 1] - g.pair_begin[pair];
    const double mma = 2.0 * g.block_m * g.block_n * g.chunk_channels * taps / flops_per_second;
    if (taps > 0) chunk_seconds += staged_by_rows ? mma + staging : std::max(mma, staging);
  }
  return g.chunks * chunk_seconds + kTileFixedSeconds;
}

// ---- groups merged into one GEMM group ------------------------------------------------------------

// CONVT_GROUP_MERGE: groups merged wherever a merged plan applies (the largest merge that plans), or
// never (read_plan_override). Read at every plan.
PlanOverride group_merge_override() { return read_plan_override("CONVT_GROUP_MERGE"); }
// Merged rows and channels at most this many (the block-diagonal A's zeros are MMA work)
constexpr int64_t kMergedGroupMostChannels = 128;
// A forward or grad_input whose groups have fewer rows (its output channels) than this merges them:
// 16-bit 32, TF32 9 (its MMAs, at half the rate, pay for the block-diagonal zeros sooner: 12-16-row
// groups ran 1.1-1.6x slower merged), 3xTF32 none (its merges ran slower). H200 A/Bs on the grouped
// sweep layers: docs/perf/2026-12-01-v79-planner-rules.md, docs/perf/2026-12-01-v80-planner-rules.md.
int64_t merged_group_rows_below(Math math) { return math == Math::k16Bit ? 32 : math == Math::kTF32 ? 9 : 0; }

// p with `merged` consecutive groups as one: x's and out's channels of a group are contiguous, so only
// the weight changes (GemmWeight::group_rows)
ConvTParams with_merged_groups(const ConvTParams& p, int64_t merged) {
  ConvTParams q = p;
  q.groups = p.groups / merged;
  q.in_channels_per_group = p.in_channels_per_group * merged;
  q.out_channels_per_group = p.out_channels_per_group * merged;
  return q;
}

// A plan whose packed weight a merge can take: one launch, W's rows and channels as they are (no
// merged phases, channel phases, tensor-map phases or grad_y deinterleaved), no exact plan
bool merge_packs(const DataPlan& plan) {
  const GemmPlan& g = plan.gemm;
  return plan.kernel == Kernel::kGemm && g.launch_row_tiles == g.row_tiles && g.launch_chunks == g.chunks && !g.zero_taps &&
         !g.deinterleaved && g.row_phases == 1 && g.channel_phases == 1 && g.weight_channel_phases == 1 && g.map_row_phases == 1;
}

// The forward or grad_input; one whose groups have few rows (merged_group_rows_below) merges G of
// them into one GEMM group whose block-diagonal weight holds theirs, the largest G that plans with
// merged rows and channels within kMergedGroupMostChannels, not onto the unpipelined warpgroup tiles:
// unmerged, tiles of 16 rows and 32-64 channels pad each group's few rows and channels and a group's
// tiles repeat every fixed cost, while these layers are bound by memory and fixed costs, not by the
// zeros' MMA work. `always`: the largest merge that plans. Not where the depthwise kernels take the
// groups.
DataPlan plan_data(const ConvTParams& p, const TensorFacts& in, Math math, bool forward, const DeviceLimits& limits) {
  DataPlan plan = plan_data_over_groups(p, in, math, forward, limits);
  const PlanOverride merge = group_merge_override();
  const bool few_rows = (forward ? p.out_channels_per_group : p.in_channels_per_group) < merged_group_rows_below(math);
  if (p.groups == 1 || plan.kernel != Kernel::kGemm || merge == PlanOverride::kNever || (merge == PlanOverride::kModel && !few_rows)) {
    return plan;
  }
  std::optional<DataPlan> best;
  for (int64_t merged = 2; merged <= p.groups; ++merged) {
    if (p.groups % merged != 0) continue;
    if (p.in_channels_per_group * merged > kMergedGroupMostChannels || p.out_channels_per_group * merged > kMergedGroupMostChannels) break;
    DataPlan candidate = plan_data_over_groups(with_merged_groups(p, merged), in, math, forward, limits);
    if (!merge_packs(candidate)) continue;
    if (merge != PlanOverride::kAlways && kGemmTileShapes[candidate.gemm.tile_shape].family == GemmFamily::kWarpgroupTiles) continue;
    candidate.merged_groups = merged;
    candidate.weight.group_rows = forward ? p.out_channels_per_group : p.in_channels_per_group;
    candidate.weight.group_channels = forward ? p.in_channels_per_group : p.out_channels_per_group;
    candidate.weight.co_rows = forward;
    best = candidate;
  }
  return best ? *best : plan;
}

// CONVT_FORWARD_X_COPIES overrides the copies' cost model (read_plan_override). Read at every plan.
PlanOverride copies_override() { return read_plan_override("CONVT_FORWARD_X_COPIES"); }

// CONVT_ZERO_TAP_COPIES=never: zero-tap plans take no copies (v78's planner; read_plan_override).
// Read at every plan.
PlanOverride zero_tap_copies_override() { return read_plan_override("CONVT_ZERO_TAP_COPIES"); }

// A plan of one pipelined launch (what the copies' choice compares; a zero-tap plan's exact plan,
// gated, runs over the same tensor: x, or a chunk's copy)
bool one_pipelined_launch(const DataPlan& plan) {
  const GemmPlan& g = plan.gemm;
  return plan.kernel == Kernel::kGemm && kGemmTileShapes[g.tile_shape].family == GemmFamily::kPipelined &&
         g.launch_row_tiles == g.row_tiles && g.launch_chunks == g.chunks &&
         (!g.zero_taps || zero_tap_copies_override() != PlanOverride::kNever);
}
}  // namespace

// The forward over x as it is, or over copies of x in aligned rows (channels-last where the channels
// allow) a batch chunk at a time (DataPlan::copy_batch): where the plan on x would stage its rows one
// by one, the plan on the copy takes TMA boxes in one launch a chunk, the copy of a chunk and the
// packed weight stay within the workspace bound (workspace_bound), and the chunks' waves of
// tiles and copies take at most kAlignedCopyMargin of the plan on x's waves (pipelined_tile_seconds;
// copies_override). Every math: the model, fitted to bf16, scales the MMA time by the math's rate
// (TF32 and 3xTF32 forwards chosen by it ran 0.77x and 0.85x the row path's time on 54 and 43 sweep
// layers, docs/perf/2026-12-01-float-x-copies.md).
namespace {
DataPlan plan_forward_on_gemm(const ConvTParams& p, const TensorFacts& x, Math math, const DeviceLimits& limits) {
  DataPlan plan = plan_data(p, x, math, /*forward=*/true, limits);
  const PlanOverride copies = copies_override();
  const bool stride_one = p.stride == 1;  // (fragment_taps' stride-1 forwards)
  if (!limits.tma || !one_pipelined_launch(plan) ||
      (plan.gemm.tensor_rows && !fragment_taps(plan.gemm, math, stride_one)) || copies == PlanOverride::kNever) {
    return plan;
  }
  const int element_size = x.element_size;
  const int64_t element_bytes = p.in_channels * aligned_row_length(p.length_in, element_size) * element_size;
  const int64_t room = workspace_bound(plan.gemm) - 4 * packed_weight_words(plan.gemm);  // (the copy's plan packs the same weight)
  const int64_t batch = std::min<int64_t>(p.batch, room / element_bytes);
  if (batch < 1) return plan;
  // The plan over a chunk of `elements` copied channels-last or in aligned rows; one that runs on the
  // copy reads it by TMA in one pipelined launch
  auto plan_over = [&](int64_t elements, bool channels_last) {
    DataPlan chunk_plan = plan_data(channels_last ? forward_over_channels_last_x(p, elements)
                                                  : forward_over_aligned_x(p, element_size, elements),
                                    copy_facts(element_size), math, /*forward=*/true, limits);
    chunk_plan.copy_channels_last = channels_last;
    return chunk_plan;
  };
  auto runs_on_copy = [](const DataPlan& chunk_plan) { return one_pipelined_launch(chunk_plan) && chunk_plan.gemm.tensor_rows; };
  DataPlan over = plan_over(batch, false);
  // x whose channels make rows of 16-byte multiples: the copies channels-last (the same bytes at
  // most, x's rows unpadded), on position rows (16-bit and TF32: 3xTF32 splits its A in registers),
  // whose tiles take kPositionRowsTimeShare of the boxes' time; not where the aligned copies take tap
  // boxes
  double tile_share = 1.0;
  if (p.in_channels * element_size % 16 == 0 && !over.gemm.tap_boxes) {  // (tap boxes: as fast)
    const DataPlan channels_last = plan_over(batch, true);
    if (one_pipelined_launch(channels_last) && channels_last.gemm.position_rows) {
      over = channels_last;
      tile_share = kPositionRowsTimeShare;
    }
  }
  if (!runs_on_copy(over) || 4 * packed_weight_words(over.gemm) + batch * element_bytes > workspace_bound(over.gemm)) return plan;
  // A zero-tap plan (a long filter, or K above the stride) over copies only where the copy's plan takes
  // as many taps a step as the plan on x: the model counts a pair's MMAs, not its steps, and long
  // filters at half the taps a step ran 1.05-1.96x slower in 16-bit (H200, docs/perf/2026-12-01-v79-planner-rules.md)
  if (plan.gemm.zero_taps && most_taps_per_step(over.gemm) < most_taps_per_step(plan.gemm) && copies != PlanOverride::kAlways) {
    return plan;
  }
  // The chunks' time: their launches' waves of tiles (a launch's parts go by batch element: chunks of
  // `chunk`, a last, smaller one its share) and launches
  const double tile_seconds = pipelined_tile_seconds(over.gemm, false, math) * tile_share;
  const int64_t element_parts = over.gemm.parts / batch;
  auto chunks_seconds = [&](int64_t chunk) {
    const int64_t full_chunks = p.batch / chunk, last_batch = p.batch % chunk;
    GemmPlan chunk_gemm = over.gemm;
    auto waves = [&](int64_t elements) {
      chunk_gemm.parts = element_parts * elements;
      return elements > 0 ? double(launch_waves(chunk_gemm, chunk_gemm.row_tiles, limits)) : 0.0;
    };
    return (double(full_chunks) * waves(chunk) + waves(last_batch)) * tile_seconds +
           double(full_chunks + (last_batch > 0)) * kChunkLaunchSeconds;
  };
  // The chunk of the fewest seconds, the largest of those: a smaller chunk than the workspace allows
  // can fill its launches' last waves (4 chunks of 1.3 waves take 8 waves, 6 of 1 wave 6). A chunk
  // only where its plan is the same pipelined tile (the model prices that tile's waves). A last,
  // smaller chunk runs its own plan: over channels-last copies only where that is pipelined (position
  // rows; other tiles read channels-last x element by element across channels: a last chunk of 2 on
  // a warp tile ran a TF32 forward 1.5x slower); over aligned rows any (strict fp32's warp tiles on a
  // last chunk of 1-2 ran as fast as a smaller chunk's extra wave, or faster).
  std::vector<int64_t> chunks(static_cast<size_t>(batch));
  std::iota(chunks.rbegin(), chunks.rend(), int64_t(1));  // (batch, ..., 1: a stable sort keeps the largest of equal times first)
  std::vector<double> seconds(static_cast<size_t>(batch) + 1);
  for (const int64_t candidate : chunks) seconds[size_t(candidate)] = chunks_seconds(candidate);
  std::stable_sort(chunks.begin(), chunks.end(), [&](int64_t a, int64_t b) { return seconds[size_t(a)] < seconds[size_t(b)]; });
  const bool channels_last = over.copy_channels_last;
  int64_t chunk = 0;
  for (const int64_t candidate : chunks) {
    if (channels_last && p.batch % candidate > 0 && !runs_on_copy(plan_over(p.batch % candidate, true))) continue;
    if (candidate < batch) {
      const DataPlan smaller = plan_over(candidate, channels_last);
      if (!runs_on_copy(smaller) || smaller.gemm.tile_shape != over.gemm.tile_shape) continue;
      over = smaller;
    }
    chunk = candidate;
    break;
  }
  if (chunk == 0) return plan;
  const double over_x = double(launch_waves(plan.gemm, plan.gemm.row_tiles, limits)) *
                        pipelined_tile_seconds(plan.gemm, !plan.gemm.tensor_rows, math, stride_one);
  const double over_copies = seconds[size_t(chunk)] +
                             2.0 * p.batch * element_bytes / copy_bandwidth(channels_last ? CopyKind::kChannelsLastX : CopyKind::kAlignedRows);
  if (over_copies > kAlignedCopyMargin * over_x && copies != PlanOverride::kAlways) return plan;
  over.copy_batch = chunk;
  return over;
}

// CONVT_PACKED_TAPS: the packed taps (forward and grad_input) wherever they plan, or never
// (read_plan_override). Read at every plan.
PlanOverride packed_taps_override() { return read_plan_override("CONVT_PACKED_TAPS"); }

// The packed-taps forward (PackedTapsPlan; docs/design.md §3.9), or nullopt where it does not apply:
// tensor-core dtypes, at most kPackedTapsMostColumns (co, tap) columns a group, at least
// kPackedTapsLeastChannels input channels a group (the K dimension pads to the 32-channel chunk), and
// a halo of at most half a block's rows (the taps' reach, (K - 1) x dilation / stride positions, is
// read by two blocks).
constexpr int64_t kPackedTapsLeastChannels = 16;
// (both passes') columns rounded up to 8, 16, 32 or 64 (least: 16-bit grad_input's k16 steps), or 0
// where the packed taps do not apply
int packed_taps_columns(const ConvTParams& p, int element_size, int64_t least) {
  const int64_t columns = p.out_channels_per_group * p.kernel_size;
  if ((element_size != 2 && element_size != 4) || columns > kPackedTapsMostColumns ||
      p.in_channels_per_group < kPackedTapsLeastChannels) {
    return 0;
  }
  return columns <= 8 && least <= 8 ? 8 : columns <= 16 ? 16 : columns <= 32 ? 32 : 64;
}
std::optional<PackedTapsPlan> plan_packed_taps(const ConvTParams& p, int element_size, const DeviceLimits& limits) {
  PackedTapsPlan plan{};
  plan.columns = packed_taps_columns(p, element_size, 8);
  if (plan.columns == 0) return std::nullopt;
  plan.outputs = (kPackedTapsRows - 2) * p.stride - (p.kernel_size - 1) * p.dilation + 1;
  // (the epilogue counts a block's outputs and offsets in 32-bit ints)
  if (plan.outputs < (kPackedTapsRows / 2) * p.stride || plan.outputs >= kGemmIndexLimit) return std::nullopt;
  plan.blocks_per_row = (p.length_out + plan.outputs - 1) / plan.outputs;
  plan.blocks = p.batch * p.groups * plan.blocks_per_row;
  if (plan.blocks >= (int64_t(1) << 31) || p.x_channel_stride * kPackedTapsChunk >= (int64_t(1) << 31)) return std::nullopt;
  plan.chunks = (p.in_channels_per_group + kPackedTapsChunk - 1) / kPackedTapsChunk;
  plan.smem_bytes = size_t(packed_taps_smem_bytes(plan.columns, element_size));
  if (int64_t(plan.smem_bytes) > limits.smem_per_block_optin) return std::nullopt;
  return plan;
}

// The packed-taps forward in place of `gemm` (the GEMM's plan for the same forward) where the GEMM is
// bound by its padded MMA work and packing cuts that work by more than kPackedTapsWorkMargin. An x
// element takes the GEMM's padded rows x taps MACs (a per-phase plan: C_out/groups padded to its tile
// rows, K taps; merged phases: C_out/groups x stride rows padded, ceil(K / stride) taps), and here
// `columns` x (a block's rows over the rows its outputs need: the halo). The narrow GEMM tiles run
// at about 45 TMAC/s while x streams at 1.7-2.5 TB/s (H100), so their MMA time passes their x
// time from about 50 MACs an element; the packed kernel streams x at 0.6-0.8 of the GEMM's
// bandwidth, so it pays from about twice that, kPackedTapsLeastGemmMacs (C_out 2, K 7, stride 1: 16
// x 7 = 112 MACs an element against 16). Merged phases of few taps (C_out 1, K 16, stride 8: 16 x 2)
// and short filters (16 x 3) stay on the GEMM, as do groups of one chunk (kPackedTapsLeastChunks:
// a block's loads run behind the tensor cores only from its second chunk on; with one, every block
// waits out its loads, then its epilogue: groups of 16 channels ran 1.2-2.4x slower in 16-bit)
// (docs/perf/2026-12-06-packed-taps.md). CUDA-core plans (no tensor-core form) always.
constexpr double kPackedTapsWorkMargin = 2.0;
constexpr int64_t kPackedTapsLeastGemmMacs = 96;
constexpr int64_t kPackedTapsLeastChunks = 2;
bool packed_taps_pay(const ConvTParams& p, const PackedTapsPlan& packed, const DataPlan& gemm) {
  const PlanOverride override_packed = packed_taps_override();
  if (override_packed != PlanOverride::kModel) return override_packed == PlanOverride::kAlways;
  if (gemm.kernel != Kernel::kGemm) return gemm.kernel == Kernel::kDirect;
  const double block_rows = double(packed.outputs + (p.kernel_size - 1) * p.dilation) / double(p.stride);
  const double packed_work = double(packed.columns) * double(kPackedTapsRows) / block_rows;
  const int64_t gemm_work = gemm.gemm.block_m * gemm.gemm.row_tiles * gemm.gemm.taps;
  return gemm_work >= kPackedTapsLeastGemmMacs && packed.chunks >= kPackedTapsLeastChunks &&
         kPackedTapsWorkMargin * packed_work < double(gemm_work);
}

DataPlan plan_forward_uncached(const ConvTParams& p, const TensorFacts& x, Math math, const DeviceLimits& limits) {
  DataPlan plan = plan_forward_on_gemm(p, x, math, limits);
  const auto packed = plan_packed_taps(p, x.element_size, limits);
  if (!packed || !packed_taps_pay(p, *packed, plan)) return plan;
  DataPlan packed_plan;
  packed_plan.kernel = Kernel::kPackedTaps;
  packed_plan.packed_taps = *packed;
  return packed_plan;
}
}  // namespace

int64_t channels_last_grad_y_rows(const ConvTParams& p) { return p.stride > 1 ? deinterleaved_length(p) : p.length_out; }
int64_t channels_last_grad_y_row_elements(const ConvTParams& p, int element_size) {
  return aligned_row_length(p.out_channels * (p.stride > 1 ? deinterleaved_phases(p) : 1), element_size);
}

namespace {
// CONVT_GRAD_INPUT_COPIES: grad_input over grad_y copied channels-last wherever that plans (16-bit and
// TF32), or nowhere (read_plan_override), else as the model below has it. Read at every plan.
PlanOverride grad_input_copies_override() { return read_plan_override("CONVT_GRAD_INPUT_COPIES"); }
}  // namespace

// grad_input over grad_y as it is (or its deinterleaved copy), or over grad_y copied channels-last
// (DataPlan::channels_last_grad_y: deinterleaved at stride > 1, the copy's channel co*P + r, so the
// deinterleaved problem's weight as it is): the pipelined kernel then reads position rows, wgmma's A
// from shared memory at every tap's shift, where on rows it assembles A's fragments in registers
// (or stages rows one by one). 16-bit and TF32, where a grad_x element sums at least kCopyLeastReduction
// products (below, grad_input is bound by its memory traffic, which the copy adds to: layers of
// C_out 1-14 ran up to 3.4x slower over it) and the copy's plan and its copy take at most
// kAlignedCopyMargin of the plan on grad_y's time (pipelined_tile_seconds, the forward's copies'
// model: position rows kPositionRowsTimeShare of a box plan's time, the copy a pass read and written).
constexpr int64_t kCopyLeastReduction = 256;
namespace {
DataPlan plan_grad_input_on_gemm(const ConvTParams& p, const TensorFacts& grad_y, Math math, const DeviceLimits& limits) {
  DataPlan plan = plan_data(p, grad_y, math, /*forward=*/false, limits);
  const PlanOverride copies = grad_input_copies_override();
  if (copies == PlanOverride::kNever || !limits.tma || !limits.wgmma || plan.kernel != Kernel::kGemm || plan.gemm.position_rows ||
      plan.merged_groups > 1 || math == Math::k3xTF32 ||
      (p.stride > 1 && (!deinterleaves(p) || deinterleaved_phases(p) > kChannelsLastCopyMostPhases))) {
    return plan;
  }
  const int element_size = grad_y.element_size;
  const int64_t rows = channels_last_grad_y_rows(p), row_elements = channels_last_grad_y_row_elements(p, element_size);
  std::optional<GemmPlan> copied;
  for (const int step_taps : {kMaxGemmTaps, 16, 8, 4, 2, 1}) {
    if (step_taps < kMaxGemmTaps && step_taps >= p.kernel_size) continue;
    auto problem = p.stride > 1 ? deinterleaved_grad_input_problem(p, step_taps)
                                : std::optional<GemmPlan>(gemm_problem(p, /*forward=*/false, step_taps));
    if (!problem) return plan;
    problem->in_channel_stride = 1, problem->in_length_stride = row_elements, problem->in_batch_stride = rows * row_elements;
    copied = plan_gemm(*problem, std::nullopt, copy_facts(element_size), math, limits);
    if (copied) break;
  }
  if (!copied || !copied->position_rows || !one_pipelined_launch(DataPlan{Kernel::kGemm, *copied})) return plan;
  // (zero taps: the exact plan over grad_y, which the copy's flag gates; plan's own where it has one)
  const bool exact_stands = plan.gemm.zero_taps || (plan.gemm.splits == 1 && !bias_first(plan.gemm));
  if (copied->zero_taps && !exact_stands) return plan;
  const double copy_seconds = 2.0 * p.batch * rows * row_elements * element_size / copy_bandwidth(CopyKind::kChannelsLastGradY);
  const double over_copy = double(launch_waves(*copied, copied->row_tiles, limits)) * pipelined_tile_seconds(*copied, false, math) *
                               kPositionRowsTimeShare + copy_seconds;
  const double over_grad_y = double(launch_waves(plan.gemm, plan.gemm.launch_row_tiles, limits)) *
                                 pipelined_tile_seconds(plan.gemm, !plan.gemm.tensor_rows, math) +
                             (plan.gemm.deinterleaved ? copy_seconds : 0.0);
  plan.copy_seconds = over_copy, plan.grad_y_seconds = over_grad_y;
  const bool busy = p.out_channels_per_group * p.kernel_size >= kCopyLeastReduction;
  if (copies != PlanOverride::kAlways && (!busy || over_copy > kAlignedCopyMargin * over_grad_y)) return plan;
  DataPlan over = plan;
  if (copied->zero_taps && !plan.gemm.zero_taps) over.exact = plan.gemm;
  set_splits(*copied, math, limits);
  over.gemm = *copied;
  over.channels_last_grad_y = true;
  return over;
}

// grad_input of a narrow output on the packed taps (PackedTapsPlan; packed_taps_grad_input.cuh), or
// nullopt where it does not apply: the forward's limits on dtypes, columns and channels; 16-bit
// columns at least 16 (mma k16)
std::optional<PackedTapsPlan> plan_packed_grad_input(const ConvTParams& p, int element_size, const DeviceLimits& limits) {
  PackedTapsPlan plan{};
  plan.columns = packed_taps_columns(p, element_size, element_size == 2 ? 16 : 8);
  if (plan.columns == 0) return std::nullopt;
  plan.outputs = kPackedTapsRows;
  plan.blocks_per_row = (p.length_in + kPackedTapsRows - 1) / kPackedTapsRows;
  plan.blocks = p.batch * p.groups * plan.blocks_per_row;
  if (plan.blocks >= (int64_t(1) << 31)) return std::nullopt;
  plan.chunks = (p.in_channels_per_group + kPackedGradInputChunk - 1) / kPackedGradInputChunk;
  plan.smem_bytes = size_t(packed_grad_input_smem_bytes(plan.columns, element_size));
  if (int64_t(plan.smem_bytes) > limits.smem_per_block_optin) return std::nullopt;
  return plan;
}

// The packed grad_input in place of `gemm` (grad_input's GEMM plan) where packing cuts the GEMM's
// padded reduction (a grad_x element takes C_out/groups padded to the GEMM's chunk, once a tap; here
// `columns` MACs), its columns are at most packed_grad_input_most_columns and a group's channels
// fill at least half of its first 64-channel pass (kPackedGradInputLeastChannels: every pass costs
// the same whatever its channels). Both kernels are bound by storing grad_x up to 16 columns; each
// packed pass grows with the columns' k-steps, so at 32 columns it beats TF32's GEMMs (MMAs at half
// the 16-bit rate) but not 16-bit's, and at 64 none (TF32: one block an SM). 3xTF32 is held to 16
// columns (three MMAs a k-step, one block an SM). Measured: docs/perf/2026-12-06-packed-grad-input.md.
// CUDA-core plans always.
constexpr int64_t kPackedGradInputLeastChannels = 32;
int packed_grad_input_most_columns(Math math) { return math == Math::kTF32 ? 32 : 16; }
bool packed_grad_input_pays(const ConvTParams& p, const PackedTapsPlan& packed, const DataPlan& gemm, Math math) {
  const PlanOverride override_packed = packed_taps_override();
  if (override_packed != PlanOverride::kModel) return override_packed == PlanOverride::kAlways;
  if (gemm.kernel != Kernel::kGemm) return gemm.kernel == Kernel::kDirect;
  const GemmPlan& g = gemm.gemm;
  const int64_t gemm_work = (g.channels_per_group + g.chunk_channels - 1) / g.chunk_channels * g.chunk_channels * g.taps;
  return packed.columns < gemm_work && packed.columns <= packed_grad_input_most_columns(math) &&
         p.in_channels_per_group >= kPackedGradInputLeastChannels;
}
}  // namespace

DataPlan plan_grad_input(const ConvTParams& p, const TensorFacts& grad_y, Math math, const DeviceLimits& limits) {
  DataPlan plan = plan_grad_input_on_gemm(p, grad_y, math, limits);
  const auto packed = plan_packed_grad_input(p, grad_y.element_size, limits);
  if (!packed || !packed_grad_input_pays(p, *packed, plan, math)) return plan;
  DataPlan packed_plan;
  packed_plan.kernel = Kernel::kPackedTaps;
  packed_plan.packed_taps = *packed;
  return packed_plan;
}

namespace {

// CONVT_GRAD_WEIGHT_BOXES: the box tiles (plan_grad_weight_boxes) where they apply (read_plan_override).
// Read at every plan: the tests run the other grad_weight kernels' cases with `never`, the box
// tiles' small cases with `always`.
PlanOverride grad_weight_boxes_override() { return read_plan_override("CONVT_GRAD_WEIGHT_BOXES"); }

// CONVT_GRAD_WEIGHT_UNROLLED: grad_weight over grad_y unrolled by taps (§5.6) wherever it plans, or
// nowhere (read_plan_override), else as the work model has it. Read at every plan.
PlanOverride grad_weight_unrolled_override() { return read_plan_override("CONVT_GRAD_WEIGHT_UNROLLED"); }

// The box tiles over x (aligned where it has no tensor map) and, 16-bit, grad_y copied channels-last
// (by phase at stride > 1); TF32 (grad_y K-major), grad_y's own rows where a stride-1 problem's
// every shift is a multiple of 16 bytes, else grad_y unrolled by taps (§5.6: one tap at shift 0).
// The plan, or nullopt
std::optional<WeightGradPlan> plan_boxes_over_copies(const ConvTParams& p, const TensorFacts& x, const TensorFacts& grad_y,
                                                      const DeviceLimits& limits, WeightPlan& weight) {
  const bool align_x = p.x_length_stride != 1 ||
                       !tensor_map_fits(x, p.length_in, p.in_channels, p.batch, p.x_channel_stride, p.x_batch_stride);
  const TensorFacts box_x = align_x ? copy_facts(x.element_size) : x;
  const ConvTParams over_x = grad_weight_over_copies(p, x.element_size, align_x, /*deinterleaved=*/false);
  std::optional<WeightGradPlan> boxes;
  if (box_grad_y_k_major(grad_y.element_size)) {
    boxes = plan_grad_weight_boxes(over_x, box_x, grad_y, limits);
    weight.problem = over_x;
    if (!boxes && unrolled_copy_fits(p, grad_y.element_size)) {  // (K = 1 too: one row of each channel)
      weight.problem = grad_weight_over_unrolled(p, x.element_size, align_x);
      boxes = plan_grad_weight_boxes(weight.problem, box_x, copy_facts(grad_y.element_size), limits);
      weight.unrolled_grad_y = true;
    }
  } else {
    weight.problem = grad_weight_over_channels_last_grad_y(over_x, grad_y.element_size);
    boxes = plan_grad_weight_boxes(weight.problem, box_x, copy_facts(grad_y.element_size), limits);
    weight.channels_last_grad_y = true;
  }
  if (!boxes) return std::nullopt;
  weight.aligned_x = align_x;
  return boxes;
}

// The box tiles against the other grad_weight kernels (§5.7), in seconds on an H200 in 16-bit,
// fitted to 143 sweep and named layers timed both ways (grad_weight alone;
// docs/perf/2026-12-02-box-planner.md): the box tiles kBoxHostSeconds a call, kBoxUnitSeconds a
// unit of their cost (box_cost), kBoxSliceElementSeconds a weight element of each slice (the
// epilogue's staged stores, the sum of the slices) and kBoxCopyUnitSeconds a unit of their copies'
// time (grad_y channels-last, x aligned where it has no tensor map); the others kGradWHostSeconds a
// call and kGradWUnitSeconds a unit of grad_weight_time (their copies included), each x row
// kGradWRowPositions positions longer (each row's items' fixed work). The box tiles where their
// estimate is the lesser. kBoxHostSeconds is the refit on 305 H100 layers both ways
// (docs/perf/2026-12-06-small-grad-weight.md: 30 µs in bf16 and in TF32, the other terms as they
// were); the old 65 µs held 30 µs for host work that was never found and, on small layers, exceeded
// the box tiles' whole time. TF32 keeps kTf32BoxHostSeconds, the old fixed time: its other terms
// are off by more (below), and the refit alone moved fresh TF32 layers both ways, slower on the whole.
constexpr double kBoxHostSeconds = 30e-6;
constexpr double kTf32BoxHostSeconds = 65e-6;
constexpr double kBoxUnitSeconds = 2.8e-9;
constexpr double kBoxSliceElementSeconds = 2.5e-12;
constexpr double kBoxCopyUnitSeconds = 0.68e-12;
constexpr double kGradWHostSeconds = 46e-6;
constexpr double kGradWUnitSeconds = 0.28e-12;
constexpr double kGradWRowPositions = 300;
// TF32 (box tiles over grad_y K-major): the other tiles take kTf32GradWTilesFactor times the time of
// the 16-bit fit (their A fragments and x_s twice the bytes, wgmma at half the rate: 1.2-2.0x, median
// 1.5x, on 76 H200 layers timed both ways, docs/perf/2026-12-04-tf32-box-tiles.md; the box tiles'
// own fit held within 0.6-1.5x).
constexpr double kTf32GradWTilesFactor = 1.8;
// The copies a grad_weight plan makes, in grad_weight_time's units (grad_y_shared: grad_input
// deinterleaves grad_y, and a plan over that copy reads it at no cost)
double weight_copies_time(const WeightPlan& weight, bool grad_y_shared) {
  const bool copies_grad_y =
      (weight.deinterleaved_grad_y && !grad_y_shared) || weight.unrolled_grad_y || weight.channels_last_grad_y;
  return (weight.aligned_x ? x_copy_time(weight.problem) : 0.0) + (copies_grad_y ? grad_y_copy_time(weight.problem) : 0.0);
}
// (box_cost's share for the slices' partial sums sizes the slices; kBoxSliceElementSeconds is the
// fitted time of those sums)
double box_tiles_seconds(const WeightPlan& boxes, bool tf32, const DeviceLimits& limits) {
  const WeightGradPlan& g = boxes.gemm;
  return (tf32 ? kTf32BoxHostSeconds : kBoxHostSeconds) + kBoxUnitSeconds * box_cost(g.tiles, g.tap_groups, g.box_slots, g.box_columns, g.slices, g.items, grad_weight_elements(g), limits) +
         kBoxSliceElementSeconds * double(g.slices) * double(grad_weight_elements(g)) +
         kBoxCopyUnitSeconds * weight_copies_time(boxes, /*grad_y_shared=*/false);
}
double grad_weight_tiles_seconds(const WeightPlan& weight, const ConvTParams& p, bool grad_y_shared) {
  return kGradWHostSeconds + kGradWUnitSeconds * (grad_weight_time(weight.gemm) + weight_copies_time(weight, grad_y_shared)) *
                                 (1 + kGradWRowPositions / double(p.length_in));
}

// Whether a dilated filter's grad_weight tiles may read grad_y copied at its dilation (the copy as at
// dilation 1, a candidate the cost model weighs): not in 3xTF32 where the copy leaves one tap a phase
// (K <= stride: the copy then only makes the rows contiguous, which the unpipelined 3xTF32 tiles
// did not repay); CONVT_GRAD_WEIGHT_DILATED_COPY=always/never: wherever it fits / nowhere
PlanOverride grad_weight_dilated_copy_override() { return read_plan_override("CONVT_GRAD_WEIGHT_DILATED_COPY"); }
bool dilated_copy_applies(const ConvTParams& p, Math math) {
  const PlanOverride override_value = grad_weight_dilated_copy_override();
  if (override_value != PlanOverride::kModel) return override_value == PlanOverride::kAlways;
  return math != Math::k3xTF32 || weight_deinterleaved_taps(p) >= 2;
}

// grad_weight's pass on the mma.sync or warpgroup tiles (or the depthwise or direct kernels);
// dilated_copy: dilated_copy_applies
WeightPlan plan_grad_weight_tiles_pass(const ConvTParams& p, const TensorFacts& x, const TensorFacts& grad_y, Math math,
                                       bool grad_bias, bool dilated_copy, const DeviceLimits& limits) {
  WeightPlan weight;
  // merged phases where they plan, else per phase; 3xTF32: no wide tap groups, no warpgroup tiles
  const bool one_pass = math != Math::k3xTF32;
  const bool with_bias = grad_bias && one_pass;
  // (one input channel per group, or a few: the depthwise kernel where it applies, no channel padding)
  const bool depthwise =
      depthwise_channels(p.in_channels_per_group, p.out_channels_per_group, /*forward=*/false) &&
      p.kernel_size <= kDwMaxTaps;
  auto plan_on = [&](const ConvTParams& q, const TensorFacts& q_x, const TensorFacts& q_grad_y, bool q_bias) {
    auto gemm = plan_grad_weight(q, q_x, q_grad_y, q_bias, one_pass, /*merge=*/true, limits);
    return gemm ? gemm : plan_grad_weight(q, q_x, q_grad_y, q_bias, one_pass, /*merge=*/false, limits);
  };
  auto gemm = depthwise ? std::nullopt : plan_on(p, x, grad_y, with_bias);
  weight.problem = p;
  // (grad_weight's copy of grad_y: grad_weight_over_copies' stride-1 problem, at the dilation)
  const bool grad_y_copy_at_dilation = p.dilation == 1 || dilated_copy;
  const bool deinterleaves_grad_y = weight_deinterleaves(p) && grad_y_copy_at_dilation;
  // (a plan's time with the copies it makes, grad_weight_time's units)
  auto time_with_copies = [](const WeightGradPlan& plan, const WeightPlan& copies) {
    return grad_weight_time(plan) + weight_copies_time(copies, /*grad_y_shared=*/false);
  };
  // The pipelined warpgroup kernel over copies where it does not plan on the tensors as they are
  // (docs/design.md §5.5): x in aligned rows where it has no tensor map; then grad_y deinterleaved
  // too where its phases are read element by element. The copies cost a pass over x and grad_y;
  // the unpipelined kernels run at a fraction of the pipelined one's rate: over copies where their
  // time and the copies' (grad_weight_time's units) is at most the unpipelined plan's (narrow
  // outputs over a long x take little MMA work, and the copy of x is most of theirs).
  if (!depthwise && one_pass && limits.wgmma && limits.tma && !(gemm && gemm->stages > 0)) {
    const bool align = p.x_length_stride != 1 || !tensor_map_fits(x, p.length_in, p.in_channels, p.batch,
                                                                  p.x_channel_stride, p.x_batch_stride);
    for (const bool deinterleave : {false, true}) {
      if (deinterleave ? !deinterleaves_grad_y : !align) continue;
      const ConvTParams q = grad_weight_over_copies(p, x.element_size, align, deinterleave);
      // (grad_y deinterleaved need not hold every position of grad_y: grad_bias from its row sums)
      auto over = plan_on(q, align ? copy_facts(x.element_size) : x, deinterleave ? copy_facts(grad_y.element_size) : grad_y,
                          with_bias && !deinterleave);
      const double copies_time = (align ? x_copy_time(q) : 0.0) + (deinterleave ? grad_y_copy_time(q) : 0.0);
      // (the merged pipelined tiles against the mma.sync ones: as plan_grad_weight has it)
      const bool merged_for_mma_sync = over && over->merged && gemm && !gemm->warpgroups;
      if (over && over->stages > 0 && (!gemm || grad_weight_time(*over) + copies_time <= grad_weight_time(*gemm) ||
                                       merged_for_mma_sync || grad_weight_pipelined_override() == PlanOverride::kAlways)) {
        gemm = over;
        weight.aligned_x = align, weight.deinterleaved_grad_y = deinterleave;
        weight.problem = q;
        break;
      }
    }
  }
  // Else over grad_y deinterleaved where that takes less MMA work, padding included: narrow
  // outputs, whose tiles' padded channels take the phases (and the copy's rows go in vector copies)
  if (gemm && gemm->stages == 0 && !gemm->merged && !weight.deinterleaved_grad_y && deinterleaves_grad_y) {
    const ConvTParams q = grad_weight_over_copies(p, x.element_size, /*aligned_x=*/false, /*deinterleaved=*/true);
    const auto over = plan_on(q, x, copy_facts(grad_y.element_size), /*q_bias=*/false);
    if (over && padded_mma_work(*over) < padded_mma_work(*gemm)) {
      gemm = over;
      weight.deinterleaved_grad_y = true;
      weight.problem = q;
    }
  }
  // Where the unpipelined 16-bit tiles would stage x or grad_y one element at a time, over
  // copies that give them vector copies (x in aligned rows; grad_y deinterleaved, which at stride 1
  // is grad_y in aligned rows), where that takes less time with the copies (grad_weight_time with
  // the element paces): odd lengths, strided grad_y
  const PlanOverride element_copies = grad_weight_element_copies_override();
  if (gemm && element_copies != PlanOverride::kNever && (copies_x_by_element(*gemm) || copies_grad_y_by_element(*gemm))) {
    const bool align = copies_x_by_element(*gemm) && !weight.aligned_x;
    const bool grad_y_as_is = !weight.deinterleaved_grad_y && !weight.unrolled_grad_y;
    const bool deinterleave = copies_grad_y_by_element(*gemm) && grad_y_as_is && grad_y_copy_at_dilation &&
                              weight_deinterleaves(p, /*any_stride=*/true);
    double best_time = time_with_copies(*gemm, weight);
    std::optional<WeightPlan> best;
    const std::pair<bool, bool> copy_choices[] = {{align, deinterleave}, {align, false}, {false, deinterleave}};
    for (const auto& [x_copy, grad_y_copy] : copy_choices) {
      if (!x_copy && !grad_y_copy) continue;
      WeightPlan over = weight;
      over.aligned_x = weight.aligned_x || x_copy;
      over.deinterleaved_grad_y = weight.deinterleaved_grad_y || grad_y_copy;
      over.problem = grad_weight_over_copies(weight.problem, x.element_size, x_copy, grad_y_copy);
      const auto plan = plan_on(over.problem, over.aligned_x ? copy_facts(x.element_size) : x,
                                grad_y_as_is && !grad_y_copy ? grad_y : copy_facts(grad_y.element_size),
                                with_bias && grad_y_as_is && !grad_y_copy);
      if (!plan) continue;
      const double time = time_with_copies(*plan, over) + kGradWCopyLaunchMacs * (int(x_copy) + int(grad_y_copy));
      if (element_copies == PlanOverride::kAlways || time < best_time) {
        best_time = time;
        over.gemm = *plan;
        best = over;
        if (element_copies == PlanOverride::kAlways) break;  // (the first that plans: every copy that applies)
      }
    }
    if (best) {
      weight = *best;
      gemm = best->gemm;
    }
  }
  // Else over grad_y unrolled by taps (§5.6) where that takes at most 1 / kUnrolledMargin of the
  // time (grad_weight_time, the copies included): narrow outputs with several taps, whose tiles' padded
  // channels then take the taps and whose tap groups stop staging x again each (any stride and
  // dilation); x aligned where that makes it pipelined. Not merged plans, whose tiles hold the phases
  // of a few co (all six measured lost 1.1-2.8x unrolled). Where no tiles plan on x's own problem (a
  // dilation whose taps' window outgrows the tiles' x rows), the unrolled copy's one tap always does:
  // the tensor cores instead of the direct kernel.
  const PlanOverride unrolled = grad_weight_unrolled_override();
  if ((gemm ? !gemm->merged || unrolled == PlanOverride::kAlways : !depthwise) && unrolls(p, grad_y.element_size) &&
      unrolled != PlanOverride::kNever) {
    const double current_time = gemm ? time_with_copies(*gemm, weight) : std::numeric_limits<double>::infinity();
    const bool can_pipeline = one_pass && limits.wgmma && limits.tma;
    std::optional<WeightGradPlan> best;
    for (const bool align : {false, true}) {
      if (align && (!can_pipeline || (best && best->stages > 0))) continue;
      const ConvTParams q = grad_weight_over_unrolled(p, x.element_size, align);
      const auto over = plan_on(q, align ? copy_facts(x.element_size) : x, copy_facts(grad_y.element_size), /*q_bias=*/false);
      // (x aligned only to pipeline; CONVT_GRAD_WEIGHT_PIPELINED=always: pipelined plans only)
      const bool pipelined_only = align || grad_weight_pipelined_override() == PlanOverride::kAlways;
      if (over && (!pipelined_only || over->stages > 0) &&
          (unrolled == PlanOverride::kAlways ||
           kUnrolledMargin * (grad_weight_time(*over) + grad_y_copy_time(q) + (align ? x_copy_time(q) : 0.0)) <= current_time)) {
        best = over;
        weight.aligned_x = align, weight.deinterleaved_grad_y = false;
        weight.unrolled_grad_y = true;
        weight.problem = q;
      }
    }
    if (best) gemm = best;
  }
  if (gemm) {
    weight.kernel = gemm->warpgroups ? Kernel::kGradWeightWgmma : Kernel::kGradWeightGemm;
    weight.gemm = *gemm;
  } else if (depthwise) {
    weight.kernel = Kernel::kDepthwise;
    weight.depthwise_slices = depthwise_grad_weight_slices(p, limits);
  } else {
    weight.kernel = Kernel::kDirect;
  }
  return weight;
}

// grad_weight's pass (plan_backward): the box tiles where they apply (C_out per group filling at least
// half a slot) and take less time than the other kernels' plan (box_tiles_seconds against
// grad_weight_tiles_seconds; grad_y_shared: that plan's copy of grad_y
// deinterleaved is grad_input's); `always`: wherever they apply
WeightPlan plan_grad_weight_pass(const ConvTParams& p, const TensorFacts& x, const TensorFacts& grad_y, Math math,
                                 bool grad_bias, bool grad_y_shared, const DeviceLimits& limits) {
  const PlanOverride boxes_override = grad_weight_boxes_override();
  const bool dilated_copy = dilated_copy_applies(p, math);
  if (math == Math::k3xTF32 || p.out_channels_per_group <= 32 || boxes_override == PlanOverride::kNever)
    return plan_grad_weight_tiles_pass(p, x, grad_y, math, grad_bias, dilated_copy, limits);
  WeightPlan boxes;
  const auto box_plan = plan_boxes_over_copies(p, x, grad_y, limits, boxes);
  if (!box_plan) return plan_grad_weight_tiles_pass(p, x, grad_y, math, grad_bias, dilated_copy, limits);
  boxes.kernel = Kernel::kGradWeightBoxes;
  boxes.gemm = *box_plan;
  if (boxes_override == PlanOverride::kAlways) return boxes;
  // (against the box tiles, the tiles without the dilated copy: its estimate beat the box tiles' on
  // 16-bit dilated filters that then ran 1.1-1.8x slower on it; the box tiles read grad_y as it is)
  WeightPlan tiles = plan_grad_weight_tiles_pass(p, x, grad_y, math, grad_bias,
                                                 grad_weight_dilated_copy_override() == PlanOverride::kAlways, limits);
  const bool gemm_tiles = tiles.kernel == Kernel::kGradWeightGemm || tiles.kernel == Kernel::kGradWeightWgmma;
  if (!gemm_tiles) return boxes;
  const bool tf32 = math == Math::kTF32;
  boxes.box_seconds = tiles.box_seconds = box_tiles_seconds(boxes, tf32, limits);
  boxes.tiles_seconds = tiles.tiles_seconds =
      grad_weight_tiles_seconds(tiles, p, grad_y_shared) * (tf32 ? kTf32GradWTilesFactor : 1.0);
  return boxes.box_seconds <= boxes.tiles_seconds ? boxes : tiles;
}

}  // namespace

namespace {
// grad_bias's row sums: a warp a row, or blocks of kRowSumBlockThreads over row segments, whichever
// the price says ends first. A form's price is its waves (rows or segments over the threads an SM
// holds, kRowSumThreadsPerSm: 64 warps, 8 blocks) times a wave's rounds of kRowSumLoads loads a
// thread (16-byte vectors of a contiguous row, elements of a strided one) plus its sum's rounds
// (the shuffle tree: 1; a block adds its warps' sums: 2). Short rows take warps however few they
// are (16,256,256,5,702,g16's 4,096 rows of 706: one wave of warps, not four of mostly idle blocks);
// a few long rows take blocks. Segments: where the rows, a block each, leave SMs idle, enough for
// about kRowSumBlocksPerSm blocks an SM, each at least kRowSumLeastSegment elements (a row is read
// once either way; the segments add N x segments slices to the second pass).
// CONVT_ROW_SUM_WARPS=always|never takes one form (read at every plan).
constexpr int64_t kRowSumThreadsPerSm = 2048, kRowSumBlocksPerSm = 4, kRowSumLeastSegment = 16384;
RowSumsPlan plan_grad_bias_row_sums(const ConvTParams& p, const TensorFacts& grad_y, const DeviceLimits& limits) {
  const int64_t rows = p.batch * p.out_channels, sms = limits.sm_count;
  const int64_t loads = p.y_length_stride == 1 ? (p.length_out * grad_y.element_size + 15) / 16 : p.length_out;
  const int64_t wanted = (kRowSumBlocksPerSm * sms + rows - 1) / rows;
  const int64_t segments = std::max<int64_t>(1, std::min(wanted, p.length_out / kRowSumLeastSegment));
  auto price = [&](int64_t items, int64_t threads, int64_t item_loads, int64_t sum_rounds) {
    const int64_t resident = sms * (kRowSumThreadsPerSm / threads);
    const int64_t rounds = (item_loads + threads * kRowSumLoads - 1) / (threads * kRowSumLoads);
    return (items + resident - 1) / resident * (rounds + sum_rounds);
  };
  const PlanOverride form = read_plan_override("CONVT_ROW_SUM_WARPS");
  const bool warp_rows = form == PlanOverride::kAlways ||
                         (form == PlanOverride::kModel &&
                          price(rows, 32, loads, 1) <= price(rows * segments, kRowSumBlockThreads, (loads + segments - 1) / segments, 2));
  return warp_rows ? RowSumsPlan{true, 1} : RowSumsPlan{false, segments};
}

BackwardPlan plan_backward_uncached(const ConvTParams& p, const TensorFacts& x, const TensorFacts& grad_y, Math math,
                                    bool grad_input, bool grad_weight, bool grad_bias, const DeviceLimits& limits) {
  BackwardPlan plan;
  if (grad_input) plan.grad_input = plan_grad_input(p, grad_y, math, limits);
  // (grad_input's deinterleaved copy, which grad_weight's plan over one reads: not its channels-last
  // one, and at dilation 1 only: a dilated grad_input's copy holds its (shift, phase) grid)
  const bool grad_y_deinterleaved = plan.grad_input.kernel == Kernel::kGemm && plan.grad_input.gemm.deinterleaved &&
                                    !plan.grad_input.channels_last_grad_y && grad_input_copy_serves_grad_weight(p);
  if (grad_weight) plan.grad_weight = plan_grad_weight_pass(p, x, grad_y, math, grad_bias, grad_y_deinterleaved, limits);
  // the one place that decides who sums grad_bias
  if (grad_bias) {
    const bool by_grad_weight = (plan.grad_weight.kernel == Kernel::kGradWeightGemm ||
                                 plan.grad_weight.kernel == Kernel::kGradWeightWgmma) &&
                                plan.grad_weight.gemm.sums_bias != 0;
    plan.grad_bias = by_grad_weight ? Kernel::kGradBiasFromGradWeight : Kernel::kGradBiasRowSums;
    if (!by_grad_weight) plan.grad_bias_rows = plan_grad_bias_row_sums(p, grad_y, limits);
  }
  return plan;
}
}  // namespace

const char* kernel_name(Kernel kernel) {
  switch (kernel) {
    case Kernel::kNone: return "none";
    case Kernel::kGemm: return "gemm";
    case Kernel::kDepthwise: return "depthwise";
    case Kernel::kDirect: return "direct";
    case Kernel::kPackedTaps: return "packed_taps";
    case Kernel::kGradWeightGemm: return "grad_weight_gemm";
    case Kernel::kGradWeightWgmma: return "grad_weight_wgmma";
    case Kernel::kGradWeightBoxes: return "grad_weight_boxes";
    case Kernel::kGradBiasRowSums: return "row_sums";
    case Kernel::kGradBiasFromGradWeight: return "with_grad_weight";
  }
  return "?";
}

const char* gemm_family_name(int tile_shape) {
  static const char* const kFamilies[] = {"warp", "warpgroup", "pipelined"};
  return tile_shape < 0 || tile_shape >= kGemmTileShapeCount ? "none" : kFamilies[int(kGemmTileShapes[tile_shape].family)];
}

namespace {
std::string key_values(std::initializer_list<std::pair<const char*, int64_t>> values) {
  std::string text;
  for (const auto& [key, value] : values) {
    char item[64];
    std::snprintf(item, sizeof(item), " %s=%lld", key, static_cast<long long>(value));
    text += item;
  }
  return text;
}
}  // namespace

// ---- the plan cache ----------------------------------------------------------------------------------

namespace {

// The planner is a pure function of the problem (ConvTParams), its tensors' facts, the math, the
// device's limits and the CONVT_* planner overrides (kPlannerVariables), and the CUDA ops ask it on
// every call, in host time that small layers pay in full (a plan for each merge of groups tried):
// its answers are kept by that whole key in one table that threads share under a mutex (a server's
// threads on different shapes, streams and devices). Planning runs outside the lock (two
// threads may plan one key; both get the same plan). A full table is emptied: the shapes in use come
// back at once. CONVT_PLAN_CACHE=never plans every call (an A/B of the host time).
constexpr size_t kPlanCacheEntries = 4096;
constexpr const char* kPlannerVariables[] = {
    "CONVT_MAX_WORKSPACE_MB",
    "CONVT_DEPTHWISE_PHASE_TAPS",
    "CONVT_FORWARD_X_COPIES",
    "CONVT_GEMM_SPLITS",
    "CONVT_GRAD_INPUT_COPIES",
    "CONVT_GRAD_WEIGHT_BOXES",
    "CONVT_GRAD_WEIGHT_UNROLLED",
    "CONVT_GROUP_MERGE",
    "CONVT_NARROW_ROWS_PIPELINED",
    "CONVT_POSITION_ROWS",
    "CONVT_STAGED_WARP_TILES",
    "CONVT_TAP_BOXES",
    "CONVT_ZERO_TAP_COPIES",
    "CONVT_ONE_CHANNEL_GEMM",
    "CONVT_GRAD_INPUT_DEINTERLEAVE",
    "CONVT_GRAD_WEIGHT_DILATED_COPY",
    "CONVT_PERMUTED_POSITIONS",
    "CONVT_GRAD_WEIGHT_PIPELINED",
    "CONVT_STRICT_WIDE_MERGE",
    "CONVT_GRAD_WEIGHT_ELEMENT_COPIES",
    "CONVT_PIPELINED_SPLITS",
    "CONVT_COPY_BANDWIDTH_GBPS",
    "CONVT_GEMM_TILE",
    "CONVT_NARROWER_PIPELINED",
    "CONVT_FRAGMENT_TAPS",
    "CONVT_STRIDED_STORES_FIRST",
    "CONVT_STORE_BOUND",
    "CONVT_FRAGMENT_TAPS_ANY_TILE",
    "CONVT_STAGED_PART_FILL",
    "CONVT_TAPLESS_PIPELINED",
    "CONVT_PACKED_TAPS",
    "CONVT_ONE_TAP_MERGE",
    "CONVT_GRAD_WEIGHT_SLICE_ITEMS",
    "CONVT_ROW_SUM_WARPS",
    "CONVT_GRAD_WEIGHT_TAPS_FIRST",
    "CONVT_ZERO_TAP_MERGE",
    "CONVT_GRAD_Y_ELEMENT_PACE_TENTHS",
};

// (every field of these is in the key: one added to them must join it)
static_assert(sizeof(ConvTParams) == 21 * sizeof(int64_t), "plan_key lists ConvTParams' fields");
static_assert(sizeof(TensorFacts) == 2 * sizeof(int64_t), "plan_key lists TensorFacts' fields");
std::string plan_key(char pass, const ConvTParams& p, std::initializer_list<TensorFacts> facts, Math math,
                     const DeviceLimits& limits, std::initializer_list<bool> flags) {
  std::vector<int64_t> values = {pass, p.batch, p.in_channels, p.out_channels, p.groups, p.in_channels_per_group,
                                 p.out_channels_per_group, p.kernel_size, p.length_in, p.length_out, p.stride, p.padding,
                                 p.dilation, p.x_batch_stride, p.x_channel_stride, p.x_length_stride, p.w_in_stride,
                                 p.w_out_stride, p.w_tap_stride, p.y_batch_stride, p.y_channel_stride, p.y_length_stride,
                                 int64_t(math), limits.sm_count, limits.smem_per_block_optin, limits.smem_per_sm,
                                 limits.reserved_smem_per_block, limits.wgmma, limits.tma};
  for (const TensorFacts& f : facts) values.insert(values.end(), {int64_t(f.element_size), f.alignment});
  for (const bool flag : flags) values.push_back(flag);
  std::string key(reinterpret_cast<const char*>(values.data()), values.size() * sizeof(int64_t));
  for (const char* variable : kPlannerVariables) {
    const char* value = std::getenv(variable);
    key += value ? '=' : '-';
    if (value) key += value;
    key += '\0';
  }
  return key;
}

template <typename Plan>
class PlanCache {
 public:
  template <typename MakePlan>
  Plan get(const std::string& key, MakePlan make_plan) {
    {
      const std::lock_guard<std::mutex> lock(mutex_);
      const auto found = plans_.find(key);
      if (found != plans_.end()) return found->second;
    }
    Plan plan = make_plan();
    const std::lock_guard<std::mutex> lock(mutex_);
    if (plans_.size() >= kPlanCacheEntries) plans_.clear();
    plans_.emplace(key, plan);
    return plan;
  }

 private:
  std::mutex mutex_;
  std::unordered_map<std::string, Plan> plans_;
};

bool plan_cache_on() { return read_plan_override("CONVT_PLAN_CACHE") != PlanOverride::kNever; }

}  // namespace

DataPlan plan_forward(const ConvTParams& p, const TensorFacts& x, Math math, const DeviceLimits& limits) {
  if (!plan_cache_on()) return plan_forward_uncached(p, x, math, limits);
  static PlanCache<DataPlan> cache;
  return cache.get(plan_key('f', p, {x}, math, limits, {}), [&] { return plan_forward_uncached(p, x, math, limits); });
}

BackwardPlan plan_backward(const ConvTParams& p, const TensorFacts& x, const TensorFacts& grad_y, Math math,
                           bool grad_input, bool grad_weight, bool grad_bias, const DeviceLimits& limits) {
  const auto make_plan = [&] { return plan_backward_uncached(p, x, grad_y, math, grad_input, grad_weight, grad_bias, limits); };
  if (!plan_cache_on()) return make_plan();
  static PlanCache<BackwardPlan> cache;
  return cache.get(plan_key('b', p, {x, grad_y}, math, limits, {grad_input, grad_weight, grad_bias}), make_plan);
}

std::string describe(const DataPlan& plan) {
  std::string text = std::string("kernel=") + kernel_name(plan.kernel);
  if (plan.kernel == Kernel::kGemm) {
    const GemmPlan& g = plan.gemm;
    text += std::string(" family=") + gemm_family_name(g.tile_shape);
    text += key_values({{"block_m", g.block_m}, {"block_n", g.block_n}, {"chunk_channels", g.chunk_channels},
                        {"chunks", g.chunks}, {"stages", g.stages}, {"taps", g.taps}, {"out_phases", g.out_phases},
                        {"in_phases", g.in_phases}, {"step_taps", most_taps_per_step(g)}, {"row_phases", g.row_phases},
                        {"stored_row_phases", g.stored_row_phases}, {"column_positions", g.column_positions},
                        {"channel_phases", g.channel_phases}, {"deinterleaved", g.deinterleaved}, {"zero_taps", g.zero_taps},
                        {"stage_output", g.stage_output}, {"resident", g.resident},
                        {"tensor_rows", g.tensor_rows}, {"map_row_phases", g.map_row_phases}, {"tap_boxes", g.tap_boxes}, {"position_rows", g.position_rows},
                        {"permuted_positions", g.permuted_positions},
                        {"bias_first", bias_first(g)}, {"tiles", g.tiles}, {"parts", g.parts},
                        {"row_tiles", g.row_tiles}, {"launch_row_tiles", g.launch_row_tiles}, {"launch_chunks", g.launch_chunks}, {"float_sums", g.float_sums}, {"splits", g.splits},
                        {"copy_batch", plan.copy_batch}, {"copy_channels_last", plan.copy_channels_last},
                        {"channels_last_grad_y", plan.channels_last_grad_y}, {"merged_groups", plan.merged_groups},
                        {"packed_weight_bytes", 4 * packed_weight_words(first_launch(g))},
                        // (the x copy of a batch chunk: copy_elements elements make 16 bytes on these plans)
                        {"workspace_bytes", 4 * packed_weight_words(first_launch(g)) + float_sums_bytes(g) +
                                                plan.copy_batch * g.in_batch_stride * (g.position_rows ? 2 : 16 / std::max(g.copy_elements, 1))},
                        {"smem_bytes", int64_t(g.smem_bytes)}});
    if (g.zero_taps) {
      text += std::string(" exact_family=") + gemm_family_name(plan.exact.tile_shape) +
              " exact_bias_first=" + std::to_string(int(bias_first(plan.exact)));
    }
    if (plan.copy_seconds > 0) {
      text += key_values({{"copy_ns", int64_t(plan.copy_seconds * 1e9)}, {"grad_y_ns", int64_t(plan.grad_y_seconds * 1e9)}});
    }
  } else if (plan.kernel == Kernel::kPackedTaps) {
    const PackedTapsPlan& packed = plan.packed_taps;
    text += key_values({{"columns", packed.columns}, {"outputs", packed.outputs}, {"blocks", packed.blocks},
                        {"chunks", packed.chunks}, {"smem_bytes", int64_t(packed.smem_bytes)}});
  } else if (plan.kernel == Kernel::kDepthwise) {
    text += key_values({{"staged", plan.depthwise.staged}, {"co_blocks", plan.depthwise.co_blocks}, {"row_groups", plan.depthwise.row_groups},
                        {"tap_step", plan.depthwise.tap_step},
                        {"smem_bytes", int64_t(plan.depthwise.smem_bytes)}});
  }
  return text;
}

std::string describe(const WeightPlan& plan) {
  std::string text = std::string("kernel=") + kernel_name(plan.kernel);
  if (plan.kernel == Kernel::kGradWeightBoxes) {
    const WeightGradPlan& g = plan.gemm;
    text += key_values({{"aligned_x", plan.aligned_x}, {"channels_last_grad_y", plan.channels_last_grad_y},
                        {"unrolled_grad_y", plan.unrolled_grad_y}, {"block_ci", g.block_ci}, {"block_co", g.block_co},
                        {"box_columns", g.box_columns}, {"box_slots", g.box_slots}, {"tap_groups", g.tap_groups},
                        {"stages", g.stages}, {"slices", g.slices}, {"tiles", g.tiles}, {"sums_bias", g.sums_bias},
                        {"smem_bytes", int64_t(g.smem_bytes)}});
  } else if (plan.kernel == Kernel::kGradWeightGemm || plan.kernel == Kernel::kGradWeightWgmma) {
    const WeightGradPlan& g = plan.gemm;
    text += key_values({{"aligned_x", plan.aligned_x}, {"deinterleaved_grad_y", plan.deinterleaved_grad_y},
                        {"unrolled_grad_y", plan.unrolled_grad_y}, {"block_ci", g.block_ci}, {"block_co", g.block_co}, {"group_taps", g.group_taps},
                        {"tap_groups", g.tap_groups}, {"merged", g.merged}, {"stages", g.stages}, {"slices", g.slices},
                        {"packed_groups", g.packed_groups}, {"tiles", g.tiles}, {"items", g.items}, {"taps", g.taps},
                        {"sums_bias", g.sums_bias}, {"taps_first", g.taps_first}, {"x_copy_elements", g.x_copy_elements},
                        {"gy_copy_elements", g.gy_copy_elements},
                        {"smem_bytes", int64_t(g.smem_bytes)}});
  } else if (plan.kernel == Kernel::kDepthwise) {
    text += key_values({{"slices", plan.depthwise_slices}});
  }
  if (plan.box_seconds > 0) {
    text += key_values({{"box_ns", int64_t(plan.box_seconds * 1e9)}, {"tiles_ns", int64_t(plan.tiles_seconds * 1e9)}});
  }
  return text;
}

std::string describe_grad_bias(const BackwardPlan& plan) {
  std::string text = std::string("kernel=") + kernel_name(plan.grad_bias);
  if (plan.grad_bias == Kernel::kGradBiasRowSums) {
    text += key_values({{"warp_rows", plan.grad_bias_rows.warp_rows}, {"segments", plan.grad_bias_rows.segments}});
  }
  return text;
}

}  // namespace convt
