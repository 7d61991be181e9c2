"""numba names a compiled function by its qualified name and a number counted per
process. Closures made by one factory share a qualified name; if two of them differ in
what they captured (an opcode, a rounding function) and two kernels holding them were
cached by two processes, a process loading both links one symbol for both: a silent
wrong answer (seen: Hessian-vector products wrong after the sweep's family variants
were compiled by different processes). Every closure a kernel calls is named after
what it captured (kernels/cache.distinct); these tests hold that."""
import gc
import math
import types

import numba
import numpy as np
from numba.core.dispatcher import Dispatcher

import autotape as at
import autotape.func as F
from autotape.kernels import active, elementwise, program, scalar  # noqa: F401 (loaded)
from autotape.kernels.cache import distinct


def _kernel_closures():
    """Every closure of autotape's that numba compiled in this process (a kernel's
    callee, an overload's implementation), by (module, qualname)."""
    found = {}
    for obj in gc.get_objects():
        if not issubclass(type(obj), Dispatcher):     # (type(): a dead weak proxy raises)
            continue
        fn = obj.py_func
        if fn.__closure__ and (fn.__module__ or "").startswith("autotape"):
            found.setdefault((fn.__module__, fn.__qualname__), []).append(fn)
    return found


def _captured(fn):
    out = []
    for cell in fn.__closure__:
        try:
            value = cell.cell_contents
        except ValueError:                      # (an empty cell)
            value = None
        if isinstance(value, types.FunctionType):
            value = value.__qualname__
        elif hasattr(value, "py_func"):         # (a numba dispatcher)
            value = value.py_func.__qualname__
        elif not isinstance(value, (int, float, str, type(None))):
            value = type(value).__name__
        out.append(value)
    return out


@numba.njit
def _model(p):
    s = 0.0
    a, b = np.zeros(2), np.ones(2)
    for k in range(2):
        a[k] = b[k] * p[k] + 1.0
    s += a[0] - a[1]
    for k in range(3):
        s += math.sin(p[0] * k) * math.exp(-p[1]) + math.cos(p[1]) * 2.0 - abs(p[1])
        if s > p[0]:
            s = s - 0.5 * p[1]
    return s


def test_closures_that_capture_different_values_have_different_names():
    # a workload that makes the kernels' closures: eager sweeps of many ops, a compiled
    # program at one and many points, at.jit's recorder (its overloads' closures)
    x = at.tensor(np.linspace(0.2, 1.5, 6), requires_grad=True)
    y = (at.tanh(x) * at.exp(x) + np.floor(x) * x - np.ceil(x * 2.0) + x * x).sum()
    at.grad(y, x)
    c = at.compile(lambda t: (np.sin(t) * t + np.floor(t) * t).sum(), np.ones(3))
    c.grad(np.ones(3))
    F.vmap(c.grad)(np.ones((4, 3)))
    at.jit(_model).grad(np.array([0.7, 0.3]))
    clashes = []
    for (module, name), fns in _kernel_closures().items():
        kinds = {repr(_captured(f)) for f in fns}
        if len(kinds) > 1:
            clashes.append(f"{module}.{name}: {sorted(kinds)[:3]}")
    assert not clashes, "closures sharing a name, capturing different values:\n" + \
        "\n".join(clashes)


def test_the_factories_name_each_closure_apart():
    made = [elementwise._unary_tanh, elementwise._unary_exp, elementwise._unary_any,
            elementwise._same_shape_add, elementwise._same_shape_mul,
            elementwise._same_shape_any]
    assert len({f.__qualname__ for f in made}) == len(made)
    assert all("<locals>" not in f.__qualname__ for f in made)
    one, many = program._kernels(1), program._kernels(0)
    assert {f.__qualname__ for f in one}.isdisjoint(f.__qualname__ for f in many)


def test_distinct_names_a_closure_by_its_parts():
    def factory(k):
        return lambda x: x + k
    f = distinct(factory(1), "one", -2)
    assert f.__qualname__ == "test_distinct_names_a_closure_by_its_parts_factory_lambda_one_m2"
    assert f(1) == 2
