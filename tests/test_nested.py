"""Nested transforms of autotape.func are correct by construction: each level
differentiates with respect to its own variable, as jax's tracers do, also when an
inner function is called with, or closes over, an outer level's variable. Checked on
the cases that confused levels and on random three-level programs against jax."""
import types

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import autotape as at
import autotape.func as F

from programs import OPS


def test_inner_argument_is_not_the_outer_variable():
    # d/dx [x * d/dy (x * y)] = d/dx [x * x] = 2x; taking y for x gives 4x
    f = lambda x: x * F.grad(lambda y: x * y)(x)
    assert float(F.grad(f)(3.0)) == 6.0
    value, tangent = F.jvp(f, (at.tensor(3.0),), (at.tensor(1.0),))
    assert (float(value), float(tangent)) == (9.0, 6.0)
    assert float(F.jacfwd(f)(at.tensor(3.0))) == 6.0
    assert float(F.jacrev(f)(at.tensor(3.0))) == 6.0


def test_transform_of_a_users_tensor_sees_only_its_argument():
    x = at.tensor(2.0, requires_grad=True)
    # grad of y -> x * y at y = x is x (torch.func: 2), not d/dx x*x = 4
    g = F.grad(lambda y: x * y)(x)
    assert float(g.detach()) == 2.0
    g.backward()                               # the result stays differentiable in x
    assert float(x.grad) == 1.0


def test_hessian_of_a_function_with_an_inner_gradient():
    # f(x) = sum(x * grad(y -> sum(x * y ** 2))(x)) = sum(2 x**3): Hessian diag(12 x)
    f = lambda x: (x * F.grad(lambda y: (x * y ** 2).sum())(x)).sum()
    x = np.array([1.0, -2.0])
    np.testing.assert_allclose(F.hessian(f)(at.tensor(x)).numpy(), np.diag(12 * x))


def _jax():
    jax = pytest.importorskip("jax")
    jax.config.update("jax_enable_x64", True)
    scipy_special = pytest.importorskip("jax.scipy.special")
    jnp = jax.numpy
    lib = types.SimpleNamespace(**{n: getattr(jnp, n) for n in dir(jnp) if not
                                   n.startswith("_")})
    lib.sigmoid, lib.erf = jax.nn.sigmoid, scipy_special.erf
    return jax, lib


def _program(lib, steps, a, b):
    pool = [a, b]
    for op, args in steps:
        pool.append(OPS[op][2](lib, *(pool[i] for i in args)))
    return pool[-1] + 0.5 * pool[-2] * a        # (every level reads both variables)


def _derivative(kind, lib_grad):
    """D f: the derivative of a scalar function of a scalar by one transform."""
    grad, jvp, jacfwd, hessian = lib_grad
    return {
        "grad": lambda f: grad(f),
        "jvp": lambda f: (lambda x: jvp(f, (x,), (x * 0 + 1.0,))[1]),
        "jacfwd": lambda f: jacfwd(f),
        "hessian": lambda f: hessian(lambda u: f(u) * u),
    }[kind]


def _three_levels(lib, lib_grad, kinds, steps):
    """x -> D1[w -> D2[z -> D3[y -> p(z, y)](z) * p(w, z)](w) + p(x, w)](x): every
    level is called with the enclosing level's variable and closes over it too."""
    D1, D2, D3 = (_derivative(k, lib_grad) for k in kinds)

    def level3(z):
        return D3(lambda y: _program(lib, steps, z, y))(z)

    def level2(w):
        return D2(lambda z: level3(z) * _program(lib, steps, w, z))(w)

    def level1(x):
        return D1(lambda w: level2(w) + _program(lib, steps, x, w))(x)
    return level1


KINDS = ["grad", "jvp", "jacfwd", "hessian"]


@settings(max_examples=25, deadline=None)
@given(kinds=st.tuples(*(st.sampled_from(KINDS),) * 3),
       steps=st.lists(st.tuples(st.integers(0, len(OPS) - 1),
                                st.tuples(st.integers(0, 1), st.integers(0, 1))),
                      min_size=1, max_size=4),
       x=st.floats(-1.2, 1.2))
def test_three_levels_equal_jax(kinds, steps, x):
    jax, jlib = _jax()
    # each step reads one or two values of the pool so far
    steps = [(op, tuple(min(a, k + 1) for a in args)[:OPS[op][1]])
             for k, (op, args) in enumerate(steps)]
    ours = _three_levels(at, (F.grad, F.jvp, F.jacfwd, F.hessian), kinds, steps)
    theirs = _three_levels(jlib, (jax.grad, jax.jvp, jax.jacfwd, jax.hessian), kinds, steps)
    expected = float(theirs(x))
    got = float(np.asarray(ours(at.tensor(x))))
    np.testing.assert_allclose(got, expected, rtol=1e-9, atol=1e-9)
