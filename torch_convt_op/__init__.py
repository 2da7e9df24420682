"""torch_convt_op: the fastest correct 1-D transposed convolution for PyTorch.

Importing the package loads the compiled operator library (``torch.ops.convt``) and registers the
fake implementations and autograd formulas, and DTensor's sharding strategies once
``torch.distributed.tensor`` is imported.
"""
import glob
import os
import warnings

import torch


def _library_path() -> str:
    here = os.path.dirname(os.path.abspath(__file__))
    candidates = sorted(glob.glob(os.path.join(here, "_C*.so")) + glob.glob(os.path.join(here, "_C*.pyd")))
    if not candidates:
        raise ImportError(f"torch_convt_op: the compiled library _C*.so is missing from {here}; "
                          "install the package with `pip install --no-build-isolation .`")
    if len(candidates) > 1:
        raise ImportError(f"torch_convt_op: more than one compiled library in {here} ({', '.join(candidates)}); "
                          "delete the stale ones and reinstall")
    return candidates[0]


LIBRARY_PATH = _library_path()
torch.ops.load_library(LIBRARY_PATH)

from . import ops  # noqa: E402  (registers fake implementations and autograd)
from .ops import conv_transpose1d, conv_transpose1d_backward  # noqa: E402
from .modules import ConvTranspose1d  # noqa: E402
from ._after_import import call_after_import  # noqa: E402


def _register_sharding_strategies() -> None:
    # Runs inside the user's import of torch.distributed.tensor: a torch whose DTensor internals
    # differ gets a warning here (DTensor then reports the op as having no strategy), not a failed import.
    try:
        from . import distributed
        distributed.register()
    except Exception as error:
        warnings.warn(f"torch_convt_op: DTensor sharding strategies not registered: {error!r}")


# torch.distributed.tensor, imported here, would add about 0.7 s to every import of this package
call_after_import("torch.distributed.tensor", _register_sharding_strategies)

__all__ = ["conv_transpose1d", "conv_transpose1d_backward", "ConvTranspose1d", "LIBRARY_PATH"]
__version__ = "0.1.0"
