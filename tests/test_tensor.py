"""Tensor attributes, conversions, dtype rules, grad modes, in-place ops and bad input."""
import warnings

import numpy as np
import pytest

import autotape as at


def test_defaults_and_attributes():
    x = at.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
    assert x.dtype == np.float64 and at.tensor([1, 2]).dtype == np.int64
    assert at.tensor(True).dtype == np.bool_
    assert (x.shape, x.ndim, x.size, len(x)) == ((2, 3), 2, 6, 2)
    assert x.T.shape == (3, 2) and x.T.tolist() == [[1, 4], [2, 5], [3, 6]]
    assert x.tolist() == [[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]]
    assert isinstance(x.numpy(), np.ndarray) and np.asarray(x).shape == (2, 3)
    assert at.tensor(2.5).item() == 2.5 and at.tensor([7]).item() == 7
    assert float(at.tensor([1.5])) == 1.5 and int(at.tensor(3)) == 3
    assert [t.tolist() for t in at.tensor([1.0, 2.0])] == [1.0, 2.0]


def test_float32_is_kept_and_float16_is_refused():
    x = at.tensor([1.0, 2.0], dtype="float32", requires_grad=True)
    assert x.dtype == np.float32 and (x * 2).dtype == np.float32
    assert (x * at.tensor([1.0, 1.0])).dtype == np.float64      # numpy promotion
    assert at.zeros(2, dtype=np.float32).dtype == np.float32
    with pytest.raises(TypeError, match="float16"):
        at.zeros(2, dtype="float16")


def test_repr():
    assert repr(at.tensor([1.0, 2.0])) == "tensor([1., 2.])"
    assert repr(at.tensor([1.0], requires_grad=True)) == "tensor([1.], requires_grad=True)"
    x = at.tensor([1.0], requires_grad=True)
    assert repr(x * 2) == "tensor([2.], grad_fn=<MultiplyBackward>)"
    assert "dtype=float32" in repr(at.tensor([1.0], dtype="float32"))


def test_one_element_conversions_and_errors():
    with pytest.raises(RuntimeError, match="a Tensor with 2 elements cannot be converted"):
        at.tensor([1.0, 2.0]).item()
    with pytest.raises(RuntimeError, match="Boolean value of Tensor with more than one"):
        bool(at.tensor([1.0, 2.0]))
    assert bool(at.tensor([0.0])) is False
    with pytest.raises(TypeError, match="len\\(\\) of a 0-d tensor"):
        len(at.tensor(1.0))
    with pytest.raises(TypeError, match="iteration over a 0-d tensor"):
        iter(at.tensor(1.0))


@pytest.mark.parametrize("data", ["abc", [1.0, "x"], {"a": 1}, object(),
                                  [[1.0, 2.0], [3.0]]])
def test_non_numeric_data_is_refused(data):
    with pytest.raises(TypeError):
        at.tensor(data)


def test_complex_data_makes_a_complex_tensor():
    z = at.tensor([1.0, 1 + 2j])
    assert isinstance(z, at.ComplexTensor) and z.dtype == np.complex128
    assert z.numpy().tolist() == [1.0, 1 + 2j]


def test_python_numbers_and_arrays_mix_on_either_side():
    x = at.tensor([1.0, 2.0], requires_grad=True)
    arr = np.array([10.0, 20.0])
    for y in (2 * x, x * 2, 1 + x, x + 1, 3 - x, x - 3, 6 / x, x / 6, 2 ** x, x ** 2,
              arr * x, x * arr, arr - x, [1.0, 1.0] + x):
        assert isinstance(y, at.Tensor) and y.requires_grad
    g, = at.grad((arr * x + 2 ** x).sum(), x)
    np.testing.assert_allclose(g.numpy(), arr + np.log(2) * 2 ** np.array([1.0, 2.0]))


def test_comparisons_give_bool_tensors_without_grad():
    x = at.tensor([1.0, 2.0, 3.0], requires_grad=True)
    for c in (x > 1, x >= 2, x < 2, x <= 1, x == 2, x != 2, 2 < x):
        assert c.dtype == np.bool_ and not c.requires_grad
    assert (x > 1.5).tolist() == [False, True, True]
    assert x in {x: 1}                                   # hashable by identity


def test_integer_ops_do_not_record():
    a = at.tensor([1, 2, 3])
    assert (a * 2).dtype == np.int64 and not (a * 2).requires_grad
    assert (a / 2).dtype == np.float64 and (a / 2).tolist() == [0.5, 1.0, 1.5]
    assert at.sum(a).item() == 6 and at.mean(a).item() == 2.0


def test_shape_errors_are_numpy_errors():
    x = at.ones(2, 3, requires_grad=True)
    with pytest.raises(ValueError):
        x + at.ones(4)
    with pytest.raises(ValueError):
        x @ at.ones(2, 2)
    with pytest.raises(ValueError):
        x.reshape(4, 2)
    with pytest.raises(IndexError):
        x[5]
    with pytest.raises(np.exceptions.AxisError):
        x.sum(axis=2)
    with pytest.raises(ValueError):
        x.sum(axis=(0, 0))
    with pytest.raises(ValueError):
        at.ones(2, 2, 3) @ at.ones(2, 2)               # batch of (2, 3) @ (2, 2)


def test_indexing_follows_numpy_and_refuses_bad_indices():
    x = at.tensor([1.0, 2.0, 3.0, 4.0], requires_grad=True)
    for index in ([0, 1], np.array([True, False, True, True]), True, (None, [3, 0])):
        np.testing.assert_array_equal(x[index].numpy(), x.numpy()[index])
    for index in (1.5, [1.5], "a"):
        with pytest.raises(IndexError):
            x[index]
    with pytest.raises(IndexError):
        x[[4]]


def test_reshape_and_transpose_spellings():
    x = at.arange(24.0).reshape(2, 3, 4)
    assert x.reshape((6, 4)).shape == x.reshape(6, 4).shape == x.reshape(-1, 4).shape
    assert x.transpose().shape == (4, 3, 2) and x.transpose(1, 0, 2).shape == (3, 2, 4)
    assert x.transpose((2, 0, 1)).shape == (4, 2, 3)
    assert x[::-1, :, ::2].tolist() == x.numpy()[::-1, :, ::2].tolist()


def test_no_grad_as_decorator_and_set_grad_enabled_as_function():
    x = at.ones(2, requires_grad=True)

    @at.no_grad()
    def f(v):
        return v * 2
    assert not f(x).requires_grad and at.is_grad_enabled()
    at.set_grad_enabled(False)
    try:
        assert not (x * 2).requires_grad
    finally:
        at.set_grad_enabled(True)
    assert (x * 2).requires_grad


def test_grad_assignment_checks():
    x = at.ones(2, requires_grad=True)
    with pytest.raises(RuntimeError, match="attempting to assign a gradient of size '\\[3\\]' "
                                           "to a tensor of size '\\[2\\]'"):
        x.grad = at.ones(3)
    with pytest.raises(RuntimeError, match="dtype"):
        x.grad = at.ones(2, dtype="float32")
    with pytest.raises(TypeError, match="assigned grad expected to be a Tensor or None"):
        x.grad = 1.0
    x.grad = at.full(2, 10.0)
    (2 * x).sum().backward()
    assert x.grad.tolist() == [12.0, 12.0]


def test_in_place_on_plain_tensors_is_numpy_in_place():
    g = at.zeros(3)
    alias = g.numpy()
    g += 1
    g *= 3
    assert alias.tolist() == [3.0, 3.0, 3.0]
    with pytest.raises(Exception):
        i = at.tensor([1, 2])
        i += 0.5                                   # numpy's same_kind casting rule


def test_numpy_of_a_tensor_that_requires_grad_is_read_only():
    x = at.tensor([1.0, 2.0], requires_grad=True)
    with pytest.raises(ValueError, match="read-only"):
        x.numpy()[0] = 5.0
    y = x * 2
    with pytest.raises(ValueError, match="read-only"):
        y.numpy()[0] = 5.0


def test_numpy_never_converts_a_tensor_that_requires_grad_silently():
    """np.array of tensors, np.asarray, an element assignment: torch's error, not a
    plain array that has left the graph."""
    x = at.tensor([1.0, 2.0], requires_grad=True)
    a, b = x[0], x[1]
    message = "Can't call numpy\\(\\) on Tensor that requires grad"
    with pytest.raises(RuntimeError, match=message):
        np.array([a * 2, b ** 2])
    with pytest.raises(RuntimeError, match=message):
        np.asarray(x * 2)
    out = np.empty(3)
    with pytest.raises(RuntimeError, match=message):
        out[:2] = x * 3                        # (out[0] = a * 3 is float(), as in torch)
    assert np.array_equal(np.asarray((x * 2).detach()), [2.0, 4.0])   # said explicitly
    assert np.asarray(at.grad((x * x).sum(), x)[0]).tolist() == [2.0, 4.0]


def test_np_array_of_tensors_in_a_compiled_step_says_what_records_instead():
    """A model's ``np.array([dx, dy])``: torch's words, then that detaching loses the
    gradient too and what builds the array instead; that way gives the same gradient."""
    def rhs(p, np_array):
        return np_array([p[0] * p[1], -p[2] * p[0]])

    def f(p, np_array=np.array):
        y = rhs(p, np_array)
        return (y * y).sum()
    p = np.array([1.0, 2.0, 3.0])
    with pytest.raises(RuntimeError, match="Can't call numpy\\(\\) on Tensor that "
                       "requires grad.*detached or not.*np.stack"):
        at.compile(f, p)
    value, grad = at.compile(lambda q: f(q, np.stack), p).value_and_grad(p)
    assert float(value) == 13.0
    assert grad.tolist() == [26.0, 4.0, 6.0]


def test_in_place_on_non_leaf_under_no_grad_is_refused():
    x = at.ones(2, requires_grad=True)
    y = x * 2
    with at.no_grad():
        with pytest.raises(RuntimeError, match="non-leaf tensor that requires grad"):
            y += 1


def test_in_place_keeps_the_python_object_and_its_retain_grad():
    x = at.tensor([1.0, 2.0], requires_grad=True)
    y = x * 1.0
    y.retain_grad()
    obj = y
    y *= x
    assert obj is y and y.grad_fn.name() == "MultiplyBackward"
    y.sum().backward()
    assert y.grad.tolist() == [1.0, 1.0] and x.grad.tolist() == [2.0, 4.0]


def test_in_place_after_requires_grad_false_leaves_recorded_values_intact():
    x = at.tensor([1.0, 2.0], requires_grad=True)
    y = (x * x).sum()
    x.requires_grad_(False)
    x += 10                                        # a plain tensor now: in place
    x.requires_grad_(True)
    g, = at.grad(y, x)
    assert g.tolist() == [2.0, 4.0]                # d(x*x) at the recorded x = [1, 2]


def test_setitem_on_plain_tensors_and_broadcast_values():
    y = at.zeros(2, 3)
    y[0] = 5.0
    y[1, 1:] = at.tensor([1.0, 2.0])
    assert y.tolist() == [[5, 5, 5], [0, 1, 2]]
    with pytest.raises(ValueError):
        y[0] = at.ones(2, requires_grad=True)      # (2,) into (3,)
    with pytest.raises(TypeError, match="dtype int64"):
        at.zeros(3, dtype="int64")[0] = at.ones((), requires_grad=True)


def test_factories():
    assert at.zeros((2, 3)).tolist() == at.zeros(2, 3).tolist() == [[0.0] * 3] * 2
    assert at.ones(2).tolist() == [1.0, 1.0] and at.full((2,), 7.0).tolist() == [7.0, 7.0]
    assert at.eye(2).tolist() == [[1.0, 0.0], [0.0, 1.0]]
    assert at.arange(3).tolist() == [0, 1, 2] and at.linspace(0, 1, 3).tolist() == [0, .5, 1]
    x = at.tensor([1.0, 2.0], requires_grad=True)
    assert at.zeros_like(x).shape == (2,) and not at.ones_like(x).requires_grad
    assert at.ones(2, requires_grad=True).requires_grad
    z = at.stack([at.tensor(1.0), at.tensor(2.0)])
    assert z.tolist() == [1.0, 2.0] and not z.requires_grad


def test_non_leaf_grad_warning_and_retain_grad_on_leaf_is_noop():
    x = at.ones(2, requires_grad=True)
    x.retain_grad()
    assert not x.retains_grad
    y = x * 2
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        assert y.grad is None
    assert len(w) == 1 and issubclass(w[0].category, UserWarning)


def test_non_tensor_inputs_and_outputs():
    x = at.ones(2, requires_grad=True)
    with pytest.raises(RuntimeError, match="^all inputs have to be Tensors or GradientEdges, "
                                           "but got float$"):
        at.grad((x * 2).sum(), [x, 1.0])
    with pytest.raises(TypeError, match="outputs must be Tensors or a sequence of Tensors, "
                                        "but got float: did a conversion"):
        at.grad(1.0, x)                   # (torch: "'float' object is not iterable")


def test_numpy_style_code_that_forgot_requires_grad_hears_torchs_message():
    data = np.array([1.0, 2.0])
    with pytest.raises(RuntimeError, match="^element 0 of tensors does not require grad"):
        at.grad(at.sin(data).sum(), data)        # (the array, not its elements, is named)
    y = at.tensor(1.0, requires_grad=True) * 2
    with pytest.raises(RuntimeError, match="but got ndarray: a numpy array has no gradient; "
                                           r"make the variable with at.tensor\(x, "
                                           r"requires_grad=True\)"):
        at.grad(y, data)


def test_grad_mode_decorators_without_parentheses():
    x = at.ones(2, requires_grad=True)

    @at.no_grad
    def f(v):
        return v * 2

    @at.enable_grad
    def g(v):
        return v * 2
    assert not f(x).requires_grad and f.__name__ == "f"
    with at.no_grad():
        assert g(x).requires_grad


def test_zero_d_views_of_recorded_tensors_are_zero_d():
    """x[0], .T and broadcast_to of a 0-d result hold a 0-d value (numpy's
    ascontiguousarray would have made it 1-d)."""
    x = at.tensor([1.0, 2.0], requires_grad=True)
    y = (x * 2)[0]
    assert y.shape == () and y.numpy().shape == () and y.detach().item() == 2.0
    s = (x * 2).sum()
    assert s.T.numpy().shape == () and at.broadcast_to(s, ()).numpy().shape == ()
    assert at.grad(y + s.T, x)[0].tolist() == [4.0, 2.0]


def test_recorded_ops_are_quiet_and_leave_numpy_error_state_alone():
    import warnings
    before = np.geterr()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        x = at.tensor([0.0, -1.0], requires_grad=True)
        y = at.log(x) / x
    assert np.isneginf(y.numpy()[0])
    assert np.isnan(y.numpy()[1])
    assert np.geterr() == before
    with pytest.warns(RuntimeWarning):
        np.log(np.array([0.0]))


def test_constants_used_by_recorded_ops_are_frozen_not_copied():
    """A constant's array is kept by the tape without a copy; updating the constant in
    place afterwards copies first, so the recorded gradient is unchanged."""
    c = at.tensor([1.0, 2.0])
    x = at.tensor([3.0, 4.0], requires_grad=True)
    y = (c * x).sum()
    assert not c.numpy().flags.writeable
    c += 10.0                                   # a new array for c, not the tape's
    c[0] = -1.0
    assert c.tolist() == [-1.0, 12.0]
    assert at.grad(y, x)[0].tolist() == [1.0, 2.0]
    base = at.tensor([[1.0, 2.0], [3.0, 4.0]])
    view = base[0]                              # a view: copied, base stays writable
    z = (view * x).sum()
    base[0, 0] = 100.0
    assert at.grad(z, x)[0].tolist() == [1.0, 2.0]
