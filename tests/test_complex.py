"""Complex numbers: values against numpy, gradients against central differences in the
complex sense (real and imaginary perturbations) and against torch's complex autograd
where torch is installed; torch's convention and errors; transforms; at.compile."""
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import autotape as at
import autotape.func as F
import autotape.numpy as anp

try:
    import torch
except ImportError:                      # (the oracle tests skip without it)
    torch = None

needs_torch = pytest.mark.skipif(torch is None, reason="torch is not installed")
RNG = np.random.default_rng(7)


def crandn(*shape):
    return RNG.standard_normal(shape) + 1j * RNG.standard_normal(shape)


def numbers(v):
    if isinstance(v, (at.Tensor, at.ComplexTensor)):
        return v.detach().numpy()
    return np.asarray(v)


def real_loss(f, weights):
    """L(*args) = Re(sum(conj(w) * f(*args))): a real loss whose gradient is f's VJP of
    w (torch's convention)."""
    def loss(*args):
        out = f(*args)
        return at.real(at.sum(at.conj(at.as_tensor(weights) if not np.iscomplexobj(weights)
                                      else at.tensor(weights)) * out))
    return loss


def check_vjp_fd(f, *args, eps=1e-6, rtol=1e-6, atol=1e-8):
    """f's VJP against central differences of the real loss along random real and
    imaginary perturbations of every complex argument (and real ones of real arguments).
    """
    out = f(*[at.tensor(a) for a in args])
    w = crandn(*out.shape) if at.is_complex(out) else RNG.standard_normal(out.shape)
    loss = real_loss(f, w)
    leaves = [at.tensor(a, requires_grad=True) for a in args]
    grads = at.grad(loss(*leaves), leaves, allow_unused=True, materialize_grads=True)
    for k, a in enumerate(args):
        kinds = ("real", "imag") if np.iscomplexobj(a) else ("real",)
        for kind in kinds:
            d = RNG.standard_normal(np.shape(a)) * (1j if kind == "imag" else 1.0)
            plus = [at.tensor(b + eps * d if j == k else b) for j, b in enumerate(args)]
            minus = [at.tensor(b - eps * d if j == k else b) for j, b in enumerate(args)]
            numeric = (float(numbers(loss(*plus))) - float(numbers(loss(*minus)))) / (2 * eps)
            exact = float(np.real(np.sum(np.conj(numbers(grads[k])) * d)))
            assert exact == pytest.approx(numeric, rel=rtol * 10, abs=atol + 1e-6 * abs(numeric)), \
                f"argument {k}, {kind} perturbation"


# ---- values and gradients of every op ---------------------------------------------------------

HOLOMORPHIC = ["exp", "exp2", "expm1", "log", "log2", "log10", "log1p", "sqrt", "square",
               "reciprocal", "sin", "cos", "tan", "sinh", "cosh", "tanh", "arcsin",
               "arccos", "arctan", "arcsinh", "arccosh", "arctanh"]


@pytest.mark.parametrize("name", HOLOMORPHIC)
def test_unary_values_and_gradients(name):
    z = crandn(3, 2) * 0.5 + 0.3
    assert np.allclose(numbers(getattr(at, name)(at.tensor(z))), getattr(np, name)(z))
    check_vjp_fd(getattr(at, name), z)
    check_vjp_fd(lambda x: getattr(anp, name)(x), z)


@pytest.mark.parametrize("fn, np_fn", [
    (lambda z: abs(z), np.abs), (at.angle, np.angle), (at.real, np.real), (at.imag, np.imag),
    (at.conj, np.conj), (lambda z: -z, np.negative), (lambda z: z ** 3, lambda z: z ** 3),
    (lambda z: z ** 2.5, lambda z: z ** 2.5), (lambda z: 2.0 ** z, lambda z: 2.0 ** z),
    (lambda z: z.sum(axis=0), lambda z: z.sum(axis=0)), (at.mean, np.mean),
    (lambda z: at.cumsum(z, axis=1), lambda z: np.cumsum(z, axis=1)),
    (lambda z: z[1:, ::-1], lambda z: z[1:, ::-1]), (lambda z: z[[0, 2], 1], lambda z: z[[0, 2], 1]),
    (lambda z: z.T, lambda z: z.T), (lambda z: z.reshape(-1), lambda z: z.reshape(-1)),
    (lambda z: at.flip(z, 0), lambda z: np.flip(z, 0)),
    (lambda z: at.roll(z, 1, axis=1), lambda z: np.roll(z, 1, axis=1)),
    (lambda z: at.concatenate([z, z * 1j], axis=-1), lambda z: np.concatenate([z, z * 1j], -1)),
    (lambda z: at.stack([z, 2 * z], axis=1), lambda z: np.stack([z, 2 * z], 1)),
    (lambda z: at.where(at.real(z) > 0, z, 1j), lambda z: np.where(z.real > 0, z, 1j)),
    (lambda z: at.trace(z[:2]), lambda z: np.trace(z[:2])),
])
def test_more_ops(fn, np_fn):
    z = crandn(3, 2) + 0.1
    assert np.allclose(numbers(fn(at.tensor(z))), np_fn(z))
    check_vjp_fd(fn, z)


@pytest.mark.parametrize("op", ["add", "subtract", "multiply", "divide", "power"])
@pytest.mark.parametrize("shapes", [((3, 2), (3, 2)), ((3, 2), (2,)), ((1, 2), (3, 1)), ((), (2,))])
def test_binary_broadcasting(op, shapes):
    x, y = crandn(*shapes[0]) + 1.5, crandn(*shapes[1]) + 1.5
    assert np.allclose(numbers(getattr(at, op)(at.tensor(x), at.tensor(y))),
                       getattr(np, op)(x, y))
    check_vjp_fd(getattr(at, op), x, y)


@pytest.mark.parametrize("op", ["add", "subtract", "multiply", "divide"])
def test_mixed_real_and_complex(op):
    x, y = RNG.standard_normal((3, 2)) + 2.0, crandn(3, 2) + 2.0
    out = getattr(at, op)(at.tensor(x), at.tensor(y))
    assert out.dtype == np.complex128
    assert np.allclose(numbers(out), getattr(np, op)(x, y))
    check_vjp_fd(getattr(at, op), x, y)
    check_vjp_fd(getattr(at, op), y, x)
    check_vjp_fd(lambda a: getattr(at, op)(a, 1.5 - 0.5j), y)
    check_vjp_fd(lambda a: getattr(at, op)(a, 1j), x)


@pytest.mark.parametrize("fn", [
    lambda a, b: a @ b.T, lambda a, b: at.einsum("ij,kj->ik", a, b), lambda a, b: at.dot(a, b.T),
    lambda a, b: at.tensordot(a, b, axes=([1], [1])), lambda a, b: at.outer(a, b),
    lambda a, b: at.vdot(a, b[:3]), lambda a, b: at.inner(a, b), lambda a, b: at.kron(a, b),
])
def test_products(fn):
    a, b = crandn(3, 2), crandn(4, 2)
    check_vjp_fd(fn, a, b)
    check_vjp_fd(fn, a.real.copy(), b)


def test_products_match_numpy():
    a, b = crandn(3, 2), crandn(2, 4)
    ta, tb = at.tensor(a), at.tensor(b)
    assert np.allclose(numbers(ta @ tb), a @ b)
    assert np.allclose(numbers(at.einsum("ij,jk->ik", ta, tb)), np.einsum("ij,jk->ik", a, b))
    assert np.allclose(numbers(at.vdot(ta, ta)), np.vdot(a, a))
    assert np.allclose(numbers(at.kron(ta, tb)), np.kron(a, b))
    assert np.allclose(numbers(at.tensor(a.real) @ tb), a.real @ b)


def test_setitem_records():
    z = at.tensor(crandn(3), requires_grad=True)
    w = z * 1.0
    w[1] = 2j * z[0]
    g, = at.grad(at.real(at.sum(w * at.conj(w))), z)
    zn = numbers(z)
    expected = 2 * zn.copy()
    expected[1] = 0
    expected[0] += 2 * 4 * zn[0]                 # |2j z0|^2 = 4 |z0|^2
    assert np.allclose(numbers(g), expected)


# ---- FFT ------------------------------------------------------------------------------------

@pytest.mark.parametrize("norm", [None, "ortho", "forward"])
@pytest.mark.parametrize("name, n", [("fft", None), ("fft", 3), ("fft", 7), ("ifft", None),
                                     ("ifft", 4), ("ifft", 8)])
def test_fft_1d(name, n, norm):
    z = crandn(2, 5)
    fn = lambda x: getattr(at.fft, name)(x, n=n, axis=-1, norm=norm)   # noqa: E731
    assert np.allclose(numbers(fn(at.tensor(z))), getattr(np.fft, name)(z, n=n, norm=norm))
    check_vjp_fd(fn, z)
    check_vjp_fd(lambda x: getattr(at.fft, name)(x, n=n, axis=0, norm=norm), z.T.copy())
    check_vjp_fd(fn, z.real.copy())                   # a real signal's transform


@pytest.mark.parametrize("norm", [None, "ortho", "forward"])
@pytest.mark.parametrize("length, n", [(6, None), (5, None), (6, 4), (6, 9), (5, 8)])
def test_rfft_and_irfft(length, n, norm):
    x = RNG.standard_normal((3, length))
    assert np.allclose(numbers(at.fft.rfft(at.tensor(x), n, norm=norm)),
                       np.fft.rfft(x, n, norm=norm))
    check_vjp_fd(lambda a: at.fft.rfft(a, n, norm=norm), x)
    c = np.fft.rfft(RNG.standard_normal((3, length)))
    assert np.allclose(numbers(at.fft.irfft(at.tensor(c), n, norm=norm)),
                       np.fft.irfft(c, n, norm=norm))
    check_vjp_fd(lambda a: at.fft.irfft(a, n, norm=norm), c)
    check_vjp_fd(lambda a: at.fft.irfft(a, n, axis=0, norm=norm), c.T.copy())


@pytest.mark.parametrize("name", ["fft2", "ifft2", "fftn", "ifftn", "rfft2", "irfft2",
                                  "rfftn", "irfftn"])
@pytest.mark.parametrize("s_axes", [(None, None), ((5, 3), (0, 2)), ((3,), (1,))])
def test_fft_nd(name, s_axes):
    s, axes = s_axes
    data = RNG.standard_normal((4, 3, 4)) / 4
    if name.startswith("ir"):
        data = np.fft.fftn(data)
    elif not name.startswith("r"):
        data = data + 1j * RNG.standard_normal(data.shape) / 4
    kwargs = {} if axes is None and name.endswith("2") and s is None else {"s": s}
    if axes is not None:
        kwargs["axes"] = axes
    elif name.endswith("2") and s is not None:
        kwargs["s"] = s if len(s) == 2 else None
    fn = lambda a: getattr(at.fft, name)(a, **kwargs)                  # noqa: E731
    assert np.allclose(numbers(fn(at.tensor(data))), getattr(np.fft, name)(data, **kwargs))
    check_vjp_fd(fn, data)


def test_fft_shifts_and_frequencies():
    x = RNG.standard_normal((4, 5))
    for axes in (None, 0, (1,)):
        assert np.allclose(numbers(at.fft.fftshift(at.tensor(x), axes)), np.fft.fftshift(x, axes))
        assert np.allclose(numbers(at.fft.ifftshift(at.tensor(x), axes)),
                           np.fft.ifftshift(x, axes))
    z = crandn(4, 5)
    assert np.allclose(numbers(at.fft.fftshift(at.tensor(z))), np.fft.fftshift(z))
    check_vjp_fd(at.fft.fftshift, z)
    check_vjp_fd(at.fft.ifftshift, x)
    assert np.allclose(numbers(at.fft.fftfreq(5, 0.1)), np.fft.fftfreq(5, 0.1))
    assert np.allclose(numbers(at.fft.rfftfreq(6)), np.fft.rfftfreq(6))


def test_numpy_fft_dispatches_on_tensors():
    x = at.tensor(RNG.standard_normal(8), requires_grad=True)
    y = np.fft.rfft(x)
    assert isinstance(y, at.ComplexTensor) and y.requires_grad
    g, = at.grad(at.sum(abs(np.fft.irfft(y * 1j)) ** 2), x)
    assert g.shape == (8,)
    z = at.tensor(crandn(4), requires_grad=True)
    assert np.allclose(numbers(np.fft.fft(z)), np.fft.fft(numbers(z)))
    assert isinstance(np.fft.fft(at.tensor(crandn(4))), np.ndarray)    # no grad: numpy's


def test_fft_errors():
    with pytest.raises(ValueError, match="Invalid norm value"):
        at.fft.fft(at.tensor(crandn(4)), norm="both")
    with pytest.raises(TypeError, match="rfft takes real input"):
        at.fft.rfft(at.tensor(crandn(4)))
    with pytest.raises(ValueError, match="Invalid number of FFT data points"):
        at.fft.fft(at.tensor(crandn(4)), n=0)


# ---- torch's convention and messages --------------------------------------------------------

def test_gradient_convention_is_torchs():
    z = at.tensor([1 + 2j, 3 - 1j], requires_grad=True)
    (abs(z) ** 2).sum().backward()                  # |z|^2: dL/dx + i dL/dy = 2z
    assert np.allclose(numbers(z.grad), 2 * np.array([1 + 2j, 3 - 1j]))
    (abs(z) ** 2).sum().backward()                  # .grad accumulates
    assert np.allclose(numbers(z.grad), 4 * np.array([1 + 2j, 3 - 1j]))
    z.grad.zero_()
    assert np.allclose(numbers(z.grad), 0)
    z.grad = None
    assert z.grad is None


def test_complex_outputs_need_grad_outputs():
    z = at.tensor([1 + 2j], requires_grad=True)
    with pytest.raises(RuntimeError, match="grad can be implicitly created only for real "
                                           "scalar outputs"):
        (z * z).sum().backward()
    with pytest.raises(RuntimeError, match="grad can be implicitly created only for real"):
        at.grad((z * z).sum(), z)
    v = np.array([0.5 - 1j])
    g, = at.grad(z * z, z, v)                       # conj(2z) * v
    assert np.allclose(numbers(g), np.conj(2 * np.array([1 + 2j])) * v)
    g2, = at.grad(z * z, z, at.tensor(v))
    assert np.allclose(numbers(g2), numbers(g))
    w = z * 1.0
    w.backward(at.tensor(v))
    assert np.allclose(numbers(z.grad), v)
    x = at.tensor([1.0], requires_grad=True)
    with pytest.raises(RuntimeError, match="both grad_output and output are required to "
                                           "have the same dtype"):
        at.grad(x * 2, x, np.array([1j]))


def test_leaves_and_attributes():
    z = at.tensor([[1 + 2j, 3.0]], requires_grad=True)
    assert z.is_leaf and z.requires_grad and z.dtype == np.complex128
    assert z.shape == (1, 2) and z.ndim == 2 and z.size == 2 and len(z) == 1
    assert not (z * 2).is_leaf
    assert np.allclose(numbers(z.real), [[1.0, 3.0]]) and np.allclose(numbers(z.imag), [[2, 0]])
    assert z.detach().requires_grad is False
    assert at.tensor(1 + 2j).item() == 1 + 2j and complex(at.tensor(1j)) == 1j
    assert at.tensor([1j]).tolist() == [1j]
    assert "requires_grad=True" in repr(z) and "grad_fn" in repr(z * 2)
    with pytest.raises(RuntimeError, match="Can't call numpy\\(\\) on Tensor that requires grad"):
        np.asarray(z)
    with pytest.raises(TypeError, match="can't convert a complex tensor to float"):
        float(at.tensor(1j))
    with pytest.raises(TypeError, match="would drop the imaginary parts"):
        z.astype(np.float64)
    c64 = at.tensor(np.array([1 + 1j], np.complex64), requires_grad=True)
    assert c64.dtype == np.complex64
    (abs(c64 * c64) ** 2).sum().backward()
    assert c64.grad.dtype == np.complex64
    assert at.complex(at.tensor([1.0]), at.tensor([2.0])).numpy().tolist() == [1 + 2j]
    parts = at.view_as_real(z)
    assert parts.shape == (1, 2, 2)
    assert at.view_as_complex(parts).shape == (1, 2)
    assert at.zeros(2, dtype=np.complex128).dtype == np.complex128
    assert at.is_complex(z) and not at.is_complex(at.tensor([1.0]))
    assert at.tensor([1.0]).real.numpy().tolist() == [1.0]


def test_unsupported_ops_are_refused_by_name():
    z = at.tensor(crandn(3), requires_grad=True)
    with pytest.raises(TypeError, match="maximum does not support complex numbers"):
        at.maximum(z, z)
    with pytest.raises(TypeError, match="sort does not support complex numbers"):
        at.sort(z)
    with pytest.raises(TypeError, match="floor does not support complex numbers"):
        np.floor(z)
    x = at.tensor([1.0, 2.0])
    with pytest.raises(TypeError):
        x[0] = 1j                                 # (never a silent cast to real)
    import numba
    with pytest.raises(TypeError, match="is complex; at.jit differentiates real numba"):
        at.jit(numba.njit(lambda a: (a * a).sum())).grad(np.array([1j]))
    with pytest.raises(TypeError, match="median"):
        np.median(z)


def test_real_tensor_methods_take_complex_operands():
    x = at.tensor([1.0, 2.0], requires_grad=True)
    z = at.tensor([1j, 2.0])
    assert numbers(x.dot(z)) == pytest.approx(4 + 1j)
    assert np.allclose(numbers(at.tensor([[1.0, 2.0]]).matmul(at.tensor([[1j], [1.0]]))),
                       [[2 + 1j]])
    with pytest.raises(TypeError, match="does not support complex numbers"):
        x.clip(z, 3.0)                         # (clip compares: no order of complex numbers)


def test_real_tensors_times_complex_scalars():
    x = at.tensor([1.0, 2.0], requires_grad=True)
    y = x * 1j + np.array([1j, 2.0]) * x
    assert isinstance(y, at.ComplexTensor)
    g, = at.grad(at.sum(at.real(y * at.conj(y))), x)
    # |x (1j + c)|^2 = x^2 |1j + c|^2
    c = np.array([1j, 2.0])
    assert np.allclose(numbers(g), 2 * np.array([1.0, 2.0]) * np.abs(1j + c) ** 2)


# ---- against torch ------------------------------------------------------------------------

TORCH_CASES = [
    (lambda m, z: abs(at.exp(z) * at.sin(z)).sum(), lambda t, z: (t.exp(z) * t.sin(z)).abs().sum()),
    (lambda m, z: at.angle(z * z + 1).sum(), lambda t, z: (z * z + 1).angle().sum()),
    (lambda m, z: (at.sqrt(z) / (z + 2)).real.sum(), lambda t, z: (t.sqrt(z) / (z + 2)).real.sum()),
    (lambda m, z: abs(at.fft.ifft(at.fft.fft(z) ** 2)).sum(),
     lambda t, z: t.fft.ifft(t.fft.fft(z) ** 2).abs().sum()),
    (lambda m, z: (at.fft.irfft(at.fft.fft(z)[..., :3] * 1j) ** 2).sum(),
     lambda t, z: (t.fft.irfft(t.fft.fft(z)[..., :3] * 1j) ** 2).sum()),
    (lambda m, z: abs(z @ z.T.conj()).sum(), lambda t, z: (z @ z.T.conj()).abs().sum()),
    (lambda m, z: (at.log(z) * at.tanh(z)).imag.mean(), lambda t, z: (t.log(z) * t.tanh(z)).imag.mean()),
    (lambda m, z: abs(z ** (0.5 + 1j)).sum(), lambda t, z: (z ** (0.5 + 1j)).abs().sum()),
]


@needs_torch
@pytest.mark.parametrize("case", range(len(TORCH_CASES)))
def test_gradients_match_torch(case):
    f, tf = TORCH_CASES[case]
    z = crandn(4, 4) + 0.5
    zt = torch.tensor(z, requires_grad=True)
    za = at.tensor(z, requires_grad=True)
    la, lt = f(None, za), tf(torch, zt)
    assert float(la.detach()) == pytest.approx(lt.item(), rel=1e-10)
    ga, = at.grad(la, za, create_graph=True)
    gt, = torch.autograd.grad(lt, zt, create_graph=True)
    assert np.allclose(numbers(ga), gt.detach().numpy(), rtol=1e-9, atol=1e-12)
    # second order: the gradient of |g|^2, through the recorded backward
    ha, = at.grad(at.sum(abs(ga) ** 2), za)
    ht, = torch.autograd.grad((gt.abs() ** 2).sum(), zt)
    assert np.allclose(numbers(ha), ht.numpy(), rtol=1e-8, atol=1e-10)


@needs_torch
def test_grad_outputs_match_torch():
    z = crandn(5)
    v = crandn(5)
    za, zt = at.tensor(z, requires_grad=True), torch.tensor(z, requires_grad=True)
    ga, = at.grad(at.fft.fft(at.exp(za)), za, v)
    gt, = torch.autograd.grad(torch.fft.fft(torch.exp(zt)), zt, torch.tensor(v))
    assert np.allclose(numbers(ga), gt.numpy())


# ---- transforms and compiled functions ------------------------------------------------------

def test_func_transforms_with_complex_values():
    z = crandn(3)
    f = lambda a: at.sin(a) * a                                    # noqa: E731
    h = 1e-6
    fd = (np.sin(z + h) * (z + h) - np.sin(z - h) * (z - h)) / (2 * h)
    assert np.allclose(numbers(F.jacrev(f, holomorphic=True)(z)), np.diag(fd), atol=1e-7)
    assert np.allclose(numbers(F.jacfwd(f, holomorphic=True)(z)), np.diag(fd), atol=1e-7)
    assert np.allclose(numbers(F.grad(lambda a: f(a).sum(), holomorphic=True)(z)), fd, atol=1e-7)
    v = crandn(3)
    out, jv = F.jvp(f, (z,), (v,))
    assert np.allclose(numbers(jv), fd * v, atol=1e-6)
    out, vjp_fn = F.vjp(f, z)
    assert isinstance(out, at.ComplexTensor)
    assert np.allclose(numbers(vjp_fn(v)[0]), np.conj(fd) * v, atol=1e-6)
    # a real function of a complex argument: the gradient in torch's convention
    g = F.grad(lambda a: at.sum(abs(a) ** 2))(z)
    assert np.allclose(numbers(g), 2 * z)
    J = F.jacrev(lambda a: abs(a) ** 2)(z)
    assert np.allclose(numbers(J), np.diag(2 * z))
    with pytest.raises(TypeError, match="grad requires real-valued outputs"):
        F.grad(lambda a: f(a).sum())(z)
    with pytest.raises(TypeError, match="jacrev requires real-valued outputs"):
        F.jacrev(f)(z)
    with pytest.raises(TypeError, match="holomorphic=True requires inputs with complex"):
        F.jacrev(f, holomorphic=True)(z.real.copy())
    with pytest.raises(TypeError, match="hessian of a function of complex inputs"):
        F.hessian(lambda a: at.sum(abs(a) ** 2))(z)


def test_compile_and_vmap_with_complex_values():
    def loss(z, k):
        w = at.fft.ifft(at.fft.fft(z) * at.exp(1j * k))
        return at.sum(abs(w * w))
    z, k = crandn(8), RNG.standard_normal(8)
    c = at.compile(loss, z, k)
    assert float(c(z, k)) == pytest.approx(float(loss(at.tensor(z), at.tensor(k))))
    gz, gk = c.grad(z, k)
    ez, ek = F.grad(loss, argnums=(0, 1))(z, k)
    assert isinstance(gz, at.ComplexTensor)
    assert np.allclose(numbers(gz), numbers(ez)) and np.allclose(numbers(gk), numbers(ek))
    zs, ks = crandn(3, 8), RNG.standard_normal((3, 8))
    gzs, gks = F.vmap(c.grad)(zs, ks)
    for i in range(3):
        e = F.grad(loss, argnums=(0, 1))(zs[i], ks[i])
        assert np.allclose(numbers(gzs)[i], numbers(e[0]))
        assert np.allclose(numbers(gks)[i], numbers(e[1]))
    J = c.jacobian(z, k)
    E = F.jacrev(lambda a, b: loss(a, b), argnums=(0, 1))(z, k)
    assert all(np.allclose(numbers(a), numbers(b)) for a, b in zip(J, E))
    assert all(np.allclose(numbers(a), numbers(b)) for a, b in zip(c.jacfwd(z, k), E))
    Js = F.vmap(c.jacrev)(zs, ks)
    assert np.allclose(numbers(Js[0])[1], numbers(F.jacrev(loss)(zs[1], ks[1])))
    value, tangent = c.jvp((z, k), (1j * np.ones(8), np.zeros(8)))
    assert np.allclose(numbers(tangent), numbers(F.jvp(loss, (z, k), (1j * np.ones(8),
                                                                        np.zeros(8)))[1]))
    with pytest.raises(TypeError, match="hessian of a function of complex arguments"):
        c.hessian(z, k)
    spectrum = at.compile(lambda x: at.fft.rfft(x * x), np.ones(6))
    assert np.allclose(numbers(spectrum(np.arange(6.0))), np.fft.rfft(np.arange(6.0) ** 2))
    with pytest.raises(TypeError, match="with complex outputs"):
        at.compile(lambda a: a * 2, z).jacobian(z)


# ---- random shapes -------------------------------------------------------------------------

shapes = st.lists(st.integers(1, 3), min_size=0, max_size=3).map(tuple)


@settings(max_examples=25, deadline=None)
@given(shapes, shapes, st.sampled_from(["add", "multiply", "divide", "subtract"]))
def test_broadcasting_random_shapes(sa, sb, op):
    try:
        expected_shape = np.broadcast_shapes(sa, sb)
    except ValueError:
        return
    a, b = crandn(*sa) + 2, crandn(*sb) + 2
    out = getattr(at, op)(at.tensor(a), at.tensor(b))
    assert out.shape == expected_shape
    assert np.allclose(numbers(out), getattr(np, op)(a, b))
    check_vjp_fd(getattr(at, op), a, b)


# ---- linear algebra ------------------------------------------------------------------------

def _phase_free(fn):
    """A loss of a decomposition that does not depend on its vectors' phases."""
    return fn


LINALG = [
    ("solve", lambda a, b: at.linalg.solve(a, b), lambda t, a, b: t.linalg.solve(a, b)),
    ("inv", lambda a, b: at.linalg.inv(a) @ b, lambda t, a, b: t.linalg.inv(a) @ b),
    ("det", lambda a, b: at.linalg.det(a) * b, lambda t, a, b: t.linalg.det(a) * b),
    ("eigvals", lambda a, b: at.linalg.eigvals(a) * b[0, 0],
     lambda t, a, b: t.linalg.eigvals(a) * b[0, 0]),
    ("abs eigvecs", lambda a, b: abs(at.linalg.eig(a).eigenvectors) * b[0, 0],
     lambda t, a, b: t.linalg.eig(a)[1].abs() * b[0, 0]),
    ("svd values", lambda a, b: at.linalg.svd(a, compute_uv=False) * b[0, 0],
     lambda t, a, b: t.linalg.svdvals(a) * b[0, 0]),
    ("abs svd vectors", lambda a, b: abs(at.linalg.svd(a, full_matrices=False).U) * b[0, 0],
     lambda t, a, b: t.linalg.svd(a, full_matrices=False)[0].abs() * b[0, 0]),
    ("nuclear norm", lambda a, b: at.linalg.norm(a, "nuc") * b[0, 0],
     lambda t, a, b: t.linalg.matrix_norm(a, "nuc") * b[0, 0]),
]


@pytest.mark.parametrize("name, fn, _", LINALG, ids=[c[0] for c in LINALG])
def test_linalg_against_finite_differences(name, fn, _):
    a, b = crandn(3, 3) + 2 * np.eye(3), crandn(3, 2)
    check_vjp_fd(fn, a, b, rtol=1e-5)


@needs_torch
@pytest.mark.parametrize("name, fn, tfn", LINALG, ids=[c[0] for c in LINALG])
def test_linalg_matches_torch(name, fn, tfn):
    a, b = crandn(3, 3) + 2 * np.eye(3), crandn(3, 2)
    w = crandn(*np.shape(numbers(fn(at.tensor(a), at.tensor(b)))))
    la, lb = at.tensor(a, requires_grad=True), at.tensor(b, requires_grad=True)
    ta, tb = torch.tensor(a, requires_grad=True), torch.tensor(b, requires_grad=True)
    out, tout = fn(la, lb), tfn(torch, ta, tb)
    assert np.allclose(numbers(out), tout.detach().numpy())
    ga = at.grad(at.real(at.sum(at.conj(at.tensor(w)) * out)), [la, lb], allow_unused=True,
                 materialize_grads=True)
    gt = torch.autograd.grad((torch.tensor(w).conj() * tout).real.sum(), [ta, tb],
                             allow_unused=True, materialize_grads=True)
    for g, h in zip(ga, gt):
        assert np.allclose(numbers(g), h.numpy(), atol=1e-9)


def test_eigh_reads_one_triangle_as_numpy_does():
    a = crandn(4, 4)
    for uplo in ("L", "U"):
        w = at.linalg.eigh(at.tensor(a), uplo).eigenvalues
        assert np.allclose(numbers(w), np.linalg.eigh(a, uplo)[0])
        check_vjp_fd(lambda m, u=uplo: at.linalg.eigh(m, u).eigenvalues, a)
        check_vjp_fd(lambda m, u=uplo: abs(at.linalg.eigh(m, u).eigenvectors), a, rtol=1e-5)
    with pytest.raises(RuntimeError, match="full_matrices=False"):
        at.linalg.svd(at.tensor(crandn(2, 3)))
    r = RNG.standard_normal((3, 3))
    assert np.allclose(np.sort_complex(numbers(at.linalg.eigvals(at.tensor(r)))),
                       np.sort_complex(np.linalg.eigvals(r)))


def test_complex_sign_prod_var_and_extremes():
    z = crandn(2, 3)
    assert np.allclose(numbers(at.prod(at.tensor(z), axis=1)), np.prod(z, axis=1))
    check_vjp_fd(lambda a: at.prod(a, axis=1), z)
    check_vjp_fd(lambda a: at.prod(a), np.array([1j, 0.0, 2.0]))      # a zero: exact
    assert np.allclose(numbers(at.var(at.tensor(z), axis=0)), np.var(z, axis=0))
    check_vjp_fd(lambda a: at.std(a, axis=1), z)
    assert np.allclose(numbers(at.max(at.tensor(z), axis=0)), np.max(z, axis=0))
    check_vjp_fd(lambda a: at.min(a, axis=1), z)
    assert np.allclose(numbers(at.sign(at.tensor(z))), np.sign(z))
    check_vjp_fd(at.sign, z)


@pytest.mark.parametrize("norm", ["backward", "ortho", "forward"])
def test_long_transforms_in_four_steps_match_numpy(norm):
    from autotape.fft import FOUR_STEP_MIN, complex_transform
    n = FOUR_STEP_MIN * 3                       # split as 384 x 512
    x = crandn(2, n)
    for inverse, np_fn in ((False, np.fft.fft), (True, np.fft.ifft)):
        ref = np_fn(x, norm=norm)
        got = complex_transform(x, 1, norm, inverse)
        assert np.abs(got - ref).max() <= 1e-13 * np.abs(ref).max()
    c64 = x.astype(np.complex64)
    assert np.allclose(complex_transform(c64, 1, norm, False), np.fft.fft(x, norm=norm),
                       rtol=1e-4, atol=1e-3 * np.abs(np.fft.fft(x, norm=norm)).max())
    # the VJP is the adjoint: <fft(x), y> = <x, vjp(y)>
    z = at.tensor(x[0], requires_grad=True)
    y = crandn(n)
    g, = at.grad(at.fft.fft(z, norm=norm), z, y)
    assert np.vdot(np.fft.fft(x[0], norm=norm), y).real == pytest.approx(
        np.vdot(x[0], numbers(g)).real, rel=1e-10)


TORCH_NAMES = {"arcsin": "asin", "arccos": "acos", "arctan": "atan", "arcsinh": "asinh",
               "arccosh": "acosh", "arctanh": "atanh"}


@needs_torch
@pytest.mark.parametrize("name", HOLOMORPHIC + ["abs", "angle", "real", "imag", "conj",
                                                "sign"])
def test_every_elementwise_gradient_matches_torch(name):
    z, w = crandn(5) * 0.6 + 0.2, crandn(5)
    ours = {"abs": abs, "sign": at.sign}.get(name, getattr(at, name, None))
    theirs = {"abs": torch.abs, "sign": torch.sgn, "square": torch.square,
              "reciprocal": torch.reciprocal, "real": torch.real, "imag": torch.imag,
              "conj": lambda t: torch.conj(t).resolve_conj(),
              "exp2": lambda t: 2 ** t}.get(name) or getattr(torch, TORCH_NAMES.get(name, name))
    za, zt = at.tensor(z, requires_grad=True), torch.tensor(z, requires_grad=True)
    out, tout = ours(za), theirs(zt)
    assert np.allclose(numbers(out), tout.detach().numpy())
    weights = w if at.is_complex(out) else w.real
    ga, = at.grad(at.real(at.sum(at.conj(at.tensor(weights)) * out)), za)
    gt, = torch.autograd.grad((torch.tensor(weights).conj() * tout).real.sum(), zt)
    assert np.allclose(numbers(ga), gt.resolve_conj().numpy(), rtol=1e-9, atol=1e-12)


@needs_torch
@pytest.mark.parametrize("name", ["fft", "ifft", "rfft", "irfft", "fft2", "ifft2", "rfft2",
                                  "irfft2", "fftn", "ifftn", "rfftn", "irfftn"])
@pytest.mark.parametrize("norm", ["backward", "ortho", "forward"])
def test_every_fft_gradient_matches_torch(name, norm):
    data = RNG.standard_normal((4, 6))
    if not name.startswith("r"):
        data = data + 1j * RNG.standard_normal((4, 6))
    elif name.startswith("ir"):
        data = np.fft.rfft2(data)
    za, zt = at.tensor(data, requires_grad=True), torch.tensor(data, requires_grad=True)
    out, tout = getattr(at.fft, name)(za, norm=norm), getattr(torch.fft, name)(zt, norm=norm)
    assert np.allclose(numbers(out), tout.detach().numpy())
    w = crandn(*out.shape) if at.is_complex(out) else RNG.standard_normal(out.shape)
    ga, = at.grad(at.real(at.sum(at.conj(at.tensor(w)) * out)), za)
    gt, = torch.autograd.grad((torch.tensor(w).conj() * tout).real.sum(), zt)
    assert np.allclose(numbers(ga), gt.resolve_conj().numpy(), rtol=1e-9, atol=1e-12)
