"""Opcodes: the index of the op table (the one module both tiers share with the tape format).

A tape row's opcode says which primitive produced the row. Opcodes are grouped in
ranges by family, so the compiled sweep dispatches on the family and each family
module dispatches on the op; adding an op to a family never touches the sweep.
"""
# Rows that bring a value onto the tape from outside: a leaf that requires grad, a
# constant, or a value recorded on an older tape (see tape.py).
LEAF, CONST, IMPORT = 0, 1, 2
SOURCE_LAST = 9

# Elementwise unary, z = f(x).
NEG, ABS, EXP, LOG, SQRT, SIN, COS, TAN, TANH, SIGMOID, RELU = range(100, 111)
(LOG1P, EXPM1, LOG2, LOG10, EXP2, SQUARE, RECIPROCAL, SINH, COSH, ARCSIN, ARCCOS, ARCTAN,
 ARCSINH, ARCCOSH, ARCTANH, SOFTPLUS, ERF, SIGN, FLOOR, CEIL, ROUND) = range(111, 132)
UNARY_FIRST, UNARY_LAST = 100, 299

# Elementwise binary with numpy broadcasting, z = f(x, y).
ADD, SUB, MUL, DIV, POW, MAXIMUM, MINIMUM = range(300, 307)
ARCTAN2, HYPOT, LOGADDEXP, FMOD, MOD = range(307, 312)
# Comparisons as values, 1.0 or 0.0, gradient 0: the condition rows that where, clip and
# masks read inside a compiled recording, so a replay recomputes them (compare()).
LESS, LESS_EQUAL, GREATER, GREATER_EQUAL, EQUAL, NOT_EQUAL = range(312, 318)
COMPARE_FIRST, COMPARE_LAST = 312, 317
BINARY_FIRST, BINARY_LAST = 300, 399

# where(cond, x, y): cond is a CONST row named in the int pool.
WHERE = 400
SELECT_FIRST, SELECT_LAST = 400, 499

# Reductions over an axis bitmask held in the int pool.
SUM, MEAN, MAX, MIN, PROD = 500, 501, 502, 503, 504
# Scans along one axis (params: outer, length, inner).
CUMSUM, CUMPROD = 550, 551
REDUCE_FIRST, REDUCE_LAST = 500, 599

# Indexing: ops whose output elements are input elements at an index map. reshape (same
# flat data, in a new shape or float dtype), strided gather (basic indexing, transpose,
# broadcast_to), index assignment, concatenation (stack), the transpose of a strided
# gather (scatter-add into zeros), and a gather by an index array (advanced indexing,
# take) with its transpose; operand b holds the flat indices: a constant, or (TAKE)
# positions the program computes. SEARCHSORTED: where each of operand b's values goes
# in operand a (1-D, non-decreasing), as float positions a TAKE can read; no gradient.
RESHAPE, STRIDED, SETITEM, CONCAT, SCATTER, TAKE, PUT_ADD, SEARCHSORTED = range(600, 608)
INDEX_FIRST, INDEX_LAST = 600, 699

# Linear algebra.
MATMUL = 700
# numpy.linalg on the last two axes (a batch of square matrices); parameters name rows
# of auxiliary values saved when recorded (an inverse, say) that the VJP reads.
INV, SOLVE, SLOGDET, CHOLESKY, EIGH = 701, 702, 703, 704, 705
# The thin SVD of the last two axes (any m x n), packed per matrix as U, s, Vh.
SVD = 706
# The Moore-Penrose pseudo-inverse of the last two axes, its rank held constant.
PINV = 707
# The determinant; its gradient is the cofactor matrix (saved when recorded), which is
# defined at singular matrices too.
DET = 708
LINALG_FIRST, LINALG_LAST = 700, 799

# A user's op (autotape.custom_op): its forward and VJP are Python functions, so the
# compiled sweep stops at such a row and the engine calls the VJP. Operands are listed
# in the parameters (custom_params), as CONCAT's.
CUSTOM = 800
PYTHON_FIRST, PYTHON_LAST = 800, 899


FAMILIES = {                 # family -> (first opcode, last opcode)
    "source": (LEAF, SOURCE_LAST), "unary": (UNARY_FIRST, UNARY_LAST),
    "binary": (BINARY_FIRST, BINARY_LAST), "select": (SELECT_FIRST, SELECT_LAST),
    "reduce": (REDUCE_FIRST, REDUCE_LAST), "index": (INDEX_FIRST, INDEX_LAST),
    "linalg": (LINALG_FIRST, LINALG_LAST), "python": (PYTHON_FIRST, PYTHON_LAST)}


def all_opcodes():
    """Every opcode defined above that a recorded op can have (sources excluded)."""
    first = UNARY_FIRST
    return sorted(v for k, v in globals().items() if k.isupper() and type(v) is int
                  and first <= v and not k.endswith(("_FIRST", "_LAST")))


def opcode_name(code):
    """The constant's name for an opcode ("MUL"), for messages."""
    for k, v in globals().items():
        if v == code and k.isupper() and type(v) is int and not k.endswith(("_FIRST",
                                                                            "_LAST")):
            return k
    return str(code)
