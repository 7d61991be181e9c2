"""The package's layers (ARCHITECTURE.md): imports point down only, never from inside a
function, never reach for another module's underscore names; the numba tier imports
only itself, and the kernel cache digest covers exactly it."""
import ast
import pathlib

import pytest

from autotape.kernels import cache, replay, staging, sweep

PACKAGE = pathlib.Path(cache.__file__).resolve().parent.parent

# bottom to top: a module may import from its own layer or those below
LAYERS = [
    ["opcodes", "tape_format", "tuning", "thread_state", "grad_mode", "guards", "errstate", "memory",
     "pytree"],
    ["kernels.*"],
    ["tape"],
    ["parallel", "executor", "sparsity", "reroll", "program", "checkpointing", "codegen", "gpu", "device_kernels"],
    ["tensor"],
    ["creation", "ops.*", "hooks"],
    ["functions.*", "linalg", "number_rules"],
    ["engine", "graph_backward", "custom"],
    ["complex_numbers.*", "fft", "numpy_dispatch", "tensor_methods"],
    ["func", "eager_calls", "explain", "recording", "batched", "pickling", "compile", "sparse", "implicit", "integrate", "ode_events", "ode_adjoint", "ode_sparse", "gradcheck", "autograd.*", "warmup", "dask", "jit",
     "jit_python", "device_tensors"],
    ["numpy", "torch_names", "__init__", "__main__"],
]


def _module_name(path):
    parts = list(path.relative_to(PACKAGE).with_suffix("").parts)
    if parts[-1] == "__init__" and len(parts) > 1:
        parts = parts[:-1] + ["__init__"]
    return ".".join(parts)


MODULES = {_module_name(p): p for p in PACKAGE.rglob("*.py")}


def _layer(name):
    for k, layer in enumerate(LAYERS):
        for pattern in layer:
            if name == pattern or (pattern.endswith(".*") and name.startswith(pattern[:-1])):
                return k
    raise AssertionError(f"module {name} is in no layer: add it to LAYERS and ARCHITECTURE.md")


def _key(dotted):
    """The MODULES key of a dotted module path inside the package."""
    if dotted in MODULES:
        return dotted
    return f"{dotted}.__init__" if dotted else "__init__"


def _resolve(name, node):
    """The package modules an import statement in module ``name`` refers to."""
    if isinstance(node, ast.Import):
        return [_key(a.name[len("autotape."):] if a.name != "autotape" else "")
                for a in node.names if a.name.split(".")[0] == "autotape"]
    if node.level == 0:
        if (node.module or "").split(".")[0] != "autotape":
            return []
        base = node.module.split(".")[1:]
    else:
        package = name.split(".")[:-1]
        base = package[:len(package) - (node.level - 1)] + (
            node.module.split(".") if node.module else [])
    out = []
    for alias in node.names:              # `from . import linalg`: the submodule itself
        sub = ".".join(base + [alias.name])
        out.append(_key(sub) if _key(sub) in MODULES else _key(".".join(base)))
    return out


def _imports():
    """(module, imported module, node, inside a function or class) for every import."""
    found = []
    for name, path in MODULES.items():
        tree = ast.parse(path.read_text())
        nested = set()
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                for inner in ast.walk(node):
                    if inner is not node:
                        nested.add(id(inner))
        for node in ast.walk(tree):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                for target in _resolve(name, node):
                    found.append((name, target, node, id(node) in nested))
    return found


IMPORTS = _imports()


def test_every_module_is_in_a_layer():
    for name in MODULES:
        _layer(name)


def test_imports_point_down():
    upward = [f"{m} (layer {_layer(m)}) imports {t} (layer {_layer(t)})"
              for m, t, _, _ in IMPORTS if _layer(t) > _layer(m)]
    assert not upward, "\n".join(upward)


def test_no_import_cycles():
    graph = {m: set() for m in MODULES}
    for m, t, _, _ in IMPORTS:
        if t != m and not (m.endswith("__init__") and t.startswith(m[:-len("__init__")])):
            graph[m].add(t)
    state = {}

    def visit(m, path):
        if state.get(m) == "open":
            raise AssertionError("import cycle: " + " -> ".join(path + [m]))
        if state.get(m) == "done":
            return
        state[m] = "open"
        for t in sorted(graph[m]):
            visit(t, path + [m])
        state[m] = "done"
    for m in sorted(graph):
        visit(m, [])


def test_no_imports_inside_functions():
    local = [f"{m}:{node.lineno} imports {t}" for m, t, node, nested in IMPORTS if nested]
    assert not local, "\n".join(local)


def test_no_underscore_names_imported_across_modules():
    private = []
    for name, path in MODULES.items():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and (node.level or (node.module or "")
                                                     .startswith("autotape")):
                private += [f"{name}:{node.lineno} {a.name}" for a in node.names
                            if a.name.startswith("_") and a.name != "__version__"]
    assert not private, "\n".join(private)


def test_kernels_import_only_the_numba_tier():
    digest = {_module_name(p) for p in cache.kernel_source_paths()}
    for m, t, node, _ in IMPORTS:
        if _layer(m) == _layer("kernels.x"):
            assert t in digest, f"{m}:{node.lineno} imports {t}, outside the kernel digest"
    for m in digest:
        assert _layer(m) <= _layer("kernels.x"), m


def test_digest_ignores_comments_and_docstrings():
    code = 'def f(x):\n    """Doc."""\n    return x + 1  # why\n'
    edited = 'def f(x):\n    """Another doc."""\n    # a new comment\n    return x + 1\n'
    assert cache.code_of(code) == cache.code_of(edited)
    assert cache.code_of(code) != cache.code_of(code.replace("x + 1", "x + 2"))


@pytest.mark.parametrize("module", ["ops/elementwise.py", "engine.py", "README.md"])
def test_python_tier_is_outside_the_digest(module):
    assert PACKAGE / module not in cache.kernel_source_paths()


def test_kernels_are_cached_by_code_digest_not_by_file():
    """Every cached kernel uses autotape's locator: the digest directory, with the code
    digest as its freshness stamp (numba's own would stamp file bytes, line and path)."""
    for kernel in (sweep.reverse_sweep, replay.forward_replay, replay.replay_and_sweep,
                   staging.decode_rows):
        locator = kernel._cache._impl.locator
        assert isinstance(locator, cache.KernelCacheLocator), kernel
        assert locator.get_cache_path() == cache.cache_dir()
        assert locator.get_source_stamp() == cache.source_digest()
