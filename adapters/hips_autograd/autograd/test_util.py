"""autograd.test_util's check_grads and combo_check, computed with autotape: the
reverse-mode VJP (and forward-mode JVP) of f at x against central differences along a
random direction, then the same for the derivative itself (order 2).

Complex values are vectors of their parts: directions are complex where a value is,
and <a, b> = Re(sum(conj(a) b)), the real inner product of the parts, under which
autotape's VJP (torch's convention) is the adjoint of its JVP."""
from itertools import product

import numpy as onp

import autotape.func as F
from autotape import ComplexTensor, Tensor

TOL = 1e-6
RTOL = 1e-6
EPS = 1e-6


def scalar_close(a, b):
    return abs(a - b) < TOL or abs(a - b) / abs(a + b) < RTOL


def _leaves(tree):
    if isinstance(tree, (tuple, list)):
        return [leaf for t in tree for leaf in _leaves(t)]
    if isinstance(tree, dict):
        return [leaf for k in tree for leaf in _leaves(tree[k])]
    return [tree]


def _rebuild(tree, leaves):
    it = iter(leaves)

    def go(t):
        if isinstance(t, (tuple, list)):
            return type(t)(go(s) for s in t)
        if isinstance(t, dict):
            return {k: go(t[k]) for k in t}
        return next(it)
    return go(tree)


def _array(v):
    if isinstance(v, (Tensor, ComplexTensor)):
        v = v.detach().numpy()
    v = onp.asarray(v)
    return v.astype(onp.complex128 if onp.iscomplexobj(v) else onp.float64)


def _randn_like(tree):
    def randn(v):
        a = _array(v)
        r = onp.random.randn(*a.shape)
        return r + 1j * onp.random.randn(*a.shape) if onp.iscomplexobj(a) else r
    return _rebuild(tree, [randn(v) for v in _leaves(tree)])


def _inner(a, b):
    return sum(float(onp.real(onp.sum(onp.conj(_array(x)) * _array(y))))
               for x, y in zip(_leaves(a), _leaves(b)))


def _shifted(x, v, step):
    return _rebuild(x, [_array(a) + step * _array(d) for a, d in zip(_leaves(x), _leaves(v))])


def _numeric_jvp(f, x, v):
    plus, minus = f(_shifted(x, v, EPS / 2)), f(_shifted(x, v, -EPS / 2))
    return _rebuild(plus, [(_array(p) - _array(m)) / EPS
                           for p, m in zip(_leaves(plus), _leaves(minus))])


def check_vjp(f, x):
    out, vjp_fn = F.vjp(f, x)
    x_v, y_v = _randn_like(x), _randn_like(out)
    exact = _inner(x_v, vjp_fn(y_v)[0])
    numeric = _inner(y_v, _numeric_jvp(f, x, x_v))
    assert scalar_close(numeric, exact), (
        f"Derivative (VJP) check failed:\nanalytic: {exact}\nnumeric:  {numeric}")


def check_jvp(f, x):
    x_v = _randn_like(x)
    exact = F.jvp(f, (x,), (x_v,))[1]
    numeric = _numeric_jvp(f, x, x_v)
    w = _randn_like(numeric)
    assert scalar_close(_inner(exact, w), _inner(numeric, w)), "Derivative (JVP) check failed"


def _check(f, x, modes, order):
    if "fwd" in modes:
        check_jvp(f, x)
        if order > 1:
            v = _randn_like(x)
            _check(lambda xv: F.jvp(f, (xv[0],), (xv[1],))[1], (x, v), modes, order - 1)
    if "rev" in modes:
        check_vjp(f, x)
        if order > 1:
            v = _randn_like(f(x))
            _check(lambda xv: F.vjp(f, xv[0])[1](xv[1])[0], (x, v), modes, order - 1)


def check_grads(f, argnum=0, modes=("fwd", "rev"), order=2):
    """check_grads(f, argnum, modes, order)(*args, **kwargs), as autograd's."""
    assert all(m in ("fwd", "rev") for m in modes)

    def check(*args, **kwargs):
        many = isinstance(argnum, (tuple, list))
        nums = tuple(argnum) if many else (argnum,)

        def g(x):
            full = list(args)
            for k, a in enumerate(nums):
                full[a] = x[k] if many else x
            return f(*full, **kwargs)
        x = tuple(args[a] for a in nums) if many else args[argnum]
        _check(g, x, modes, order)
    return check


COMPLEX_CASES = [0, 0]          # combinations with a complex argument: checked, passed;
                                # their failures are listed in COMPLEX_FAILURES


def combo_check(fun, *args, **kwargs):
    """Check every combination of the given argument and keyword values; those with a
    complex argument are counted in COMPLEX_CASES (checked, passed)."""
    _check_grads = lambda f: check_grads(f, *args, **kwargs)    # noqa: E731

    def _combo_check(*args, **kwargs):
        kwarg_key_vals = [[(k, x) for x in xs] for k, xs in kwargs.items()]
        for _args in product(*args):
            complex_case = any(onp.iscomplexobj(leaf) for leaf in _leaves(_args))
            for _kwargs in product(*kwarg_key_vals):
                if not complex_case:
                    _check_grads(fun)(*_args, **dict(_kwargs))
                    continue
                COMPLEX_CASES[0] += 1
                try:
                    _check_grads(fun)(*_args, **dict(_kwargs))
                    COMPLEX_CASES[1] += 1
                except Exception as e:          # (counted and listed, not raised)
                    COMPLEX_FAILURES.append(f"{getattr(fun, '__name__', fun)}"
                                            f"{_shapes(_args)} {dict(_kwargs)}: "
                                            f"{type(e).__name__}: {str(e)[:120]}")
    return _combo_check


COMPLEX_FAILURES = []


def _shapes(args):
    return tuple(("c" if onp.iscomplexobj(a) else "r") + str(onp.shape(a)) for a in args)
