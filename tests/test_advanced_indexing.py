"""Integer-array and boolean-mask indexing, take, take_along_axis, and assignment through
them: numpy's values, finite differences, second order, repeated indices."""
import numpy as np
import pytest

import autotape as at
from fd import check_grads, check_second_order

rng = np.random.default_rng(5)

INDICES = [
    np.array([2, 0, 2]),                       # repeated rows
    (np.array([0, 1, 1]), np.array([3, 0, 0])),
    (slice(None), [1, 1, 3]),
    (Ellipsis, np.array([[0], [2]])),
    (np.array([True, False, True]),),
    (None, [0, 2], slice(1, 3)),
]


@pytest.mark.parametrize("index", INDICES, ids=range(len(INDICES)))
def test_getitem(index):
    x = rng.normal(size=(3, 4))
    np.testing.assert_array_equal(at.tensor(x)[index].numpy(), x[index])
    check_grads(lambda t: t[index], x)
    check_second_order(lambda t: (t * t)[index] * t[index], x)


def test_boolean_mask_from_a_comparison():
    x0 = rng.normal(size=(4, 3))
    check_grads(lambda t: t[t > 0] ** 2, x0)
    x = at.tensor(x0, requires_grad=True)
    g, = at.grad(x[x > 0].sum(), x)
    np.testing.assert_array_equal(g.numpy(), (x0 > 0).astype(float))


def test_repeated_indices_accumulate():
    x = at.tensor([1.0, 2.0, 3.0], requires_grad=True)
    assert at.grad(x[[0, 0, 2, 0]].sum(), x)[0].tolist() == [3.0, 0.0, 1.0]


def test_take_and_take_along_axis():
    x = rng.normal(size=(3, 4))
    idx = np.array([[0, 3], [1, 1], [2, 0]])
    np.testing.assert_array_equal(at.take(at.tensor(x), [5, 1, 5]).numpy(),
                                  np.take(x, [5, 1, 5]))
    np.testing.assert_array_equal(at.take_along_axis(at.tensor(x), idx, 1).numpy(),
                                  np.take_along_axis(x, idx, 1))
    check_grads(lambda t: at.take(t, [[0, 2], [2, 2]], axis=0), x)
    check_grads(lambda t: np.take_along_axis(t, idx, 1), x)
    check_second_order(lambda t: at.take(t * t, [1, 1, 7]), x)


def test_setitem_last_write_wins_for_values_and_gradients():
    v = at.tensor([10.0, 20.0, 30.0], requires_grad=True)
    z = at.zeros(5)
    z[[1, 3, 1]] = v
    assert z.tolist() == [0.0, 30.0, 0.0, 20.0, 0.0]
    assert at.grad((z * at.arange(5.0)).sum(), v)[0].tolist() == [0.0, 3.0, 1.0]


def test_setitem_with_mask_and_broadcast_value():
    def f(x, v):
        y = x * 1.0
        y[x > 0] = v * 2.0
        y[[0, 2], 1:] = v[:1] ** 2
        return y
    x0, v0 = rng.normal(size=(3, 4)), rng.normal(size=(1,))
    check_grads(f, x0, v0)
    check_second_order(f, x0, v0)


def test_setitem_advanced_without_grad_is_numpy():
    y = at.zeros(4)
    y[[0, 2]] = at.tensor([5.0, 6.0])
    y[np.array([False, True, False, False])] = 1.0
    assert y.tolist() == [5.0, 1.0, 6.0, 0.0]
    x = at.ones(3, requires_grad=True)
    with pytest.raises(RuntimeError, match="view of a leaf Variable"):
        x[[0]] = 2.0


def test_third_order_through_a_gather_of_rows():
    # the derivative of the scatter (PUT_ADD) that a gather's VJP records has the
    # gather's index shape, not the flat one (it failed with a reshape error)
    import autotape.func as F
    x = np.arange(6.0).reshape(3, 2)
    v = np.ones((3, 2))

    def rows(t):
        return t[np.array([0, 2]), :] ** 3
    second = F.jvp(lambda a, b: F.jvp(rows, (a,), (b,))[1], (x, v), (v, v))[1]
    a = x[[0, 2]]                  # d(3 a^2 b) along (v, v) = 6 a b v + 3 a^2 v, v = b = 1
    assert np.allclose(second.numpy(), 6 * a + 3 * a ** 2)
