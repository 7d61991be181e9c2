"""torch.autograd.graph's spelling: hooks on several tensors.

>>> x = at.tensor([1.0], requires_grad=True)
>>> handle = at.autograd.graph.register_multi_grad_hook([x], lambda grads: None)
>>> handle.remove()
"""
from ..hooks import register_multi_grad_hook

__all__ = ["register_multi_grad_hook"]
