"""One conv_transpose1d problem: sizes and arguments. The benchmark's named shapes (bench.SHAPES) and
the tests' cases (tests/conftest.py's CASES) are both ``Case``s."""
import dataclasses
from typing import Dict, Tuple


@dataclasses.dataclass(frozen=True)
class Case:
    """Input (n, c_in, l_in), weight (c_in, c_out / groups, k) and the op's arguments, in the order
    of torch.nn.ConvTranspose1d's; then what only tests vary (bias, batched, layout) and a name."""
    n: int
    c_in: int
    c_out: int
    k: int
    l_in: int
    stride: int = 1
    padding: int = 0
    output_padding: int = 0
    dilation: int = 1
    groups: int = 1
    bias: bool = True
    batched: bool = True  # False: an unbatched (c_in, l_in) input (n must be 1)
    layout: str = "contiguous"  # how the input is laid out in memory (tests/conftest.py's LAYOUTS)
    name: str = ""  # the benchmark's name for the shape (e.g. "kb64")

    @property
    def args(self) -> Tuple[int, int, int, int, int]:
        """(stride, padding, output_padding, groups, dilation), in the op's argument order."""
        return self.stride, self.padding, self.output_padding, self.groups, self.dilation

    @property
    def sizes(self) -> Tuple[int, ...]:
        """(n, c_in, c_out, k, l_in, stride, padding, output_padding, dilation, groups): planner.explain's
        positional arguments, the order of tools/ab.py's --layers and of sweep.compact."""
        return (self.n, self.c_in, self.c_out, self.k, self.l_in, self.stride, self.padding, self.output_padding,
                self.dilation, self.groups)

    @property
    def l_out(self) -> int:
        return (self.l_in - 1) * self.stride - 2 * self.padding + self.dilation * (self.k - 1) + self.output_padding + 1

    @property
    def flops(self) -> int:
        return 2 * self.n * self.c_in * (self.c_out // self.groups) * self.k * self.l_in

    def numels(self) -> Dict[str, int]:
        """Elements of x, w, bias and y."""
        return {"x": self.n * self.c_in * self.l_in, "w": self.c_in * (self.c_out // self.groups) * self.k,
                "bias": self.c_out, "y": self.n * self.c_out * self.l_out}

    def scaled(self, n: int, l_in: int) -> "Case":
        """At most n batch elements and l_in input positions."""
        return dataclasses.replace(self, n=min(self.n, n), l_in=min(self.l_in, l_in))

    def describe(self) -> str:
        """Every size and argument, as the benchmark prints them."""
        return (f"N={self.n} Cin={self.c_in} Cout={self.c_out} K={self.k} Lin={self.l_in} s={self.stride} "
                f"p={self.padding} op={self.output_padding} d={self.dilation} g={self.groups}")

    def __str__(self):
        """The fields that differ from their defaults (the sizes always): a test id."""
        fields = [f"{f.name}={getattr(self, f.name)}" for f in dataclasses.fields(self)
                  if getattr(self, f.name) != f.default or f.default is dataclasses.MISSING]
        return ",".join(fields)
