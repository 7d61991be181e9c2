"""torch.autograd's spelling: ``at.autograd.grad``, ``at.autograd.backward`` and
``at.autograd.functional``, so torch code ports by renaming the module.

>>> x = at.tensor([1.0, 2.0], requires_grad=True)
>>> at.autograd.grad((x ** 2).sum(), x)
(tensor([2., 4.]),)
"""
from ..engine import backward, grad
from . import function, functional, graph
from .function import Function

__all__ = ["grad", "backward", "Function", "function", "functional", "graph"]
