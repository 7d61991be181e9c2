"""autotape.integrate.solve_ivp: solutions against scipy's solve_ivp at the same
tolerances, gradients against central differences, one recording under at.compile (no
guard on the step-size control), vmap with each point taking its own steps, and the
errors and statuses of a solve that cannot finish."""
import math

import numpy as np
import pytest

import autotape as at
import autotape.func as F
from autotape.integrate import solve_ivp

integrate = pytest.importorskip("scipy.integrate")


def lotka_volterra(t, y, p):
    return at.stack([p[0] * y[0] - p[1] * y[0] * y[1], -p[2] * y[1] + p[3] * y[0] * y[1]])


def lotka_volterra_numbers(t, y, p=(1.5, 1.0, 3.0, 1.0)):
    return [p[0] * y[0] - p[1] * y[0] * y[1], -p[2] * y[1] + p[3] * y[0] * y[1]]


P0 = np.array([1.5, 1.0, 3.0, 1.0])
Y0 = np.array([1.0, 1.0])
TIMES = np.linspace(0.0, 10.0, 11)


def test_rk45_takes_scipys_steps_and_matches_its_solution():
    sol = solve_ivp(lotka_volterra, (0.0, 10.0), Y0, t_eval=TIMES, args=(P0,), rtol=1e-8,
                    atol=1e-10)
    ref = integrate.solve_ivp(lotka_volterra_numbers, (0.0, 10.0), Y0, t_eval=TIMES,
                              rtol=1e-8, atol=1e-10)
    assert sol.success and sol.status == 0
    np.testing.assert_allclose(sol.y.numpy(), ref.y, atol=1e-8)
    np.testing.assert_array_equal(sol.t, TIMES)
    assert sol.nfev == ref.nfev


@pytest.mark.parametrize("method", ["RK45", "Tsit5", "RK4", "Rodas4"])
def test_every_method_converges_to_the_solution(method):
    exact = integrate.solve_ivp(lotka_volterra_numbers, (0.0, 10.0), Y0, t_eval=TIMES,
                                rtol=1e-13, atol=1e-14, method="DOP853").y
    kwargs = {"first_step": 0.005} if method == "RK4" else {"rtol": 1e-9, "atol": 1e-11}
    sol = solve_ivp(lotka_volterra, (0.0, 10.0), Y0, method=method, t_eval=TIMES,
                    args=(P0,), **kwargs)
    np.testing.assert_allclose(sol.y.numpy(), exact, atol=1e-6)


@pytest.mark.parametrize("method", ["RK45", "Tsit5", "Rodas4"])
def test_gradients_match_central_differences(method):
    def loss(p, y0):
        s = solve_ivp(lotka_volterra, (0.0, 10.0), y0, method=method, t_eval=TIMES,
                      args=(p,), rtol=1e-10, atol=1e-12)
        return (s.y ** 2).sum()
    gp, gy = F.grad(loss, argnums=(0, 1))(P0, Y0)
    value = lambda p, y: float(loss(at.tensor(p), at.tensor(y)))      # noqa: E731
    h = 1e-6
    fp = [(value(P0 + h * e, Y0) - value(P0 - h * e, Y0)) / (2 * h) for e in np.eye(4)]
    fy = [(value(P0, Y0 + h * e) - value(P0, Y0 - h * e)) / (2 * h) for e in np.eye(2)]
    np.testing.assert_allclose(gp.numpy(), fp, rtol=1e-6)
    np.testing.assert_allclose(gy.numpy(), fy, rtol=1e-6)


def test_compiled_once_and_mapped_over_points():
    def loss(p):
        s = solve_ivp(lotka_volterra, (0.0, 10.0), Y0, t_eval=TIMES, args=(p,),
                      rtol=1e-6, atol=1e-8, max_steps=300)
        return (s.y ** 2).sum()
    c = at.compile(loss, P0)
    points = P0 * (1.0 + 0.1 * np.random.default_rng(0).standard_normal((6, 4)))
    with _no_recording_again():
        grads = F.vmap(c.grad)(points)
        for k in range(6):
            value, grad = c.value_and_grad(points[k])
            assert float(value) == pytest.approx(float(loss(at.tensor(points[k]))), rel=1e-12)
            np.testing.assert_allclose(grad.numpy(), F.grad(loss)(points[k]).numpy(),
                                       rtol=1e-9)
            np.testing.assert_allclose(grads.numpy()[k], grad.numpy(), rtol=1e-9)
    # 4.4 MB of slots a point: its points go one at a time through the one-point body
    # (chunks of 4 took 2.7x as long), whose chunk-of-points kernels are never compiled
    lean = c._lean("value", [P0]).lean
    assert lean._most_points(6) == 1 and lean.loop_ready is not None
    assert {group for _, group in lean.loop_ready} == {"reverse"}


@pytest.mark.parametrize("method", ["RK45", "RK4"])     # (Rodas4's Hermite: as RK4's)
def test_many_output_times_cost_the_attempts_nothing(method):
    # each output time is interpolated once, from the attempt a search finds (not
    # masked at every attempt): the loop body is the same for 3 output times and 301,
    # and the values are scipy's dense output's at the same steps
    def loss(p, times):
        s = solve_ivp(lotka_volterra, (0.0, 10.0), Y0, method, times, args=(p,),
                      rtol=1e-8, atol=1e-10, max_steps=400,
                      first_step=0.05 if method == "RK4" else None)
        return s.y
    many = np.linspace(0.0, 10.0, 301)
    bodies = []
    for times in (np.array([0.0, 4.0, 10.0]), many):
        c = at.compile(lambda p: loss(p, times), P0)
        lean = c._lean("value", [P0]).lean
        bodies.append(lean.loop[1])
        assert lean.loop[2] > 150
    assert bodies[0] == bodies[1]
    y = c(P0).numpy()
    np.testing.assert_array_equal(y, loss(at.tensor(P0), many).numpy())
    if method == "RK45":
        ref = integrate.solve_ivp(lotka_volterra_numbers, (0.0, 10.0), Y0, t_eval=many,
                                  rtol=1e-8, atol=1e-10)
        np.testing.assert_allclose(y, ref.y, atol=1e-8)
    weights = np.cos(many)

    def misfit(p):
        return (loss(p, many) * weights).sum()
    np.testing.assert_allclose(at.compile(misfit, P0).grad(P0 * 1.05).numpy(),
                               F.grad(misfit)(P0 * 1.05).numpy(), rtol=1e-10)


def test_a_compiled_solve_sweeps_in_checkpointed_segments():
    # the step control, frozen, reaches no output: the loop body sweeps without it, so
    # checkpoint="sqrt" (segments of the compiled body) applies to a solve too
    def loss(p):
        s = solve_ivp(lotka_volterra, (0.0, 10.0), Y0, t_eval=TIMES, args=(p,),
                      rtol=1e-6, atol=1e-8, max_steps=300)
        return (s.y ** 2).sum()
    plain, segmented = at.compile(loss, P0), at.compile(loss, P0, checkpoint="sqrt")
    lean = segmented._lean("value", [P0]).lean
    assert lean.segments is not None and lean.segments.size < lean.nslots / 2
    for _ in range(5):
        value, grad = plain.value_and_grad(P0)
    assert all(plain._lean("value", [P0]).lean._loop_reached_by(
        plain._lean("value", [P0]).lean.live))
    value2, grad2 = segmented.value_and_grad(P0)
    assert float(value2) == float(value)
    np.testing.assert_array_equal(grad2.numpy(), grad.numpy())
    np.testing.assert_allclose(grad.numpy(), F.grad(loss)(P0).numpy(), rtol=1e-9)


class _no_recording_again:
    """Fails if at.compile warns that it recorded again (a decision flipped)."""

    def __enter__(self):
        import warnings
        self.catcher = warnings.catch_warnings(record=True)
        self.caught = self.catcher.__enter__()
        warnings.simplefilter("always")

    def __exit__(self, *exc):
        self.catcher.__exit__(*exc)
        assert not [w for w in self.caught if "recorded again" in str(w.message)]


def test_a_solve_that_cannot_finish_says_so():
    with pytest.raises(RuntimeError, match="max_steps"):
        solve_ivp(lotka_volterra, (0.0, 10.0), Y0, args=(P0,), max_steps=5)
    with pytest.raises(RuntimeError, match="not finite"):
        solve_ivp(lambda t, y: at.sqrt(y - 2.0), (0.0, 1.0), np.array([1.0]))
    with pytest.raises(ValueError, match="y0 is not finite"):
        solve_ivp(lotka_volterra, (0.0, 1.0), np.array([math.nan, 1.0]), args=(P0,))
    with pytest.raises(ValueError, match="method must be one of"):
        solve_ivp(lotka_volterra, (0.0, 1.0), Y0, method="BDF2", args=(P0,))
    with pytest.raises(ValueError, match="first_step must be positive"):
        solve_ivp(lotka_volterra, (0.0, 1.0), Y0, args=(P0,), first_step=-0.1)
    with pytest.raises(ValueError, match="max_step must be positive"):
        solve_ivp(lotka_volterra, (0.0, 1.0), Y0, args=(P0,), method="Rodas4", max_step=0.0)
    with pytest.raises(ValueError, match="t_eval must be sorted"):
        solve_ivp(lotka_volterra, (0.0, 1.0), Y0, t_eval=[2.0], args=(P0,))
    # compiled, a solve runs out of steps as data: nan outputs and status -1
    c = at.compile(lambda p: solve_ivp(lotka_volterra, (0.0, 10.0), Y0, t_eval=TIMES,
                                       args=(p,), max_steps=20).y, P0)
    out = c(P0).numpy()
    assert np.isnan(out[:, -1]).all() and np.isfinite(out[:, 0]).all()
    status = at.compile(lambda p: solve_ivp(lotka_volterra, (0.0, 10.0), Y0, args=(p,),
                                            max_steps=20).status, P0)(P0)
    assert float(status) == -1.0


# ---- stiff problems: Rodas4 -------------------------------------------------------------

def robertson(t, y, k):
    return at.stack([-k[0] * y[0] + k[2] * y[1] * y[2],
                     k[0] * y[0] - k[2] * y[1] * y[2] - k[1] * y[1] ** 2, k[1] * y[1] ** 2])


def robertson_numbers(t, y, k=(0.04, 3e7, 1e4)):
    return [-k[0] * y[0] + k[2] * y[1] * y[2],
            k[0] * y[0] - k[2] * y[1] * y[2] - k[1] * y[1] ** 2, k[1] * y[1] ** 2]


def van_der_pol(t, y, p):
    return at.stack([y[1], p[0] * (1 - y[0] ** 2) * y[1] - y[0]])


def van_der_pol_numbers(t, y, mu):
    return [y[1], mu * (1 - y[0] ** 2) * y[1] - y[0]]


def test_rodas4_solves_robertson_as_scipys_radau():
    """Robertson's chemical kinetics to t = 1e5: rates 0.04 to 3e7 (an explicit method
    needs millions of steps), here a few hundred."""
    times = np.array([0.0, 1e-3, 1.0, 1e2, 1e4, 1e5])
    k = np.array([0.04, 3e7, 1e4])
    sol = solve_ivp(robertson, (0.0, 1e5), np.array([1.0, 0.0, 0.0]), method="Rodas4",
                    t_eval=times, args=(k,), rtol=1e-9, atol=1e-13)
    ref = integrate.solve_ivp(robertson_numbers, (0.0, 1e5), [1.0, 0.0, 0.0],
                              method="Radau", t_eval=times, rtol=1e-12, atol=1e-16)
    assert sol.success and sol.nsteps < 2000
    np.testing.assert_allclose(sol.y.numpy(), ref.y, rtol=1e-6, atol=1e-12)


def test_rodas4_gradient_of_a_stiff_solve_matches_the_true_one():
    """Van der Pol with mu = 1000 on its slow manifold: the gradient with respect to the
    initial state and mu matches central differences of scipy's Radau solution at
    rtol 1e-13 to 1e-6, the small sensitivity to the initial velocity (set by the stiff
    transient) included: the step sizes are taken as chosen, not differentiated."""
    times = np.linspace(0.0, 500.0, 6)

    def loss(y0, p):
        s = solve_ivp(van_der_pol, (0.0, 500.0), y0, method="Rodas4", t_eval=times,
                      args=(p,), rtol=1e-10, atol=1e-12, max_steps=4000)
        return (s.y ** 2).sum()

    def reference(y0, mu):
        s = integrate.solve_ivp(van_der_pol_numbers, (0.0, 500.0), y0, method="Radau",
                                t_eval=times, args=(mu,), rtol=1e-13, atol=1e-15,
                                jac=lambda t, y, mu: [[0.0, 1.0], [-2 * mu * y[0] * y[1] - 1,
                                                                   mu * (1 - y[0] ** 2)]])
        return (s.y ** 2).sum()
    y0, mu = np.array([2.0, 0.0]), 1000.0
    gy, gp = F.grad(loss, argnums=(0, 1))(y0, np.array([mu]))
    h = 1e-4                      # (the reference's error, ~1e-13, over h: below 1e-8)
    fy = [(reference(y0 + h * e, mu) - reference(y0 - h * e, mu)) / (2 * h) for e in np.eye(2)]
    fp = (reference(y0, mu + 1e-3) - reference(y0, mu - 1e-3)) / 2e-3
    np.testing.assert_allclose(gy.numpy(), fy, rtol=2e-6)
    np.testing.assert_allclose(gp.numpy(), [fp], rtol=2e-6)


def test_rodas4_compiled_once_lean_and_mapped_over_points():
    """Compiled, the step's matrix is factorised by elementwise ops with pivoting as
    data (where), so the solve is one lean loop; its values and gradients equal the
    eager solve's (LAPACK's factorisation) at every point, with no recording again."""
    def loss(p):
        s = solve_ivp(van_der_pol, (0.0, 10.0), np.array([2.0, 0.0]), method="Rodas4",
                      t_eval=[2.0, 10.0], args=(p,), rtol=1e-6, atol=1e-8, max_steps=150)
        return (s.y ** 2).sum() + s.status
    p0 = np.array([1000.0])
    c = at.compile(loss, p0)
    explained = c.explain(p0)
    assert "lean program" in explained and "decision" not in explained
    points = np.array([[1000.0], [300.0], [50.0], [20.0]])
    with _no_recording_again():
        grads = F.vmap(c.grad)(points)
        for k, p in enumerate(points):
            value, grad = c.value_and_grad(p)
            eager_value, eager_grad = F.value_and_grad(loss)(p)
            assert float(value) == pytest.approx(float(eager_value), rel=1e-10)
            np.testing.assert_allclose(grad.numpy(), eager_grad.numpy(), rtol=1e-8)
            np.testing.assert_allclose(grads.numpy()[k], grad.numpy(), rtol=1e-9)
    # a step of 372 instructions: its points go one at a time (chunk-of-points kernels
    # of a body that long took numba over 13 minutes to compile)
    lean = c._lean("value", [p0]).lean
    assert {group for _, group in lean.loop_ready} == {"reverse"}


def test_rodas4_compiled_factorisation_of_three_states_equals_lapacks():
    """Robertson (3 states: the pivot search compares several rows): the compiled
    solve's elementwise LU gives the eager (LAPACK) value and gradient."""
    def loss(k):
        s = solve_ivp(robertson, (0.0, 1e3), np.array([1.0, 0.0, 0.0]), method="Rodas4",
                      t_eval=[1.0, 1e3], args=(k,), rtol=1e-6, atol=1e-10, max_steps=200)
        return (s.y ** 2).sum() + s.status
    k = np.array([0.04, 3e7, 1e4])
    c = at.compile(loss, k)
    assert "decision" not in c.explain(k)
    value, grad = c.value_and_grad(k)
    eager_value, eager_grad = F.value_and_grad(loss)(k)
    assert float(value) == pytest.approx(float(eager_value), rel=1e-12)
    np.testing.assert_allclose(grad.numpy(), eager_grad.numpy(), rtol=1e-10,
                               atol=1e-12 * np.abs(eager_grad.numpy()).max())


# ---- events --------------------------------------------------------------------------------

def falling(t, y, g):
    return at.stack([y[1], -g + 0.0 * y[0]])


def ground(t, y, g):
    return y[0]


ground.terminal, ground.direction = True, -1


def _landing(h0, v0, g):
    """The ball's landing time and its derivatives in (h0, v0, g), by hand."""
    s = math.sqrt(v0 * v0 + 2 * g * h0)
    return (v0 + s) / g, np.array([1 / s, (1 + v0 / s) / g, h0 / s / g - (v0 + s) / g ** 2])


def test_a_terminal_event_time_and_its_gradient_are_exact():
    p = at.tensor([10.0, 3.0, 9.81], requires_grad=True)
    sol = solve_ivp(falling, (0.0, 10.0), p[:2], args=(p[2],), events=ground, rtol=1e-10,
                    atol=1e-12, t_eval=[0.5, 1.0, 2.0, 3.0])
    want, dwant = _landing(10.0, 3.0, 9.81)
    assert sol.status == 1 and sol.success and sol.message.startswith("A termination")
    assert list(sol.t) == [0.5, 1.0] and sol.y.shape == (2, 2)   # (later outputs dropped)
    np.testing.assert_allclose(float(sol.t_events[0][0].detach()), want, rtol=1e-13)
    np.testing.assert_allclose(sol.y_events[0].detach().numpy(),
                               [[0.0, 3.0 - 9.81 * want]], atol=1e-12)
    np.testing.assert_allclose(at.grad(sol.t_events[0][0], p, retain_graph=True)[0].numpy(),
                               dwant, rtol=1e-10)
    # the state at the event moves with the event time: d(v at landing)/dg = -t - g dt/dg
    dv = at.grad(sol.y_events[0][0, 1], p)[0].numpy()
    np.testing.assert_allclose(dv[2], -want - 9.81 * dwant[2], rtol=1e-10)


def test_a_compiled_terminal_event_equals_the_eager_one_at_every_point():
    def landing(p):
        sol = solve_ivp(falling, (0.0, 10.0), p[:2], args=(p[2],), events=ground,
                        rtol=1e-10, atol=1e-12, max_steps=64)
        return at.stack([sol.t_events[0][0], sol.status])
    points = np.array([[10.0, 3.0, 9.81], [5.0, 1.0, 9.0], [2.0, -1.0, 3.7]])
    c = at.compile(landing, points[0])
    values, jac = F.vmap(c)(points), F.vmap(c.jacobian)(points)
    for k, p in enumerate(points):
        want, dwant = _landing(*p)
        np.testing.assert_allclose(values.numpy()[k], [want, 1.0], rtol=1e-12)
        np.testing.assert_allclose(jac.numpy()[k, 0], dwant, rtol=1e-9)
    never = np.array([10.0, 3.0, -1.0])             # thrown up against negative gravity
    assert np.isnan(c(never).numpy()[0]) and c(never).numpy()[1] == 0.0
    assert c.traces == 1 and "runs as a lean program" in c.explain(points[0])


def oscillator(t, y):
    return at.stack([y[1], -y[0]])


def test_non_terminal_events_every_crossing_in_its_direction():
    def zero(t, y):
        return y[0]
    sol = solve_ivp(oscillator, (0.0, 10.0), np.array([1.0, 0.0]), events=zero, rtol=1e-10,
                    atol=1e-12)
    np.testing.assert_allclose(sol.t_events[0].numpy(), np.array([0.5, 1.5, 2.5]) * np.pi,
                               rtol=1e-9)
    assert sol.status == 0 and sol.y.shape == (2, 2)
    zero.direction = 1
    sol = solve_ivp(oscillator, (0.0, 10.0), np.array([1.0, 0.0]), events=[zero],
                    rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(sol.t_events[0].numpy(), [1.5 * np.pi], rtol=1e-9)
    np.testing.assert_allclose(sol.y_events[0].numpy(), [[0.0, 1.0]], atol=1e-9)
    zero.direction, zero.terminal = 0, 2                # stop at the second crossing
    sol = solve_ivp(oscillator, (0.0, 10.0), np.array([1.0, 0.0]), events=zero,
                    rtol=1e-10, atol=1e-12, t_eval=[1.0, 4.0, 5.0, 9.0])
    np.testing.assert_allclose(sol.t_events[0].numpy(), [0.5 * np.pi, 1.5 * np.pi],
                               rtol=1e-9)
    assert sol.status == 1 and list(sol.t) == [1.0, 4.0]


def test_event_times_match_scipys_and_their_gradients_central_differences():
    def prey_falls(t, y, p=None):
        return y[0] - 2.0
    prey_falls.direction = -1                     # (scipy reads the same attribute)

    def falls(p):
        return solve_ivp(lotka_volterra, (0.0, 10.0), Y0, args=(p,), events=prey_falls,
                         rtol=1e-10, atol=1e-12).t_events[0]
    theirs = integrate.solve_ivp(lotka_volterra_numbers, (0.0, 10.0), Y0,
                                 events=prey_falls, rtol=1e-12, atol=1e-14).t_events[0]
    assert len(theirs) == 3
    np.testing.assert_allclose(falls(at.tensor(P0)).numpy(), theirs, rtol=1e-8)
    p = at.tensor(P0, requires_grad=True)
    got = at.grad(falls(p)[2], p)[0].numpy()
    step = 1e-5
    fd = [(falls(at.tensor(P0 + step * e)).numpy()[2]
           - falls(at.tensor(P0 - step * e)).numpy()[2]) / (2 * step) for e in np.eye(4)]
    np.testing.assert_allclose(got, fd, rtol=1e-6)


def test_events_with_fixed_steps_and_the_bad_cases():
    sol = solve_ivp(falling, (0.0, 10.0), np.array([10.0, 3.0]), args=(9.81,),
                    events=ground, method="RK4", first_step=0.01)
    np.testing.assert_allclose(float(sol.t_events[0][0]), _landing(10.0, 3.0, 9.81)[0],
                               rtol=1e-12)                 # (RK4 is exact on a parabola)
    assert sol.status == 1
    never = solve_ivp(falling, (0.0, 1.0), np.array([10.0, 3.0]), args=(9.81,),
                      events=ground)
    assert never.status == 0 and never.t_events[0].shape == (0,)
    assert never.y_events[0].shape == (0, 2)

    def often(t, y):
        return y[0]
    with pytest.raises(RuntimeError, match="more than max_events"):
        solve_ivp(oscillator, (0.0, 20.0), np.array([1.0, 0.0]), events=often,
                  max_events=2)
    c = at.compile(lambda y0: solve_ivp(oscillator, (0.0, 20.0), y0, events=often,
                                        max_events=2, max_steps=256).status,
                   np.array([1.0, 0.0]))
    assert float(c(np.array([1.0, 0.0]))) == -3.0
    with pytest.raises(ValueError, match="must return a number"):
        solve_ivp(oscillator, (0.0, 1.0), np.array([1.0, 0.0]), events=lambda t, y: y)
    with pytest.raises(TypeError, match="not callable"):
        solve_ivp(oscillator, (0.0, 1.0), np.array([1.0, 0.0]), events=[3.0])


# ---- the continuous adjoint ---------------------------------------------------------------

def test_the_backsolve_adjoint_equals_the_gradient_through_the_solver():
    def loss(p, y0, adjoint):
        sol = solve_ivp(lotka_volterra, (0.0, 10.0), y0, args=(p,), t_eval=TIMES,
                        rtol=1e-10, atol=1e-12, adjoint=adjoint)
        return (sol.y ** 2).sum()
    got, want = [], []
    for adjoint, out in (("backsolve", got), (None, want)):
        p, y0 = at.tensor(P0, requires_grad=True), at.tensor(Y0, requires_grad=True)
        value = loss(p, y0, adjoint)
        out.append(float(value.detach()))
        out.extend(g.numpy() for g in at.grad(value, (p, y0)))
    # the same solution to the tolerance (backsolve's steps land on each output time,
    # where the solve through the solver interpolates within its steps)
    np.testing.assert_allclose(got[0], want[0], rtol=1e-9)
    for g, w in zip(got[1:], want[1:]):
        np.testing.assert_allclose(g, w, rtol=1e-6)
    sol = solve_ivp(lotka_volterra, (0.0, 10.0), Y0, args=(P0,), adjoint="backsolve")
    assert sol.success and sol.nfev is None and sol.y.shape == (2, 2)


def test_the_backsolve_adjoint_matches_central_differences_from_a_later_start():
    def last(k, t0=1.0):                        # output times after t0, y0 not an input
        return solve_ivp(lambda t, y, k: -k * y + at.sin(t + 0.0 * y), (t0, 3.0),
                         np.array([1.0, 2.0]), args=(k,), t_eval=[2.0, 3.0], rtol=1e-11,
                         atol=1e-13, adjoint="backsolve").y[:, -1].sum()
    k = at.tensor([0.7, 1.3], requires_grad=True)
    g = at.grad(last(k), k)[0].numpy()
    fd = [(float(last(at.tensor([0.7, 1.3]) + 1e-5 * e).detach())
           - float(last(at.tensor([0.7, 1.3]) - 1e-5 * e).detach())) / 2e-5
          for e in np.eye(2)]
    np.testing.assert_allclose(g, fd, rtol=1e-6)


def test_the_backsolve_adjoint_refuses_what_it_does_not_take():
    with pytest.raises(ValueError, match="does not take events"):
        solve_ivp(oscillator, (0.0, 1.0), np.array([1.0, 0.0]), events=lambda t, y: y[0],
                  adjoint="backsolve")
    with pytest.raises(ValueError, match="adjoint must be None"):
        solve_ivp(oscillator, (0.0, 1.0), np.array([1.0, 0.0]), adjoint="interpolated")


# ---- march: the compiled step the continuous adjoint solves with --------------------------

def test_march_lands_on_each_stop_and_matches_scipy():
    stops = [0.5, 2.0, 7.25, 10.0]
    got = at.integrate.march(lotka_volterra, 0.0, Y0, stops, args=(P0,), rtol=1e-10,
                             atol=1e-12)
    ref = integrate.solve_ivp(lotka_volterra_numbers, (0.0, 10.0), Y0, t_eval=stops,
                              rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(got, ref.y.T, rtol=1e-8)
    stiff = at.integrate.march(van_der_pol, 0.0, np.array([2.0, 0.0]), [1.0, 500.0],
                               args=(np.array([1000.0]),), method="Rodas4", rtol=1e-8,
                               atol=1e-10)
    want = integrate.solve_ivp(van_der_pol_numbers, (0.0, 500.0), [2.0, 0.0],
                               method="Radau", t_eval=[1.0, 500.0], args=(1000.0,),
                               rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(stiff, want.y.T, rtol=1e-5, atol=1e-8)


def test_march_records_its_step_once_per_function_and_settings():
    def decay(t, y, k):
        return -k * y
    for k in (1.0, 2.0, 3.0):
        got = at.integrate.march(decay, 0.0, np.ones(3), [1.0], args=(np.array(k),),
                                 rtol=1e-10, atol=1e-12)
        np.testing.assert_allclose(got[0], np.exp(-k), rtol=1e-8)
    steppers = at.integrate._steppers[decay]
    assert len(steppers) == 1
    (step,) = steppers.values()
    assert "decision" not in step.explain(0.0, np.ones(3), np.ones(3), 0.1, 1.0, 1.0)


def test_march_names_what_stops_it():
    with pytest.raises(RuntimeError, match="max_steps"):
        at.integrate.march(lotka_volterra, 0.0, Y0, [10.0], args=(P0,), rtol=1e-10,
                           atol=1e-12, max_steps=20)
    with pytest.raises(RuntimeError, match="not finite"):
        at.integrate.march(lambda t, y: y * y, 0.0, np.ones(1), [2.0])    # blows up at 1
    with pytest.raises(ValueError, match="adaptive"):
        at.integrate.march(lotka_volterra, 0.0, Y0, [1.0], args=(P0,), method="RK4")


def test_backsolve_of_a_long_solve_is_fast_and_exact():
    """4000 steps of a harmonic oscillator: each attempt one call of the compiled step,
    forward and backward; the gradient is the exact solution's to the tolerance."""
    def field(t, y, k):
        return at.stack([y[1], -k * y[0]])
    horizon = 300.0
    k = at.tensor(1.0, requires_grad=True)
    sol = solve_ivp(field, (0.0, horizon), np.array([1.0, 0.0]), args=(k,), rtol=1e-10,
                    atol=1e-12, max_steps=10 ** 5, adjoint="backsolve")
    (g,) = at.grad(sol.y[0, -1], k)
    np.testing.assert_allclose(float(sol.y[0, -1].detach()), math.cos(horizon), rtol=1e-6)
    np.testing.assert_allclose(float(g), -math.sin(horizon) * horizon / 2, rtol=1e-6)


def test_a_singular_step_matrix_is_named_eagerly_and_a_status_compiled():
    """y' = 2 y with h = 2: W = I / (gamma h) - J = 2 I - 2 I (gamma = 1/4) exactly."""
    def growth(t, y, k):
        return k * y
    for sparsity in (None, "auto"):
        with pytest.raises(np.linalg.LinAlgError, match="step matrix .* is singular near "
                                                        "t = 0, h = 2"):
            solve_ivp(growth, (0.0, 4.0), np.ones(3), method="Rodas4",
                      args=(np.array(2.0),), first_step=2.0, jac_sparsity=sparsity)

    def run(k):
        s = solve_ivp(growth, (0.0, 4.0), np.ones(3), method="Rodas4", args=(k,),
                      first_step=2.0, max_steps=40)
        return at.stack([s.status * 1.0, s.y[0, -1]])
    c = at.compile(run, np.array(2.0))
    status, last = c(np.array(2.0)).numpy()
    assert status == -2 and np.isnan(last)          # (not -1: the steps were not the cause)
    status, last = c(np.array(1.5)).numpy()
    assert status == 0 and last == pytest.approx(math.exp(6.0), rel=1e-3)


def test_the_compiled_steps_do_not_keep_their_functions_alive():
    """march's cache of compiled steps (and the adjoint's augmented systems) is keyed
    weakly by fun: a solve with a fresh lambda leaves nothing behind; a bound method
    (a new object at each access) works, uncached."""
    import gc
    gc.collect()
    before = len(at.integrate._steppers)      # (module-level functions' stay)
    for k in (1.0, 2.0):
        p = at.tensor([k], requires_grad=True)
        sol = solve_ivp(lambda t, y, p: -p * y, (0.0, 1.0), np.ones(2), args=(p,),
                        t_eval=[1.0], rtol=1e-8, atol=1e-10, adjoint="backsolve")
        assert float(at.grad(sol.y.sum(), p)[0]) == pytest.approx(-2 * math.exp(-k),
                                                                  rel=1e-6)
    del sol
    gc.collect()
    assert len(at.integrate._steppers) == before

    class Model:
        def field(self, t, y, p):
            return -p * y
    p = at.tensor([1.5], requires_grad=True)
    sol = solve_ivp(Model().field, (0.0, 1.0), np.ones(1), args=(p,), t_eval=[1.0],
                    rtol=1e-8, atol=1e-10, adjoint="backsolve")
    assert float(at.grad(sol.y.sum(), p)[0]) == pytest.approx(-math.exp(-1.5), rel=1e-6)
