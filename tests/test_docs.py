"""The documentation: every public name has a docstring with an example (the doctests
run them), and every Python block in docs/ runs as written."""
import inspect
import linecache
import pathlib
import re

import numpy as np
import pytest

import autotape as at
import autotape.autograd.functional
import autotape.func
import autotape.linalg
import autotape.warmup

try:
    import autotape.dask
except ImportError:                   # (dask not installed)
    pass

DOCS = pathlib.Path(__file__).resolve().parent.parent / "docs"
NAMESPACES = {"autotape": at, "autotape.func": at.func, "autotape.linalg": at.linalg,
              "autotape.autograd": at.autograd,
              "autotape.autograd.functional": at.autograd.functional,
              "autotape.autograd.graph": at.autograd.graph,
              "autotape.warmup": at.warmup, "autotape.fft": at.fft,
              "autotape.integrate": at.integrate}
if hasattr(at, "dask"):
    NAMESPACES["autotape.dask"] = at.dask
try:                                     # (scipy's: an optional dependency)
    import autotape.implicit
    NAMESPACES["autotape.implicit"] = autotape.implicit
except ImportError:
    pass
DTYPES = {"float32", "float64", "int32", "int64"}      # numpy's own types, re-exported


def _public():
    for prefix, module in NAMESPACES.items():
        for name in module.__all__:
            if prefix == "autotape" and name in DTYPES:
                continue
            yield f"{prefix}.{name}", getattr(module, name)
    for cls in (at.Tensor, at.ComplexTensor):
        for name in dir(cls):
            if not name.startswith("_"):
                member = inspect.getattr_static(cls, name)
                yield f"{cls.__name__}.{name}", (member.fget if isinstance(member, property)
                                                 else member)


@pytest.mark.parametrize("name, obj", list(_public()), ids=lambda v: v if isinstance(
    v, str) else "")
def test_every_public_name_has_a_docstring_with_an_example(name, obj):
    doc = inspect.getdoc(obj) or ""
    assert doc.strip(), f"{name} has no docstring"
    assert ">>>" in doc, f"{name}'s docstring has no example"


def test_the_api_reference_covers_every_namespace():
    pages = "".join(p.read_text() for p in (DOCS / "api").glob("*.md"))
    for prefix in NAMESPACES:
        assert f"::: {prefix}\n" in pages, prefix
    assert "::: autotape.Tensor" in pages
    assert "::: autotape.ComplexTensor" in pages


@pytest.mark.parametrize("page", sorted(p.relative_to(DOCS).as_posix()
                                        for p in DOCS.rglob("*.md")))
def test_python_blocks_in_the_docs_run(page):
    blocks = re.findall(r"```python\n(.*?)```", (DOCS / page).read_text(), re.S)
    namespace = {"__name__": "docs"}
    for k, code in enumerate(blocks):
        name = f"<docs/{page} block {k}>"         # (its source readable, as a file's:
        linecache.cache[name] = (len(code), None, code.splitlines(True), name)   # at.jit
        exec(compile(code, name, "exec"), namespace)                             # reads it)


def test_every_docs_page_is_in_the_site_navigation():
    nav = (DOCS.parent / "mkdocs.yml").read_text()
    for page in DOCS.rglob("*.md"):
        assert page.relative_to(DOCS).as_posix() in nav, page
