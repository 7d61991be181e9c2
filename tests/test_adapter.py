"""The HIPS autograd adapter (adapters/hips_autograd) checks gradients for real: a
correct derivative passes its check_grads, a wrong one fails. The full outside suite
runs with adapters/run_hips_autograd_suite.py (it downloads autograd's tests)."""
import os
import sys

import numpy as np
import pytest

ADAPTER = os.path.join(os.path.dirname(__file__), "..", "adapters", "hips_autograd")


@pytest.fixture
def autograd_adapter():
    saved = {k: v for k, v in sys.modules.items() if k == "autograd" or
             k.startswith("autograd.")}
    for k in saved:
        del sys.modules[k]
    sys.path.insert(0, ADAPTER)
    try:
        import autograd
        import autograd.numpy
        import autograd.test_util
        yield autograd
    finally:
        sys.path.remove(ADAPTER)
        for k in [k for k in sys.modules if k == "autograd" or k.startswith("autograd.")]:
            del sys.modules[k]
        sys.modules.update(saved)


def test_adapter_checks_gradients(autograd_adapter):
    anp = autograd_adapter.numpy
    check_grads = autograd_adapter.test_util.check_grads
    x = np.random.default_rng(0).uniform(0.5, 1.5, (3, 2))
    check_grads(lambda a: anp.sum(anp.tanh(a) * anp.log(a), axis=0))(x)
    check_grads(lambda a, b: anp.einsum("ij,ij->j", a, b), argnum=(0, 1))(x, x + 1.0)
    assert autograd_adapter.grad(lambda a: anp.sum(a ** 2))(x).tolist() == (2 * x).tolist()
    assert isinstance(anp.sin(x), np.ndarray)          # no Tensor in, numpy out

    def cut(a):                  # drops a's graph: the recorded derivative goes wrong
        return a.detach() if hasattr(a, "detach") else a
    with pytest.raises(AssertionError, match="check failed"):
        check_grads(lambda a: anp.sum(a * cut(a)))(x)
