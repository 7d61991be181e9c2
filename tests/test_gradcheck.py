"""at.gradcheck: passes for correct derivatives, names the worst element otherwise."""
import numpy as np
import pytest

import autotape as at


def test_passes_on_correct_derivatives():
    x = at.tensor(np.linspace(0.2, 1.0, 6).reshape(2, 3), requires_grad=True)
    w = at.tensor([0.5, -1.0, 2.0], requires_grad=True)
    c = at.tensor([1.0, 2.0, 3.0])                         # not checked
    assert at.gradcheck(lambda a, b, k: (at.tanh(a * b) @ k, (a ** 2).sum()), (x, w, c))


def test_names_the_worst_element():
    x = at.tensor([0.1, 0.2, 0.3], requires_grad=True)
    broken = lambda v: _BrokenSquare.apply(v)               # noqa: E731
    with pytest.raises(at.GradcheckError, match=r"d output\[0\]\[1\] / d input\[0\]\[1\]"):
        at.gradcheck(broken, x)
    assert at.gradcheck(broken, x, raise_exception=False) is False


class _BrokenSquare:
    """v**2 whose recorded graph is 3v for element 1 only: a wrong derivative."""
    @staticmethod
    def apply(v):
        with at.no_grad():
            true_value = v.detach() ** 2
        recorded = at.where(np.array([False, True, False]), v * 3.0, v * v)
        return recorded - recorded.detach() + true_value


def test_needs_an_input_that_requires_grad():
    with pytest.raises(ValueError, match="at least one input tensor to require gradient"):
        at.gradcheck(lambda v: v * 2, at.ones(2))


def test_outputs_must_be_tensors():
    with pytest.raises(TypeError, match="must return Tensors"):
        at.gradcheck(lambda v: 1.0, at.ones(2, requires_grad=True))
