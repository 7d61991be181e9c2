"""Every numpy function issue #3 lists, called as np.<name> on Tensors: it records (the
result requires grad), its value is numpy's, and its gradient matches central
differences, on shapes that broadcast where the function broadcasts."""
import numpy as np
import pytest

import autotape as at
from fd import check_grads

rng = np.random.default_rng(21)


def pos(*shape):
    return rng.uniform(0.5, 1.5, shape)


def unit(*shape):
    return rng.uniform(-0.8, 0.8, shape)


def spd(n):
    m = rng.uniform(-1, 1, (n, n))
    return m @ m.T + n * np.eye(n)


UNARY = ["log1p", "expm1", "log2", "log10", "exp2", "square", "reciprocal", "sinh", "cosh",
         "arcsin", "arccos", "arctan", "arcsinh", "arctanh", "sin", "cos", "tan", "tanh",
         "exp", "log", "sqrt", "abs", "negative", "sign", "floor", "ceil", "round"]
BINARY = ["arctan2", "hypot", "logaddexp", "fmod", "mod", "power", "add", "subtract",
          "multiply", "divide", "maximum", "minimum"]

CASES = {f"{name}": (getattr(np, name), lambda x: [x], lambda: [pos(2, 3) * 0.9 + 0.35])
         for name in UNARY}
CASES["arccosh"] = (np.arccosh, lambda x: [x], lambda: [pos(2, 3) + 1.0])
for _name in ("arcsin", "arccos", "arctanh"):
    CASES[_name] = (getattr(np, _name), lambda x: [x], lambda: [unit(2, 3)])
for _name in BINARY:                               # (2, 3) with (3,): broadcasting
    CASES[_name] = (getattr(np, _name), lambda x, y: [x, y],
                    lambda: [pos(2, 3) * 4.1, pos(3) * 0.3 + 1.7])
CASES.update({
    "clip": (np.clip, lambda x: [x, 0.0, 0.6], lambda: [unit(3, 4)]),
    "sum": (np.sum, lambda x: [x], lambda: [unit(3, 4)]),
    "prod": (lambda x: np.prod(x, axis=1), lambda x: [x], lambda: [unit(3, 4)]),
    "max": (lambda x: np.max(x, axis=0), lambda x: [x], lambda: [unit(3, 4)]),
    "min": (lambda x: np.min(x, axis=1, keepdims=True), lambda x: [x], lambda: [unit(3, 4)]),
    "amax": (np.amax, lambda x: [x], lambda: [unit(3, 4)]),
    "amin": (np.amin, lambda x: [x], lambda: [unit(3, 4)]),
    "mean": (lambda x: np.mean(x, axis=0), lambda x: [x], lambda: [unit(3, 4)]),
    "var": (lambda x: np.var(x, axis=1, ddof=1), lambda x: [x], lambda: [unit(3, 4)]),
    "std": (lambda x: np.std(x, axis=0), lambda x: [x], lambda: [unit(3, 4)]),
    "norm": (lambda x: np.linalg.norm(x, ord="fro"), lambda x: [x], lambda: [unit(3, 4)]),
    "cumsum": (lambda x: np.cumsum(x, axis=1), lambda x: [x], lambda: [unit(3, 4)]),
    "cumprod": (lambda x: np.cumprod(x, axis=0), lambda x: [x], lambda: [unit(3, 4)]),
    "average": (lambda x: np.average(x, axis=1, weights=[1.0, 2.0, 3.0, 4.0]),
                lambda x: [x], lambda: [unit(3, 4)]),
    "trace": (np.trace, lambda x: [x], lambda: [unit(3, 4)]),
    "diagonal": (np.diagonal, lambda x: [x], lambda: [unit(3, 4)]),
    "expand_dims": (lambda x: np.expand_dims(x, 1), lambda x: [x], lambda: [unit(3, 4)]),
    "squeeze": (np.squeeze, lambda x: [x], lambda: [unit(3, 1, 4)]),
    "broadcast_to": (lambda x: np.broadcast_to(x, (2, 3, 4)), lambda x: [x],
                     lambda: [unit(3, 1)]),
    "concatenate": (lambda x, y: np.concatenate([x, y], axis=1), lambda x, y: [x, y],
                    lambda: [unit(2, 3), unit(2, 2)]),
    "stack": (lambda x, y: np.stack([x, y], axis=1), lambda x, y: [x, y],
              lambda: [unit(2, 3), unit(2, 3)]),
    "split": (lambda x: np.split(x, 2, axis=1)[1], lambda x: [x], lambda: [unit(3, 4)]),
    "flip": (lambda x: np.flip(x, 0), lambda x: [x], lambda: [unit(3, 4)]),
    "roll": (lambda x: np.roll(x, 2, axis=1), lambda x: [x], lambda: [unit(3, 4)]),
    "tile": (lambda x: np.tile(x, (2, 1)), lambda x: [x], lambda: [unit(3, 4)]),
    "repeat": (lambda x: np.repeat(x, 2, axis=0), lambda x: [x], lambda: [unit(3, 4)]),
    "moveaxis": (lambda x: np.moveaxis(x, 0, -1), lambda x: [x], lambda: [unit(2, 3, 4)]),
    "swapaxes": (lambda x: np.swapaxes(x, 0, 2), lambda x: [x], lambda: [unit(2, 3, 4)]),
    "ravel": (np.ravel, lambda x: [x], lambda: [unit(3, 4)]),
    "pad": (lambda x: np.pad(x, ((1, 0), (0, 2))), lambda x: [x], lambda: [unit(3, 4)]),
    "triu": (np.triu, lambda x: [x], lambda: [unit(3, 4)]),
    "tril": (lambda x: np.tril(x, -1), lambda x: [x], lambda: [unit(3, 4)]),
    "take": (lambda x: np.take(x, [0, 2, 2, 5]), lambda x: [x], lambda: [unit(3, 4)]),
    "take_along_axis": (lambda x: np.take_along_axis(x, np.array([[0], [3], [1]]), 1),
                        lambda x: [x], lambda: [unit(3, 4)]),
    "where": (lambda x, y: np.where(x > 0, x, y), lambda x, y: [x, y],
              lambda: [unit(3, 4), unit(4)]),
    "dot": (np.dot, lambda x, y: [x, y], lambda: [unit(3, 4), unit(4, 2)]),
    "vdot": (np.vdot, lambda x, y: [x, y], lambda: [unit(3, 4), unit(3, 4)]),
    "inner": (np.inner, lambda x, y: [x, y], lambda: [unit(3, 4), unit(2, 4)]),
    "outer": (np.outer, lambda x, y: [x, y], lambda: [unit(3), unit(4)]),
    "matmul": (np.matmul, lambda x, y: [x, y], lambda: [unit(2, 3, 4), unit(4, 2)]),
    "einsum": (lambda x, y: np.einsum("bij,jk->bik", x, y), lambda x, y: [x, y],
               lambda: [unit(2, 3, 4), unit(4, 2)]),
    "tensordot": (lambda x, y: np.tensordot(x, y, axes=([1, 2], [0, 1])), lambda x, y: [x, y],
                  lambda: [unit(2, 3, 4), unit(3, 4)]),
    "solve": (np.linalg.solve, lambda a, b: [a, b], lambda: [spd(3), unit(3, 2)]),
    "inv": (np.linalg.inv, lambda a: [a], lambda: [spd(3)]),
    "det": (np.linalg.det, lambda a: [a], lambda: [spd(3)]),
    "slogdet": (lambda a: np.linalg.slogdet(a)[1], lambda a: [a], lambda: [spd(3)]),
    "cholesky": (np.linalg.cholesky, lambda a: [a], lambda: [spd(3)]),
    "eigh": (lambda a: np.linalg.eigh(a)[0], lambda a: [a], lambda: [spd(3)]),
})


@pytest.mark.parametrize("name", sorted(CASES))
def test_numpy_function_on_tensors(name):
    fn, args, make = CASES[name]
    arrays = make()
    tensors = [at.tensor(a, requires_grad=True) for a in arrays]
    out = fn(*args(*tensors))
    assert isinstance(out, at.Tensor) and out.requires_grad, name
    expected = fn(*args(*arrays))
    np.testing.assert_allclose(out.numpy(), expected, rtol=1e-12, atol=1e-14)
    if name not in ("sign", "floor", "ceil", "round"):
        check_grads(lambda *ts: fn(*args(*ts)), *arrays)
