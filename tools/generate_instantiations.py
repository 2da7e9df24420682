"""Writes csrc/cuda/instantiations/: one .cu file per kernel family and dtype, each instantiating the
launchers that csrc/cuda/launch.h declares, so that the CUDA build compiles them in parallel.
Run it after adding a family or a dtype: python tools/generate_instantiations.py"""
import pathlib

ROOT = pathlib.Path(__file__).resolve().parent.parent
OUT = ROOT / "csrc" / "cuda" / "instantiations"

# (file suffix, torch element type, math mode) of the tensor-core families
TENSOR_CORE = [("tf32", "float", "Math::kTF32"), ("3xtf32", "float", "Math::k3xTF32"),
               ("fp16", "c10::Half", "Math::k16Bit"), ("bf16", "c10::BFloat16", "Math::k16Bit")]
CUDA_CORE = [("fp32", "float"), ("fp64", "double"), ("fp16", "c10::Half"), ("bf16", "c10::BFloat16")]

PACK = """template void pack_gemm_weight<{t}, {m}>(const GemmPlan&, const GemmWeight&, const {t}*, uint32_t*, Launch);"""
IMPLICIT = """template void launch_implicit_gemm<{t}, {m}, GemmFamily::{f}>(const GemmPlan&, const {t}*, const uint32_t*, const {t}*,
                                                              {t}*, float*, Launch);"""
PIPELINED = """template void launch_pipelined_gemm<{t}, {m}, PipelineForm::{form}>(const GemmPlan&, const CUtensorMap*,
                                                                  const {t}*, const uint32_t*, const {t}*, {t}*, float*, Launch);"""
GRAD_WEIGHT_GEMM = """template void launch_grad_weight_gemm<{t}, {m}>(const WeightGradPlan&, const {t}*, const {t}*, float*, float*,
                                                  Launch);"""
GRAD_WEIGHT_WGMMA = """template void launch_grad_weight_wgmma<{t}, {pipelined}, {merged}>(const WeightGradPlan&, const CUtensorMap*,
                                                                const {t}*, const {t}*, float*, float*, Launch);"""
GRAD_WEIGHT_BOXES = """template void launch_grad_weight_boxes<{t}>(const WeightGradPlan&, const CUtensorMap*, const CUtensorMap*, float*,
                                             Launch);"""
PACKED_TAPS = """template void launch_packed_taps_forward<{t}, {m}>(const ConvTParams&, const PackedTapsPlan&, const {t}*, const {t}*,
                                                     const {t}*, {t}*, Launch);
template void launch_packed_taps_grad_input<{t}, {m}>(const ConvTParams&, const PackedTapsPlan&, const {t}*, const {t}*,
                                                        {t}*, Launch);"""
DIRECT = """template void launch_forward_direct<{t}>(const ConvTParams&, const {t}*, const {t}*, const {t}*, {t}*, Launch);
template void launch_depthwise_forward<{t}>(const ConvTParams&, const DepthwisePlan&, const {t}*, const {t}*, const {t}*,
                                            {t}*, Launch);
template void launch_grad_input_direct<{t}>(const ConvTParams&, const {t}*, const {t}*, {t}*, Launch);
template void launch_depthwise_grad_input<{t}>(const ConvTParams&, const DepthwisePlan&, const {t}*, const {t}*, {t}*,
                                               acc_type<{t}>*, Launch);
template void launch_depthwise_grad_weight<{t}>(const ConvTParams&, int64_t, const {t}*, const {t}*, acc_type<{t}>*,
                                                Launch);
template void launch_grad_weight_direct<{t}>(const ConvTParams&, const {t}*, const {t}*, {t}*, Launch);
template void launch_grad_y_row_sums<{t}>(const ConvTParams&, const RowSumsPlan&, const {t}*, acc_type<{t}>*, Launch);
template void launch_deinterleave_grad_y<{t}>(const ConvTParams&, const {t}*, {t}*, int*, int64_t, int64_t, int64_t, Launch);
template void launch_deinterleave_grad_y_channels_last<{t}>(const ConvTParams&, const {t}*, {t}*, int*, int64_t, int64_t,
                                                           int64_t, Launch);
template void launch_unroll_grad_y<{t}>(const ConvTParams&, const {t}*, {t}*, Launch);
template void launch_channels_last<{t}>(const ChannelsLastCopy&, const {t}*, {t}*, Launch);
template void launch_aligned_rows<{t}>(const RowsView&, const {t}*, int64_t, {t}*, Launch);
template void launch_sum_slices<{t}>(const acc_type<{t}>*, {t}*, int64_t, int64_t, Launch, const {t}*, int64_t, int64_t, int64_t);"""


def files():
    for suffix, t, m in TENSOR_CORE:
        # (the warp and the warpgroup tiles in files of their own: the two largest parts of the build)
        yield f"implicit_gemm_warp_{suffix}.cu", "gemm_launch.cuh", \
            PACK.format(t=t, m=m) + "\n" + IMPLICIT.format(t=t, m=m, f="kWarpTiles")
        yield f"implicit_gemm_warpgroup_{suffix}.cu", "gemm_launch.cuh", IMPLICIT.format(t=t, m=m, f="kWarpgroupTiles")
        # problems of one pair, of several, and strided forwards' phase pairs (not in 3xTF32)
        for form, prefix in (("kOnePair", ""), ("kPairs", "pairs_"), ("kPhasePair", "phase_pair_")):
            if form != "kPhasePair" or m != "Math::k3xTF32":
                yield f"pipelined_gemm_{prefix}{suffix}.cu", "gemm_launch.cuh", PIPELINED.format(t=t, m=m, form=form)
        yield f"grad_weight_gemm_{suffix}.cu", "grad_weight_launch.cuh", GRAD_WEIGHT_GEMM.format(t=t, m=m)
        yield f"packed_taps_{suffix}.cu", "packed_taps_launch.cuh", PACKED_TAPS.format(t=t, m=m)
        if m != "Math::k3xTF32":  # (the warpgroup grad_weight rounds float to TF32)
            for pipelined in ("false", "true"):  # (four files: the largest family of the build)
                for merged in ("false", "true"):
                    name = f"grad_weight_wgmma_{'pipelined_' if pipelined == 'true' else ''}" \
                           f"{'merged_' if merged == 'true' else ''}{suffix}.cu"
                    yield name, "grad_weight_launch.cuh", GRAD_WEIGHT_WGMMA.format(t=t, pipelined=pipelined, merged=merged)
            # (box tiles: 16-bit over grad_y N-major, TF32 over grad_y K-major)
            yield f"grad_weight_boxes_{suffix}.cu", "grad_weight_boxes_launch.cuh", GRAD_WEIGHT_BOXES.format(t=t)
    for suffix, t in CUDA_CORE:
        yield f"direct_{suffix}.cu", "direct_launch.cuh", DIRECT.format(t=t)


def main():
    OUT.mkdir(parents=True, exist_ok=True)
    wanted = set()
    for name, header, body in files():
        wanted.add(name)
        text = (f"// Generated by tools/generate_instantiations.py: do not edit.\n"
                f'#include "cuda/{header}"\n\nnamespace convt::cuda {{\n{body}\n}}  // namespace convt::cuda\n')
        (OUT / name).write_text(text)
    for stale in OUT.glob("*.cu"):
        if stale.name not in wanted:
            stale.unlink()


if __name__ == "__main__":
    main()
