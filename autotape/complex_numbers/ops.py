"""Ops on complex numbers, in two kinds.

* Primitives. Arithmetic, the elementwise functions numpy defines on complex numbers,
  abs, angle, conj, where (and the FFTs in fft.py) are each one recorded op: numpy
  computes it on complex views of the parts (a real operand stays real: numpy mixes
  them), and its VJP is written below with these same ops, so that it is differentiated
  again (create_graph, Hessians). For a holomorphic f the VJP is ``g * conj(f'(z))``,
  so the table below lists f' and nothing else; a real operand's cotangent is the real
  part of the complex one.
* Real ops on the parts. Whatever moves numbers without combining them (sums,
  reshapes, indexing, joining) is the same real op on the ``shape + (2,)`` parts
  Tensor, and products (matmul, einsum, dot, ...) are real products of the parts
  combined: (a + ib)(c + id) = (ac - bd) + i(ad + bc).
"""
import math

import numpy as np

from ..custom import CustomOp
from ..functions import products, shaping, stacking
from ..ops import elementwise as real_ops, reduce as real_reduce
from ..ops.indexing import as_tensor, broadcast_to as real_broadcast_to, concatenate as real_concatenate
from ..ops.indexing import stack as real_stack
from ..ops.linalg import matmul as real_matmul
from ..ops.subscript import getitem as real_getitem, setitem as real_setitem
from ..parallel import pieces, ufunc_in_threads
from ..tensor import Tensor, array_of, canonical, is_complex_data, new_leaf
from .tensor import ComplexTensor, complex_view, constant, real_view


# ---- making complex operands -----------------------------------------------------------------

def is_complex(v):
    return isinstance(v, ComplexTensor) or is_complex_data(v)


def as_complex(v):
    """v as a ComplexTensor: complex ones as they are, real ones with zero imaginary
    parts (recorded, so a gradient reaches the real tensor)."""
    if isinstance(v, ComplexTensor):
        return v
    if not isinstance(v, Tensor) and is_complex_data(v):
        return constant(v)
    return from_real(v)


def _real_tensor(v):
    x = as_tensor(v)
    return x if x.dtype.kind == "f" else x.astype(np.float64)


def make_complex(real, imag):
    """``real + 1j * imag`` from real tensors (torch.complex); broadcast alike.

    >>> at.complex(at.tensor([1.0]), at.tensor([2.0]))
    tensor([1.+2.j])
    """
    if is_complex(real) or is_complex(imag):
        raise TypeError("complex(real, imag) takes real tensors")
    real, imag = _real_tensor(real), _real_tensor(imag)
    shape = np.broadcast_shapes(real.shape, imag.shape)
    if real.shape != shape:
        real = real_broadcast_to(real, shape)
    if imag.shape != shape:
        imag = real_broadcast_to(imag, shape)
    return ComplexTensor(real_stack([real, imag], axis=-1))


# ---- primitives --------------------------------------------------------------------------

class Primitive(CustomOp):
    """A complex op as one recorded row: ``forward`` computes it with numpy on complex
    (kind "c") or real ("r") operands; ``vjps`` has one function per operand, ``vjp(g,
    out, *xs, **params)``, giving its cotangent with ComplexTensor ops (None: no
    derivative; for a real operand, the real part is taken). ``params`` are fixed for
    the row (an FFT's axis and norm)."""

    def __init__(self, name, forward, vjps, kinds, out_kind, params=None, elementwise=False):
        super().__init__(self._forward, self._vjp, name)
        self.spec_forward, self.vjps, self.elementwise = forward, vjps, elementwise
        self.kinds, self.out_kind, self.params = kinds, out_kind, params or {}
        self.keeps_cotangent = True     # (its vjp never writes to g: the sweep need
                                        # not copy it first)

    def __call__(self, *operands):
        tensors = [o._ri if k == "c" else o for o, k in zip(operands, self.kinds)]
        out = self._forward(*[array_of(t) for t in tensors])
        result = self.record(tensors, out)
        return ComplexTensor(result) if self.out_kind == "c" else result

    def value(self, values, shape=None):
        out = self._forward(*[np.asarray(v) for v in values])
        if shape is not None and out.shape != tuple(shape):
            raise RuntimeError(f"complex op {self.name}: a compiled replay gave shape "
                               f"{out.shape} where it was recorded with {tuple(shape)}")
        return np.asarray(out, np.float64)

    def _forward(self, *values):
        args = [complex_view(v) if k == "c" else np.asarray(v) for v, k in
                zip(values, self.kinds)]
        with np.errstate(all="ignore"):
            out = _in_threads(self.spec_forward, args) if self.elementwise else None
            if out is None:
                out = self.spec_forward(*args, **self.params)
        if self.out_kind == "c":
            return real_view(out)
        out = np.asarray(out)
        out = out if out.dtype.kind == "f" else out.astype(np.float64)
        return out if out.flags.c_contiguous else out.copy()

    def cotangents(self, inputs, output, g, needed=None):
        """The VJPs of the operands ``needed`` (all by default; a constant's is not)."""
        return list(self._vjp(inputs, output, g, needed))

    def _vjp(self, inputs, output, g, needed=None):
        numbers = not isinstance(g, Tensor)       # the sweep's numpy values, not a graph
        wrap = (lambda v, k: _wrapped(v, k, numbers))
        xs = [wrap(v, k) for v, k in zip(inputs, self.kinds)]
        g, output = wrap(g, self.out_kind), wrap(output, self.out_kind)
        cots = [None if vjp is None or (needed is not None and not needed[k]) else
                vjp(g, output, *xs, **self.params) for k, vjp in enumerate(self.vjps)]
        out = []
        for c, k in zip(cots, self.kinds):
            if c is None:
                out.append(None)
                continue
            if k == "c":
                c = as_complex(c)._ri
            elif isinstance(c, ComplexTensor):
                c = real(c)
            out.append(array_of(c) if numbers else c)
        return tuple(out)


def _in_threads(ufunc, args):
    """An elementwise ufunc on large operands of one shape (or numbers), in pieces on
    autotape's threads (numpy's loop on each: its values to the bit); None where it
    does not split."""
    shape = next((a.shape for a in args if a.ndim), None)
    if shape is None or any(a.ndim and a.shape != shape for a in args):
        return None
    size = int(np.prod(shape, dtype=np.int64))
    count = pieces(size)
    if count == 1:
        return None
    flat = [a.reshape(-1) if a.ndim else a[()] for a in args]
    dtype = ufunc(*[a[:1] if isinstance(a, np.ndarray) else a for a in flat]).dtype
    out = np.empty(shape, dtype)
    ufunc_in_threads(ufunc, flat, out.reshape(-1), count)
    return out


def _wrapped(v, kind, numbers):
    t = new_leaf(*canonical(np.asarray(v))) if numbers else v
    return ComplexTensor(t) if kind == "c" else t


def primitive(name, forward, vjps, kinds="c", out_kind="c", elementwise=False, **params):
    """The function applying a Primitive (see the class) to its operands, with its
    parameters (``params``, and keywords of the call). ``kinds``: one letter per
    operand, "c" (made complex), "r" (real) or "a" (as it comes: real operands stay
    real, which numpy computes with directly). ``elementwise``: forward is a ufunc,
    which large operands run in pieces on autotape's threads."""
    def apply(*operands, **more):
        ks = "".join(("c" if is_complex(o) else "r") if k == "a" else k
                     for o, k in zip(operands, kinds))
        ops = [as_complex(o) if k == "c" else _real_tensor(o) for o, k in zip(operands, ks)]
        return Primitive(name, forward, vjps, ks, out_kind, {**params, **more},
                         elementwise)(*ops)
    apply.__name__ = name
    return apply


def sum_to(c, shape):
    """A cotangent summed over the axes broadcasting added (to an operand of ``shape``)."""
    if c.shape == tuple(shape):
        return c
    lead = c.ndim - len(shape)
    axes = tuple(range(lead)) + tuple(lead + k for k, n in enumerate(shape)
                                      if n == 1 and c.shape[lead + k] != 1)
    total = csum(c, axis=axes) if isinstance(c, ComplexTensor) else \
        real_reduce.sum(c, axis=axes)
    return reshape(total, shape) if isinstance(total, ComplexTensor) else \
        total.reshape(shape)


# ---- the parts -----------------------------------------------------------------------------

_conj = primitive("conjugate", np.conjugate, (lambda g, out, z: conj(g),), elementwise=True)
_real = primitive("real", lambda z: np.real(z).copy(), (lambda g, out, z: from_real(g),),
                  out_kind="r")
_imag = primitive("imag", lambda z: np.imag(z).copy(), (lambda g, out, z: multiply(g, 1j),),
                  out_kind="r")
from_real = primitive("from_real", lambda x: x.astype(np.result_type(x, np.complex64)),
                      (lambda g, out, x: g,), kinds="r")
from_real.__doc__ = """A real tensor as a complex one (x + 0j).

    >>> at.complex_numbers.ops.from_real(at.tensor([1.0, 2.0]))
    tensor([1.+0.j, 2.+0.j])
    """


def real(z):
    """The real parts (for a real tensor: itself).

    >>> at.real(at.tensor([1 + 2j]))
    tensor([1.])
    """
    return _real(z) if is_complex(z) else as_tensor(z)


def imag(z):
    """The imaginary parts (for a real tensor: zeros).

    >>> at.imag(at.tensor([1 + 2j]))
    tensor([2.])
    """
    return _imag(z) if is_complex(z) else as_tensor(z) * 0.0


def conj(z):
    """The complex conjugate (for a real tensor: itself).

    >>> at.conj(at.tensor([1 + 2j]))
    tensor([1.-2.j])
    """
    return _conj(z) if is_complex(z) else as_tensor(z)


# ---- elementwise: the holomorphic table -----------------------------------------------------

LN2, LN10 = math.log(2.0), math.log(10.0)

# numpy name: f'(z), from z and w = f(z)
DERIVATIVES = {
    "exp": lambda z, w: w,
    "exp2": lambda z, w: w * LN2,
    "expm1": lambda z, w: w + 1,
    "log": lambda z, w: 1 / z,
    "log2": lambda z, w: 1 / (z * LN2),
    "log10": lambda z, w: 1 / (z * LN10),
    "log1p": lambda z, w: 1 / (z + 1),
    "sqrt": lambda z, w: 0.5 / w,
    "square": lambda z, w: 2 * z,
    "reciprocal": lambda z, w: -(w * w),
    "sin": lambda z, w: cos(z),
    "cos": lambda z, w: -sin(z),
    "tan": lambda z, w: 1 + w * w,
    "sinh": lambda z, w: cosh(z),
    "cosh": lambda z, w: sinh(z),
    "tanh": lambda z, w: 1 - w * w,
    "arcsin": lambda z, w: 1 / sqrt(1 - z * z),
    "arccos": lambda z, w: -1 / sqrt(1 - z * z),
    "arctan": lambda z, w: 1 / (1 + z * z),
    "arcsinh": lambda z, w: 1 / sqrt(z * z + 1),
    "arccosh": lambda z, w: 1 / (sqrt(z - 1) * sqrt(z + 1)),
    "arctanh": lambda z, w: 1 / (1 - z * z),
}


def _holomorphic(name, derivative):
    fn = primitive(name, getattr(np, name),
                   (lambda g, w, z: multiply_conj(g, derivative(z, w)),), elementwise=True)
    fn.__doc__ = f"""numpy.{name} of complex numbers (numpy's values and branch cuts),
    differentiable: its VJP is g * conj(f'(z)).

    >>> at.{name}(at.tensor([0.5 + 0.5j])).dtype
    dtype('complex128')
    """
    return fn


_unary = {name: _holomorphic(name, d) for name, d in DERIVATIVES.items()}
(exp, exp2, expm1, log, log2, log10, log1p, sqrt, square, reciprocal, sin, cos, tan, sinh,
 cosh, tanh, arcsin, arccos, arctan, arcsinh, arccosh, arctanh) = (
    _unary[name] for name in DERIVATIVES)


def _over(g, r):
    """g / r, and 0 where r is 0 (the derivatives of |z| and angle(z) there: torch's);
    1 / inf is 0, and so is its derivative."""
    return g / real_ops.where(r > 0, r, math.inf)


absolute = primitive("absolute", np.abs, (lambda g, r, z: multiply(z, _over(g, r)),),
                     out_kind="r", elementwise=True)     # (g z / |z|: torch's sgn)
_angle = primitive("angle", np.angle,              # d angle = (x dy - y dx) / |z|^2
                   (lambda g, theta, z: multiply(z, 1j * _over(g, absolute(z) ** 2)),),
                   out_kind="r")


def angle(z, deg=False):
    """The argument of each number, in radians (degrees with ``deg``).

    >>> at.angle(at.tensor([1j]))
    tensor([1.57079633])
    """
    if not is_complex(z):
        x = as_tensor(z)
        out = real_ops.where(x < 0, math.pi, 0.0) + x * 0.0
    else:
        out = _angle(z)
    return out * (180.0 / math.pi) if deg else out


# ---- arithmetic ----------------------------------------------------------------------------
#
# Operands "as they come" ("aa"): numpy mixes a complex operand with a real one itself,
# and a real operand's cotangent is the real part of the one written here.

def _times_conj(x, y, out=None):
    """x * conj(y) (a ufunc's signature, for _in_threads)."""
    c = np.conjugate(y, out=out) if out is not None else np.conjugate(y)
    if out is None and isinstance(c, np.ndarray) and c.ndim and \
            c.shape == np.broadcast_shapes(np.shape(x), c.shape) and \
            c.dtype == np.result_type(x, c):
        out = c
    return np.multiply(x, c, out=out)


# name, numpy's function, then the cotangent of each operand from g, out = f(x, y), x, y
add = primitive("add", np.add, (lambda g, out, x, y: sum_to(g, x.shape),
                                lambda g, out, x, y: sum_to(g, y.shape)), kinds="aa", elementwise=True)
subtract = primitive("subtract", np.subtract, (
    lambda g, out, x, y: sum_to(g, x.shape),
    lambda g, out, x, y: sum_to(negative(g), y.shape)), kinds="aa", elementwise=True)
multiply = primitive("multiply", np.multiply, (
    lambda g, out, x, y: sum_to(multiply_conj(g, y), x.shape),
    lambda g, out, x, y: sum_to(multiply_conj(g, x), y.shape)), kinds="aa", elementwise=True)
multiply_conj = primitive("multiply_conj", _times_conj, (                 # x conj(y)
    lambda g, out, x, y: sum_to(multiply(g, y), x.shape),
    lambda g, out, x, y: sum_to(multiply_conj(x, g), y.shape)), kinds="aa", elementwise=True)
divide = primitive("divide", np.divide, (
    lambda g, out, x, y: sum_to(divide(g, conj(y)), x.shape),
    lambda g, out, x, y: sum_to(negative(multiply_conj(g, divide(out, y))), y.shape)),
    kinds="aa", elementwise=True)
_pow = primitive("power", np.power, (
    lambda g, out, x, y: sum_to(multiply_conj(g, multiply(y, power(x, subtract(y, 1)))),
                                x.shape),
    lambda g, out, x, y: sum_to(multiply_conj(g, multiply(out, log(x))), y.shape)),
    kinds="aa", elementwise=True)
negative = primitive("negative", np.negative, (lambda g, out, z: negative(g),),
                     elementwise=True)
add.__doc__ = """x + y with complex operands.

    >>> at.tensor([1j]) + 1.0
    tensor([1.+1.j])
    """
subtract.__doc__ = """x - y with complex operands.

    >>> at.tensor([1j]) - 1.0
    tensor([-1.+1.j])
    """
multiply.__doc__ = """x * y with complex operands.

    >>> at.tensor([1j]) * 1j
    tensor([-1.+0.j])
    """
multiply_conj.__doc__ = """x * conj(y), in one pass (the VJPs' product).

    >>> at.complex_numbers.ops.multiply_conj(at.tensor([1j]), at.tensor([1j]))
    tensor([1.+0.j])
    """
divide.__doc__ = """x / y with complex operands.

    >>> at.tensor([2j]) / 2.0
    tensor([0.+1.j])
    """
negative.__doc__ = """-z.

    >>> -at.tensor([1j])
    tensor([-0.-1.j])
    """


def sign(z):
    """z / |z|, and 0 at 0 (numpy 2's sign of complex numbers, torch's sgn).

    >>> at.sign(at.tensor([3 + 4j, 0j]))
    tensor([0.6+0.8j, 0. +0.j ])
    """
    z = as_complex(z)
    return multiply(z, _over(1.0, absolute(z)))


def power(x, y):
    """x ** y with complex operands; a small integer power is repeated products.

    >>> at.tensor([1j]) ** 2
    tensor([-1.+0.j])
    """
    if isinstance(y, (int, np.integer)) and not isinstance(y, bool) and 0 <= y <= 4:
        x = as_complex(x)
        if y == 0:
            return add(multiply(x, 0.0), 1.0)
        out = x
        for _ in range(y - 1):
            out = multiply(out, x)
        return out
    return _pow(x, y)


def equal(x, y):
    """Elementwise x == y (both parts equal): a bool tensor.

    >>> at.equal(at.tensor([1j, 1.0]), 1j)
    tensor([ True, False])
    """
    return real_reduce.amin(real_ops.equal(as_complex(x)._ri, as_complex(y)._ri) * 1.0,
                            axis=-1) > 0.5


def not_equal(x, y):
    """Elementwise x != y: a bool tensor.

    >>> at.not_equal(at.tensor([1j, 1.0]), 1j)
    tensor([False,  True])
    """
    return real_ops.equal(equal(x, y) * 1.0, 0.0)


# ---- shapes and indexing: the same real ops on the parts -----------------------------------

def _axis(axis, ndim):
    """A numpy axis (negative counts from the end) of a complex tensor, as an axis of
    its parts (whose last axis is the pair)."""
    if not -ndim <= axis < ndim:
        raise np.exceptions.AxisError(f"axis {axis} is out of bounds for array of "
                                      f"dimension {ndim}")
    return axis % ndim


def _axes(axis, ndim):
    if axis is None:
        return tuple(range(ndim))
    if isinstance(axis, (tuple, list)):
        return tuple(_axis(a, ndim) for a in axis)
    return _axis(axis, ndim)


def _index(index):
    """An index of a complex tensor as the same index of its parts."""
    index = index if isinstance(index, tuple) else (index,)
    if any(i is Ellipsis for i in index):
        return index + (slice(None),)
    return index + (Ellipsis, slice(None))


def getitem(z, index):
    """z[index], as numpy (basic, advanced and boolean indices).

    >>> at.tensor([1j, 2.0])[1]
    tensor(2.+0.j)
    """
    return ComplexTensor(real_getitem(as_complex(z)._ri, _index(index)))


def setitem(z, index, value):
    """z[index] = value, as for real tensors (recorded; torch's rules on leaves)."""
    real_setitem(z._ri, _index(index), as_complex(value)._ri)


def reshape(z, *shape):
    """The same numbers in a new shape (one length may be -1).

    >>> at.reshape(at.tensor([1j, 2.0]), (2, 1)).shape
    (2, 1)
    """
    z = as_complex(z)
    if len(shape) == 1:
        shape = shape[0]
    shape = (shape,) if isinstance(shape, (int, np.integer)) else tuple(shape)
    shape = np.empty(z.shape, np.bool_).reshape(shape).shape
    return ComplexTensor(z._ri.reshape(shape + (2,)))


def transpose(z, axes=None):
    """Axes permuted (reversed by default).

    >>> at.transpose(at.tensor([[1j, 2.0]])).shape
    (2, 1)
    """
    z = as_complex(z)
    axes = tuple(reversed(range(z.ndim))) if axes is None else _axes(axes, z.ndim)
    return ComplexTensor(z._ri.transpose(axes + (z.ndim,)))


def _kept_shape(shape, axes):
    return tuple(1 if k in axes else n for k, n in enumerate(shape))


_sum = primitive("sum", lambda z, axis, keepdims: np.sum(z, axis=axis, keepdims=keepdims), (
    lambda g, out, z, axis, keepdims: broadcast_to(reshape(g, _kept_shape(z.shape, axis)),
                                                   z.shape),))


def csum(z, axis=None, keepdims=False, **_):
    """Sum over axes.

    >>> at.sum(at.tensor([1j, 2.0]))
    tensor(2.+1.j)
    """
    z = as_complex(z)
    axes = _axes(axis, z.ndim)
    return _sum(z, axis=axes if isinstance(axes, tuple) else (axes,), keepdims=keepdims)


def mean(z, axis=None, keepdims=False, **_):
    """Mean over axes.

    >>> at.mean(at.tensor([1j, 2.0]))
    tensor(1.+0.5j)
    """
    z = as_complex(z)
    axes = _axes(axis, z.ndim)
    axes = axes if isinstance(axes, tuple) else (axes,)
    count = int(np.prod([z.shape[a] for a in axes], dtype=np.int64))
    return divide(csum(z, axes, keepdims), float(count))


def prod(z, axis=None, keepdims=False, **_):
    """The product over axes: halves multiplied pairwise (log2 n recorded products), so
    its derivative is the product rule's, exact where numbers are 0.

    >>> at.prod(at.tensor([1j, 2.0, 1j]))
    tensor(-2.+0.j)
    """
    z = as_complex(z)
    axes = _axes(axis, z.ndim)
    axes = axes if isinstance(axes, tuple) else (axes,)
    kept = _kept_shape(z.shape, axes)
    rest = [k for k in range(z.ndim) if k not in axes]
    order = tuple(axes) + tuple(rest)
    moved = transpose(z, order) if order != tuple(range(z.ndim)) else z
    out = reshape(moved, (-1,) + tuple(z.shape[k] for k in rest))
    while out.shape[0] > 1:
        if out.shape[0] % 2:
            out = concatenate([out, broadcast_to(1.0 + 0j, (1,) + out.shape[1:])], axis=0)
        half = out.shape[0] // 2
        out = multiply(out[:half], out[half:])
    if out.shape[0] == 0:
        out = broadcast_to(1.0 + 0j, (1,) + out.shape[1:])
    out = reshape(out, tuple(z.shape[k] for k in rest))
    return reshape(out, kept) if keepdims else out


def _extreme(pick):
    def extreme(z, axis=None, keepdims=False, **_):
        z = as_complex(z)
        if axis is None:
            z, axis = reshape(z, -1), 0
        axis = _axis(axis, z.ndim)
        index = np.expand_dims(pick(z.detach().numpy(), axis=axis), axis)
        grids = list(np.indices(index.shape, sparse=True))
        grids[axis] = index
        out = getitem(z, tuple(grids))
        return out if keepdims else squeeze(out, axis)
    return extreme


amax, amin = _extreme(np.argmax), _extreme(np.argmin)
amax.__name__, amin.__name__ = "amax", "amin"
amax.__doc__ = """The largest number in numpy's order of complex numbers (by real part, then
    imaginary part); its gradient goes to that element.

    >>> at.max(at.tensor([1j, 2.0, 2 - 1j]))
    tensor(2.+0.j)
    """
amin.__doc__ = """The smallest number in numpy's order of complex numbers.

    >>> at.min(at.tensor([1j, 2.0]))
    tensor(0.+1.j)
    """


def var(z, axis=None, dtype=None, out=None, ddof=0, keepdims=False, **_):
    """The variance, mean(|z - mean(z)|^2) (real, as numpy's).

    >>> at.var(at.tensor([1j, -1j]))
    tensor(1.)
    """
    z = as_complex(z)
    d = subtract(z, mean(z, axis, keepdims=True))
    axes = _axes(axis, z.ndim)
    axes = axes if isinstance(axes, tuple) else (axes,)
    count = int(np.prod([z.shape[a] for a in axes], dtype=np.int64))
    squares = real(multiply_conj(d, d))
    return real_reduce.sum(squares, axis=axes, keepdims=keepdims) / max(count - ddof, 0)


def std(z, axis=None, dtype=None, out=None, ddof=0, keepdims=False, **_):
    """The standard deviation, sqrt(var) (real).

    >>> at.std(at.tensor([1j, -1j]))
    tensor(1.)
    """
    v = var(z, axis, ddof=ddof, keepdims=keepdims)
    positive = v > 0                      # (0 where the numbers are all equal: so is its
    return real_ops.where(positive, real_ops.sqrt(real_ops.where(positive, v, 1.0)), 0.0)
                                          #  derivative, rather than 0 * inf)


def real_if_close(z, tol=100):
    """The real parts when every imaginary part is within ``tol`` machine epsilons of
    0 (numpy.real_if_close), else z.

    >>> np.real_if_close(at.tensor([2.0 + 1e-20j], requires_grad=True)).dtype
    dtype('float64')
    """
    if not is_complex(z):
        return as_tensor(z)
    z = as_complex(z)
    eps = np.finfo(z.dtype).eps
    close = bool(np.all(np.abs(np.imag(z.detach().numpy())) < tol * eps))
    return real(z) if close else z


def cumsum(z, axis=None):
    """Running sums along an axis (of the flattened numbers without one).

    >>> at.cumsum(at.tensor([1j, 2.0]))
    tensor([0.+1.j, 2.+1.j])
    """
    z = as_complex(z)
    if axis is None:
        z, axis = reshape(z, -1), 0
    return ComplexTensor(real_reduce.cumsum(z._ri, axis=_axis(axis, z.ndim)))


def concatenate(arrays, axis=0):
    """Join along an existing axis (axis=None: flattened first).

    >>> at.concatenate([at.tensor([1j]), at.tensor([2.0])])
    tensor([0.+1.j, 2.+0.j])
    """
    zs = [as_complex(a) for a in arrays]
    if axis is None:
        zs, axis = [reshape(z, -1) for z in zs], 0
    return ComplexTensor(real_concatenate([z._ri for z in zs], axis=_axis(axis, zs[0].ndim)))


def stack(arrays, axis=0):
    """Join along a new axis.

    >>> at.stack([at.tensor([1j]), at.tensor([2.0])]).shape
    (2, 1)
    """
    zs = [as_complex(a) for a in arrays]
    return ComplexTensor(real_stack([z._ri for z in zs], axis=_axis(axis, zs[0].ndim + 1)))


_broadcast = primitive("broadcast_to", lambda z, shape: np.broadcast_to(z, shape).copy(),
                       (lambda g, out, z, shape: sum_to(g, z.shape),))


def broadcast_to(z, shape):
    """The numbers broadcast to ``shape`` (a copy).

    >>> at.broadcast_to(at.tensor(1j), (2,)).shape
    (2,)
    """
    z = as_complex(z)
    shape = (shape,) if isinstance(shape, (int, np.integer)) else tuple(shape)
    return z if z.shape == shape else _broadcast(z, shape=shape)


_where = primitive("where", lambda c, x, y: np.where(c != 0, x, y), (
    None, lambda g, out, c, x, y: sum_to(where(c, g, 0.0), x.shape),
    lambda g, out, c, x, y: sum_to(where(c, 0.0, g), y.shape)), kinds="raa")


def where(condition, x, y):
    """x where condition holds, else y (either may be complex).

    >>> at.where(at.tensor([True, False]), 1j, 2.0)
    tensor([0.+1.j, 2.+0.j])
    """
    c = as_tensor(condition)
    return _where(c.astype(np.float64) if c.dtype.kind != "f" else c, x, y)


def _on_parts(fn, example):
    """numpy's ``fn`` (a shaping function whose axis arguments come second and third)
    applied to the parts, the axes mapped to theirs."""
    def apply(z, *args):
        z = as_complex(z)
        return ComplexTensor(fn(z._ri, *[_axes(a, z.ndim) for a in args]))
    apply.__name__ = fn.__name__
    apply.__doc__ = f"""numpy.{fn.__name__} of a complex tensor.

    >>> {example}
    """
    return apply


def flip(z, axis=None):
    """The numbers in reverse order along ``axis`` (all axes by default).

    >>> at.flip(at.tensor([1j, 2.0]))
    tensor([2.+0.j, 0.+1.j])
    """
    z = as_complex(z)
    return ComplexTensor(shaping.flip(z._ri, axis=_axes(axis, z.ndim)))


def roll(z, shift, axis=None):
    """The numbers shifted cyclically along ``axis`` (of the flattened array without).

    >>> at.roll(at.tensor([1j, 2.0, 3.0]), 1)
    tensor([3.+0.j, 0.+1.j, 2.+0.j])
    """
    z = as_complex(z)
    if axis is None:
        return reshape(roll(reshape(z, -1), shift, 0), z.shape)
    return ComplexTensor(shaping.roll(z._ri, shift, axis=_axes(axis, z.ndim)))


def expand_dims(z, axis):
    """A new axis of length 1 at ``axis``.

    >>> at.expand_dims(at.tensor([1j, 2.0]), 0).shape
    (1, 2)
    """
    z = as_complex(z)
    axes = axis if isinstance(axis, (tuple, list)) else (axis,)
    n = z.ndim + len(axes)
    return ComplexTensor(shaping.expand_dims(z._ri, tuple(_axis(a, n) for a in axes)))


def squeeze(z, axis=None):
    """Axes of length 1 removed (those given, or all).

    >>> at.squeeze(at.tensor([[1j, 2.0]])).shape
    (2,)
    """
    z = as_complex(z)
    if axis is None:
        axis = tuple(k for k, n in enumerate(z.shape) if n == 1)
    return ComplexTensor(shaping.squeeze(z._ri, axis=_axes(axis, z.ndim)))


def ravel(z):
    """The numbers as a 1-D tensor.

    >>> at.ravel(at.tensor([[1j], [2.0]])).shape
    (2,)
    """
    return reshape(z, -1)


def diagonal(z, offset=0, axis1=0, axis2=1):
    """The diagonal of the 2-D slices over ``axis1`` and ``axis2`` (on the last axis).

    >>> at.diagonal(at.tensor([[1j, 2.0], [3.0, 4j]]))
    tensor([0.+1.j, 0.+4.j])
    """
    z = as_complex(z)
    d = shaping.diagonal(z._ri, offset, _axis(axis1, z.ndim), _axis(axis2, z.ndim))
    return ComplexTensor(shaping.moveaxis(d, -1, -2))    # (the pair axis stays last)


def trace(z, offset=0, axis1=0, axis2=1):
    """The sum of the diagonal.

    >>> at.trace(at.tensor([[1j, 2.0], [3.0, 4j]]))
    tensor(0.+5.j)
    """
    return csum(diagonal(z, offset, axis1, axis2), axis=-1)


def _triangle(fn, name):
    def apply(z, k=0):
        z = as_complex(z)
        return where(fn(np.ones(z.shape[-2:]), k) > 0, z, 0.0)
    apply.__name__ = name
    apply.__doc__ = f"""numpy.{name} of a complex tensor.

    >>> at.{name}(at.tensor([[1j, 2.0], [3.0, 4j]])).shape
    (2, 2)
    """
    return apply


SHAPING = {
    "flip": flip, "roll": roll, "expand_dims": expand_dims, "squeeze": squeeze,
    "ravel": ravel, "trace": trace, "diagonal": diagonal,
    "swapaxes": _on_parts(shaping.swapaxes, "at.swapaxes(at.tensor([[1j, 2.0]]), 0, 1).shape\n    (2, 1)"),
    "moveaxis": _on_parts(shaping.moveaxis, "at.moveaxis(at.tensor([[1j, 2.0]]), 0, 1).shape\n    (2, 1)"),
    "fliplr": lambda z: flip(z, 1), "flipud": lambda z: flip(z, 0),
    "tril": _triangle(shaping.tril, "tril"), "triu": _triangle(shaping.triu, "triu"),
}


# ---- products: multilinear in their operands --------------------------------------------------

def multilinear(fn, *operands):
    """fn(*operands) for a function linear in each operand (matmul, einsum, ...), with
    complex operands: expanded over their real and imaginary parts, i^k sorting each
    term into the real or the imaginary part of the result."""
    parts = []
    for o in operands:
        if isinstance(o, ComplexTensor) or is_complex_data(o):
            z = as_complex(o)
            parts.append((z._ri[..., 0], z._ri[..., 1]))
        else:
            parts.append((as_tensor(o),))
    re, im = None, None
    for choice in np.ndindex(*[len(p) for p in parts]):
        k = sum(choice)                                  # how many imaginary factors
        term = fn(*[p[c] for p, c in zip(parts, choice)])
        sign = -1.0 if k % 4 in (2, 3) else 1.0
        term = term if sign > 0 else -term
        if k % 2 == 0:
            re = term if re is None else re + term
        else:
            im = term if im is None else im + term
    if im is None:
        return re
    return make_complex(re if re is not None else im * 0.0, im)


def matmul(a, b):
    """Matrix product with complex operands.

    >>> at.matmul(at.tensor([[1j]]), at.tensor([[1j]]))
    tensor([[-1.+0.j]])
    """
    return multilinear(real_matmul, a, b)


def einsum(subscripts, *operands, **kwargs):
    """numpy.einsum with complex operands.

    >>> at.einsum("i,i->", at.tensor([1j, 1.0]), at.tensor([1j, 2.0]))
    tensor(1.+0.j)
    """
    return multilinear(lambda *xs: products.einsum(subscripts, *xs, **kwargs), *operands)


def _bilinear(fn):
    def apply(a, b, *args, **kwargs):
        return multilinear(lambda x, y: fn(x, y, *args, **kwargs), a, b)
    apply.__name__ = fn.__name__
    apply.__doc__ = f"""numpy.{fn.__name__} with complex operands.

    >>> at.{fn.__name__}(at.tensor([1j, 2.0]), at.tensor([1j, 1.0])).dtype
    dtype('complex128')
    """
    return apply


def vdot(a, b):
    """numpy.vdot: sum(conj(a) * b) over the flattened operands.

    >>> at.vdot(at.tensor([1j]), at.tensor([1j]))
    tensor(1.+0.j)
    """
    return multilinear(products.vdot, conj(a), b)


PRODUCTS = {"dot": _bilinear(products.dot), "inner": _bilinear(products.inner),
            "outer": _bilinear(products.outer), "tensordot": _bilinear(products.tensordot),
            "kron": _bilinear(stacking.kron)}
