// Direct (CUDA-core) kernels: one thread per output element, loops over the channels of its group
// and the taps, with the polyphase index formulas of convt.h. They serve every dtype and argument
// the faster paths leave out (float64, more than kMaxGemmTaps taps: no tensor-core form).
// 64-bit indices. docs/design.md §6.2.
#pragma once

#include "cuda/grid_dependency.cuh"
#include "cuda/launch.h"
#include "problem.h"

namespace convt::cuda {

// The taps' (phase, shift) in shared memory, so the inner loops do no division (kernels longer than
// kTableTaps compute the rest on the fly).
struct TapTable {
  static constexpr int kTableTaps = 64;
  Tap entries[kTableTaps];

  __device__ void fill(const ConvTParams& p) {
    for (int64_t k = threadIdx.x; k < p.kernel_size && k < kTableTaps; k += blockDim.x) {
      entries[k] = tap_of(k, p.stride, p.padding, p.dilation);
    }
    __syncthreads();
  }
  __device__ Tap operator()(int64_t k, const ConvTParams& p) const {
    return k < kTableTaps ? entries[k] : tap_of(k, p.stride, p.padding, p.dilation);
  }
};

// Grid of the row kernels below: blockIdx.y walks rows (n, channel), blockIdx.x and the threads walk
// positions along the row.
#define CONVT_ROW_LOOP(row, rows) for (int64_t row = blockIdx.y; row < (rows); row += gridDim.y)
#define CONVT_POSITION_LOOP(position, length)                                                            \
  for (int64_t position = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; position < (length);            \
       position += int64_t(blockDim.x) * gridDim.x)

// y[n, co, j] = bias[co] + sum over ci of co's group and taps k of w[ci, co mod Cog, k] * x[n, ci, i],
// where tap k reaches output j iff j mod stride == phase_k, with i = j div stride - shift_k.
// y is contiguous (N, C_out, L_out); x and w are read through their element strides.
template <typename scalar_t, typename acc_t>
__global__ void forward_direct_kernel(const scalar_t* __restrict__ x, const scalar_t* __restrict__ w,
                                      const scalar_t* __restrict__ bias, scalar_t* __restrict__ y, ConvTParams p) {
  begin_dependent_grid();
  __shared__ TapTable taps;
  taps.fill(p);
  CONVT_ROW_LOOP(row, p.batch * p.out_channels) {
    const int64_t co = row % p.out_channels, n = row / p.out_channels;
    const int64_t g = co / p.out_channels_per_group, co_in_group = co % p.out_channels_per_group;
    const scalar_t* x_group = x + n * p.x_batch_stride + g * p.in_channels_per_group * p.x_channel_stride;
    const scalar_t* w_column = w + g * p.in_channels_per_group * p.w_in_stride + co_in_group * p.w_out_stride;
    const acc_t bias_value = bias ? acc_t(bias[co]) : acc_t(0);
    CONVT_POSITION_LOOP(j, p.length_out) {
      const int64_t phase = j % p.stride, m = j / p.stride;
      acc_t acc = bias_value;
      for (int64_t k = 0; k < p.kernel_size; ++k) {
        const Tap tap = taps(k, p);
        const int64_t i = m - tap.shift;
        if (tap.phase != phase || i < 0 || i >= p.length_in) continue;
        for (int64_t ci = 0; ci < p.in_channels_per_group; ++ci) {
          acc += acc_t(w_column[ci * p.w_in_stride + k * p.w_tap_stride]) *
                 acc_t(x_group[ci * p.x_channel_stride + i * p.x_length_stride]);
        }
      }
      y[row * p.length_out + j] = scalar_t(acc);
    }
  }
}

// grad_x[n, ci, i] = sum over co of ci's group and taps k of w[ci, co mod Cog, k] * grad_y[n, co, j],
// j = (i + shift_k)*stride + phase_k when it lies in [0, L_out). grad_x is contiguous (N, C_in, L_in);
// grad_y is read through the params' y strides.
template <typename scalar_t, typename acc_t>
__global__ void grad_input_direct_kernel(const scalar_t* __restrict__ grad_y, const scalar_t* __restrict__ w,
                                         scalar_t* __restrict__ grad_x, ConvTParams p) {
  begin_dependent_grid();
  __shared__ TapTable taps;
  taps.fill(p);
  CONVT_ROW_LOOP(row, p.batch * p.in_channels) {
    const int64_t ci = row % p.in_channels, n = row / p.in_channels;
    const int64_t g = ci / p.in_channels_per_group;
    const scalar_t* grad_y_group = grad_y + n * p.y_batch_stride + g * p.out_channels_per_group * p.y_channel_stride;
    const scalar_t* w_row = w + ci * p.w_in_stride;
    CONVT_POSITION_LOOP(i, p.length_in) {
      acc_t acc = 0;
      for (int64_t k = 0; k < p.kernel_size; ++k) {
        const Tap tap = taps(k, p);
        const int64_t j = (i + tap.shift) * p.stride + tap.phase;
        if (j < 0 || j >= p.length_out) continue;
        for (int64_t co_in_group = 0; co_in_group < p.out_channels_per_group; ++co_in_group) {
          acc += acc_t(w_row[co_in_group * p.w_out_stride + k * p.w_tap_stride]) *
                 acc_t(grad_y_group[co_in_group * p.y_channel_stride + j * p.y_length_stride]);
        }
      }
      grad_x[row * p.length_in + i] = scalar_t(acc);
    }
  }
}

// The layout copies' shared-memory tile (channels_last_kernel, deinterleave_channels_last_kernel):
// an out row's values of the tile, kChannelsLastTile a row or more, in 16-byte vectors; vector v of
// row t at v ^ (swizzle mod 8) of the row. A warp's element stores then fall on up to 8 different
// vectors of 8 rows (the rows of a tile are 32 words apart: unswizzled, a warp's stores down a column
// hit one bank), and a 16-byte load takes an out vector whole, in order, for one 16-byte store.
template <typename scalar_t>
struct alignas(16) CopyVector {
  static constexpr int kElements = 16 / int(sizeof(scalar_t));
  scalar_t v[kElements];
};
__device__ __forceinline__ int swizzled_vector(int row_vectors, int row, int vector, int swizzle) {
  return row * row_vectors + (vector ^ (swizzle & 7));
}

// grad_y deinterleaved (GemmPlan::deinterleaved, WeightPlan::deinterleaved_grad_y; docs/design.md
// §3.2, §5.5): out[n, co*phases + r, m] = grad_y[n, co, m*stride + r*phase_step - padding] for r <
// phases, m < row_length, zero where that lies outside grad_y (phase_step: 1, or grad_weight's
// dilation). out is contiguous (N, C_out*phases, row_length); grad_y is read through the params' y
// strides. A block takes a (n, co) row's segment of `columns` positions m: it reads the segment's
// grad_y elements in the order (m, r), each once, into shared memory, then writes each row in
// order: both sides coalesced (at phase_step 1). A thread issues kDeinterleaveLoads loads before it
// stages any (one memory latency a batch, not one a load: the copy is bound by bandwidth, not
// latency). Element e = m*phases + r sits at e + e / 32 (a pad word every 32), so that the reads at
// stride `phases` hit distinct banks. *nonfinite is set where an element copied is Inf or NaN
// (DataPlan::exact).
constexpr int kDeinterleaveLoads = 8;

template <typename scalar_t>
__global__ void deinterleave_grad_y_kernel(const scalar_t* __restrict__ grad_y, scalar_t* __restrict__ out, int* nonfinite,
                                           ConvTParams p, int phases, int phase_step, int64_t row_length, int columns) {
  begin_dependent_grid();
  extern __shared__ unsigned char deinterleave_smem[];
  scalar_t* const staged = reinterpret_cast<scalar_t*>(deinterleave_smem);
  const int64_t segment_step = int64_t(gridDim.x) * columns;
  const bool consecutive = phase_step == 1 && phases == p.stride;
  for (int64_t first_m = int64_t(blockIdx.x) * columns; first_m < row_length; first_m += segment_step) {
    const int segment = int(std::min<int64_t>(columns, row_length - first_m)), elements = segment * phases;
    CONVT_ROW_LOOP(row, p.batch * p.out_channels) {
      const int64_t n = row / p.out_channels, co = row % p.out_channels;
      const scalar_t* grad_y_row = grad_y + n * p.y_batch_stride + co * p.y_channel_stride;
      const int64_t first_j = first_m * p.stride - p.padding;
      bool finite = true;
      for (int first_e = 0; first_e < elements; first_e += kDeinterleaveLoads * int(blockDim.x)) {
        scalar_t values[kDeinterleaveLoads];
#pragma unroll
        for (int u = 0; u < kDeinterleaveLoads; ++u) {
          const int e = first_e + u * int(blockDim.x) + int(threadIdx.x);
          values[u] = scalar_t(0);
          if (e >= elements) continue;
          // (e = m*phases + r; consecutive positions j = first_j + e where phases = stride at phase_step
          // 1: no division, which short rows' copies were bound by)
          const int64_t j = consecutive ? first_j + e : first_j + int64_t(e / phases) * p.stride + int64_t(e % phases) * phase_step;
          if (j >= 0 && j < p.length_out) values[u] = grad_y_row[j * p.y_length_stride];
        }
#pragma unroll
        for (int u = 0; u < kDeinterleaveLoads; ++u) {
          const int e = first_e + u * int(blockDim.x) + int(threadIdx.x);
          if (e < elements) staged[e + e / 32] = values[u];
          finite = finite && isfinite(static_cast<float>(values[u]));
        }
      }
      if (!__syncthreads_and(finite) && threadIdx.x == 0) *nonfinite = 1;
      for (int r = 0; r < phases; ++r) {
        scalar_t* const out_row = out + (row * phases + r) * row_length + first_m;
        for (int m = threadIdx.x; m < segment; m += blockDim.x) {
          const int e = m * phases + r;
          out_row[m] = staged[e + e / 32];
        }
      }
      __syncthreads();
    }
  }
}

// grad_y unrolled by taps (WeightPlan::unrolled_grad_y; docs/design.md §5.6): out[n, co*K + k, i] =
// grad_y[n, co, i*stride + k*dilation - padding] for i < L_in, zero outside grad_y and at i >= L_in
// (rows of row_length). A block takes windows (unroll_window: `positions` i from i0, `taps` k from k0)
// of (n, co) rows: blockIdx.x a (segment, tap group), blockIdx.y and its grid stride the rows. It reads
// the window's grad_y elements j = jb + e (jb = i0*stride + k0*dilation - padding) in order, each once,
// kDeinterleaveLoads a thread in flight, into shared memory (zero outside grad_y; e at e + e / 32), then
// writes the taps' rows: a thread a CopyVector of consecutive i (16 bytes of out, each run 16-byte
// aligned: row_length is a multiple of 8 elements) from staged e = (i - i0)*stride + (k - k0)*dilation.
// Both sides coalesced: read in place, a strided gather of grad_y touched a 32-byte sector a
// stride's elements, and rows of a few runs left most of a block's threads idle.
template <typename scalar_t>
__global__ void unroll_grad_y_kernel(const scalar_t* __restrict__ grad_y, scalar_t* __restrict__ out, ConvTParams p,
                                     int64_t row_length, UnrollWindow window) {
  begin_dependent_grid();
  using Run = CopyVector<scalar_t>;
  constexpr int kVector = Run::kElements;
  extern __shared__ unsigned char unroll_smem[];
  scalar_t* const staged = reinterpret_cast<scalar_t*>(unroll_smem);
  const int64_t tap_groups = (p.kernel_size + window.taps - 1) / window.taps;
  const int64_t i0 = int64_t(blockIdx.x) / tap_groups * window.positions, k0 = int64_t(blockIdx.x) % tap_groups * window.taps;
  const int positions = int(std::min<int64_t>(window.positions, row_length - i0));
  const int taps = int(std::min<int64_t>(window.taps, p.kernel_size - k0));
  const int elements = (positions - 1) * int(p.stride) + (taps - 1) * int(p.dilation) + 1;
  const int runs = positions / kVector;
  const int64_t first_j = i0 * p.stride + k0 * p.dilation - p.padding;
  CONVT_ROW_LOOP(channel, p.batch * p.out_channels) {
    const scalar_t* grad_y_row = grad_y + channel / p.out_channels * p.y_batch_stride + channel % p.out_channels * p.y_channel_stride;
    for (int first_e = 0; first_e < elements; first_e += kDeinterleaveLoads * int(blockDim.x)) {
      scalar_t values[kDeinterleaveLoads];
#pragma unroll
      for (int u = 0; u < kDeinterleaveLoads; ++u) {
        const int e = first_e + u * int(blockDim.x) + int(threadIdx.x);
        const int64_t j = first_j + e;
        values[u] = e < elements && j >= 0 && j < p.length_out ? grad_y_row[j * p.y_length_stride] : scalar_t(0);
      }
#pragma unroll
      for (int u = 0; u < kDeinterleaveLoads; ++u) {
        const int e = first_e + u * int(blockDim.x) + int(threadIdx.x);
        if (e < elements) staged[e + e / 32] = values[u];
      }
    }
    __syncthreads();
    for (int item = threadIdx.x; item < taps * runs; item += blockDim.x) {
      const int tap = item / runs, run = item % runs;
      Run values;
#pragma unroll
      for (int v = 0; v < kVector; ++v) {
        const int position = run * kVector + v, e = position * int(p.stride) + tap * int(p.dilation);
        values.v[v] = i0 + position < p.length_in ? staged[e + e / 32] : scalar_t(0);
      }
      reinterpret_cast<Run*>(out + (channel * p.kernel_size + k0 + tap) * row_length + i0)[run] = values;
    }
    __syncthreads();  // (the window is written: shared memory free for the next row's)
  }
}

// The layout copies' tile loop (channels_last_kernel, deinterleave_channels_last_kernel): block b
// takes tiles b, b + gridDim.x, ... (a grid of a few blocks an SM: copy_grid). A tile's loads go to
// registers (load), then to the shared-memory tile (stage); the next tile's loads are issued before
// this tile's stores from shared memory (store), so their latency passes behind those stores: a
// block keeps a tile's loads in flight all the time, not one latency per tile in turn.
template <typename LoadTile, typename StageTile, typename StoreTile>
__device__ __forceinline__ void copy_tiles(int tiles, LoadTile load, StageTile stage, StoreTile store) {
  int tile = int(blockIdx.x);
  if (tile >= tiles) return;
  load(tile);
  for (;;) {
    stage();
    __syncthreads();
    const int next = tile + int(gridDim.x);
    if (next < tiles) load(next);  // (the registers were staged)
    store(tile);
    if (next >= tiles) return;
    __syncthreads();  // (the tile is stored: shared memory free for the next)
    tile = next;
  }
}

// Channels-last rows by phase (launch_channels_last): out[((n * phases + r) * phase_rows + m) *
// row_elements + c] = in[n, c, m * phases + r]. A block of kChannelsLastThreads moves tiles of
// kChannelsLastTile channels x kChannelsLastTile positions of in through shared memory (copy_tiles;
// tile t: batch element, channel tile, position tile, the last fastest): it reads each channel's
// positions in order and writes each position's channels in order, both sides coalesced. A thread's
// loads of a tile are kLoadElements consecutive positions each (rows and the base aligned to that
// many elements, positions contiguous; 1: through the length stride), all in flight at once, staged
// by position row, swizzled by the load's position group (so a warp's stores of one element of its
// loads, 8 groups, take 8 vectors). kVectorStores: a thread writes 16 bytes of an out row
// (row_elements a multiple of 16 bytes), channels past `channels` as zeros, else one element of each
// channel below `channels`. Any phases: position j's row is (j mod phases, j div phases), from one
// 64-bit division a tile and a 32-bit one a stored row (a 64-bit division a store made the copy bound
// by its instructions).
constexpr int kChannelsLastTile = 64, kChannelsLastThreads = 256, kCopyBlocksPerSm = 4;
static_assert(kChannelsLastTile == kChannelsLastCopyMostPhases, "plan.h's most phases of a channels-last copy: a tile's positions");

template <typename scalar_t, int kLoadElements, bool kVectorStores>
__global__ void __launch_bounds__(kChannelsLastThreads, kCopyBlocksPerSm)
    channels_last_kernel(const scalar_t* __restrict__ in, scalar_t* __restrict__ out, ChannelsLastCopy copy, int channel_tiles,
                         int position_tiles) {
  begin_dependent_grid();
  using Vector = CopyVector<scalar_t>;
  constexpr int kTile = kChannelsLastTile, kVector = Vector::kElements, kRowVectors = kTile / kVector;
  constexpr int kLoadGroups = kTile / kLoadElements;                     // a channel's loads a tile
  constexpr int kLoads = kTile * kLoadGroups / kChannelsLastThreads;      // a thread's loads a tile
  constexpr int kLoadChannelStep = kChannelsLastThreads / kLoadGroups;  // between a thread's loads
  struct alignas(sizeof(scalar_t) * kLoadElements) Load { scalar_t v[kLoadElements]; };
  __shared__ Vector staged_vectors[kTile * kRowVectors];  // position j's channels: row j
  scalar_t* const staged = reinterpret_cast<scalar_t*>(staged_vectors);
  auto staged_at = [&](int j, int c) {
    return staged + swizzled_vector(kRowVectors, j, c / kVector, j / kLoadElements) * kVector + c % kVector;
  };
  const RowsView& rows = copy.in;
  // (a thread's loads: channels first_channel + u * kLoadChannelStep, positions first_position + v)
  const int first_channel = int(threadIdx.x) / kLoadGroups, first_position = int(threadIdx.x) % kLoadGroups * kLoadElements;
  struct TileAt {
    int64_t n, first_c, first_j;
    int channels, positions;
  };
  auto tile_at = [&](int tile) {
    const int position_tile = tile % position_tiles, rest = tile / position_tiles;
    TileAt at{rest / channel_tiles, int64_t(rest % channel_tiles) * kTile, int64_t(position_tile) * kTile, 0, 0};
    at.channels = int(std::min<int64_t>(kTile, rows.channels - at.first_c));
    at.positions = int(std::min<int64_t>(kTile, rows.length - at.first_j));
    return at;
  };
  Load loads[kLoads];
  auto load = [&](int tile) {
    const TileAt at = tile_at(tile);
    const scalar_t* first = in + at.n * rows.batch_stride + (at.first_c + first_channel) * rows.channel_stride +
                            (at.first_j + first_position) * rows.length_stride;
#pragma unroll
    for (int u = 0; u < kLoads; ++u) {
      const int c = first_channel + u * kLoadChannelStep;
      const scalar_t* at_load = first + int64_t(u * kLoadChannelStep) * rows.channel_stride;
      if (c < at.channels && first_position + kLoadElements <= at.positions) {
        loads[u] = *reinterpret_cast<const Load*>(at_load);
      } else {
#pragma unroll
        for (int v = 0; v < kLoadElements; ++v)
          loads[u].v[v] = c < at.channels && first_position + v < at.positions ? at_load[v * rows.length_stride] : scalar_t(0);
      }
    }
  };
  auto stage = [&] {
#pragma unroll
    for (int u = 0; u < kLoads; ++u) {
#pragma unroll
      for (int v = 0; v < kLoadElements; ++v) *staged_at(first_position + v, first_channel + u * kLoadChannelStep) = loads[u].v[v];
    }
  };
  auto store = [&](int tile) {
    const TileAt at = tile_at(tile);
    // (position first_j + j is phase (first_phase + j) mod phases of row first_m + (first_phase + j) div phases)
    const int64_t first_m = at.first_j / copy.phases;
    const int first_phase = int(at.first_j - first_m * copy.phases), phases = int(copy.phases);
    const int64_t plane = copy.phase_rows * copy.row_elements;
    scalar_t* const first_row = out + at.n * copy.phases * plane + first_m * copy.row_elements + at.first_c;
    auto out_row = [&](int j) {
      const int local = first_phase + j, rows_on = local / phases, phase = local - rows_on * phases;
      return first_row + phase * plane + rows_on * copy.row_elements;
    };
    if constexpr (kVectorStores) {
      const int row_vectors = int(std::min<int64_t>(kTile, copy.row_elements - at.first_c)) / kVector;
      constexpr int kRowStep = kChannelsLastThreads / kRowVectors;  // (a thread's rows: first_row_j + s * kRowStep)
      const int vector = int(threadIdx.x) % kRowVectors, first_row_j = int(threadIdx.x) / kRowVectors;
#pragma unroll
      for (int s = 0; s < kTile / kRowStep; ++s) {
        const int j = first_row_j + s * kRowStep;
        if (j < at.positions && vector < row_vectors)
          reinterpret_cast<Vector*>(out_row(j))[vector] = staged_vectors[swizzled_vector(kRowVectors, j, vector, j / kLoadElements)];
      }
    } else {
      constexpr int kRowStep = kChannelsLastThreads / kTile;
      const int c = int(threadIdx.x) % kTile, first_row_j = int(threadIdx.x) / kTile;
#pragma unroll 4
      for (int s = 0; s < kTile / kRowStep; ++s) {
        const int j = first_row_j + s * kRowStep;
        if (j < at.positions && c < at.channels) out_row(j)[c] = *staged_at(j, c);
      }
    }
  };
  copy_tiles(int(rows.batch) * channel_tiles * position_tiles, load, stage, store);
}

// grad_y deinterleaved channels-last (launch_deinterleave_grad_y_channels_last): out[(n * rows + m) *
// row_elements + co * phases + r] = grad_y[n, co, m * stride + r - padding]. A block moves tiles of
// kChannelsLastTile co x tile_rows rows m (tile_rows * phases <= kChannelsLastTile positions: a row's
// phases, which are consecutive positions of grad_y where phases = stride) through shared memory
// (copy_tiles; tile t: batch element, channel tile, row tile, the last fastest). A thread keeps one
// position i = t * phases + r of every tile (its division by phases done once) and loads it from
// kLoads channels, all in flight, then stages them in out's order (row t, value co * phases + r), so
// that each 16-byte store along out's row takes one 16-byte load of the tile (an element at a time at
// a row's end).
template <typename scalar_t>
__global__ void __launch_bounds__(kChannelsLastThreads, kCopyBlocksPerSm)
    deinterleave_channels_last_kernel(const scalar_t* __restrict__ grad_y, scalar_t* __restrict__ out, int* nonfinite,
                                      ConvTParams p, int phases, int64_t rows, int64_t row_elements, int channel_tiles,
                                      int row_tiles) {
  begin_dependent_grid();
  using Vector = CopyVector<scalar_t>;
  constexpr int kTile = kChannelsLastTile, kVector = Vector::kElements;
  constexpr int kChannelStep = kChannelsLastThreads / kTile, kLoads = kTile / kChannelStep;  // (4 channels a pass, 16 passes)
  __shared__ Vector staged_vectors[kTile * kTile / kVector];  // row t's values co * phases + r: tile_row_vectors a row
  scalar_t* const staged = reinterpret_cast<scalar_t*>(staged_vectors);
  const int tile_rows = kTile / phases, tile_row_vectors = kTile * phases / kVector;
  const int i = int(threadIdx.x) % kTile, first_channel = int(threadIdx.x) / kTile;
  const int t = i / phases, r = i - t * phases;
  const bool in_tile = t < tile_rows;
  struct TileAt {
    int64_t n, first_co, first_m;
    int channels;
  };
  auto tile_at = [&](int tile) {
    const int row_tile = tile % row_tiles, rest = tile / row_tiles;
    TileAt at{rest / channel_tiles, int64_t(rest % channel_tiles) * kTile, int64_t(row_tile) * tile_rows, 0};
    at.channels = int(std::min<int64_t>(kTile, p.out_channels - at.first_co));
    return at;
  };
  bool finite = true;
  scalar_t loads[kLoads];
  auto load = [&](int tile) {
    const TileAt at = tile_at(tile);
    const int64_t j = (at.first_m + t) * p.stride + r - p.padding;
    const bool inside = in_tile && j >= 0 && j < p.length_out;
    // (a thread outside grad_y forms no pointer there)
    const scalar_t* position = grad_y + at.n * p.y_batch_stride + (at.first_co + first_channel) * p.y_channel_stride +
                               (inside ? j : 0) * p.y_length_stride;
#pragma unroll
    for (int u = 0; u < kLoads; ++u) {
      const int c = first_channel + u * kChannelStep;
      loads[u] = inside && c < at.channels ? position[int64_t(u * kChannelStep) * p.y_channel_stride] : scalar_t(0);
      finite = finite && isfinite(static_cast<float>(loads[u]));
    }
  };
  auto stage = [&] {
    if (!in_tile) return;
#pragma unroll
    for (int u = 0; u < kLoads; ++u) {
      const int value = (first_channel + u * kChannelStep) * phases + r;
      staged[swizzled_vector(tile_row_vectors, t, value / kVector, t) * kVector + value % kVector] = loads[u];
    }
  };
  auto store = [&](int tile) {
    const TileAt at = tile_at(tile);
    const int row_values = at.channels * phases, row_vectors = (row_values + kVector - 1) / kVector;
    const int out_rows = int(std::min<int64_t>(tile_rows, rows - at.first_m));
    scalar_t* const first_row = out + (at.n * rows + at.first_m) * row_elements + at.first_co * phases;
    for (int e = threadIdx.x; e < out_rows * row_vectors; e += kChannelsLastThreads) {
      const int row = e / row_vectors, vector = e - row * row_vectors;
      scalar_t* const out_row = first_row + row * row_elements;
      const int at_vector = swizzled_vector(tile_row_vectors, row, vector, row);
      if ((vector + 1) * kVector <= row_values) {
        reinterpret_cast<Vector*>(out_row)[vector] = staged_vectors[at_vector];
      } else {
        for (int v = 0; vector * kVector + v < row_values; ++v) out_row[vector * kVector + v] = staged[at_vector * kVector + v];
      }
    }
  };
  copy_tiles(int(p.batch) * channel_tiles * row_tiles, load, stage, store);
  if (!__syncthreads_and(finite) && threadIdx.x == 0) *nonfinite = 1;
}

// Rows of row_elements (launch_aligned_rows): out[(n * channels + c) * row_elements + i] = in[n, c, i]
// for i < length, zeros after. A thread writes 16 bytes of an out row (row_elements a multiple of 16
// bytes) from element loads, which a warp's consecutive threads make consecutive along the row.
template <typename scalar_t>
__global__ void aligned_rows_kernel(const scalar_t* __restrict__ in, scalar_t* __restrict__ out, RowsView rows, int64_t row_elements) {
  begin_dependent_grid();
  using Vector = CopyVector<scalar_t>;
  constexpr int kVector = Vector::kElements;
  const int64_t row_vectors = row_elements / kVector, vectors = rows.batch * rows.channels * row_vectors;
  for (int64_t index = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; index < vectors; index += int64_t(gridDim.x) * blockDim.x) {
    const int64_t row = index / row_vectors, first = index % row_vectors * kVector;
    const scalar_t* in_row = in + row / rows.channels * rows.batch_stride + row % rows.channels * rows.channel_stride;
    Vector values;
#pragma unroll
    for (int v = 0; v < kVector; ++v)
      values.v[v] = first + v < rows.length ? in_row[(first + v) * rows.length_stride] : scalar_t(0);
    reinterpret_cast<Vector*>(out)[index] = values;
  }
}

// Sums of a block's threads in a fixed order (a shared-memory tree): deterministic.
template <typename acc_t, int kThreads>
__device__ acc_t block_sum(acc_t value) {
  __shared__ acc_t partial[kThreads];
  partial[threadIdx.x] = value;
  __syncthreads();
#pragma unroll
  for (int width = kThreads / 2; width > 0; width /= 2) {
    if (threadIdx.x < width) partial[threadIdx.x] += partial[threadIdx.x + width];
    __syncthreads();
  }
  const acc_t total = partial[0];
  __syncthreads();
  return total;
}

// One block per weight element (ci, co mod Cog, k): grad_w = sum over n and i of x[n, ci, i] * grad_y[n, co, j(i, k)].
// Each thread strides over (n, m) in a fixed order, then a fixed-order block sum: no atomics.
template <typename scalar_t, typename acc_t, int kThreads>
__global__ void grad_weight_direct_kernel(const scalar_t* __restrict__ grad_y, const scalar_t* __restrict__ x,
                                          scalar_t* __restrict__ grad_w, ConvTParams p) {
  begin_dependent_grid();
  for (int64_t index = blockIdx.x; index < p.in_channels * p.out_channels_per_group * p.kernel_size;
       index += gridDim.x) {
    const auto [ci, co_in_group, k, co] = weight_element(index, p);
    const Tap tap = tap_of(k, p.stride, p.padding, p.dilation);
    const TapRange r = tap_range(tap, phase_length(tap.phase, p.length_out, p.stride), p.length_in);
    const int64_t width = r.empty() ? 0 : r.end - r.begin;
    acc_t acc = 0;
    for (int64_t item = threadIdx.x; item < p.batch * width; item += kThreads) {
      const int64_t n = item / width, m = r.begin + item % width;
      acc += acc_t(x[n * p.x_batch_stride + ci * p.x_channel_stride + (m - tap.shift) * p.x_length_stride]) *
             acc_t(grad_y[n * p.y_batch_stride + co * p.y_channel_stride + (m * p.stride + tap.phase) * p.y_length_stride]);
    }
    acc = block_sum<acc_t, kThreads>(acc);
    if (threadIdx.x == 0) grad_w[index] = scalar_t(acc);
  }
}

// grad_bias in two fixed-order passes (no atomics; docs/design.md §5.4). First row_sums[(n*segments
// + s)*C_out + co] = sum over j in segment s of grad_y[n, co, j], kRowThreads threads a segment (a
// warp or a block of kRowSumBlockThreads, a row in `segments` segments: the planner's RowSumsPlan),
// coalesced along the row, each thread keeping kLoads sums so that kLoads loads are in flight, added
// in a fixed order (a fixed shuffle tree, then the warps' sums in order); then sum_slices_kernel
// adds the N * segments slices of C_out sums in order. A contiguous row goes in 16-byte loads from
// its first 16-byte boundary, its whole vectors shared out over the segments, the elements before
// the first vector (segment 0) and after the last (the last segment) one at a time; a strided row's
// elements are shared out one at a time.
template <typename scalar_t, typename acc_t, int kRowThreads>
__global__ void __launch_bounds__(256) grad_y_row_sums_kernel(const scalar_t* __restrict__ grad_y, acc_t* __restrict__ row_sums,
                                                             ConvTParams p, int64_t segments) {
  begin_dependent_grid();
  constexpr int kLoads = kRowSumLoads, kVector = 16 / sizeof(scalar_t), kRowWarps = kRowThreads / 32;
  struct alignas(16) Vector { scalar_t v[kVector]; };
  __shared__ acc_t warp_sums[8];
  const int rows_a_block = int(blockDim.x) / kRowThreads, thread = int(threadIdx.x) % kRowThreads;
  const int64_t first_row = int64_t(blockIdx.x) * rows_a_block + threadIdx.x / kRowThreads;
  for (int64_t item = first_row; item < p.batch * p.out_channels * segments; item += int64_t(gridDim.x) * rows_a_block) {
    const int64_t row = item / segments, segment = item % segments;
    const int64_t n = row / p.out_channels, co = row % p.out_channels;
    const scalar_t* grad_y_row = grad_y + n * p.y_batch_stride + co * p.y_channel_stride;
    acc_t sums[kLoads] = {};
    // sums[u] += value(j + u * kRowThreads) for this thread's j in [begin, end), kLoads at a time
    auto add_all = [&](int64_t begin, int64_t end, auto&& value) {
      int64_t j = begin + thread;
      for (; j + (kLoads - 1) * kRowThreads < end; j += kLoads * kRowThreads) {
#pragma unroll
        for (int u = 0; u < kLoads; ++u) sums[u] += value(j + u * kRowThreads);
      }
      for (; j < end; j += kRowThreads) sums[0] += value(j);
    };
    auto element = [&](int64_t j) { return acc_t(grad_y_row[j * p.y_length_stride]); };
    int64_t head = p.length_out, vectors = 0;  // elements before the first boundary; whole vectors after it
    if (p.y_length_stride == 1) {
      const int misalignment = int(reinterpret_cast<uintptr_t>(grad_y_row) % 16) / int(sizeof(scalar_t));
      const int to_boundary = (kVector - misalignment) % kVector;
      head = p.length_out < to_boundary ? p.length_out : to_boundary;
      vectors = (p.length_out - head) / kVector;
    }
    const Vector* row_vectors = reinterpret_cast<const Vector*>(grad_y_row + head);
    if (vectors == 0) {  // (a strided row, or a short one: its elements shared out over the segments)
      add_all(p.length_out * segment / segments, p.length_out * (segment + 1) / segments, element);
    } else {  // this segment's whole vectors, the row's first and last elements in its first and last
      add_all(vectors * segment / segments, vectors * (segment + 1) / segments, [&](int64_t v) {
        const Vector values = row_vectors[v];
        acc_t sum = acc_t(values.v[0]);
#pragma unroll
        for (int e = 1; e < kVector; ++e) sum += acc_t(values.v[e]);
        return sum;
      });
      if (segment == 0) add_all(0, head, element);
      if (segment == segments - 1) add_all(head + vectors * kVector, p.length_out, element);
    }
    acc_t acc = sums[0];
#pragma unroll
    for (int u = 1; u < kLoads; ++u) acc += sums[u];
#pragma unroll
    for (int width = 16; width > 0; width /= 2) acc += __shfl_xor_sync(0xffffffffu, acc, width);
    if constexpr (kRowWarps > 1) {
      if (threadIdx.x % 32 == 0) warp_sums[threadIdx.x / 32] = acc;
      __syncthreads();
      acc = warp_sums[0];
#pragma unroll
      for (int w = 1; w < kRowWarps; ++w) acc += warp_sums[w];
      __syncthreads();  // warp_sums is read before the next row overwrites it
    }
    if (thread == 0) row_sums[(n * segments + segment) * p.out_channels + co] = acc;
  }
}

// out[e] = the sum of partial[slice][e] over slices in a fixed order, plus bias[(e / length) mod
// channels] where there is a bias; sums taps first (taps > 1) go to out[(e mod rows) * taps + e div
// rows], rows = elements / taps (the second pass of the sliced grad_weight reductions, of grad_bias
// and of the GEMMs' reduction splits: deterministic, docs/design.md §8). A lane takes kVector
// consecutive elements (one 16-byte load a slice where the elements are a multiple of kVector, so
// that every slice's vectors are aligned); a block's kSumWarps warps take groups of 32 lanes'
// elements, kSliceWarps warps a group (sum_slice_warps: about 4 slices a warp, so that loads of
// several slices are in flight per element, where one thread summing every slice would wait on each
// in turn): warp w of a group adds slices w, w + kSliceWarps, ... in order, then lane by lane the
// warps' sums are added in warp order.
constexpr int kSumWarps = 8;
inline int sum_slice_warps(int64_t slices) {
  int warps = 1;
  while (warps < kSumWarps && 4 * warps < slices) warps *= 2;
  return warps;
}
template <typename T, typename acc_t, int kSliceWarps, int kVector>
__global__ void __launch_bounds__(32 * kSumWarps)
    sum_slices_kernel(const acc_t* __restrict__ partial, const T* __restrict__ bias, T* __restrict__ out, int64_t elements,
                      int64_t slices, int64_t length, int64_t channels, int64_t taps, const int* gate) {
  begin_dependent_grid();
  if (gate != nullptr && *gate == 0) return;  // (Launch::gate: the slices of a gated GEMM)
  struct alignas(sizeof(acc_t) * kVector) Vector { acc_t v[kVector]; };
  __shared__ Vector warp_sums[kSumWarps][32];
  constexpr int kBlockVectors = 32 * (kSumWarps / kSliceWarps);
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int group = warp / kSliceWarps, slice_warp = warp % kSliceWarps;
  const int64_t vectors = elements / kVector, rows = elements / taps;
  for (int64_t first = int64_t(blockIdx.x) * kBlockVectors; first < vectors; first += int64_t(gridDim.x) * kBlockVectors) {
    const int64_t v = first + 32 * group + lane;
    Vector sum{};
    if (v < vectors) {
#pragma unroll 4
      for (int64_t s = slice_warp; s < slices; s += kSliceWarps) {
        const Vector part = reinterpret_cast<const Vector*>(partial + s * elements)[v];
#pragma unroll
        for (int e = 0; e < kVector; ++e) sum.v[e] += part.v[e];
      }
    }
    warp_sums[warp][lane] = sum;
    __syncthreads();
    if (slice_warp == 0 && v < vectors) {
#pragma unroll
      for (int e = 0; e < kVector; ++e) {
        acc_t total = acc_t(0);
#pragma unroll
        for (int w = 0; w < kSliceWarps; ++w) total += warp_sums[warp + w][lane].v[e];
        const int64_t element = v * kVector + e, at = taps == 1 ? element : element % rows * taps + element / rows;
        if (bias != nullptr) total += acc_t(bias[at / length % channels]);
        out[at] = T(total);
      }
    }
    __syncthreads();  // warp_sums is read before the next elements overwrite it
  }
}

}  // namespace convt::cuda
