"""A gather's or scatter's index array as loops over runs of consecutive (or repeated)
elements: the generated loop bodies (loops.py) read a roll, a concatenation, a tile or a
repeat through a module-level index array, ``T[k] = Vo[S11[k]]``, an indexed load per
element that LLVM cannot vectorize. Most such arrays are runs that repeat with fixed
strides: a 2-D roll along its last axis is, row after row, one element wrapped around
then 31 in order. ``affine_loops`` writes such a loop as a loop over the pattern's
repetitions and, inside, one plain loop per run (contiguous loads and stores),

    for kr in range(32):
        T_32 = T[kr * 32:]
        Vo_32 = Vo[kr * 32:]
        for k in range(1):
            T_32[1024 + (0 + k)] = Vo_32[(9254 + k)]
        for k in range(31):
            T_32[1024 + (1 + k)] = Vo_32[(9223 + k)]

visiting the elements in the same order (a scatter's terms reach each element in the
order they did: the same bits). Each row reads and writes through views that start at
the row (``T_32``): indexed ``T[1024 + (kr * 32 + 1 + k)]`` instead, LLVM left the short
loops scalar (a 2-D roll's adjoint, two terms a cell, took 1.45 us a step, 0.5 in
views). An index that is not a plain sum of numbers and k keeps ``kr`` in it.
"""
import re

from ..tuning import INDEX_PATTERN_MAX, INDEX_RUN_MEAN_MIN

_HEADER = re.compile(r"^(\s*)for k in range\((\d+)\):$")
_INDEXED = re.compile(r"\b([A-Z]\d+)\[k\]")
_K = re.compile(r"\bk\b")
_ROW = "\x00"                  # (a row's offset ``kr * d`` in an index, while written)
_PLAIN_INDEX = re.compile(r"^[\d\sk+()]*$")


def index_runs(index):
    """[(k0, s0, length, step)]: ``index`` cut into maximal runs of step 1 (consecutive)
    or 0 (repeated), in order; a lone element is a run of length 1, step 1.

    >>> index_runs([3, 0, 1, 2, 5, 5, 5])
    [(0, 3, 1, 1), (1, 0, 3, 1), (4, 5, 3, 0)]
    """
    out, n, k = [], len(index), 0
    while k < n:
        step = index[k + 1] - index[k] if k + 1 < n else 1
        if step not in (0, 1):
            step = 1
        end = k + 1
        while end < n and index[end] - index[end - 1] == step:
            end += 1
        out.append((k, int(index[k]), end - k, int(step)))
        k = end
    return out


def index_pattern(index, mean_min=1):
    """(repeats, strides, runs): the runs of ``index`` as ``runs`` (at most
    INDEX_PATTERN_MAX of them) repeated ``repeats`` times, the i-th repetition's shifted
    by ``strides`` = (dk, ds) i; or None where no such pattern covers it, or its runs
    are shorter than ``mean_min`` on average.

    >>> index_pattern([1, 2, 0, 4, 5, 3])       # a roll along the last axis of (2, 3)
    (2, (3, 3), [(0, 1, 2, 1), (2, 0, 1, 1)])
    """
    found = joint_pattern([index], mean_min)
    if found is None:
        return None
    repeats, (dk, (ds,)), runs = found
    return repeats, (dk, ds), [(k0, s0, n, step) for k0, (s0,), n, (step,) in runs]


def joint_runs(indices):
    """[(k0, (s0, ...), length, (step, ...))]: equally long index arrays cut where any
    of them starts a run (index_runs), each array's start and step in each piece.

    >>> joint_runs([[1, 2, 0], [5, 5, 5]])
    [(0, (1, 5), 2, (1, 0)), (2, (0, 5), 1, (1, 0))]
    """
    each = [index_runs(index) for index in indices]
    cuts = sorted({k0 for runs in each for k0, _, _, _ in runs} | {len(indices[0])})
    out, at = [], [0] * len(each)
    for k0, k1 in zip(cuts, cuts[1:]):
        starts, steps = [], []
        for a, runs in enumerate(each):
            while runs[at[a]][0] + runs[at[a]][2] <= k0:
                at[a] += 1
            r0, s0, _, step = runs[at[a]]
            starts.append(s0 + step * (k0 - r0))
            steps.append(step)
        out.append((k0, tuple(starts), k1 - k0, tuple(steps)))
    return out


def joint_pattern(indices, mean_min=1):
    """index_pattern of several equally long index arrays read by one loop:
    (repeats, (dk, (ds, ...)), runs of joint_runs) with a stride per array; None where
    no pattern of at most INDEX_PATTERN_MAX runs covers them all."""
    found = framed_pattern(indices, mean_min, frame=0)
    return None if found is None or found[0] or found[2] else found[1]


def framed_pattern(indices, mean_min=1, frame=INDEX_PATTERN_MAX):
    """(head, pattern, tail): joint_pattern's repetition over all of the arrays' joint
    runs but up to ``frame`` first ones (head) and last ones (tail), themselves lists
    of joint runs; the shortest frame that leaves a repetition, None where none does. A
    roll along the first axis of a grid, read beside rolls along the last, wraps in the
    first or last row only: that row is a frame, the rows between a repetition."""
    n, runs = len(indices[0]), joint_runs(indices)
    if n < mean_min * len(runs):
        return None
    for cut in range(2 * frame + 1):
        for head in range(max(0, cut - frame), min(cut, frame) + 1):
            tail = len(runs) - (cut - head)
            if tail <= head:
                continue
            found = _repeated(runs[head:tail], len(indices))
            if found is not None:
                return runs[:head], found, runs[tail:]
    return None


def _repeated(runs, arrays):
    """(repeats, (dk, (ds, ...)), the first repetition's runs): ``runs`` as at most
    INDEX_PATTERN_MAX runs repeated with fixed strides; None where they are not."""
    for m in range(1, INDEX_PATTERN_MAX + 1):
        if len(runs) % m:
            continue
        repeats = len(runs) // m
        dk, ds = (runs[m][0] - runs[0][0], tuple(b - a for a, b in zip(runs[0][1],
                                                                       runs[m][1]))) \
            if repeats > 1 else (0, (0,) * arrays)
        if all(runs[i * m + j] == (k0 + i * dk, tuple(s + i * d for s, d in zip(s0, ds)),
                                   length, step)
               for i in range(repeats) for j, (k0, s0, length, step) in enumerate(runs[:m])):
            return repeats, (dk, ds), runs[:m]
    return None


def affine_loops(source, arrays):
    """``source`` with each loop ``for k in range(n):`` that indexes arrays of
    ``arrays`` (name -> its values) as ``NAME[k]``, and nothing else by k, written over
    their joint runs (``joint_pattern``) where they average INDEX_RUN_MEAN_MIN elements
    or more; other loops as they are."""
    lines, out, i = source.split("\n"), [], 0
    patterns = {}
    while i < len(lines):
        header = _HEADER.match(lines[i])
        end = i + 1
        if header:
            depth = len(header.group(1))
            while end < len(lines) and (not lines[end].strip() or
                                        len(lines[end]) - len(lines[end].lstrip()) > depth):
                end += 1
            block = lines[i + 1:end]
            names = tuple(sorted({m.group(1) for line in block
                                  for m in _INDEXED.finditer(line)}))
            if names and all(name in arrays for name in names):
                if names not in patterns:
                    values = [arrays[name] for name in names]
                    patterns[names] = framed_pattern(values, INDEX_RUN_MEAN_MIN) if all(
                        len(v) == int(header.group(2)) for v in values) else None
                if patterns[names] is not None:
                    out += _written(header.group(1), block, names, patterns[names])
                    i = end
                    continue
        out.append(lines[i])
        i += 1
    return "\n".join(out)


def _written(indent, block, names, framed):
    """The block's lines over the framed pattern's runs (see the module's docstring):
    the head's runs, the repetition (through row views), the tail's runs."""
    head, (repeats, (dk, ds), runs), tail = framed
    out = []
    for run in head:
        out += _run_lines(indent, indent, block, names, run)
    if repeats > 1:
        inner = indent + "    "
        lines, views = [], {}
        for run in runs:
            lines += [_row_views(line, views)
                      for line in _run_lines(indent, inner, block, names, run, (dk, ds))]
        out.append(f"{indent}for kr in range({repeats}):")
        out += [f"{inner}{view} = {name}[kr * {d}:]" for (name, d), view in views.items()]
        out += lines
    else:
        for run in runs:
            out += _run_lines(indent, indent, block, names, run)
    for run in tail:
        out += _run_lines(indent, indent, block, names, run)
    return out


def _run_lines(indent, inner, block, names, run, strides=None):
    """One run of the block as a plain loop over k; within the repetition's loop over
    kr when ``strides`` (dk, ds) are given, each row's offset marked (_ROW)."""
    k0, s0, length, step = run

    def row(d):
        return f"{_ROW}{d}{_ROW}" if d > 0 else f"kr * {d} + " if d else ""
    at = f"{row(strides[0])}{k0}" if strides else f"{k0}"
    out = [f"{inner}for k in range({length}):"]
    for line in block:
        for i, (name, s, moving) in enumerate(zip(names, s0, step)):
            source = (f"{row(strides[1][i])}{s}" if strides else f"{s}") + \
                (" + __k__" if moving else "")
            line = line.replace(f"{name}[k]", f"({source})")
        line = _K.sub(f"({at} + k)", line).replace("__k__", "k")
        out.append(inner + line[len(indent):])
    return out


_MARK = re.compile(_ROW + r"(\d+)" + _ROW)


def _row_views(line, views):
    """``line`` with each subscript ``A[... kr * d ...]`` whose index is otherwise a plain
    sum of numbers and k written as ``A_d[...]`` (a view of A from the row, recorded in
    ``views``: (A, d) -> its name); any other keeps ``kr * d + `` in its index."""
    out, i = [], 0
    for found in re.finditer(r"(?<![\w.])([A-Za-z_]\w*)\[", line):
        if found.start() < i:
            continue                            # (inside a subscript written already)
        depth, j = 1, found.end()
        while depth and j < len(line):
            depth += {"[": 1, "]": -1}.get(line[j], 0)
            j += 1
        index = line[found.end():j - 1]
        marks = _MARK.findall(index)
        rest = _MARK.sub("", index)
        if len(marks) == 1 and _PLAIN_INDEX.match(rest):
            name = found.group(1)
            view = views.setdefault((name, int(marks[0])), f"{name}_{marks[0]}")
            out.append(line[i:found.start()] + f"{view}[{rest}]")
            i = j
    out.append(line[i:])
    return _MARK.sub(lambda m: f"kr * {m.group(1)} + ", "".join(out))
