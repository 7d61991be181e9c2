"""``with ignore_fp_errors():`` is ``np.errstate(all="ignore")`` at a third of its cost.

Every recorded op evaluates numpy with floating-point warnings off (autotape follows
torch: log(0) is -inf, silently). np.errstate costs about 3 us per entry, more than a
small ufunc; setting numpy's error-state context variable directly costs a fraction.
Where numpy's internals differ (another numpy version), np.errstate is used.
"""
import numpy as np

try:
    from numpy._core._ufunc_config import _extobj_contextvar as _STATE
    from numpy._core.umath import _make_extobj

    _IGNORE = _make_extobj(all="ignore")

    class ignore_fp_errors:
        __slots__ = ("token",)

        def __enter__(self):
            self.token = _STATE.set(_IGNORE)

        def __exit__(self, *exc):
            _STATE.reset(self.token)
except (ImportError, AttributeError, TypeError):            # pragma: no cover
    def ignore_fp_errors():
        return np.errstate(all="ignore")
