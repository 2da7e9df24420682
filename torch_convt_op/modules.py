"""``ConvTranspose1d``: ``torch.nn.ConvTranspose1d`` whose forward runs ``convt::conv_transpose1d``."""
from typing import List, Optional

from torch import Tensor, nn
from torch.nn.utils import parametrize

from .ops import conv_transpose1d


class ConvTranspose1d(nn.ConvTranspose1d):
    """Drop-in for ``torch.nn.ConvTranspose1d``: same constructor, parameters, initialisation,
    ``state_dict`` keys and ``repr``; only the forward computation is ours.

    ``ConvTranspose1d.convert(model)`` switches the ``nn.ConvTranspose1d`` layers of an existing model
    over in place, keeping their parameters, hooks and weight norm.
    """

    def forward(self, input: Tensor, output_size: Optional[List[int]] = None) -> Tensor:
        if self.padding_mode != "zeros":
            raise ValueError("Only `zeros` padding mode is supported for ConvTranspose1d")
        output_padding = self._output_padding(input, output_size, self.stride, self.padding, self.kernel_size,
                                              1, self.dilation)
        return conv_transpose1d(input, self.weight, self.bias, self.stride, self.padding, output_padding,
                                self.groups, self.dilation)

    @classmethod
    def convert(cls, module: nn.Module) -> nn.Module:
        """Make every ``nn.ConvTranspose1d`` in ``module`` (``module`` itself included) run our op.

        The layers are converted in place by changing their class, so parameters (the same objects),
        buffers, device, dtype, training mode, hooks, old-style ``nn.utils.weight_norm`` and
        ``nn.utils.parametrizations`` all stay as they were. Subclasses of ``nn.ConvTranspose1d``
        (other than the class that parametrization wraps around it) are left alone, as they may have
        their own forward. Returns ``module``; converting twice changes nothing.
        """
        for m in module.modules():
            if type(m) is nn.ConvTranspose1d:
                m.__class__ = cls
            elif parametrize.is_parametrized(m) and type(m).__bases__ == (nn.ConvTranspose1d,):
                # parametrize gave this module a class of its own, "ParametrizedConvTranspose1d",
                # holding the parametrized properties: rebuild it on top of ours.
                namespace = {k: v for k, v in vars(type(m)).items() if k not in ("__dict__", "__weakref__")}
                m.__class__ = type(type(m).__name__, (cls,), namespace)
        return module
