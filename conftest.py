"""Doctests see ``at`` (autotape) and ``np`` without importing them."""
import numpy as np
import pytest

import autotape


@pytest.fixture(autouse=True)
def _doctest_names(doctest_namespace):
    doctest_namespace["at"] = autotape
    doctest_namespace["np"] = np
