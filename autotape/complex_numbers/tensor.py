"""ComplexTensor: complex numbers on autotape's real engine.

A ComplexTensor holds one real Tensor of shape ``shape + (2,)``: each number's real and
imaginary parts side by side, which is numpy's own memory layout of a complex array, so
numpy computes on it as a complex array without a copy (``.view(np.complex128)``).
Everything recorded is real: the tape, its compiled sweeps, ``at.compile`` and the
transforms never meet a complex number, and the gradient of a real loss with respect to
a complex leaf is the gradient with respect to its parts, ``dL/dx + i dL/dy``: exactly
torch's convention (the conjugate Wirtinger derivative, times two).

Ops on complex numbers live in ops.py; this module is the data: attributes,
conversions, gradients.
"""
import numpy as np

from ..tensor import Tensor, new_leaf

C128, C64 = np.dtype(np.complex128), np.dtype(np.complex64)
F64, F32 = np.dtype(np.float64), np.dtype(np.float32)
REAL_OF = {C128: F64, C64: F32}
COMPLEX_OF = {F64: C128, F32: C64}


class ComplexTensor:
    """An n-d array of complex numbers that records the ops applied to it (made by
    ``at.tensor`` from complex data, ``at.complex(real, imag)`` or arithmetic with
    ``1j``).

    >>> z = at.tensor([1 + 2j, 3 - 1j], requires_grad=True)
    >>> (z * z.conj()).real.sum().backward()
    >>> z.grad
    tensor([2.+4.j, 6.-2.j])
    """
    __slots__ = ("_ri", "__weakref__")
    __array_priority__ = 1000          # ndarray <op> ComplexTensor: ours, not numpy's

    def __init__(self, parts):
        if not isinstance(parts, Tensor) or parts.ndim == 0 or parts.shape[-1] != 2 or \
                parts.dtype.kind != "f":
            raise ValueError("a ComplexTensor is made from a real floating Tensor whose "
                             "last axis has length 2 (its numbers' real and imaginary "
                             "parts): see at.view_as_complex")
        self._ri = parts

    # -- attributes ------------------------------------------------------------------------

    @property
    def parts(self):
        """The real Tensor of shape ``shape + (2,)`` holding the real and imaginary
        parts (torch's ``view_as_real``); differentiable.

        >>> at.tensor([1 + 2j]).parts
        tensor([[1., 2.]])
        """
        return self._ri

    @property
    def shape(self):
        """The shape, a tuple of ints.

        >>> at.tensor([[1j, 2.0]]).shape
        (1, 2)
        """
        return self._ri.shape[:-1]

    @property
    def ndim(self):
        """The number of axes.

        >>> at.tensor([1j, 2.0]).ndim
        1
        """
        return self._ri.ndim - 1

    @property
    def dtype(self):
        """complex128 (complex64 for float32 parts).

        >>> at.tensor([1j]).dtype
        dtype('complex128')
        """
        return COMPLEX_OF[self._ri.dtype]

    @property
    def size(self):
        """The number of elements.

        >>> at.tensor([1j, 2.0]).size
        2
        """
        return int(np.prod(self.shape, dtype=np.int64))

    def __len__(self):
        if not self.shape:
            raise TypeError("len() of a 0-d tensor")
        return self.shape[0]

    @property
    def is_leaf(self):
        """True for a tensor no recorded op produced.

        >>> at.tensor([1j], requires_grad=True).is_leaf
        True
        """
        return self._ri.is_leaf

    @property
    def requires_grad(self):
        """Whether ops on this tensor are recorded; settable on leaves.

        >>> at.tensor([1j], requires_grad=True).requires_grad
        True
        """
        return self._ri.requires_grad

    @requires_grad.setter
    def requires_grad(self, flag):
        self._ri.requires_grad = flag

    def requires_grad_(self, requires_grad=True):
        """Set ``requires_grad`` on a leaf in place; returns self.

        >>> at.tensor([1j]).requires_grad_().requires_grad
        True
        """
        self._ri.requires_grad_(requires_grad)
        return self

    @property
    def grad(self):
        """The gradient accumulated by ``backward``: for a real loss L of z = x + iy,
        ``dL/dx + i dL/dy`` (torch's convention); None until then.

        >>> z = at.tensor(1 + 1j, requires_grad=True)
        >>> abs(z * z).backward()
        >>> z.grad
        tensor(2.+2.j)
        """
        g = self._ri.grad
        return None if g is None else ComplexTensor(g)

    @grad.setter
    def grad(self, g):
        if g is not None and not isinstance(g, ComplexTensor):
            raise TypeError("assigned grad expected to be a complex Tensor or None but got "
                            f"grad of type {type(g).__name__}")
        self._ri.grad = None if g is None else g._ri

    def retain_grad(self):
        """Keep the gradient of this non-leaf in ``.grad``.

        >>> z = at.tensor([1j], requires_grad=True) * 2
        >>> z.retain_grad()
        """
        self._ri.retain_grad()

    # -- conversions -----------------------------------------------------------------------

    def numpy(self):
        """The value as a complex numpy array (read-only when the tensor requires grad).

        >>> at.tensor([1 + 2j]).numpy()
        array([1.+2.j])
        """
        return complex_view(self._ri.numpy())

    def __array__(self, dtype=None, copy=None):
        # (the parts' own conversion: the same refusal for a tensor that requires grad)
        a = complex_view(self._ri.__array__(copy=copy))
        return a if dtype is None or a.dtype == dtype else a.astype(dtype)

    def detach(self):
        """A new leaf that does not require grad, sharing the value.

        >>> at.tensor([1j], requires_grad=True).detach().requires_grad
        False
        """
        return ComplexTensor(self._ri.detach())

    def item(self):
        """The value of a one-element tensor as a Python complex.

        >>> at.tensor([1 + 2j]).item()
        (1+2j)
        """
        if self.size != 1:
            raise RuntimeError(f"a Tensor with {self.size} elements cannot be converted "
                               "to Scalar")
        return complex(self.detach().numpy().reshape(-1)[0])

    def tolist(self):
        """The values as nested lists of Python complex numbers.

        >>> at.tensor([1j]).tolist()
        [1j]
        """
        return self.detach().numpy().tolist()

    def __complex__(self):
        return self.item()

    def __float__(self):
        raise TypeError("can't convert a complex tensor to float (take .real or abs() "
                        "first)")

    def __bool__(self):
        return bool(self.item())

    def __iter__(self):
        if not self.shape:
            raise TypeError("iteration over a 0-d tensor")
        return (self[i] for i in range(self.shape[0]))

    def __repr__(self):
        body = np.array2string(self._ri.detach().numpy().view(self.dtype)[..., 0],
                               separator=", ", prefix="tensor(")
        extra = "" if self.dtype == C128 else f", dtype={self.dtype}"
        if self.requires_grad:
            extra += ", requires_grad=True" if self.is_leaf else ", grad_fn=<ComplexBackward>"
        return f"tensor({body}{extra})"

    __hash__ = object.__hash__


def complex_view(a):
    """A real array of shape ``S + (2,)`` as a complex array of shape S (no copy when
    it is C-contiguous)."""
    a = np.ascontiguousarray(a)
    if a.dtype not in COMPLEX_OF:
        a = a.astype(F64)
    return a.view(COMPLEX_OF[a.dtype])[..., 0]


def real_view(c):
    """A complex array as a real one of shape ``shape + (2,)`` (no copy when
    C-contiguous); a real array gets zero imaginary parts."""
    c = np.asarray(c)
    if c.dtype.kind != "c":
        c = c.astype(COMPLEX_OF.get(c.dtype, C128))
    elif c.dtype not in REAL_OF:
        c = c.astype(C128)
    if not c.flags.c_contiguous:
        c = c.copy()                 # (not ascontiguousarray: it makes 0-d arrays 1-d)
    return c.reshape(c.shape + (1,)).view(REAL_OF[c.dtype])


def constant(c):
    """Complex data (numbers, arrays, nested lists) as a ComplexTensor off the graph."""
    ri = real_view(np.array(c))
    return ComplexTensor(new_leaf(ri.copy(), ri.shape, ri.dtype))
