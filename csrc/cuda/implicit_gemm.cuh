// Tensor-core implicit GEMM for the forward and for grad_input, native NCL (docs/design.md §3).
//
// Both are one problem with roles swapped (§3.1, GemmProblem):
//   out[n, row, col*out_step + out_phase] = bias[row]
//       + sum_{taps t of out_phase} sum_ch A_t[row, ch] * in[n, ch, (col + offset_t)*in_step + in_phase_t]
// the forward with (rows, channels, out_step, in_step) = (C_out, C_in, stride, 1), grad_input with
// (C_in, C_out, 1, stride), A_t being W[:, :, k] seen as rows x channels. Strided warpgroup problems
// may merge their phases into rows (forward) or channels (grad_input): §3.2, Merge.
//
// implicit_gemm_kernel (§3.3, §3.4, §3.7) walks tiles (n, group, block_m rows, block_n columns of
// every out_phase) in steps (out_phase, in_phase, chunk of channels) and is composed of
//   GemmScheduler         gemm_scheduler.cuh  which part of which tile, and the step after this one
//   ImplicitGemmLoader    gemm_loader.cuh     a step's x window and weight slots -> shared, cp.async,
//                                             double-buffered (the weight resident where it fits)
//   ImplicitGemmMainloop  gemm_mainloop.cuh   mma.sync warp tiles, or wgmma warpgroup tiles (WarpgroupMma)
//   ImplicitGemmEpilogue  gemm_epilogue.cuh   per out_phase to y_s or out (float_sums: to an
//                                             fp32 slice, §3.8), per tile y_s -> out
// pack_gemm_weight_kernel packs A once per call into the layout the MMA reads.
#pragma once

#include <type_traits>

#include "cuda/gemm_epilogue.cuh"
#include "cuda/gemm_loader.cuh"
#include "cuda/gemm_mainloop.cuh"
#include "cuda/gemm_problem.cuh"
#include "cuda/gemm_scheduler.cuh"
#include "cuda/grid_dependency.cuh"
#include "cuda/mma.cuh"
#include "cuda/wgmma.cuh"

namespace convt::cuda {

// A packed once per launch: words packed[g][row_tile][chunk][part][slot][slot_words] of the launch's
// row tiles (GemmPlan::first_row_tile on), where slot i
// holds tap step_tap[i] (the taps of a step are consecutive slots), each word one TF32 value (rounded
// to nearest for kTF32; for 3xTF32 raw float32 bits, split at use, or on pipelined tiles, whose wgmma
// reads A from shared memory, split here: part 0 the big TF32 parts, part 1 the small ones) or two
// 16-bit channels. Zero outside the problem. Within a slot, (row, word) of the block_m x (8 * ksteps)-word tile sits
//   mma.sync tiles:  in fragment order [m16 tile][k-step][lane][4], lane's 4 words rows (lane/4,
//                    lane/4 + 8) x word columns (lane%4, lane%4 + 4) of the m16 x 8-word fragment
//                    (a0 a1 a2 a3 of mma.sync)
//   warpgroup tiles: as B of wgmma (A^T, K-major, swizzled rows of 32 * ksteps bytes; wgmma.cuh)
// A_t[row, ch] = w[...]: GemmWeight (plan.h).

// Block (x, y, z) packs quad y * blockDim.x + threadIdx.x (16 bytes: words 4q .. 4q + 3) of each
// slot of unit x, (g, row_tile, chunk) of the launch, at every gridDim.z-th of its part slots from z.
// A quad's words share their rows (warpgroup tiles: one row; mma.sync: a lane's fragment, two rows),
// so the index math of its rows and channels runs once per thread, in 32 bits (rows and channels
// stay below 2^30, gemm_applies; a unit's slots hold at most 256 x 8,192 words; offsets into w and
// packed are 64-bit), and a slot costs its taps' loads and one 16-byte store. A unit's part slots
// read W's elements of its rows and channels at every tap, so a 32-byte sector fetched for one slot
// serves the taps beside it (L1).
template <typename T, Math kMath>
__global__ void pack_gemm_weight_kernel(const T* __restrict__ w, uint32_t* __restrict__ packed, GemmProblem p,
                                        GemmWeight a) {
  begin_dependent_grid();
  constexpr int kChannelsPerWord = kMath == Math::k16Bit ? 2 : 1, kElements = 4 * kChannelsPerWord;
  if (p.gate != nullptr && *p.gate == 0) return;  // (a gated plan's weight: only where its GEMM runs, Launch::gate)
  const int quad = int(blockIdx.y * blockDim.x + threadIdx.x);
  if (4 * quad >= p.slot_words) return;
  const int unit = int(blockIdx.x), part_slots = p.weight_parts * p.taps;
  const auto unit_chunk = p.div_chunks.divmod(unsigned(unit)), unit_tile = p.div_row_tiles.divmod(unit_chunk.div);
  const int chunk = int(unit_chunk.mod), row_tile = int(unit_tile.mod), g = int(unit_tile.div);
  const T* w_group = w + int64_t(g) * a.group_stride;
  uint32_t* quad_packed = packed + int64_t(unit) * part_slots * p.slot_words + 4 * quad;
  // The quad's words e = 0..3 of the slot's block_m x (8 * ksteps)-word tile: rows tile_row[e % 2],
  // words word[e]
  int tile_row[2], word[4];
  if (p.warpgroups) {  // rows of 8 * ksteps words (32 * ksteps bytes), 16-byte units swizzled by row
    const auto row_unit = p.div_ksteps.divmod(unsigned(quad / 2));
    tile_row[0] = tile_row[1] = int(row_unit.div);
    const int unit_in_row = int(row_unit.mod) * 2 + quad % 2;
    for (int e = 0; e < 4; ++e) word[e] = (unit_in_row ^ swizzle_of_row(tile_row[0] % 8, p.ksteps * 32)) * 4 + e;
  } else {  // the fragment of lane quad % 32: a0 a1 a2 a3 at rows (lane/4, lane/4 + 8) x words (lane%4, lane%4 + 4)
    const int lane = quad % 32;
    const auto m16_kstep = p.div_ksteps.divmod(unsigned(quad / 32));
    tile_row[0] = int(m16_kstep.div) * 16 + lane / 4, tile_row[1] = tile_row[0] + 8;
    for (int e = 0; e < 4; ++e) word[e] = int(m16_kstep.mod) * 8 + lane % 4 + (e / 2) * 4;
  }
  // Each row: inside the problem, its phase, W's row (merged phases: GemmProblem::row_phases,
  // weight_channel_phases; merged groups: W's rows of an original group, GemmWeight::group_rows,
  // never with merged phases)
  const bool merged_groups = a.group_rows > 0;
  int row[2], row_phase[2];
  bool row_inside[2];
  int64_t row_offset[2];
  for (int r = 0; r < 2; ++r) {
    row[r] = (p.first_row_tile + row_tile) * p.block_m + tile_row[r];  // (a launch packs its row tiles)
    const auto row_of_phase = p.div_row_phases.divmod(unsigned(row[r]));
    row_phase[r] = int(row_of_phase.mod);
    row_inside[r] = row[r] < p.rows_per_group && int(row_of_phase.mod) < p.stored_row_phases;
    row_offset[r] = (merged_groups && a.co_rows ? int64_t(row_of_phase.div) % a.group_rows : int64_t(row_of_phase.div)) * a.row_stride;
  }
  // Each element (word e, half h: its channel kappa = word * kChannelsPerWord + h of the chunk, x_s
  // row kappa with tensor map phases, set_half_bases): where W holds it beside its tap, its phase, and
  // whether it is inside the problem at all
  const int map_phase_rows = p.map_row_phases > 1 ? p.staged_rows / p.map_row_phases : 1;
  const int first_channel = int(problem_chunk(p, chunk)) * p.chunk_channels;
  int64_t offset[kElements];
  int phase[kElements];
  bool inside[kElements];
#pragma unroll
  for (int i = 0; i < kElements; ++i) {
    const int e = i / kChannelsPerWord, kappa = word[e] * kChannelsPerWord + i % kChannelsPerWord;
    const int ch = first_channel + (p.map_row_phases > 1 ? kappa % map_phase_rows * p.map_row_phases + kappa / map_phase_rows : kappa);
    const auto channel_phase = p.div_weight_channel_phases.divmod(unsigned(ch));
    phase[i] = row_phase[e % 2] + int(channel_phase.mod);  // (one of the two is 0)
    inside[i] = row_inside[e % 2] && ch < p.channels_per_group && (!merged_groups || row[e % 2] / a.group_rows == ch / a.group_channels);
    const int64_t w_channel = merged_groups && !a.co_rows ? int64_t(channel_phase.div) % a.group_channels : int64_t(channel_phase.div);
    offset[i] = row_offset[e % 2] + w_channel * a.channel_stride;
  }
  // (merged rows or grad_y's phases as channels of a dilated filter: position t * row_phases *
  // weight_channel_phases + phase holds the tap at position / dilation where dilation divides it;
  // the division only there)
  const int dilation = p.row_phases > 1 || p.weight_channel_phases > 1 ? int(a.dilation) : 1;
  const int tap_positions = p.row_phases * p.weight_channel_phases;
  for (int part_slot = int(blockIdx.z); part_slot < part_slots; part_slot += int(gridDim.z)) {
    const bool small_part = part_slot >= p.taps;  // (weight_parts: 1 or 2)
    const int t = p.step_tap[small_part ? part_slot - p.taps : part_slot];  // slot i holds tap step_tap[i]
    uint32_t words[4] = {0, 0, 0, 0};
#pragma unroll
    for (int i = 0; i < kElements; ++i) {
      const int position = t * tap_positions + phase[i];
      const int tap = dilation == 1 ? position : position / dilation;
      // (merged rows of phases without a tap: zero, stored_row_phases; zero_taps: taps from K on)
      const bool element_inside = inside[i] && tap < a.taps && (dilation == 1 || position % dilation == 0);
      const T element = element_inside ? w_group[offset[i] + tap * a.tap_stride] : from_float<T>(0.0f);
      uint32_t& value = words[i / kChannelsPerWord];
      if constexpr (kMath == Math::kTF32) {
        value = to_tf32(to_float(element));
      } else if constexpr (kMath == Math::k3xTF32) {
        const uint32_t raw[1] = {__float_as_uint(to_float(element))};
        uint32_t big[1], small[1];
        split_tf32(raw, big, small);
        value = p.weight_parts == 1 ? raw[0] : small_part ? small[0] : big[0];
      } else {
        value |= uint32_t(*reinterpret_cast<const unsigned short*>(&element)) << (16 * (i % kChannelsPerWord));
      }
    }
    *reinterpret_cast<uint4*>(quad_packed + int64_t(part_slot) * p.slot_words) = make_uint4(words[0], words[1], words[2], words[3]);
  }
}

// ---- the kernel ----------------------------------------------------------------------------------

// kShiftedRows: a warpgroup problem with row_offsets (its own instantiation: the shifts' code in the
// tap loop would slow the aligned rows). kMerge: a warpgroup problem with merged phases (its own
// instantiations, so that the other kernels keep their code).
template <typename T, Math kMath, int kWarpTilesM, int kWarpsM, bool kWarpgroups = false, bool kShiftedRows = false,
          Merge kMerge = Merge::kNone>
__global__ void __launch_bounds__(kGemmThreads, kMath == Math::k3xTF32 ? 1 : 2)  // 3xTF32: room for two accumulators
    implicit_gemm_kernel(const T* __restrict__ in, const uint32_t* __restrict__ packed_w, const T* __restrict__ bias,
                         T* __restrict__ out, const __grid_constant__ GemmProblem p) {
  begin_dependent_grid();
  constexpr int kBlockM = kBlockMOf<kWarpTilesM, kWarpsM>, kBlockN = kBlockNOf<kWarpsM>;
  static_assert(!kWarpgroups || (kMath != Math::k3xTF32 && kBlockM == 128 && kBlockN == 128));
  static_assert(kWarpgroups || kMerge == Merge::kNone);
  if constexpr (kWarpgroups && !CONVT_WGMMA_AVAILABLE) {
    return;  // (warpgroup tiles are sm_90a only: other archs get an empty kernel)
  } else {
    if (p.gate != nullptr && *p.gate == 0) return;  // (the whole block: Launch::gate)
    extern __shared__ __align__(kMaxSwizzleAtomBytes) uint32_t smem[];  // weight slots first: swizzle atoms aligned
    using Mainloop = ImplicitGemmMainloop<T, kMath, kWarpTilesM, kWarpsM, kWarpgroups, kShiftedRows, kMerge>;
    const ImplicitGemmSmem<T> buffers(smem, p);
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    const Mainloop mainloop(p, in, lane, warp);
    const int steps = p.out_phases * p.in_phases * p.chunks;          // reduction steps of a tile
    const int phase_steps = p.in_phases * p.chunks;                   // steps of one out_phase
    const int part_steps = p.tile_parts == 1 ? steps : phase_steps;   // steps of one part (tile_parts: 1 or out_phases)
    const ImplicitGemmLoader<T, kMath, kBlockN, kShiftedRows, kMerge> loader(p, in, packed_w, buffers);
    const ImplicitGemmEpilogue<T, kMath, kWarpTilesM, kWarpsM, kWarpgroups, kMerge> epilogue(p, bias, out, buffers.y_s, lane, warp);
    const GemmScheduler scheduler(p);
    epilogue.clear_staging();

    typename Mainloop::Accumulators acc;  // mma.sync tiles
    typename Mainloop::Warpgroup wg;      // warpgroup tiles
    int64_t resident_key = -1;            // the weight the resident buffer holds (ImplicitGemmLoader)
    unsigned part = scheduler.first();
    if (!scheduler.has_part(part)) return;
    GemmTile tile = scheduler.tile_of(part);
    int step_index = scheduler.first_step_of(part, part_steps), phase_step = 0, buffer = 0;  // phase_step: of step_index's out_phase
    int part_last = p.splits > 1 ? scheduler.last_step_of(step_index) : 0;  // (a split part's last step)
    loader.stage(tile, GemmStep(step_index, p), 0);
    cp_async_commit();
    mainloop.clear(acc, wg);
    while (true) {
      // (with a split, a part ends where its run of steps does, and its sums go to its slice)
      const bool phase_ends = p.splits > 1 ? step_index == part_last : phase_step == phase_steps - 1;
      const bool tile_ends = step_index == steps - 1;
      loader.load_resident_weight(tile, resident_key);
      // the next step, prefetched into the other buffer while this one computes
      const GemmScheduler::Next next = scheduler.after(part, step_index, phase_ends, tile_ends, part_steps);
      const GemmTile next_tile = next.new_tile ? scheduler.tile_of(next.part) : tile;
      if (next.valid) loader.stage(next_tile, GemmStep(next.step, p), buffer ^ 1);
      cp_async_commit();
      cp_async_wait<1>();
      loader.round_x(buffer);
      if constexpr (kWarpgroups) fence_async_shared();  // the weight slots (cp.async) are read by wgmma
      __syncthreads();

      const GemmStep step(step_index, p);
      mainloop.run_step(tile, step, loader.w_s(buffer), loader.x_s(buffer), acc, wg);
      if (phase_ends) {
        if (p.float_sums) {
          epilogue.store_slice(tile, step.out_phase, scheduler.split_of(part), acc);
        } else {
          epilogue.store_phase(tile, step.out_phase, acc, wg);
        }
        mainloop.clear(acc, wg);
      }
      if (tile_ends) {
        if (p.stage_output) __syncthreads();  // y_s complete
        epilogue.finish_tile(tile);
      }
      __syncthreads();  // this buffer (and y_s) is consumed: the next iteration may overwrite it
      if (!next.valid) break;
      part = next.part;
      step_index = next.step;
      if (p.splits > 1 && phase_ends) part_last = scheduler.last_step_of(step_index);
      phase_step = phase_ends ? 0 : phase_step + 1;  // parts start with an out_phase
      tile = next_tile;
      buffer ^= 1;
    }
    cp_async_wait<0>();
  }
}

}  // namespace convt::cuda
