"""The examples run and reach what they claim."""
import importlib
import os
import runpy
import sys

import numpy as np

EXAMPLES = os.path.join(os.path.dirname(__file__), "..", "examples")


def test_fit_decay_recovers_the_parameters():
    module = runpy.run_path(os.path.join(EXAMPLES, "fit_decay.py"))
    truth, theta, gradient = module["main"]()
    np.testing.assert_allclose(theta, truth, atol=0.05)
    assert np.abs(gradient).max() < 1e-9                  # Newton converged


def test_ensemble_batched_equals_single_and_processes_agree():
    sys.path.insert(0, EXAMPLES)             # (worker processes import it by name)
    try:
        values, grads, single, remote = importlib.import_module("ensemble").main(points=96)
    finally:
        sys.path.remove(EXAMPLES)
    assert values.shape == (96,) and grads.shape == (96, 4)
    np.testing.assert_allclose(grads[17], single, rtol=1e-13)
    np.testing.assert_array_equal(remote, grads)


# The figure examples, at reduced size, headless (each calls matplotlib.use("Agg")).

def _example(name):
    return runpy.run_path(os.path.join(EXAMPLES, f"{name}.py"))


def test_ode_fit_recovers_the_parameters_and_draws(tmp_path):
    truth, theta, history, path = _example("ode_fit")["main"](
        noise=0.05, out=str(tmp_path))
    np.testing.assert_allclose(theta, truth, rtol=0.05)
    assert history[-1] < 0.5                      # 122 readings with noise 0.05: ~0.15
    assert os.path.getsize(path) > 10_000 and path.endswith("ode_fit.png")


def test_inverse_heat_recovers_the_field_and_draws(tmp_path):
    truth, kappa, path = _example("inverse_heat")["main"](n=24, steps=120, every=20,
                                                          out=str(tmp_path))
    assert np.abs(kappa - truth).max() < 0.05
    assert os.path.getsize(path) > 10_000


def test_sensitivity_map_matches_finite_differences_and_draws(tmp_path):
    module = _example("sensitivity_map")
    angles, dampings, energy, gradients, path = module["main"](grid=8, steps=50,
                                                               out=str(tmp_path))
    import autotape as at
    theta = np.array([angles[3], 0.0, 9.8, dampings[5]])
    value = lambda th: float(module["energy_after"](at.tensor(th), 50))   # noqa: E731
    assert abs(value(theta) - energy[5, 3]) < 1e-12
    for k in range(4):
        d = np.zeros(4)
        d[k] = 1e-6
        fd = (value(theta + d) - value(theta - d)) / 2e-6
        assert abs(fd - gradients[5, 3, k]) < 1e-5 * max(1.0, abs(fd))
    assert os.path.getsize(path) > 10_000


def test_nls_fit_recovers_the_parameters_and_draws(tmp_path):
    truth, fitted, history, path = _example("nls_fit")["main"](
        n=64, steps=100, every=25, out=str(tmp_path))
    np.testing.assert_allclose(fitted, truth, rtol=0.02)
    assert history[-1] < 0.1 * history[0]
    assert os.path.getsize(path) > 10_000 and path.endswith("nls_fit.png")


def test_bouncing_ball_recovers_drag_and_restitution_and_draws(tmp_path):
    truth, fitted, history, path = _example("bouncing_ball")["main"](
        bounces=4, noise=0.001, out=str(tmp_path))
    np.testing.assert_allclose(fitted, truth, rtol=0.02)
    assert history[-1] < 1e-4 * history[0]
    assert os.path.getsize(path) > 10_000 and path.endswith("bouncing_ball.png")


def test_steady_state_sensitivity_matches_finite_differences_and_draws(tmp_path):
    module = _example("steady_state")
    x, u, ds, dD, dk, path = module["main"](n=40, out=str(tmp_path))
    import autotape as at
    from autotape.implicit import root
    weights, _ = module["sensor"](40)

    def J(s, D=1.0, k=0.5):
        u = root(module["residual"], np.zeros(40), at.tensor(s), at.tensor(D), at.tensor(k))
        return float((u.numpy() * weights).sum() / weights.sum())
    s0 = module["source"](x)
    for i in (5, 20, 33):
        e = np.zeros(40)
        e[i] = 1e-4
        fd = (J(s0 + e) - J(s0 - e)) / 2e-4
        assert abs(fd - ds[i]) < 1e-6 * max(1.0, abs(fd)) + 1e-9
    assert abs((J(s0, D=1.0 + 1e-5) - J(s0, D=1.0 - 1e-5)) / 2e-5 - dD) < 1e-6
    assert abs((J(s0, k=0.5 + 1e-5) - J(s0, k=0.5 - 1e-5)) / 2e-5 - dk) < 1e-6
    assert os.path.getsize(path) > 10_000 and path.endswith("steady_state.png")


def test_reaction_diffusion_finds_the_pattern_agrees_with_bdf_and_draws(tmp_path):
    found = _example("reaction_diffusion")["main"](cells=40, out=str(tmp_path))
    assert found["lanes"] == 6 and found["nnz"] == 2 * (3 * 40 - 2) + 2 * 40
    assert found["agree"] < 1e-4                     # Rodas4 against scipy's BDF
    assert abs(found["dp"][2] - found["fd_alpha"]) < 1e-3 * abs(found["fd_alpha"])
    assert os.path.getsize(found["path"]) > 10_000
