"""The first-order cases of research/torch_semantics.md §4, ported to autotape.

Each test names its case (Txx). Values are exactly representable, so they are compared
exactly. Where autotape deliberately differs from a torch quirk, the test asserts
autotape's documented behaviour and says so.
"""
import re
import warnings

import numpy as np

import pytest

import autotape as at

RELEASED = "Trying to backward through the graph a second time"


def L(t):
    """A tensor (or tuple/list/dict of them) as plain lists, like the research notes."""
    if t is None:
        return None
    if isinstance(t, dict):
        return {k: L(v) for k, v in t.items()}
    if isinstance(t, (tuple, list)):
        return type(t)(L(v) for v in t)
    return t.tolist()


def test_T01_duplicate_outputs_and_inputs():
    x = at.tensor([5., 3.], requires_grad=True)
    y = x
    g = at.grad(outputs=[y, y], inputs=[x, x], grad_outputs=[at.ones(2), at.ones(2)])
    assert L(g) == ([2.0, 2.0], [2.0, 2.0])
    assert [t.requires_grad for t in g] == [False, False]


def test_T02_two_names_for_one_leaf():
    x = at.tensor([5., 3.], requires_grad=True)
    y = x
    z = x
    assert L(at.grad([y, z], [x, x], [at.ones(2), at.ones(2)])) == ([2.0, 2.0], [2.0, 2.0])


def test_T03_separate_leaves():
    x = at.tensor([5., 3.], requires_grad=True)
    w = at.tensor([5., 3.], requires_grad=True)
    assert L(at.grad([x, w], [x, w], [at.ones(2), at.ones(2)])) == ([1.0, 1.0], [1.0, 1.0])


def test_T04_input_listed_twice_gets_total_each_time():
    x = at.tensor([5., 3.], requires_grad=True)
    w = at.tensor([5., 3.], requires_grad=True)
    out = at.grad([x, w], [x, w, x], [at.ones(2), 2 * at.ones(2)])
    assert L(out) == ([1.0, 1.0], [2.0, 2.0], [1.0, 1.0])


def test_T05_duplicated_output_through_an_op():
    x = at.tensor([5., 3.], requires_grad=True)
    y = 2 * x
    assert L(at.grad([y, y], [x, x], [at.ones(2), at.ones(2)])) == ([4.0, 4.0], [4.0, 4.0])


def test_T06_every_input_slot_gets_the_total():
    q = at.tensor([1., 2.], requires_grad=True)
    x = at.concatenate([2 * q, 4 * q * q])
    outs = [x[i:i + 1] for i in range(4)]
    assert L(at.grad(outs, [q] * 4, [at.ones(1)] * 4)) == ([10.0, 18.0],) * 4


@pytest.mark.parametrize("first, second, expected", [
    (2, 3, ([2.0], [5.0])),     # T07
    (3, 2, ([3.0], [5.0])),     # T08
])
def test_T07_T08_backward_accumulates(first, second, expected):
    x = at.ones(1, requires_grad=True)
    (x ** first).backward()
    g1 = x.grad.tolist()
    (x ** second).backward()
    assert (g1, x.grad.tolist()) == expected


def test_T09_zero_between_backwards():
    x = at.ones(1, requires_grad=True)
    y = x ** 2
    z = x ** 3
    y.backward()
    g1 = x.grad.tolist()
    x.grad.zero_()
    z.backward()
    assert (g1, x.grad.tolist()) == ([2.0], [3.0])


def test_T10_accumulation_is_in_place_and_none_resets():
    x = at.ones(1, requires_grad=True)
    before = x.grad
    (x ** 2).backward()
    g = x.grad
    (x ** 3).backward()
    assert g is x.grad
    x.grad = None
    (x ** 3).backward()
    x2 = at.ones(1, requires_grad=True)
    with pytest.raises(AttributeError, match="'NoneType' object has no attribute 'zero_'"):
        x2.grad.zero_()
    assert before is None and x.grad.tolist() == [3.0]


def test_T11_index_assignment_puts_y_in_the_graph():
    x = at.tensor([[2.], [3.]], requires_grad=True)
    y = at.zeros(3, 1)
    y[0] = x[0] ** 2
    y[1] = x[1] ** 3
    y.backward(gradient=at.ones(3, 1))
    assert y.detach().tolist() == [[4.0], [27.0], [0.0]]
    assert y.grad_fn.name() == "CopySlices" and not y.is_leaf
    assert x.grad.tolist() == [[4.0], [27.0]]


def test_T12_rows_never_read_get_zero():
    x = at.tensor([[2.], [3.]], requires_grad=True)
    y = at.zeros(3, 1)
    y[0] = x[0] ** 2
    y.backward(gradient=at.tensor([[1.], [10.], [100.]]))
    assert x.grad.tolist() == [[4.0], [0.0]]


def test_T13_overwritten_slot_contributes_nothing():
    x = at.tensor([[2.], [3.]], requires_grad=True)
    y = at.zeros(3, 1)
    y[0:2] = x ** 2
    y[1] = 10 * x[1]
    y.backward(gradient=at.ones(3, 1))
    assert x.grad.tolist() == [[4.0], [10.0]]


def test_T14_nonscalar_backward_needs_gradient():
    x = at.tensor([[2.], [3.]], requires_grad=True)
    y = at.zeros(3, 1)
    y[0] = x[0] ** 2
    with pytest.raises(RuntimeError, match="^grad can be implicitly created only for scalar "
                                           "outputs$"):
        y.backward()


def test_T15_outputs_are_summed_with_weights():
    inp = at.tensor([1., 2., 3.], requires_grad=True)
    l1 = (inp ** 2).sum()
    l2 = (inp ** 3).sum()
    a = at.grad((l1, l2), inp, grad_outputs=(at.ones_like(l1), 2 * at.ones_like(l2)),
                retain_graph=True)
    b = at.grad(l1 + 2 * l2, inp)
    assert L(a) == L(b) == ([8.0, 28.0, 60.0],)


def test_T16_implicit_ones_and_none_entries():
    inp = at.tensor([1., 2., 3.], requires_grad=True)
    l1 = (inp ** 2).sum()
    l2 = (inp ** 3).sum()
    a = at.grad((l1, l2), inp, retain_graph=True)
    b = at.grad((l1, l2), inp, grad_outputs=(None, at.tensor(2.)))
    c = at.grad((inp ** 2, inp ** 3), inp, grad_outputs=(at.ones(3), 2 * at.ones(3)))
    assert (L(a), L(b), L(c)) == (([5.0, 16.0, 33.0],), ([8.0, 28.0, 60.0],),
                                  ([8.0, 28.0, 60.0],))


def test_T17_grad_returns_tuple_never_touches_grad_and_dict_inputs():
    x = at.tensor([1., 2.], requires_grad=True)
    w = at.tensor([3.], requires_grad=True)
    g = at.grad((x * w).sum(), x, retain_graph=True)
    d = at.grad((x * w).sum(), {"w": w, "x": x})
    assert type(g) is tuple and L(g) == ([3.0, 3.0],)
    assert x.grad is None
    assert L(d) == {"w": [3.0], "x": [3.0, 3.0]}


def test_T18_leaf_is_itself_an_output():
    x = at.tensor([5., 3.], requires_grad=True)
    assert L(at.grad([x, x * x], [x], [at.ones(2), at.ones(2)])) == ([11.0, 7.0],)


def test_T19_gradient_wrt_intermediate_and_leaf():
    x = at.ones(2, requires_grad=True)
    y = x * 3
    z = (y * y).sum()
    assert L(at.grad(z, [y, x])) == ([6.0, 6.0], [18.0, 18.0])


def test_T20_unused_inputs():
    x = at.ones(3, requires_grad=True)
    w = at.ones(3, requires_grad=True)
    with pytest.raises(RuntimeError, match="^The differentiated Tensor at index 1 appears to "
                       "not have been used in the graph. Set allow_unused=True if this is "
                       "the desired behavior.$"):
        at.grad((x * 2).sum(), [x, w], retain_graph=True)
    assert L(at.grad((x * 2).sum(), [x, w], allow_unused=True)) == ([2.0, 2.0, 2.0], None)
    assert L(at.grad((x * 2).sum(), [x, w], materialize_grads=True)) == (
        [2.0, 2.0, 2.0], [0.0, 0.0, 0.0])
    with pytest.raises(ValueError, match="^Expected allow_unused to be True or not passed "
                       "when materialize_grads=True, but got: allow_unused=False.$"):
        at.grad((x * 2).sum(), [x], allow_unused=False, materialize_grads=True)


def test_T21_inputs_and_outputs_that_do_not_require_grad():
    x = at.ones(3, requires_grad=True)
    w = at.ones(3)
    with pytest.raises(RuntimeError, match="^One of the differentiated Tensors does not "
                                           "require grad$"):
        at.grad((x * w).sum(), [x, w], allow_unused=True)
    with pytest.raises(RuntimeError, match="^element 1 of tensors does not require grad and "
                                           "does not have a grad_fn$"):
        at.grad([(x * x).sum(), at.tensor(1.)], x)
    with pytest.raises(RuntimeError, match="^element 0 of tensors does not require grad and "
                                           "does not have a grad_fn$"):
        at.tensor(1.).backward()


def test_T22_tensor_made_after_the_forward_pass_is_unused():
    x = at.tensor([1., 2.], requires_grad=True)
    y = (x ** 2).sum()
    with pytest.raises(RuntimeError, match="index 0 appears to not have been used"):
        at.grad(y, x[0])


def test_T23_implicit_gradient_only_for_one_element():
    x = at.ones(3, requires_grad=True)
    with pytest.raises(RuntimeError, match="only for scalar outputs"):
        at.grad(x * 2, x)
    x1 = at.ones(1, 1, requires_grad=True)
    assert L(at.grad(x1 * 2, x1)) == ([[2.0]],)
    x0 = at.ones(0, requires_grad=True)
    with pytest.raises(RuntimeError, match="only for scalar outputs"):
        at.grad(x0 * 2, x0)


@pytest.mark.parametrize("shape", [(4,), (1,), (), (3, 1)])
def test_T24_grad_output_shape_must_match_exactly(shape):
    x = at.ones(3, requires_grad=True)
    with pytest.raises(RuntimeError) as e:
        at.grad(x * 2, x, grad_outputs=at.ones(shape), retain_graph=True)
    assert str(e.value) == (f"Mismatch in shape: grad_output[0] has a shape of {shape} and "
                            "output[0] has a shape of (3,).")


def test_T25_grad_output_real_dtypes_are_cast():
    x = at.ones(3, dtype="float32", requires_grad=True)
    a = at.grad(x * 2, x, at.ones(3, dtype="float64"), retain_graph=True)
    b = at.grad(x * 2, x, at.tensor([1, 2, 3]), retain_graph=True)
    assert (L(a), a[0].dtype, L(b), b[0].dtype) == (
        ([2.0, 2.0, 2.0],), np.float32, ([2.0, 4.0, 6.0],), np.float32)


def test_T26_grad_outputs_length_and_types():
    x = at.tensor([1., 2.], requires_grad=True)
    a = (x * x).sum()
    b = (x * 3).sum()
    with pytest.raises(RuntimeError, match="^got 2 tensors and 1 gradients$"):
        at.grad([a, b], x, grad_outputs=[at.tensor(1.)], retain_graph=True)
    # torch silently ignores extra grad_outputs; so does autotape (documented)
    r2 = at.grad([a], x, grad_outputs=[at.tensor(1.), at.tensor(5.)], retain_graph=True)
    assert L(r2) == ([2.0, 4.0],)
    with pytest.raises(TypeError, match="^gradients can be either Tensors or None, but got "
                                        "float$"):
        at.grad(x * 2, x, grad_outputs=[1., 1.])
    with pytest.raises(TypeError, match="^'float' object is not iterable$"):
        at.grad(a, x, grad_outputs=2.0)


def test_T27_leaf_output_gradient_is_a_copy_not_an_alias():
    # torch returns the grad_outputs object itself; autotape returns a new tensor
    x = at.tensor([5., 3.], requires_grad=True)
    go = at.tensor([1., 2.])
    g, = at.grad(x, x, go)
    assert g is not go and g.tolist() == [1.0, 2.0]
    g.numpy()[:] *= 10
    assert go.tolist() == [1.0, 2.0]


def test_T28_backward_twice_needs_retain_graph():
    x = at.ones(3, requires_grad=True)
    y = (x * x).sum()
    y.backward(retain_graph=True)
    y.backward()
    assert x.grad.tolist() == [4.0, 4.0, 4.0]
    y2 = (x * x).sum()
    y2.backward()
    with pytest.raises(RuntimeError) as e:
        y2.backward()
    assert str(e.value) == (
        "Trying to backward through the graph a second time (or directly access saved "
        "tensors after they have already been freed). Saved intermediate values of the "
        "graph are freed when you call .backward() or autograd.grad(). Specify "
        "retain_graph=True if you need to backward through the graph a second time or if "
        "you need to access saved tensors after calling backward.")


def test_T29_shared_freed_subgraph():
    x = at.tensor([5., 3.], requires_grad=True)
    y = x * x
    z = y * 2
    z.sum().backward()
    with pytest.raises(RuntimeError, match=RELEASED):
        (y * 3).sum().backward()


def test_T30_a_graph_that_saved_nothing_sweeps_twice():
    # torch's rule, per saved value: nodes that saved nothing (add, sum) are walked again
    # after a backward without retain_graph; a node that read a recorded value is not
    x = at.ones(3, requires_grad=True)
    y = (x + 1).sum()
    y.backward()
    y.backward()
    assert x.grad.tolist() == [2.0, 2.0, 2.0]
    z = (x * x).sum()
    z.backward()
    with pytest.raises(RuntimeError, match=RELEASED):
        z.backward()
    w = (x * 2.0).sum()          # (torch saves the number, wrapped)
    w.backward()
    with pytest.raises(RuntimeError, match=RELEASED):
        w.backward()


def test_T32_backward_inputs():
    x = at.ones(2, requires_grad=True)
    w = at.ones(2, requires_grad=True)
    (x * w * 3).sum().backward(inputs=[x])
    assert (x.grad.tolist(), w.grad) == ([3.0, 3.0], None)
    x2 = at.tensor([5., 3.], requires_grad=True)
    (2 * x2).backward(at.ones(2), inputs=[x2, x2])
    assert x2.grad.tolist() == [2.0, 2.0]
    v = at.ones(2, requires_grad=True)
    (x2 * 2).sum().backward(inputs=[v])
    assert v.grad is None
    x3 = at.ones(2, requires_grad=True)
    y3 = x3 * 2
    (y3 * y3).sum().backward(inputs=[y3])
    assert y3.grad.tolist() == [4.0, 4.0] and x3.grad is None
    with pytest.raises(RuntimeError, match="^`inputs` argument to `backward\\(\\)` cannot be "
                                           "empty.$"):
        (x3 * 2).sum().backward(inputs=[])
    with pytest.raises(RuntimeError, match="^`inputs` argument to `grad\\(\\)` cannot be "
                                           "empty.$"):
        at.grad((x3 * 2).sum(), [])
    with pytest.raises(RuntimeError, match="^can't retain_grad on Tensor that has "
                                           "requires_grad=False$"):
        (x3 * at.ones(2)).sum().backward(inputs=[at.ones(2)])


def test_T33_backward_sums_several_outputs():
    x = at.tensor([5., 3.], requires_grad=True)
    y = 2 * x
    at.backward([y, y], [at.ones(2), at.ones(2)])
    r1 = x.grad.tolist()
    x.grad = None
    at.backward([x, x], [at.ones(2), at.tensor([1., 2.])])
    r2 = x.grad.tolist()
    x.grad = None
    a = x * x
    b = (x * 3).sum()
    at.backward([a, b], [at.tensor([1., 10.]), None])
    assert (r1, r2, x.grad.tolist()) == ([4.0, 4.0], [2.0, 3.0], [13.0, 63.0])


def test_T34_leaf_backward_copies_gradient_and_scalar_scale():
    x = at.tensor([1., 2.], requires_grad=True)
    g = at.tensor([3., 4.])
    x.backward(g)
    assert x.grad.tolist() == [3.0, 4.0] and x.grad is not g
    x.grad = None
    x.sum().backward(at.tensor(2.))
    assert x.grad.tolist() == [2.0, 2.0]
    with pytest.raises(TypeError, match="^'float' object is not iterable$"):
        x.sum().backward(2.)


def test_T35_dependent_outputs_add():
    x = at.tensor([1., 2.], requires_grad=True)
    y = x ** 2
    z = y ** 3
    at.backward([y, z], [at.tensor([1., 1.]), at.tensor([1., 0.5])])
    assert x.grad.tolist() == [8.0, 100.0]


def test_T36_leaf_and_requires_grad_propagation():
    x = at.ones(2, requires_grad=True)
    a = at.ones(2)
    y = x * 2
    z = a * 2
    assert (x.is_leaf, a.is_leaf, y.is_leaf, z.is_leaf) == (True, True, False, True)
    assert x.grad_fn is None and z.grad_fn is None
    assert y.grad_fn.name() == "MultiplyBackward"
    assert (y.requires_grad, z.requires_grad, x[0:1].is_leaf) == (True, False, False)


def test_T37_reading_grad_of_a_non_leaf_warns():
    x = at.ones(2, requires_grad=True)
    y = x * 2
    y.sum().backward()
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        g = y.grad
    assert g is None
    assert str(w[0].message).startswith(
        "The .grad attribute of a Tensor that is not a leaf Tensor is being accessed. Its "
        ".grad attribute won't be populated during autograd.backward().")


def test_T38_retain_grad_accumulates_also_during_grad():
    x = at.ones(2, requires_grad=True)
    y = x * 2
    y.retain_grad()
    z = (y * y).sum()
    z.backward(retain_graph=True)
    r1 = y.grad.tolist()
    z.backward(retain_graph=True)
    r2 = y.grad.tolist()
    at.grad(z, x)
    r3 = y.grad.tolist()
    assert (r1, r2, r3, x.grad.tolist(), y.retains_grad, x.retains_grad) == (
        [4.0, 4.0], [8.0, 8.0], [12.0, 12.0], [16.0, 16.0], True, False)


def test_T40_requires_grad_on_computed_tensor_and_misuse():
    a = at.ones(2)
    b = a * 2
    b.requires_grad_()
    (b * 3).sum().backward()
    assert (b.is_leaf, b.grad.tolist()) == (True, [3.0, 3.0])
    with pytest.raises(RuntimeError, match="^can't retain_grad on Tensor that has "
                                           "requires_grad=False$"):
        at.ones(2).retain_grad()
    x = at.ones(2, requires_grad=True)
    with pytest.raises(RuntimeError, match="^you can only change requires_grad flags of leaf "
                                           "variables."):
        (x * 2).requires_grad_(False)


def test_T41_integer_tensors_cannot_require_grad():
    with pytest.raises(RuntimeError, match="^Only Tensors of floating point and complex dtype "
                                           "can require gradients$"):
        at.tensor([1, 2, 3], requires_grad=True)
    with pytest.raises(RuntimeError, match="^only Tensors of floating point dtype can require "
                                           "gradients$"):
        at.tensor([1, 2, 3]).requires_grad_()
    with pytest.raises(RuntimeError, match="^only Tensors of floating point and complex dtype "
                                           "can require gradients$"):
        at.tensor([1, 2, 3]).requires_grad = True
    with pytest.raises(RuntimeError, match="^only Tensors of floating point dtype"):
        at.tensor([True]).requires_grad_()
    assert at.tensor([1, 2]).requires_grad_(False).requires_grad is False


def test_T42_non_differentiable_ops():
    x = at.tensor([1.5, 2.5, -0.5], requires_grad=True)
    assert (x > 0).requires_grad is False
    assert (x > 0).dtype == np.bool_


def test_T43_mixed_dtypes_gradient_has_the_leaf_dtype():
    x = at.ones(2, dtype="float32", requires_grad=True)
    w = at.ones(2, dtype="float64", requires_grad=True)
    y = (x * w * at.tensor([1, 2])).sum()
    y.backward()
    assert y.dtype == np.float64
    assert (x.grad.tolist(), x.grad.dtype, w.grad.tolist(), w.grad.dtype) == (
        [1.0, 2.0], np.float32, [1.0, 2.0], np.float64)


def test_T44_detach_stops_gradient_and_is_read_only():
    x = at.tensor([1., 2.], requires_grad=True)
    y = x * x
    yd = y.detach()
    (yd * x).sum().backward()
    assert (yd.requires_grad, yd.is_leaf, x.grad.tolist()) == (False, True, [1.0, 4.0])
    # torch lets e.detach().zero_() corrupt e and fails at backward; autotape's detached
    # view is read-only, so zero_() writes a copy and e's gradient stays right
    x2 = at.tensor([1., 2.], requires_grad=True)
    e = x2.exp()
    d = e.detach()
    d.zero_()
    assert d.tolist() == [0.0, 0.0]
    e.sum().backward()
    assert np.allclose(x2.grad.numpy(), np.exp([1., 2.]))


def test_T45_grad_modes():
    x = at.ones(2, requires_grad=True)
    with at.no_grad():
        y = x * 2
        with at.enable_grad():
            z = x * 2
    with at.set_grad_enabled(False):
        v = x * 2
    q = (x * x).sum()
    with at.no_grad():
        q.backward()
    assert (y.requires_grad, y.is_leaf, z.requires_grad, v.requires_grad,
            x.grad.tolist()) == (False, True, True, False, [2.0, 2.0])
    assert at.is_grad_enabled()


def test_T46_in_place_on_a_leaf_that_requires_grad():
    x = at.ones(2, requires_grad=True)
    with pytest.raises(RuntimeError, match="^a leaf Variable that requires grad is being used "
                                           "in an in-place operation.$"):
        x += 1
    with pytest.raises(RuntimeError, match="^a view of a leaf Variable that requires grad is "
                                           "being used in an in-place operation.$"):
        x[0] = 5.
    with at.no_grad():
        x *= 2
    assert (x.detach().tolist(), x.is_leaf, x.requires_grad) == ([2.0, 2.0], True, True)


def test_T47_modifying_a_saved_tensor_in_place_raises_at_backward():
    x = at.ones(3, requires_grad=True)
    a = x * 1
    y = a * a                    # the multiplication's gradient reads a (version 0)
    a += 1                       # a is now version 1
    assert a._version == 1
    with pytest.raises(RuntimeError, match=re.escape(
            "one of the variables needed for gradient computation has been modified by "
            "an inplace operation: [float64 (3,)], which is output 0 of <AddBackward>, "
            "is at version 1; expected version 0 instead.")):
        y.sum().backward()


def test_T48_in_place_before_saving_or_on_what_nothing_saved_is_fine():
    x = at.ones(3, requires_grad=True)
    a = x * 1
    a.add_(1)
    y = a * a                    # modified before it was saved
    y.sum().backward()
    assert x.grad.tolist() == [4.0, 4.0, 4.0]
    x.grad = None
    a = x.clone()
    b = a + 1                    # an addition saves nothing
    a.mul_(3)
    b.sum().backward()
    assert x.grad.tolist() == [1.0, 1.0, 1.0]
    e = x.exp()                  # exp's gradient reads its own result
    e.mul_(2)
    with pytest.raises(RuntimeError, match=r"\[float64 \(3,\)\], which is output 0 of "
                       r"<MultiplyBackward>, is at version 1; expected version 0"):
        e.sum().backward()


def test_T49_broadcasting_reduces_back_to_each_shape():
    a = at.ones(2, 3, requires_grad=True)
    b = at.tensor([1., 2., 3.], requires_grad=True)
    s = at.tensor(2., requires_grad=True)
    c = at.tensor([[1.], [2.]], requires_grad=True)
    (a * b * s + c).sum().backward()
    e = at.zeros(4, 0, requires_grad=True)
    f = at.zeros(4, 1, requires_grad=True)
    (e + f).sum().backward()
    assert (a.grad.tolist(), b.grad.tolist(), s.grad.tolist(), c.grad.tolist(),
            e.grad.shape, f.grad.tolist()) == (
        [[2.0, 4.0, 6.0], [2.0, 4.0, 6.0]], [4.0, 4.0, 4.0], 12.0, [[3.0], [3.0]], (4, 0),
        [[0.0], [0.0], [0.0], [0.0]])


def test_T50_broadcasting_with_non_uniform_upstream():
    a = at.zeros(2, 1, 3, requires_grad=True)
    b = at.zeros(4, 1, requires_grad=True)
    (a + b).backward(at.arange(24.).reshape(2, 4, 3))
    assert a.grad.tolist() == [[[18.0, 22.0, 26.0]], [[66.0, 70.0, 74.0]]]
    assert b.grad.tolist() == [[42.0], [60.0], [78.0], [96.0]]


def test_T60_conventions_at_kinks():
    x = at.tensor([0., -1., 2.], requires_grad=True)
    t = at.tensor([1., 3., 3.], requires_grad=True)
    u = at.tensor([-1., 4.], requires_grad=True)

    def G(y, v):
        return at.grad(y, v)[0].tolist()
    assert G(x.abs().sum(), x) == [0.0, -1.0, 1.0]
    assert G(x.relu().sum(), x) == [0.0, 0.0, 1.0]
    s = G(x.sqrt().sum(), x)
    assert s[0] == np.inf and np.isnan(s[1]) and s[2] == pytest.approx(0.3535533845424652)
    assert G(at.maximum(t, 3.).sum(), t) == [0.0, 0.5, 0.5]
    w = G(at.where(u > 0, u.sqrt(), at.zeros(2)).sum(), u)
    assert np.isnan(w[0]) and w[1] == 0.25
