"""The examples run and reach what they claim."""
import os
import runpy

import numpy as np

EXAMPLES = os.path.join(os.path.dirname(__file__), "..", "examples")


def test_fit_decay_recovers_the_parameters():
    module = runpy.run_path(os.path.join(EXAMPLES, "fit_decay.py"))
    truth, theta, gradient = module["main"]()
    np.testing.assert_allclose(theta, truth, atol=0.05)
    assert np.abs(gradient).max() < 1e-9                  # Newton converged
