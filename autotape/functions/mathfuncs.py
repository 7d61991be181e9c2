"""numpy's elementwise functions composed of table ops: fabs, fmax, fmin, logaddexp2,
deg2rad / radians, rad2deg / degrees, sinc, nan_to_num, select. NaN and infinity tests
are comparisons (x != x, |x| == inf), so a compiled replay recomputes them."""
import numpy as np

from ..ops.elementwise import abs, compare, logaddexp, maximum, minimum, sin, where
from ..guards import observe
from ..ops.indexing import as_tensor, broadcast_to
from ..tensor import leaf_of

__all__ = ["fabs", "fmax", "fmin", "logaddexp2", "deg2rad", "rad2deg", "radians", "degrees",
           "sinc", "nan_to_num", "select", "signbit", "isin"]

_LN2 = np.log(2.0)


def _isnan(x):
    return compare(np.not_equal, x, x)


def fabs(x):
    """|x| (numpy.fabs: abs for real numbers).

    >>> at.fabs(at.tensor([-1.5, 2.0]))
    tensor([1.5, 2. ])
    """
    return abs(x)


def fmax(x, y):
    """Elementwise maximum that ignores a NaN (the other operand wins), as numpy.fmax.

    >>> x = at.tensor([1.0, 2.0, 3.0], requires_grad=True)
    >>> at.fmax(x, 2.0)
    tensor([2., 2., 3.], grad_fn=<WhereBackward>)
    """
    x, y = as_tensor(x), as_tensor(y)
    return where(_isnan(y), x, where(_isnan(x), y, maximum(x, y)))


def fmin(x, y):
    """Elementwise minimum that ignores a NaN, as numpy.fmin.

    >>> x = at.tensor([1.0, 2.0, 3.0], requires_grad=True)
    >>> at.fmin(x, 2.0)
    tensor([1., 2., 2.], grad_fn=<WhereBackward>)
    """
    x, y = as_tensor(x), as_tensor(y)
    return where(_isnan(y), x, where(_isnan(x), y, minimum(x, y)))


def logaddexp2(x, y):
    """log2(2**x + 2**y), without overflow.

    >>> x = at.tensor([1.0, 2.0, 3.0], requires_grad=True)
    >>> at.logaddexp2(x, x)
    tensor([2., 3., 4.], grad_fn=<DivideBackward>)
    """
    return logaddexp(as_tensor(x) * _LN2, as_tensor(y) * _LN2) / _LN2


def deg2rad(x):
    """Degrees to radians.

    >>> at.radians(at.tensor([90.0]))
    tensor([1.57079633])

    >>> at.deg2rad(at.tensor([180.0]))
    tensor([3.14159265])
    """
    return as_tensor(x) * (np.pi / 180.0)


def rad2deg(x):
    """Radians to degrees.

    >>> at.rad2deg(at.tensor([np.pi]))
    tensor([180.])

    >>> at.degrees(at.tensor([np.pi / 2]))
    tensor([90.])
    """
    return as_tensor(x) * (180.0 / np.pi)


radians, degrees = deg2rad, rad2deg

# Below this |x|, sinc is its Taylor polynomial: exact to rounding there, and its
# derivatives to every order that matters are those of sinc (sin(pi x) / (pi x) has a
# removable 0 / 0 at x = 0 that would give NaN derivatives).
_SINC_SERIES_BELOW = 1e-3


def sinc(x):
    """sin(pi x) / (pi x), 1 at x = 0, with exact derivatives there too.

    >>> x = at.tensor(0.0, requires_grad=True)
    >>> at.grad(at.sinc(x), x)
    (tensor(0.),)
    """
    x = as_tensor(x)
    small = compare(np.less, abs(x), _SINC_SERIES_BELOW)
    px = np.pi * where(small, 1.0, x)
    u = (np.pi * x) ** 2
    series = 1.0 - u / 6.0 + u * u / 120.0 - u * u * u / 5040.0
    return where(small, series, sin(px) / px)


def nan_to_num(x, copy=True, nan=0.0, posinf=None, neginf=None):
    """NaN, +inf and -inf replaced by ``nan``, ``posinf`` and ``neginf`` (numpy's
    defaults: 0 and the largest finite numbers); the gradient passes where x is finite.

    >>> at.nan_to_num(at.tensor([np.nan, 1.0]))
    tensor([0., 1.])
    """
    x = as_tensor(x)
    if x.dtype.kind != "f":
        return x.copy()
    info = np.finfo(x.dtype)
    posinf = info.max if posinf is None else posinf
    neginf = info.min if neginf is None else neginf
    out = where(_isnan(x), nan, x)
    out = where(compare(np.equal, x, np.inf), posinf, out)
    return where(compare(np.equal, x, -np.inf), neginf, out)


def select(condlist, choicelist, default=0):
    """numpy.select: each element from the first choice whose condition holds, else
    ``default``.

    >>> x = at.tensor([1.0, 2.0, 3.0], requires_grad=True)
    >>> at.select([x < 2, x > 2], [x, 10 * x], 0.0)
    tensor([ 1.,  0., 30.], grad_fn=<WhereBackward>)
    """
    if len(condlist) != len(choicelist):
        raise ValueError("list of cases must be same length as list of conditions")
    if not condlist:
        raise ValueError("select with an empty condition list is not possible")
    choices = [as_tensor(c) for c in choicelist]
    conds = [c if hasattr(c, "shape") and not isinstance(c, (list, tuple)) else
             np.asarray(c) for c in condlist]
    shape = np.broadcast_shapes(*(c.shape for c in choices), *(np.shape(c) for c in conds),
                                np.shape(default))
    out = broadcast_to(as_tensor(default), shape)
    for c, v in zip(reversed(conds), reversed(choices)):
        if getattr(c, "dtype", np.dtype(bool)) != np.dtype(bool):
            raise TypeError("invalid entry in condlist: should be boolean ndarray")
        out = where(c, v, out)
    return out


def signbit(x):
    """Whether each element's sign bit is set (-0.0 included), as numpy.signbit: a
    bool tensor (a decision, no gradient).

    >>> at.signbit(at.tensor([-1.0, -0.0, 2.0]))
    tensor([ True,  True, False])
    """
    return leaf_of(observe(np.signbit, as_tensor(x)))


def isin(elements, test_elements, *, assume_unique=False, invert=False):
    """Whether each element is in ``test_elements``, as numpy.isin and torch.isin: a
    bool tensor (a decision, no gradient).

    >>> at.isin(at.tensor([1.0, 2.0, 3.0]), [2.0, 5.0])
    tensor([False,  True, False])
    """
    test = test_elements.detach().numpy() if hasattr(test_elements, "detach") else \
        np.asarray(test_elements)
    return leaf_of(observe(lambda v: np.isin(v, test, assume_unique=assume_unique,
                                            invert=invert), as_tensor(elements)))
