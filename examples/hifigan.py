"""A HiFi-GAN V1 generator (mel spectrogram -> waveform) with torch_convt_op swapped in.

The generator is built from plain ``torch.nn`` layers with weight norm, following the V1
configuration of the HiFi-GAN paper (Kong et al., 2020): upsampling rates 8, 8, 2, 2 with kernels
16, 16, 4, 4 from 512 channels, and multi-receptive-field fusion blocks with kernels 3, 7, 11 and
dilations 1, 3, 5. ``ConvTranspose1d.convert`` switches a copy of it to our op; the script checks
that both give the same waveform and times them end to end, in eager mode and under
``torch.compile``.

    python examples/hifigan.py [--device cpu|cuda] [--batch 1] [--frames 860] [--small] [--no-compile]
                               [--repeats 10]

``--small`` shrinks the channels (for tests); the structure stays the same.
"""
import argparse
import copy
import statistics
import time
from typing import Callable, List, Sequence

import torch
from torch import nn
from torch.nn.utils.parametrizations import weight_norm

import torch_convt_op

LEAKY_SLOPE = 0.1


def same_padding(kernel_size: int, dilation: int) -> int:
    return (kernel_size * dilation - dilation) // 2


class ResBlock(nn.Module):
    """HiFi-GAN's residual block type 1: pairs of (dilated conv, conv), each pair added back."""

    def __init__(self, channels: int, kernel_size: int, dilations: Sequence[int]):
        super().__init__()
        self.dilated = nn.ModuleList(
            weight_norm(nn.Conv1d(channels, channels, kernel_size, dilation=d, padding=same_padding(kernel_size, d)))
            for d in dilations)
        self.plain = nn.ModuleList(
            weight_norm(nn.Conv1d(channels, channels, kernel_size, padding=same_padding(kernel_size, 1)))
            for _ in dilations)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for dilated, plain in zip(self.dilated, self.plain):
            residual = dilated(nn.functional.leaky_relu(x, LEAKY_SLOPE))
            x = x + plain(nn.functional.leaky_relu(residual, LEAKY_SLOPE))
        return x


class Generator(nn.Module):
    """mel (N, mel_channels, frames) -> waveform (N, 1, frames * prod(upsample_rates))."""

    def __init__(self, mel_channels: int = 80, initial_channels: int = 512,
                 upsample_rates: Sequence[int] = (8, 8, 2, 2), upsample_kernels: Sequence[int] = (16, 16, 4, 4),
                 block_kernels: Sequence[int] = (3, 7, 11), block_dilations: Sequence[int] = (1, 3, 5)):
        super().__init__()
        self.pre = weight_norm(nn.Conv1d(mel_channels, initial_channels, 7, padding=3))
        self.upsamplers = nn.ModuleList()
        self.blocks = nn.ModuleList()
        channels = initial_channels
        for rate, kernel in zip(upsample_rates, upsample_kernels):
            self.upsamplers.append(weight_norm(
                nn.ConvTranspose1d(channels, channels // 2, kernel, stride=rate, padding=(kernel - rate) // 2)))
            channels //= 2
            self.blocks.append(nn.ModuleList(ResBlock(channels, k, block_dilations) for k in block_kernels))
        self.post = weight_norm(nn.Conv1d(channels, 1, 7, padding=3))

    def forward(self, mel: torch.Tensor) -> torch.Tensor:
        x = self.pre(mel)
        for upsample, blocks in zip(self.upsamplers, self.blocks):
            x = upsample(nn.functional.leaky_relu(x, LEAKY_SLOPE))
            x = sum(block(x) for block in blocks) / len(blocks)  # multi-receptive-field fusion
        return torch.tanh(self.post(nn.functional.leaky_relu(x)))


def median_ms(fn: Callable[[], torch.Tensor], device: str, repeats: int) -> float:
    """Median wall time of fn() after two warm-up calls (CUDA: events on the current stream)."""
    for _ in range(2):
        fn()
    times = []
    for _ in range(repeats):
        if device == "cuda":
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end))
        else:
            t0 = time.perf_counter()
            fn()
            times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


def main(argv: List[str] = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu",
                        help="where to run both models (default: cuda when available, else cpu)")
    parser.add_argument("--batch", type=int, default=1, help="mel spectrograms per call (default: 1)")
    parser.add_argument("--frames", type=int, default=860,
                        help="mel frames per spectrogram (default: 860, 10 s of 22 kHz audio)")
    parser.add_argument("--small", action="store_true",
                        help="32 initial channels instead of 512: same layers, much faster (for tests)")
    parser.add_argument("--no-compile", action="store_true", help="skip the torch.compile timings (eager only)")
    parser.add_argument("--repeats", type=int, default=10,
                        help="timed calls per model and mode, after two warm-up calls; prints the median "
                             "(default: 10)")
    args = parser.parse_args(argv)

    torch.manual_seed(0)
    original = Generator(initial_channels=32 if args.small else 512).to(args.device).eval()
    converted = torch_convt_op.ConvTranspose1d.convert(copy.deepcopy(original))
    mel = torch.randn(args.batch, 80, args.frames, device=args.device)

    results = {}
    with torch.no_grad():
        expected, actual = original(mel), converted(mel)
        scale = expected.abs().max().item()
        error = (actual - expected).abs().max().item() / max(scale, 1e-30)
        # float32 on the CPU is exact up to summation order; on CUDA both sides may use TF32
        tolerance = 1e-4 if args.device == "cpu" else 1e-2
        print(f"waveform {tuple(actual.shape)}, max |converted - original| / max |original| = {error:.1e}")
        if not error <= tolerance:
            raise SystemExit(f"outputs differ: {error:.1e} > {tolerance:.0e}")
        results["error"] = error
        variants = [("eager", original, converted)]
        if not args.no_compile:
            variants.append(("torch.compile", torch.compile(original), torch.compile(converted)))
        print(f"| mode | nn.ConvTranspose1d ms | torch_convt_op ms | speedup |  ({args.device}, batch {args.batch}, "
              f"{args.frames} frames{', small' if args.small else ''})")
        print("|---|---|---|---|")
        for mode, reference_model, our_model in variants:
            if mode == "torch.compile":  # the compiled graph with our op must match too
                compiled_error = (our_model(mel) - reference_model(mel)).abs().max().item() / max(scale, 1e-30)
                if not compiled_error <= tolerance:
                    raise SystemExit(f"compiled outputs differ: {compiled_error:.1e} > {tolerance:.0e}")
            reference_ms = median_ms(lambda: reference_model(mel), args.device, args.repeats)
            our_ms = median_ms(lambda: our_model(mel), args.device, args.repeats)
            print(f"| {mode} | {reference_ms:.2f} | {our_ms:.2f} | {reference_ms / our_ms:.2f}x |")
            results[mode] = (reference_ms, our_ms)
    return results


if __name__ == "__main__":
    main()
