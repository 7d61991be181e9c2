"""Small compiled helpers the Python side calls while recording."""
from .cache import cached_njit


@cached_njit()
def address_of(a):
    """Data address of a float64 array (a numba call is 5x cheaper than ``a.ctypes``)."""
    return a.ctypes.data
