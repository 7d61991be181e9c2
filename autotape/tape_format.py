"""The tape format, written once for the Python side and for compiled code.

A tape row is six int64s: opcode, operand a, operand b, shape id, aux and value
location. Operands are earlier rows (``NO_ROW`` where there is none); CONCAT keeps its
variable list of operands among its parameters, and ``operand_count`` / ``operand``
cover both. ``aux`` indexes the int pool where a row's parameters start (``NO_ROW``:
none). A value location >= 0 is an offset into the float64 arena (0-d values); one
< 0 names an array by index (``array_index``), whose address the tape keeps.

Each op family's parameters have one layout, encoded by a ``*_params`` function here
(what the recorders store) and decoded by the functions beside it, which compiled
kernels, the create_graph rules and the replay all call with the int pool and the
row's aux (``(params, 0)`` on a row's own parameter slice from Python). Every function
marked ``register_jitable`` runs as plain Python too. ``operand_count`` and
``operand`` are inlined by numba (``inline="always"``): they run once per row, and a
call that passes arrays costs their reference counts.
"""
import numpy as np
from numba.extending import register_jitable

from .opcodes import CONCAT, CUSTOM

OP, A, B, SHAPE, AUX, VLOC = range(6)
ROW_WIDTH = 6
NO_ROW = -1


# ---- where a row's value lives ----------------------------------------------------------

@register_jitable
def array_location(index):
    """The value location of the tape's array number ``index``."""
    return -1 - index


@register_jitable
def array_index(loc):
    """The array number of a value location < 0 (one >= 0 is an arena offset)."""
    return -1 - loc


# ---- operands ---------------------------------------------------------------------------

@register_jitable(inline="always")
def operand_count(rows, ipool, i):
    if rows[i, OP] == CONCAT:
        return ipool[rows[i, AUX] + 2]
    if rows[i, OP] == CUSTOM:
        return ipool[rows[i, AUX]]
    return (1 if rows[i, A] >= 0 else 0) + (1 if rows[i, B] >= 0 else 0)


def operand_list(op, a, b, params):
    """A row's operand rows from its decoded fields (the Python side's ``operand``)."""
    if op == CONCAT:
        return [int(concat_part(params, 0, t)[0]) for t in range(concat_dims(params, 0)[2])]
    if op == CUSTOM:
        return [int(r) for r in params[1:1 + params[0]]]
    return [r for r in (a, b) if r >= 0]


@register_jitable
def reach(rows, ipool, seed_rows):
    """The rows reachable backwards from ``seed_rows`` along operand edges, and the last
    of them (the sweep's first stage). The walk is written out: a helper call per row
    costs the sweep of a 100k-row scalar tape 2x."""
    top = -1
    for s in seed_rows:
        top = max(top, s)
    reached = np.zeros(top + 1, np.bool_)
    for s in seed_rows:
        reached[s] = True
    for i in range(top, -1, -1):
        if not reached[i]:
            continue
        if rows[i, OP] == CONCAT:
            for k in range(ipool[rows[i, AUX] + 2]):
                reached[ipool[rows[i, AUX] + 3 + 3 * k]] = True
        elif rows[i, OP] == CUSTOM:
            for k in range(ipool[rows[i, AUX]]):
                reached[ipool[rows[i, AUX] + 1 + k]] = True
        else:
            if rows[i, A] >= 0:
                reached[rows[i, A]] = True
            if rows[i, B] >= 0:
                reached[rows[i, B]] = True
    return reached, top


@register_jitable(inline="always")
def operand(rows, ipool, i, k):
    """Row i's k-th operand row (k < operand_count)."""
    if rows[i, OP] == CONCAT:
        return ipool[rows[i, AUX] + 3 + 3 * k]
    if rows[i, OP] == CUSTOM:
        return ipool[rows[i, AUX] + 1 + k]
    return rows[i, A] if k == 0 else rows[i, B]


# ---- parameter layouts, one per family ----------------------------------------------------

def reduce_params(axes):
    """SUM, MEAN, MAX, MIN, PROD: (bitmask of the operand's reduced axes,)."""
    mask = 0
    for ax in axes:
        mask |= 1 << ax
    return (mask,)


@register_jitable
def reduces_axis(ipool, p, d):
    return (ipool[p] >> d) & 1 == 1


def reduced_axes(params, ndim):
    """The reduced axes as a tuple (Python side)."""
    return tuple(d for d in range(ndim) if reduces_axis(params, 0, d))


def scan_params(outer, length, inner):
    """CUMSUM, CUMPROD: the operand seen as (outer, length, inner), scanned along the
    middle axis."""
    return (outer, length, inner)


@register_jitable
def scan_dims(ipool, p):
    return ipool[p], ipool[p + 1], ipool[p + 2]


def view_params(offset, strides):
    """STRIDED (into the operand) and SCATTER (into the output): a strided view's
    (offset, strides...) in elements of flat C-order data; the view's shape is the
    output's (STRIDED) or the operand's (SCATTER)."""
    return (int(offset),) + tuple(int(s) for s in strides)


@register_jitable
def view_offset(ipool, p):
    return ipool[p]


@register_jitable
def view_strides(ipool, p, ndim):
    strides = np.empty(ndim, np.int64)
    for d in range(ndim):
        strides[d] = ipool[p + 1 + d]
    return strides


def setitem_params(region, offset, strides):
    """SETITEM: (ndim, region shape..., offset, strides...) of the assigned region of
    the base, as a view."""
    return (len(region),) + tuple(int(d) for d in region) + view_params(offset, strides)


@register_jitable
def setitem_region(ipool, p):
    ndim = ipool[p]
    region = np.empty(ndim, np.int64)
    for d in range(ndim):
        region[d] = ipool[p + 1 + d]
    return region


@register_jitable
def setitem_view(ipool, p):
    """The region's (offset, strides) in the base."""
    ndim = ipool[p]
    return view_offset(ipool, p + 1 + ndim), view_strides(ipool, p + 1 + ndim, ndim)


def custom_params(operand_rows):
    """CUSTOM: (count, operand row * count)."""
    return (len(operand_rows),) + tuple(operand_rows)


def concat_params(outer, width, parts):
    """CONCAT: (outer, width, count, (operand row, first column, band width) * count):
    the output seen as (outer, width), each operand a band of columns."""
    out = [outer, width, len(parts)]
    for part in parts:
        out.extend(part)
    return tuple(out)


@register_jitable
def concat_dims(ipool, p):
    """(outer, width, count)."""
    return ipool[p], ipool[p + 1], ipool[p + 2]


@register_jitable
def concat_part(ipool, p, t):
    """(operand row, first column, band width) of part t."""
    return ipool[p + 3 + 3 * t], ipool[p + 4 + 3 * t], ipool[p + 5 + 3 * t]


def where_params(condition_row):
    """WHERE: (row of the condition, a CONST of 0s and 1s,)."""
    return (condition_row,)


@register_jitable
def where_condition(ipool, p):
    return ipool[p]


def saved_params(saved_row):
    """SOLVE, SLOGDET, CHOLESKY: (row of values saved when recorded for the VJP,)."""
    return (saved_row,)


@register_jitable
def saved_row(ipool, p):
    return ipool[p]


def eigh_params(upper):
    """EIGH: (1 if the upper triangle is read, else 0,)."""
    return (int(upper),)


@register_jitable
def eigh_upper(ipool, p):
    return ipool[p] != 0


def svd_params(m, n, full):
    """SVD: (m, n) of each matrix and whether U and Vh are full (square); per matrix its
    row holds U (m x ku), s (k), Vh (kv x n): k = min(m, n), ku = m and kv = n when
    full, else k."""
    return (m, n, int(full))


@register_jitable
def svd_dims(ipool, p):
    """(m, n, k, ku, kv) of an SVD row."""
    m, n = ipool[p], ipool[p + 1]
    k = min(m, n)
    full = ipool[p + 2] != 0
    return m, n, k, m if full else k, n if full else k


def pinv_params(rcond):
    """PINV: the relative cutoff of singular values, as the bits of a float64."""
    return (int(np.float64(rcond).view(np.int64)),)


def pinv_rcond(params):
    """The cutoff of a PINV row (Python side: the replay recomputes the value)."""
    return float(np.int64(params[0]).view(np.float64))
