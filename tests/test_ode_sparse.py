"""solve_ivp(method="Rodas4", jac_sparsity=...): the Jacobian's pattern found from the
recording, one reverse lane per colour of rows, one sparse LU per step. The step equals
the dense one; a 1-D reaction-diffusion system matches scipy's solution and its
gradients central differences; compiled, mapped, and the bad cases named."""
import os
import runpy
import warnings

import numpy as np
import pytest

import autotape as at
import autotape.func as F
from autotape.integrate import solve_ivp

integrate = pytest.importorskip("scipy.integrate")
sp = pytest.importorskip("scipy.sparse")
ods = pytest.importorskip("autotape.ode_sparse")
implicit = pytest.importorskip("autotape.implicit")
EXAMPLE = runpy.run_path(os.path.join(os.path.dirname(__file__), "..", "examples",
                                      "reaction_diffusion.py"))


# the guide's model: Hairer & Wanner's 1-D Brusselator, u then v on N cells, ends held
brusselator = EXAMPLE["brusselator"]
start = EXAMPLE["initial_state"]


P0 = np.array([1.0, 3.0, 0.02])


def true_pattern(cells):
    """u_i reads u_{i-1..i+1} and v_i; v_i reads v_{i-1..i+1} and u_i."""
    band = sp.diags([1.0, 1.0, 1.0], [-1, 0, 1], shape=(cells, cells))
    eye = sp.eye(cells)
    return (sp.bmat([[band, eye], [eye, band]]) != 0).toarray()


def test_pattern_is_found_from_the_recording_and_coloured():
    for cells in (8, 500):
        system = ods.SparseSystem.found(brusselator(cells), 0.0, start(cells), (P0,))
        np.testing.assert_array_equal(system.pattern.toarray(), true_pattern(cells))
        # u_i's row meets u_{i-2..i+2} and v_{i-1..i+1}: three colours for the u rows,
        # and v_i meets all three of them
        assert system.colours == 6 and not system.reads_t
    # the pattern holds at every point: a dense Jacobian somewhere has no entry outside it
    jac = F.jacrev(lambda y: brusselator(8)(0.0, y, P0))(np.random.default_rng(0).random(16))
    assert not (jac.numpy() != 0)[~true_pattern(8)].any()


def test_sparse_step_equals_the_dense_step():
    """Same steps, same values, same gradients as the dense Jacobian and LAPACK's LU."""
    cells = 8
    y0, field = start(cells), brusselator(cells)

    def loss(y, p, sparsity):
        sol = solve_ivp(field, (0.0, 2.0), y, method="Rodas4", args=(p,), rtol=1e-6,
                        atol=1e-8, t_eval=[0.5, 2.0], jac_sparsity=sparsity)
        return (sol.y ** 2).sum(), sol.nsteps
    (dense, steps), dense_grads = F.value_and_grad(loss, argnums=(0, 1), has_aux=True)(
        y0, P0, None)
    for sparsity in ("auto", true_pattern(cells), sp.csr_matrix(true_pattern(cells))):
        (value, sparse_steps), grads = F.value_and_grad(loss, argnums=(0, 1), has_aux=True)(
            y0, P0, sparsity)
        assert sparse_steps == steps
        assert float(value) == pytest.approx(float(dense), rel=1e-12)
        for ours, theirs in zip(grads, dense_grads):
            np.testing.assert_allclose(ours.numpy(), theirs.numpy(), rtol=1e-9, atol=1e-12)


def test_a_right_hand_side_that_reads_t_gets_its_time_derivative():
    """A source switched on in time: the pattern says fun reads t, and the Rosenbrock
    stages' df/dt term (one forward-mode product) keeps the step equal to the dense."""
    cells = 6
    diffusion = brusselator(cells)

    def forced(t, y, p):
        return diffusion(t, y, p) + at.sin(3.0 * t) * np.linspace(0.0, 1.0, 2 * cells)
    system = ods.SparseSystem.found(forced, 0.0, start(cells), (P0,))
    assert system.reads_t

    def loss(p, sparsity):
        sol = solve_ivp(forced, (0.0, 1.5), start(cells), method="Rodas4", args=(p,),
                        rtol=1e-7, atol=1e-9, jac_sparsity=sparsity)
        return (sol.y[:, -1] ** 2).sum()
    dense = F.value_and_grad(loss)(P0, None)
    ours = F.value_and_grad(loss)(P0, "auto")
    assert float(ours[0]) == pytest.approx(float(dense[0]), rel=1e-12)
    np.testing.assert_allclose(ours[1].numpy(), dense[1].numpy(), rtol=1e-9)


def test_reaction_diffusion_matches_scipy_and_finite_differences():
    """200 states: the solution matches scipy's BDF at a tighter tolerance, and the
    gradient (initial state and parameters) central differences of scipy's solves."""
    cells = 100
    y0, field = start(cells), brusselator(cells)
    rng = np.random.default_rng(1)
    direction = rng.standard_normal(2 * cells)
    tol = dict(rtol=1e-10, atol=1e-12)

    def loss(y, p):
        sol = solve_ivp(field, (0.0, 2.0), y, method="Rodas4", args=(p,),
                        jac_sparsity="auto", max_steps=2000, **tol)
        return (sol.y[:, -1] ** 2).sum(), sol.y[:, -1]
    (value, final), (gy, gp) = F.value_and_grad(loss, argnums=(0, 1), has_aux=True)(y0, P0)

    def reference(y, p):
        def f(t, state):
            return field(t, at.tensor(state), at.tensor(p)).numpy()
        jac = F.jacrev(lambda s: field(0.0, s, at.tensor(p)))
        s = integrate.solve_ivp(f, (0.0, 2.0), y, method="Radau", rtol=1e-13, atol=1e-14,
                                jac=lambda t, state: sp.csr_matrix(jac(state).numpy()))
        return s.y[:, -1]
    exact = reference(y0, P0)
    np.testing.assert_allclose(final.numpy(), exact, rtol=1e-8, atol=1e-9)
    h = 1e-5
    along_y = ((reference(y0 + h * direction, P0) ** 2).sum()
               - (reference(y0 - h * direction, P0) ** 2).sum()) / (2 * h)
    np.testing.assert_allclose(float(gy.numpy() @ direction), along_y, rtol=1e-6)
    for k in (1, 2):                                   # (B, and alpha: the stiff one)
        step = h * P0[k]
        e = np.eye(3)[k] * step
        fd = ((reference(y0, P0 + e) ** 2).sum() - (reference(y0, P0 - e) ** 2).sum()) / (2 * step)
        np.testing.assert_allclose(gp.numpy()[k], fd, rtol=1e-6)


def test_compiled_and_mapped_equal_eager():
    cells = 10
    field, y0 = brusselator(cells), start(cells)

    def loss(p):
        sol = solve_ivp(field, (0.0, 1.0), y0, method="Rodas4", args=(p,), rtol=1e-6,
                        atol=1e-8, jac_sparsity="auto", max_steps=60)
        return (sol.y[:, -1] ** 2).sum() + sol.status
    c = at.compile(loss, P0)
    assert "decision" not in c.explain(P0)            # (finding the pattern reads no value)
    points = np.array([P0, [1.2, 2.5, 0.03], [0.9, 3.2, 0.01]])
    mapped = F.vmap(c.grad)(points)
    for k, p in enumerate(points):
        value, grad = c.value_and_grad(p)
        eager_value, eager_grad = F.value_and_grad(loss)(p)
        assert float(value) == pytest.approx(float(eager_value), rel=1e-12)
        np.testing.assert_allclose(grad.numpy(), eager_grad.numpy(), rtol=1e-10)
        np.testing.assert_allclose(mapped.numpy()[k], grad.numpy(), rtol=1e-10)


def test_one_factorisation_serves_a_steps_solves_and_their_vjps(monkeypatch):
    calls = []
    splu = implicit.spla.splu
    monkeypatch.setattr(implicit.spla, "splu", lambda A: calls.append(1) or splu(A))
    values = at.tensor([4.0, 1.0, 1.0, 3.0], requires_grad=True)
    solve = implicit.SparseMatrix(values, sp.csr_matrix(np.ones((2, 2)))).solver()
    b = at.tensor([1.0, 2.0], requires_grad=True)
    x1 = solve(b)
    x2 = solve(x1 * 2.0)
    (gv, gb) = at.grad((x1 + x2).sum(), (values, b))
    assert len(calls) == 1
    A = np.array([[4.0, 1.0], [1.0, 3.0]])
    inv = np.linalg.inv(A)
    np.testing.assert_allclose(gb.numpy(), (inv + 2 * inv @ inv).T @ np.ones(2))
    values2 = values.detach() * 2.0
    implicit.SparseMatrix(values2, sp.csr_matrix(np.ones((2, 2)))).solver()(b)
    assert len(calls) == 2                             # (other values: factorised again)


@pytest.mark.filterwarnings("ignore::UserWarning")      # (float() of a traced value)
def test_a_guarded_right_hand_side_warns_and_takes_the_dense_jacobian():
    def guarded(t, y, p):
        return -p[0] * y if float(y.sum()) > 0 else p[0] * y    # a decision on values
    with pytest.warns(RuntimeWarning, match="dense.*decisions in Python"):
        sol = solve_ivp(guarded, (0.0, 1.0), np.ones(3), method="Rodas4",
                        args=(np.array([2.0]),), jac_sparsity="auto", rtol=1e-8, atol=1e-10)
    np.testing.assert_allclose(sol.y.numpy()[:, -1], np.exp(-2.0), rtol=1e-6)


def test_bad_sparsity_is_named():
    field, y0 = brusselator(4), start(4)
    with pytest.raises(ValueError, match="jac_sparsity is for the stiff method"):
        solve_ivp(field, (0.0, 1.0), y0, args=(P0,), jac_sparsity="auto")
    with pytest.raises(ValueError, match="must be None, 'auto' or a pattern"):
        solve_ivp(field, (0.0, 1.0), y0, method="Rodas4", args=(P0,), jac_sparsity="yes")
    with pytest.raises(ValueError, match=r"must have shape \(8, 8\)"):
        solve_ivp(field, (0.0, 1.0), y0, method="Rodas4", args=(P0,),
                  jac_sparsity=np.ones((4, 4)))
    with warnings.catch_warnings():
        warnings.simplefilter("error")                 # (a pattern given: no warning)
        solve_ivp(field, (0.0, 0.1), y0, method="Rodas4", args=(P0,),
                  jac_sparsity=true_pattern(4))
