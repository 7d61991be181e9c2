"""gradcheck: compare autotape's gradients with central finite differences."""
import numpy as np

from .creation import tensor
from .engine import grad
from .grad_mode import enable_grad
from .tensor import Tensor


class GradcheckError(RuntimeError):
    """Raised by gradcheck when an analytical and a numerical derivative disagree.

    >>> wrong = lambda x: at.tensor(x.detach().numpy() ** 2) + 0 * x   # gradient lost
    >>> try:
    ...     at.gradcheck(wrong, (at.tensor([1.0, 2.0], requires_grad=True),))
    ... except at.GradcheckError:
    ...     print("caught")
    caught
    """


def gradcheck(func, inputs, *, eps=1e-6, atol=1e-5, rtol=1e-3, raise_exception=True):
    """Check the derivatives of ``func`` at ``inputs`` against central differences.

    ``inputs`` is a Tensor or a tuple of them; those that require grad are checked
    against every element of every output. Returns True, or raises GradcheckError
    naming the worst element (False instead with ``raise_exception=False``). Use
    float64 inputs: float32 cannot resolve a difference of ``eps``.

    >>> x = at.tensor([0.5, 1.5], requires_grad=True)
    >>> at.gradcheck(lambda v: at.sin(v) * v, x)
    True
    """
    inputs = (inputs,) if isinstance(inputs, Tensor) else tuple(inputs)
    checked = [k for k, t in enumerate(inputs) if isinstance(t, Tensor) and t.requires_grad]
    if not checked:
        raise ValueError("gradcheck expects at least one input tensor to require gradient")
    outputs = _as_outputs(func(*inputs))
    analytic = _analytic(outputs, [inputs[k] for k in checked])
    numeric = _numeric(func, inputs, outputs, checked, eps)
    worst = None
    for o, out in enumerate(outputs):
        for c, k in enumerate(checked):
            a, n = analytic[o][c], numeric[o][c]
            if not out.requires_grad and np.any(np.abs(n) > atol):
                if not raise_exception:
                    return False
                raise GradcheckError(        # (torch's words: no gradient, yet it varies)
                    f"Numerical gradient for function expected to be zero: output {o} "
                    f"does not require grad, but varies with input {k}")
            excess = np.abs(a - n) - (atol + rtol * np.abs(n))
            if excess.size and excess.max() > 0:
                j = np.unravel_index(np.argmax(excess), excess.shape)
                if worst is None or excess[j] > worst[0]:
                    worst = (excess[j], o, k, j, n[j], a[j])
    if worst is None:
        return True
    if not raise_exception:
        return False
    _, o, k, (row, col), n, a = worst
    raise GradcheckError(
        f"Jacobian mismatch for output {o} with respect to input {k}: d output[{o}]"
        f"{_index(outputs[o].shape, row)} / d input[{k}]{_index(inputs[k].shape, col)} "
        f"is {float(a)!r} analytically but {float(n)!r} numerically (atol={atol}, "
        f"rtol={rtol})")


def _as_outputs(result):
    outs = (result,) if isinstance(result, Tensor) else (
        tuple(result) if isinstance(result, (tuple, list)) else (result,))
    for t in outs:
        if not isinstance(t, Tensor):
            raise TypeError(f"gradcheck: func must return Tensors, got {type(t).__name__}")
    return outs


def _analytic(outputs, inputs):
    """J[o][c]: (output size, input size) blocks, one reverse sweep per output element."""
    result = []
    for out in outputs:
        blocks = [np.zeros((out.size, t.size)) for t in inputs]
        if out.requires_grad:
            for j in range(out.size):
                seed = np.zeros(out.size)
                seed[j] = 1.0
                gs = grad(out, inputs, tensor(seed.reshape(out.shape)), retain_graph=True,
                          allow_unused=True, materialize_grads=True)
                for block, g in zip(blocks, gs):
                    block[j] = np.asarray(g.numpy(), np.float64).reshape(-1)
        result.append(blocks)
    return result


def _numeric(func, inputs, outputs, checked, eps):
    values = [np.array(t.numpy(), np.float64) if isinstance(t, Tensor) else t
              for t in inputs]

    def evaluate(k, flat_index, delta):
        """func's outputs, flat, with input k's element moved by delta; func gets
        inputs that require grad where the originals do (as torch's gradcheck: a hook
        registered inside func works), and outputs of the shapes it gave at first."""
        args = []
        for i, t in enumerate(inputs):
            if i == k:
                v = values[k].copy().reshape(-1)
                v[flat_index] += delta
                args.append(tensor(v.reshape(values[k].shape), dtype=t.dtype,
                                   requires_grad=t.requires_grad))
            else:
                args.append(t)
        with enable_grad():
            outs = _as_outputs(func(*args))
        got = [o.shape for o in outs]
        if got != shapes:
            raise GradcheckError(f"gradcheck: func's outputs have shapes {got} at input {k} "
                                 f"moved by {delta:g} but {shapes} at the inputs given: a "
                                 "derivative needs outputs whose shapes do not change")
        return [np.asarray(o.detach().numpy(), np.float64).reshape(-1) for o in outs]

    shapes = [o.shape for o in outputs]
    result = [[np.zeros((int(np.prod(shape)), inputs[k].size)) for k in checked]
              for shape in shapes]
    for c, k in enumerate(checked):
        for col in range(inputs[k].size):
            plus, minus = evaluate(k, col, eps), evaluate(k, col, -eps)
            for o in range(len(shapes)):
                result[o][c][:, col] = (plus[o] - minus[o]) / (2 * eps)
    return result


def _index(shape, flat):
    return str([int(i) for i in np.unravel_index(flat, shape)]) if shape else "[]"


def gradgradcheck(func, inputs, grad_outputs=None, *, eps=1e-6, atol=1e-5, rtol=1e-3,
                  raise_exception=True, seed=0):
    """Check second derivatives: gradcheck of the first derivative of ``func`` taken
    with create_graph=True, weighted by ``grad_outputs`` (random when None).

    >>> x = at.tensor([0.5, 1.5], requires_grad=True)
    >>> at.gradgradcheck(lambda v: at.sin(v) * v ** 3, x)
    True
    """

    inputs = (inputs,) if isinstance(inputs, Tensor) else tuple(inputs)
    checked = [k for k, t in enumerate(inputs) if isinstance(t, Tensor) and t.requires_grad]
    if grad_outputs is None:
        rng = np.random.default_rng(seed)
        grad_outputs = [tensor(rng.uniform(0.5, 1.5, o.shape))
                        for o in _as_outputs(func(*inputs))]

    def first_derivative(*xs):
        xs = [x.detach().requires_grad_() if k in checked and not x.requires_grad else x
              for k, x in enumerate(xs)]
        with enable_grad():
            return grad(_as_outputs(func(*xs)), [xs[k] for k in checked], grad_outputs,
                        create_graph=True, allow_unused=True, materialize_grads=True)
    return gradcheck(first_derivative, inputs, eps=eps, atol=atol, rtol=rtol,
                     raise_exception=raise_exception)
