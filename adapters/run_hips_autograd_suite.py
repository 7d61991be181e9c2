"""Run HIPS autograd's own test suite against autotape.numpy through the thin adapter
in ./hips_autograd, and report the pass rate for the functions autotape covers.

    python adapters/run_hips_autograd_suite.py [--source DIR]

Without --source it downloads the autograd 1.9.1 sdist (pip download) into a temporary
directory. Its test files for numpy functions run unchanged, with the adapter's
``autograd`` package first on sys.path: ``autograd.numpy`` is autotape.numpy and
``check_grads`` compares autotape's reverse and forward derivatives (to second order)
with central differences, as autograd's does.

Out of scope, reported separately: tests of what autotape does not provide (listed in
OUT_OF_SCOPE: np.r_ / np.c_, autograd's own primitives, a check that autograd raises
NotImplementedError where it has no rule).
Complex numbers are reported on their own line: test_complex.py, test_fft.py, the tests
named for complex inputs, and the complex combinations inside combo checks (each
counted as one check; their failures are listed rather than failing the real test).
"""
import argparse
import glob
import os
import subprocess
import sys
import tarfile
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
VERSION = "1.9.1"
FILES = ["test_numpy.py", "test_systematic.py", "test_linalg.py", "test_scalar_ops.py",
         "test_binary_ops.py", "test_complex.py", "test_fft.py"]
COMPLEX_FILES = ("test_complex.py", "test_fft.py")
OUT_OF_SCOPE = {       # not numpy functions on real arrays, or not in autotape's scope
    "numpy_version",                                   # autograd's own version check
    "make_diagonal",                                   # autograd's own primitive
    "r_basic", "r_double", "r_no_relation", "r_node_and_const", "r_mixed", "r_slicing",
    "c_", "c_mixed",                                   # np.r_ / np.c_ index tricks
    "rfftn_odd_not_implemented",        # autograd's own limitation (autotape has no such)
}
COMPLEX_TESTS = {"real", "real_ic", "imag", "conj", "conjugate", "angle", "eig_complex"}


def is_complex_test(nodeid):
    """A test of complex numbers: in test_complex.py / test_fft.py, or named so."""
    base = nodeid.split("::")[-1].split("[")[0][len("test_"):]
    return base not in OUT_OF_SCOPE and (nodeid.split("::")[0].endswith(COMPLEX_FILES) or
                                         "complex" in base or base in COMPLEX_TESTS)


def in_scope(nodeid):
    base = nodeid.split("::")[-1].split("[")[0][len("test_"):]
    return not is_complex_test(nodeid) and base not in OUT_OF_SCOPE


class Outcomes:
    def __init__(self):
        self.results = {}

    def pytest_runtest_logreport(self, report):
        if report.when == "call" or report.outcome != "passed":
            self.results[report.nodeid] = report.outcome


def fetch(dest):
    subprocess.run([sys.executable, "-m", "pip", "download", f"autograd=={VERSION}",
                    "--no-binary", ":all:", "--no-deps", "-q", "-d", dest], check=True)
    archive = glob.glob(os.path.join(dest, f"autograd-{VERSION}.tar.gz"))[0]
    with tarfile.open(archive) as tar:
        tar.extractall(dest, filter="data")
    return os.path.join(dest, f"autograd-{VERSION}")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--source", help="an unpacked autograd source tree")
    args = parser.parse_args()
    source = args.source or fetch(tempfile.mkdtemp())
    tests = os.path.join(source, "tests")
    sys.path[:0] = [os.path.join(HERE, "hips_autograd"), tests]
    import pytest
    from autograd import test_util
    outcomes = Outcomes()
    os.chdir(tests)
    pytest.main(["-q", "-p", "no:cacheprovider", "-c", os.devnull, "--rootdir", tests,
                 "-W", "ignore"] + FILES, plugins=[outcomes])
    scoped = {k: v for k, v in outcomes.results.items() if in_scope(k)}
    complex_tests = {k: v for k, v in outcomes.results.items() if is_complex_test(k)}
    other = {k: v for k, v in outcomes.results.items() if k not in scoped and
             k not in complex_tests}
    passed = sum(v == "passed" for v in scoped.values())
    print(f"\nautograd {VERSION} tests of functions autotape covers: {passed} / {len(scoped)} "
          f"passed ({100.0 * passed / max(len(scoped), 1):.1f}%)")
    for k, v in sorted(scoped.items()):
        if v != "passed":
            print(f"  {v}: {k}")
    c_passed = sum(v == "passed" for v in complex_tests.values()) + test_util.COMPLEX_CASES[1]
    c_total = len(complex_tests) + test_util.COMPLEX_CASES[0]
    print(f"complex checks (the complex tests, and the complex combinations inside combo "
          f"checks): {c_passed} / {c_total} passed ({100.0 * c_passed / max(c_total, 1):.1f}%)")
    for k, v in sorted(complex_tests.items()):
        if v != "passed":
            print(f"  {v}: {k}")
    for failure in test_util.COMPLEX_FAILURES:
        print(f"  failed combination: {failure}")
    print(f"out of scope (functions autotape does not provide): "
          f"{sum(v == 'passed' for v in other.values())} / {len(other)} passed")
    return 0 if passed >= 0.9 * len(scoped) else 1


if __name__ == "__main__":
    sys.exit(main())
