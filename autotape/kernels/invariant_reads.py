"""Reads that do not change inside an element loop, loaded once before it.

A generated loop body (loops.py) writes an operand that does not move with the cells as
a load in every element: ``z15 = f64(T[0]) * f64(Vo[795 + k])``. LLVM cannot hoist
``T[0]`` or ``V[166]`` out of the loop itself, since the loop stores into ``Vo`` and
``T``, which it cannot prove apart from them; so it reloads them per element and keeps
the loop scalar. A cubic oscillator's step of 32 cells took 66 ns so, 31 ns with its
four parameters loaded before the loop (a numba forward run of the model: 20 ns).

``hoisted_reads`` rewrites each ``for k in range(n):`` block: a value read
``f64(V[i])`` or ``f64(T[i])`` whose index has no ``k`` (nor a point's ``j`` or a
lane's ``l``) and that the block does not write becomes a local assigned before the
loop. The loads are the same loads, earlier: the bits are the same.

Only value arrays are hoisted (V, T and a repetition's view Vo, read-only within an
element loop but for the loop's own cells); adjoints (G, GT, W) are added to inside the
loops and stay where they are.
"""
import re

_HEADER = re.compile(r"^(\s*)for k in range\((\d+)\):$")
_READ = re.compile(r"f64\(((V|Vo|T)\[([^\[\]]*)\])\)")
_INVARIANT_INDEX = re.compile(r"^(?:[\d\s+*()-]|\btb?\b)*$")
_SUBSCRIPT = re.compile(r"\b(V|Vo|T)(_\d+)?\[")
_ASSIGNS = re.compile(r"\s*[+\-*/]?=(?!=)")
_CELL = re.compile(r"^\(?(\d+) \+ k\)?$")


def _writes(line):
    """(array, view suffix, index) of each value array element ``line`` assigns or adds
    to (an index may hold subscripts: a scatter's ``T[S3[k]]``)."""
    for found in _SUBSCRIPT.finditer(line):
        depth, j = 1, found.end()
        while depth and j < len(line):
            depth += {"[": 1, "]": -1}.get(line[j], 0)
            j += 1
        if _ASSIGNS.match(line, j):
            yield found.group(1), found.group(2), line[found.end():j - 1]


def _written_cells(block, n):
    """{array: [(first, end) element ranges written], or None where a write's index is
    not ``first + k``} for the value arrays the block writes."""
    written = {}
    for line in block:
        for name, view, index in _writes(line):
            cell = None if view else _CELL.match(index.strip())   # (a row's view: any cell)
            ranges = written.setdefault(name, [])
            if cell is None or ranges is None:
                written[name] = None
            else:
                first = int(cell.group(1))
                ranges.append((first, first + n))
    return written


def _may_hoist(name, index, written):
    """Whether ``name[index]`` keeps its value through the block: an index without the
    element (or point, or lane) and no write of the block to that element. Vo's and V's
    writes are this repetition's own cells, never a fixed slot (loops.py's body), so a
    fixed read of V is safe beside them; a read of Vo or T must miss each written range."""
    if not _INVARIANT_INDEX.match(index):
        return False
    if written.get("V", []) != []:
        return False
    if name == "V":
        return True
    ranges = written.get(name, [])
    if ranges is None:
        return False
    if not ranges:
        return True
    if not index.strip().isdigit():
        return False
    i = int(index)
    return all(not first <= i < end for first, end in ranges)


def hoisted_reads(source):
    """``source`` with the invariant value reads of every element loop loaded into locals
    (``inv{i}``) before it.

    >>> print(hoisted_reads("    for k in range(4):\\n"
    ...                     "        T[8 + k] = f64(T[0]) * f64(V[8 + k])"))
        inv0 = f64(T[0])
        for k in range(4):
            T[8 + k] = inv0 * f64(V[8 + k])
    """
    lines, out, i, count = source.split("\n"), [], 0, 0
    while i < len(lines):
        header = _HEADER.match(lines[i])
        if not header:
            out.append(lines[i])
            i += 1
            continue
        indent, n = header.group(1), int(header.group(2))
        end = i + 1
        while end < len(lines) and (not lines[end].strip() or
                                    len(lines[end]) - len(lines[end].lstrip()) > len(indent)):
            end += 1
        block = lines[i + 1:end]
        written = _written_cells(block, n)
        names = {}
        for line in block:
            for found in _READ.finditer(line):
                read, name, index = found.groups()
                if read not in names and _may_hoist(name, index, written):
                    names[read] = f"inv{count}"
                    count += 1
        out += [f"{indent}{local} = f64({read})" for read, local in names.items()]
        out.append(lines[i])
        for line in block:
            out.append(_READ.sub(lambda m: names.get(m.group(1), m.group(0)), line))
        i = end
    return "\n".join(out)
