"""numpy.linalg on Tensors: values equal numpy's; gradients match finite differences
(first and second order), torch where installed, and K lanes equal K sweeps."""
import numpy as np
import pytest

import autotape as at
from fd import check_grads, check_second_order
from test_batched import assert_lanes_equal_separate_sweeps

rng = np.random.default_rng(3)


def well_conditioned(shape):
    n = shape[-1]
    return rng.uniform(-0.5, 0.5, shape) + 2.0 * np.eye(n)


def spd(shape):
    m = rng.uniform(-1, 1, shape)
    return m @ np.swapaxes(m, -1, -2) + shape[-1] * np.eye(shape[-1])


def sym(t):
    return (t + at.swapaxes(t, -1, -2)) * 0.5


CASES = {
    "inv": (lambda a: at.linalg.inv(a), well_conditioned, np.linalg.inv),
    "det": (lambda a: at.linalg.det(a), well_conditioned, np.linalg.det),
    "logdet": (lambda a: at.linalg.slogdet(a).logabsdet, well_conditioned,
               lambda a: np.linalg.slogdet(a).logabsdet),
    "solve matrix": (lambda a: at.linalg.solve(a, B3), well_conditioned,
                     lambda a: np.linalg.solve(a, B3)),
    "cholesky": (lambda a: at.linalg.cholesky(sym(a)), spd, np.linalg.cholesky),
    "eigvalsh": (lambda a: at.linalg.eigh(sym(a)).eigenvalues, spd,
                 lambda a: np.linalg.eigh(a)[0]),
    "eigh vectors": (lambda a: _sign_free(at.linalg.eigh(sym(a)).eigenvectors), spd,
                     lambda a: _sign_free(np.linalg.eigh(a)[1])),
    "svd values": (lambda a: at.linalg.svd(a, compute_uv=False), well_conditioned,
                   lambda a: np.linalg.svd(a, compute_uv=False)),
    "svd vectors": (lambda a: _svd_sign_free(at.linalg.svd(a)), well_conditioned,
                    lambda a: _svd_sign_free(np.linalg.svd(a))),
}
B3 = rng.uniform(-1, 1, (3, 2))


def _svd_sign_free(usv):
    """U's and Vh's signs are arbitrary, together: u_i v_i^T is not."""
    u, _, vh = usv
    return u[..., :, :1] * vh[..., :1, :] + u[..., :, 1:2] * vh[..., 1:2, :]


def _sign_free(v):
    """Eigenvector signs are arbitrary: products v_i v_j are not."""
    return v[..., :, :1] * v[..., :, 1:2] + v ** 2


@pytest.mark.parametrize("name", sorted(CASES))
@pytest.mark.parametrize("shape", [(3, 3), (2, 3, 3)], ids=["matrix", "batch"])
def test_linalg_values_and_gradients(name, shape):
    f, make, reference = CASES[name]
    a = make(shape)
    np.testing.assert_allclose(f(at.tensor(a)).numpy(), reference(a), rtol=1e-12,
                               atol=1e-12)
    check_grads(f, a, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("name", sorted(CASES))
def test_linalg_second_order(name):
    f, make, _ = CASES[name]
    check_second_order(lambda a: f(a) * 1.0, make((3, 3)), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("name", sorted(CASES))
def test_linalg_lanes_equal_separate_sweeps(name):
    f, make, _ = CASES[name]
    assert_lanes_equal_separate_sweeps(f, [make((3, 3))], lanes=3)


def test_solve_vector_right_hand_side_and_broadcast_batch():
    a, b = well_conditioned((2, 3, 3)), rng.uniform(-1, 1, 3)
    x = at.linalg.solve(at.tensor(a), at.tensor(b))
    np.testing.assert_allclose(x.numpy(), np.linalg.solve(a, b), rtol=1e-13)
    check_grads(lambda a_, b_: at.linalg.solve(a_, b_), a, b)
    check_grads(lambda a_, b_: at.linalg.solve(a_, b_), well_conditioned((3, 3)),
                rng.uniform(-1, 1, (2, 3, 2)))


def test_det_of_a_known_matrix_and_numpy_dispatch():
    a = at.tensor([[2.0, 1.0], [1.0, 3.0]], requires_grad=True)
    d = np.linalg.det(a)
    assert d.item() == pytest.approx(5.0) and d.requires_grad
    np.testing.assert_allclose(at.grad(d, a)[0].numpy(), [[3.0, -1.0], [-1.0, 2.0]],
                               rtol=1e-14)
    sign, lad = np.linalg.slogdet(at.tensor([[0.0, 1.0], [1.0, 0.0]]))
    assert sign.item() == -1.0 and lad.item() == 0.0
    w, v = np.linalg.eigh(a)
    np.testing.assert_allclose(at.grad(w.sum(), a)[0].numpy(), np.eye(2), atol=1e-15)
    import autotape.numpy as anp
    assert anp.linalg.inv is at.linalg.inv


def test_errors_follow_numpy():
    with pytest.raises(np.linalg.LinAlgError, match="must be square"):
        at.linalg.inv(at.ones((2, 3)))
    with pytest.raises(np.linalg.LinAlgError, match="at least two-dimensional"):
        at.linalg.det(at.ones(3))
    with pytest.raises(np.linalg.LinAlgError, match="Singular matrix"):
        at.linalg.inv(at.zeros((2, 2)))
    with pytest.raises(np.linalg.LinAlgError):
        at.linalg.cholesky(at.tensor([[1.0, 2.0], [2.0, 1.0]]))


def test_float32_inputs():
    a = at.tensor(well_conditioned((3, 3)), dtype="float32", requires_grad=True)
    z = at.linalg.inv(a)
    assert z.dtype == np.float32
    g, = at.grad(z.sum(), a)
    assert g.dtype == np.float32


def test_against_torch():
    torch = pytest.importorskip("torch")
    a0 = spd((3, 3))
    fns = {
        "inv": (lambda m: at.linalg.inv(m), torch.linalg.inv),
        "det": (lambda m: at.linalg.det(m), torch.linalg.det),
        "solve": (lambda m: at.linalg.solve(m, B3), lambda m: torch.linalg.solve(
            m, torch.tensor(B3))),
        "cholesky": (lambda m: at.linalg.cholesky(sym(m)),
                     lambda m: torch.linalg.cholesky((m + m.mT) / 2)),
        "eigvalsh": (lambda m: at.linalg.eigh(sym(m)).eigenvalues,
                     lambda m: torch.linalg.eigh((m + m.mT) / 2).eigenvalues),
    }
    for name, (ours, theirs) in fns.items():
        mt = torch.tensor(a0, requires_grad=True)
        out_t = theirs(mt)
        weights = torch.tensor(rng.uniform(-1, 1, tuple(out_t.shape)))
        gt, = torch.autograd.grad((out_t * weights).sum(), mt)
        m = at.tensor(a0, requires_grad=True)
        g, = at.grad((ours(m) * weights.numpy()).sum(), m)
        np.testing.assert_allclose(g.numpy(), gt.numpy(), rtol=1e-10, atol=1e-12,
                                   err_msg=name)


@pytest.mark.parametrize("uplo", ["L", "U"])
def test_triangle_readers_have_exact_gradients_on_any_matrix(uplo):
    """eigh and cholesky read one triangle: on a non-symmetric A the gradient is that
    of the function numpy computes (finite differences in every entry agree)."""
    a = spd((3, 3)) + np.triu(rng.uniform(-1, 1, (3, 3)), 1)       # not symmetric
    check_grads(lambda m: at.linalg.eigh(m, uplo).eigenvalues, a)
    check_grads(lambda m: _sign_free(at.linalg.eigh(m, uplo).eigenvectors), a)
    check_second_order(lambda m: at.linalg.eigh(m, uplo).eigenvalues ** 2, a,
                       rtol=1e-4, atol=1e-5)
    if uplo == "L":
        check_grads(at.linalg.cholesky, a)
        check_second_order(at.linalg.cholesky, a, rtol=1e-4, atol=1e-5)


def test_det_gradient_is_the_cofactor_matrix_also_where_singular():
    cases = [np.array([[1.0, 2.0], [2.0, 4.0]]),                        # rank 1
             np.array([[1.0, 2.0, 3.0], [2.0, 4.0, 6.0], [1.0, 0.0, 1.0]]),   # rank 2
             np.zeros((3, 3)),                                           # rank 0
             np.random.default_rng(0).normal(size=(2, 4, 4))]            # a batch
    for a in cases:
        x = at.tensor(a, requires_grad=True)
        g, = at.grad(at.linalg.det(x).sum(), x)
        eps, fd = 1e-6, np.zeros_like(a)
        for k in np.ndindex(a.shape):
            up, down = a.copy(), a.copy()
            up[k] += eps
            down[k] -= eps
            fd[k] = (np.linalg.det(up).sum() - np.linalg.det(down).sum()) / (2 * eps)
        np.testing.assert_allclose(g.numpy(), fd, atol=1e-8)
        assert np.isfinite(g.numpy()).all()
    # second derivatives where A is invertible
    a = np.random.default_rng(1).normal(size=(3, 3))
    assert at.gradgradcheck(lambda m: at.linalg.det(m), (at.tensor(a, requires_grad=True),))
