"""The numba tier: everything compiled into a kernel, and nothing else. Each op family's
values, partial derivatives and kernels (elementwise, reduce, indexing, linalg), the
sweep context, the reverse sweep and the forward replay. Its modules import numba,
numpy and the tape format only; the cache digest covers exactly them (cache.py)."""
