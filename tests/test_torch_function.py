"""at.autograd.Function, torch's custom-function class, on cases of torch's
test_autograd.py in autotape's spelling (and against torch where it is installed)."""
import numpy as np
import pytest

import autotape as at
from autotape.autograd import Function
from autotape.autograd.function import once_differentiable


def same(a, b, tol=1e-12):
    a = a.detach().numpy() if isinstance(a, at.Tensor) else np.asarray(a)
    b = b.detach().numpy() if isinstance(b, at.Tensor) else np.asarray(b)
    np.testing.assert_allclose(a, b, rtol=tol, atol=tol)


class MyFunction(Function):
    @staticmethod
    def forward(ctx, tensor1, pyscalar, tensor2):
        ctx.pyscalar = pyscalar
        ctx.save_for_backward(tensor1, tensor2)
        return tensor1 + pyscalar * tensor2 + tensor1 * tensor2

    @staticmethod
    def backward(ctx, grad_output):
        var1, var2 = ctx.saved_tensors
        return (grad_output + grad_output * var2, None,
                grad_output * ctx.pyscalar + grad_output * var1)


@pytest.mark.filterwarnings("ignore:Using backward\\(\\) with create_graph")
def test_function():
    x = at.randn(5, 5, requires_grad=True)
    y = at.randn(5, 5, requires_grad=True)
    result = MyFunction.apply(x, 2, y)
    assert result.grad_fn.name() == "MyFunctionBackward"
    at.autograd.backward(result.sum(), at.ones((), requires_grad=True), create_graph=True)
    same(x.grad, y.detach() + 1)
    same(y.grad, x.detach() + 2)
    assert x.grad.grad_fn is not None and y.grad.grad_fn is not None
    # the gradient is differentiable again: d(sum x.grad)/dy = 1 per element
    g, = at.grad(x.grad.sum(), y)
    same(g, np.ones((5, 5)))


@pytest.mark.filterwarnings("ignore:Using backward\\(\\) with create_graph")
def test_once_differentiable():
    class Once(MyFunction):
        @staticmethod
        @once_differentiable
        def backward(ctx, grad_output):
            assert not at.is_grad_enabled()
            t1, t2 = ctx.saved_tensors
            return (grad_output + grad_output * t2, None,
                    grad_output * ctx.pyscalar + grad_output * t1)

    x = at.randn(5, 5, requires_grad=True)
    y = at.randn(5, 5, requires_grad=True)
    at.autograd.backward(Once.apply(x, 2, y).sum(), create_graph=True)
    same(x.grad, y.detach() + 1)
    with pytest.raises(RuntimeError, match="trying to differentiate twice a function that "
                       "was marked with @once_differentiable"):
        at.grad(x.grad.sum(), y)


@pytest.mark.parametrize("shape", [(1,), ()])
def test_function_returns_input(shape):
    class Identity(Function):
        @staticmethod
        def forward(ctx, x):
            return x

        @staticmethod
        def backward(ctx, grad):
            return grad * 2

    v = at.ones(*shape, requires_grad=True)
    Identity.apply(v).backward()
    same(v.grad, np.full(shape, 2.0))
    with at.no_grad():
        v.grad.zero_()
    Identity.apply(v.clone()).backward()
    same(v.grad, np.full(shape, 2.0))


def test_function_returns_undefined_tensor():
    class NoGrad(Function):
        @staticmethod
        def forward(ctx, x):
            return x * 2

        @staticmethod
        def backward(ctx, grad):
            return None

    # departure (docs/torch.md, as every custom op): a leaf reached only through a
    # backward that returned None gets zeros, where torch leaves .grad None
    x = at.ones(1, requires_grad=True)
    NoGrad.apply(x).backward()
    same(x.grad, [0.0])
    NoGrad.apply(x ** 2).backward()
    same(x.grad, [0.0])


def test_custom_function_exception():
    class Fails(Function):
        @staticmethod
        def forward(ctx, x):
            return x.clone()

        @staticmethod
        def backward(ctx, g):
            raise Exception("Simulate error on backward pass")

    t1 = at.rand(3, 3, requires_grad=True)
    with pytest.raises(Exception, match="Simulate error on backward pass"):
        Fails.apply(t1 * t1).sum().backward()


def test_custom_function_non_tensor_inputs_outputs():
    class Mixed(Function):
        @staticmethod
        def forward(ctx, t1, t2, scale, t3):
            t4 = (t1 + t2 * t3) * scale
            t5 = (t1 * t2 + t3) * scale
            ctx.scale = scale
            ctx.save_for_backward(t1, t2, t3)
            return scale, t4, None, True, t5, "bar", t1

        @staticmethod
        @once_differentiable
        def backward(ctx, *grads):
            assert len(grads) == 7
            assert all(grads[k] is None for k in (0, 2, 3, 5))
            scale = ctx.scale
            var1, var2, var3 = ctx.saved_tensors
            return (grads[1] * scale + grads[4] * var2 * scale + grads[6],
                    grads[1] * var3 * scale + grads[4] * var1 * scale,
                    None,
                    grads[1] * var2 * scale + grads[4] * scale)

    t1 = at.rand(10, requires_grad=True)
    t2 = at.rand(10, requires_grad=True)
    t3 = at.rand(10)
    res = Mixed.apply(t1, t2, 3, t3)
    assert res[0] == 3 and res[2] is None and res[3] is True and res[5] == "bar"
    T1, T2, T3 = (t.detach().numpy() for t in (t1, t2, t3))
    same(res[1], (T1 + T2 * T3) * 3)
    same(res[4], (T1 * T2 + T3) * 3)
    same(res[6], T1)
    at.autograd.backward([res[1].sum(), res[4].sum(), res[6].sum()])
    assert t1.grad is not None and t2.grad is not None and t3.grad is None
    assert at.gradcheck(lambda a, b, c: Mixed.apply(a, b, 3, c)[1::3][0:2] +
                        (Mixed.apply(a, b, 3, c)[6],), (t1, t2, t3))


def test_invalid_gradients():
    class Wrong(Function):
        @staticmethod
        def forward(ctx, x):
            return x * 2

        @staticmethod
        def backward(ctx, grad_output):
            return at.randn(10)

    with pytest.raises(RuntimeError, match="expected shape"):
        Wrong.apply(at.randn(5, 5, requires_grad=True)).sum().backward()


def test_too_many_grads_and_too_few():
    class Extra(Function):
        @staticmethod
        def forward(ctx, x):
            return x

        @staticmethod
        def backward(ctx, g):
            return g, None, None

    x = at.randn(5, 5, requires_grad=True)
    Extra.apply(x).sum().backward()
    same(x.grad, np.ones((5, 5)))

    class Wrong(Extra):
        @staticmethod
        def backward(ctx, g):
            return g, g

    with pytest.raises(RuntimeError, match="incorrect number of gradients"):
        Wrong.apply(x).sum().backward()


def test_mark_non_differentiable():
    class Mask(Function):
        @staticmethod
        def forward(ctx, x):
            output = x > 0
            ctx.mark_non_differentiable(output)
            return output

        @staticmethod
        def backward(ctx, g):
            return g * 0

    x = at.randn(5, 5, requires_grad=True)
    mask = Mask.apply(x)
    assert not mask.requires_grad
    x.masked_fill(mask, 0).sum().backward()


def test_mark_non_differentiable_mixed():
    class Two(Function):
        @staticmethod
        def forward(ctx, x):
            a, b = x + 1, x + 2
            ctx.mark_non_differentiable(a)
            return a, b

        @staticmethod
        def backward(ctx, grad_a, grad_b):
            assert (grad_a.numpy() == 0).all() and (grad_b.numpy() == 1).all()
            return grad_b

    x = at.randn(5, 5, requires_grad=True)
    a, b = Two.apply(x)
    assert not a.requires_grad and b.requires_grad
    b.sum().backward()
    same(x.grad, np.ones((5, 5)))


def test_dont_materialize_grads():
    class Two(Function):
        @staticmethod
        def forward(ctx, x):
            ctx.set_materialize_grads(False)
            a = x + 1
            ctx.mark_non_differentiable(a)
            return a, x * 2

        @staticmethod
        def backward(ctx, grad_a, grad_b):
            assert grad_a is None
            return grad_b * 2

    x = at.ones(2, requires_grad=True)
    Two.apply(x)[1].sum().backward()
    same(x.grad, [2.0, 2.0])


def test_return_duplicate():
    class DoubleDuplicate(Function):
        @staticmethod
        def forward(ctx, x):
            output = x * 2
            return output, output

        @staticmethod
        def backward(ctx, grad1, grad2):
            return grad1 * 2 + grad2 * 2

    def fn(x):
        a, b = DoubleDuplicate.apply(x)
        assert a is b
        return a + b

    x = at.randn(5, 5, requires_grad=True)
    assert at.gradcheck(fn, [x])
    assert at.gradgradcheck(fn, [x])


def test_save_none_for_backward():
    class SaveNone(Function):
        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(None, x, None)
            return x * x

        @staticmethod
        def backward(ctx, g):
            n1, x, n2 = ctx.saved_tensors
            assert n1 is None and n2 is None
            return 2 * x * g

    x = at.randn(5, requires_grad=True)
    SaveNone.apply(x).sum().backward()
    same(x.grad, 2 * x.detach())


def test_no_grad_python_function_and_input():
    class Plus(Function):
        @staticmethod
        def forward(ctx, x):
            return x + 1

        @staticmethod
        def backward(ctx, g):
            return g

    x = at.ones(5, 5, requires_grad=True)
    with at.no_grad():
        y = Plus.apply(x)
    assert not y.requires_grad and y.grad_fn is None and x.requires_grad


def test_dep_nograd():
    class F1(Function):
        @staticmethod
        def forward(ctx, x):
            out = at.randn(*x.shape)
            ctx.mark_non_differentiable(out)
            return x, out

        @staticmethod
        def backward(ctx, g, ignored):
            return g

    class F2(Function):
        @staticmethod
        def forward(ctx, x, ignored):
            return x

        @staticmethod
        def backward(ctx, g):
            return g, None

    x = at.randn(5, requires_grad=True)
    a, b = F1.apply(x)
    b = b + 1
    assert a.requires_grad and not b.requires_grad
    c = F2.apply(a, b)
    c.backward(at.ones(*c.shape))
    same(x.grad, np.ones(5))


def test_function_in_a_compiled_function_and_legacy_call():
    class Cube(Function):
        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(x)
            return x ** 3

        @staticmethod
        def backward(ctx, g):
            x, = ctx.saved_tensors
            return 3 * x ** 2 * g

    f = at.compile(lambda x: Cube.apply(x).sum(), np.array([1.0, 2.0]))
    for v in ([1.0, 2.0], [0.5, -1.0]):
        same(f.grad(np.array(v)), 3 * np.array(v) ** 2)
    with pytest.raises(RuntimeError, match="Legacy autograd function"):
        Cube()


def test_against_torch():
    torch = pytest.importorskip("torch")

    def define(lib, base):
        class Scale(base):
            @staticmethod
            def forward(ctx, x, w):
                ctx.save_for_backward(x, w)
                return lib.sin(x) * w

            @staticmethod
            def backward(ctx, g):
                x, w = ctx.saved_tensors
                return g * lib.cos(x) * w, (g * lib.sin(x)).sum(0)
        return Scale

    xv, wv = np.random.default_rng(0).normal(size=(2, 4, 3))[:, :, :]
    xv, wv = xv, wv[0]
    ours = define(at, Function)
    theirs = define(torch, torch.autograd.Function)
    x, w = at.tensor(xv, requires_grad=True), at.tensor(wv, requires_grad=True)
    tx, tw = torch.tensor(xv, requires_grad=True), torch.tensor(wv, requires_grad=True)
    gx, gw = at.grad((ours.apply(x, w) ** 2).sum(), (x, w), create_graph=True)
    tgx, tgw = torch.autograd.grad((theirs.apply(tx, tw) ** 2).sum(), (tx, tw),
                                   create_graph=True)
    same(gx, tgx.detach().numpy(), 1e-12)
    same(gw, tgw.detach().numpy(), 1e-12)
    h, = at.grad(gx.sum(), w)
    th, = torch.autograd.grad(tgx.sum(), tw)
    same(h, th.numpy(), 1e-12)
