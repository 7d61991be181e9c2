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
