"""The SIMD sin/cos against numpy: ulp error, special values, the libm fallback."""
import numpy as np
import pytest

import autotape as at
from autotape.kernels import vmath


def ulps(got, want):
    return np.abs(got - want) / np.spacing(np.maximum(np.abs(want), 1e-300))


@pytest.mark.parametrize("limit, max_ulp", [(1.0, 1), (10.0, 1), (100.0, 1), (1e5, 2)])
def test_ulp_error(limit, max_ulp):
    x = np.random.default_rng(0).uniform(-limit, limit, 200_000)
    assert ulps(vmath.sin_array(x), np.sin(x)).max() <= max_ulp
    assert ulps(vmath.cos_array(x), np.cos(x)).max() <= max_ulp


def test_special_values_and_large_arguments_fall_back_to_libm():
    x = np.array([0.0, -0.0, np.pi, -np.pi / 2, 1e6, -3e9, 1e300, 5e-324] * 3)
    s, c = vmath.sin_array(x), vmath.cos_array(x)
    np.testing.assert_array_equal(s[4:8], np.sin(x[4:8]))
    np.testing.assert_array_equal(c[4:8], np.cos(x[4:8]))
    assert np.signbit(s[1]) and not np.signbit(s[0])
    assert np.isnan(vmath.sin_array(np.array([np.inf, -np.inf, np.nan] * 8))).all()


def test_other_dtypes_use_numpy():
    x = np.linspace(-3, 3, 40, dtype=np.float32)
    assert vmath.sin_array(x).dtype == np.float32
    np.testing.assert_array_equal(vmath.sin_array(x), np.sin(x))


@pytest.mark.parametrize("scale", [1.0, 1e7])     # SIMD loop, and the libm fallback
def test_sweep_derivatives(scale):
    x0 = np.random.default_rng(1).uniform(-scale, scale, 100)
    x = at.tensor(x0, requires_grad=True)
    gs, = at.grad(at.sin(x).sum(), x)
    gc, = at.grad(at.cos(x).sum(), x)
    assert ulps(gs.numpy(), np.cos(x0)).max() <= 2
    assert ulps(gc.numpy(), -np.sin(x0)).max() <= 2


@pytest.mark.parametrize("low, high", [(-1e-8, 1e-8), (-0.7, 0.7), (0.6, 0.65), (-3.0, 3.0),
                                       (-30.0, 30.0)])
def test_tanh_ulp_error(low, high):
    x = np.random.default_rng(2).uniform(low, high, 200_000)
    assert ulps(vmath.tanh_array(x), np.tanh(x)).max() <= 2


def test_tanh_special_values_and_shapes():
    x = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 22.0, -22.0, 0.5, 5e-324, -1e300] * 2)
    got, want = vmath.tanh_array(x), np.tanh(x)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    np.testing.assert_array_equal(np.signbit(got), np.signbit(want))
    ok = ~np.isnan(want)
    assert ulps(got[ok], want[ok]).max() <= 2
    m = np.random.default_rng(3).normal(size=(7, 9))
    assert vmath.tanh_array(m).shape == (7, 9)
    assert vmath.tanh_array(m.T).shape == (9, 7)                    # not contiguous
    assert vmath.tanh_array(m.astype(np.float32)).dtype == np.float32
    assert ulps(at.tanh(at.tensor(m)).numpy(), np.tanh(m)).max() <= 2
