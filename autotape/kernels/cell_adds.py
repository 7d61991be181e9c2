"""Adds into one array at shifted cells, written as one pass over its cells.

A loop body's reverse sweep (loops.py) adds each adjoint term where its operand lies:
a stencil's instructions read ``u`` at cells shifted by -1, 0 and +1, so their terms
reach the adjoint of ``u`` through one loop per instruction (and per deferred member of
a fused run, fusion.py), with a boundary cell's scalar adds between them:

    for k in range(126):
        GT[2 + k] += W[254 + k]
    for k in range(126):
        GT[1 + k] += W[380 + k]
    gx, gy = f64(GT[381]), -f64(GT[381])
    GT[127] += gx
    for k in range(126):
        GT[2 + k] += W[506 + k]
        GT[0 + k] += W[632 + k]

Each loop loads and stores every cell again, and the last is not vectorized at all
(its two adds are a dependence two cells apart). ``cell_order`` writes such a run as
one pass over the cells it reaches, each cell loaded once, given its terms in the order
the run gave them, and stored once; cut where the set of terms a cell receives changes
(a boundary cell is a pass of its own). The bits are the run's: every cell adds the
same terms in the same order, each rounded where the run stored it. (Burgers' reverse
took 20% less.)

A gather's adjoint adds at its sources, through its index array: the rolls of a 2-D
stencil each scatter their deferred terms into the grid's adjoint, one loop a roll,

    for k in range(1024):
        Go[S13[k]] += W[2048 + k]
    for k in range(1024):
        Go[S11[k]] += W[3072 + k]

Where each such index array is a permutation of the same cells, ``permuted_order``
writes the loops as one over those cells, each reading its terms through the inverse
permutations (``R13``, which index_runs.py then turns into runs of plain loads), in the
loops' order: the same bits in one load and store a cell. (A 2-D roll's reverse: 1100
-> 750 us.)

Within one element loop (a fused run's reverse), several adds into one cell,

    Go[2159 + k] += gx
    ...
    Go[2159 + k] += gy

become a local the loop loads once and stores once (``local_adds``): LLVM cannot keep
the cell in a register between them itself, since the loads of V between them might
read it.
"""
import re

_LOOP = re.compile(r"^for k in range\((\d+)\):$")
_PERMUTED = re.compile(r"^    (\w+)\[(S(\d+))\[k\]\] \+= (.+)$")   # (a gather's S{q})
_IN_ORDER = re.compile(r"^    (\w+)\[(\d+) \+ k\] \+= (.+)$")
_INDEXED = re.compile(r"\b[A-Z]\d+\[")
_ADD = re.compile(r"^(\w+)\[(\d+)( \+ k)?\] (\+?=) (.+)$")
_LOCALS = re.compile(r"^(\w+(?:, \w+)*) = (.+)$")
_K = re.compile(r"\bk\b")
_NAME = re.compile(r"[A-Za-z_]\w*")
CELL, ACC = "cell", "acc"
ROUNDED = "V.dtype.type"    # (as the array stores a value: float32 rounds)


def _split(expressions):
    """Top-level comma-separated expressions: ``f64(a[1]), -f64(b)`` -> two."""
    out, depth, start = [], 0, 0
    for i, ch in enumerate(expressions):
        if ch in "([":
            depth += 1
        elif ch in ")]":
            depth -= 1
        if ch == "," and depth == 0:
            out.append(expressions[start:i].strip())
            start = i + 1
    return out + [expressions[start:].strip()]


def _substituted(expression, names):
    return _NAME.sub(lambda m: f"({names[m.group(0)]})" if m.group(0) in names
                     else m.group(0), expression)


def _item(lines, i):
    """The item starting at lines[i]: a top-level loop over k with its body, or one
    line, as (its lines, the loop's count or None for a line, the index after it); its
    lines None for a loop with a loop nested in it."""
    found = _LOOP.match(lines[i])
    if found is None:
        return [lines[i]], None, i + 1
    j = i + 1
    while j < len(lines) and lines[j].startswith("    "):
        if lines[j].startswith("        "):
            return None, None, j
        j += 1
    return [line[4:] for line in lines[i + 1:j]], int(found.group(1)), j


def _adds(lines, looped, defined, target):
    """The adds of one item into ``target`` (found from the first add when None), as
    [(first cell, how: "+=" or "=", term)], locals assigned among its lines substituted
    into later ones (``defined``: name -> expression, updated); (None, None) where a
    line is of another form, or writes another array."""
    adds = []
    for line in lines:
        line = line.split("  #", 1)[0]
        found = _ADD.match(line)
        if found is not None:
            name, first, moving, how, term = found.groups()
            if (moving is not None) != looped or target not in (None, name):
                return None, None
            target = name
            adds.append((int(first), how, _substituted(term, defined)))
            continue
        found = _LOCALS.match(line)
        if found is None:
            return None, None
        names, values = found.group(1).split(", "), _split(found.group(2))
        if len(names) != len(values):
            return None, None
        values = [_substituted(v, defined) for v in values]
        defined.update(zip(names, values))
    return adds, target


def _assigned(lines):
    names = set()
    for line in lines:
        found = _LOCALS.match(line.split("  #", 1)[0])
        if found:
            names.update(found.group(1).split(", "))
    return names


# arrays that are views of one another (the repetition's window: Vo = V[o:], Go = G[o:])
_ALIASES = {"G": "Go", "Go": "G", "V": "Vo", "Vo": "V"}


def _subscripts(text, name, may_be_the_cell):
    """Whether ``text`` may read or write a cell of ``name``: any subscript of the array
    aliasing it (``G`` and its window ``Go``), or one of its own whose index (stripped
    text) ``may_be_the_cell`` says may be the cell."""
    alias = _ALIASES.get(name)
    for found in re.finditer(r"(?<!\w)(\w+)\[(?=([^\]]*))", text):   # (nested ones too)
        array = found.group(1)
        if array == alias or (array == name and may_be_the_cell(found.group(2).strip())):
            return True
    return False


def _reads_target(term, target, cells):
    """Whether a term reads ``target`` (or a view of it) at a cell of ``cells``
    (ranges [a, b)), or at a cell that moves with k."""
    return _subscripts(term, target, lambda index: not index.isdigit() or
                       any(a <= int(index) < b for a, b in cells))


_BRANCH = re.compile(r"^(\s*)(if|elif|else|while)\b")


def _read_before_assigned(lines, names):
    """Whether a line of ``lines`` reads one of ``names`` before an unconditional line
    assigns it (a branch's assignment may not run)."""
    left, branch = set(names), None
    for line in lines:
        indent = len(line) - len(line.lstrip())
        if branch is not None and indent <= branch:
            branch = None
        code = line.strip().split("  #", 1)[0]
        found = _LOCALS.match(code)
        if set(_NAME.findall(found.group(2) if found else code)) & left:
            return True
        if found and branch is None:
            left -= set(found.group(1).split(", "))
        if _BRANCH.match(line) and branch is None:
            branch = indent
        if not left:
            return False
    return False


def _terms(items):
    """The run's terms as (first cell a, count n, how, term in k), in the order every
    cell receives those it has: item after item; within a loop, the statement whose
    iteration reaches the cell first (the larger first cell), then statement order."""
    out = []
    for n, adds, _, _ in items:
        n = n or 1                              # (a line: one cell)
        ordered = sorted(range(len(adds)), key=lambda s: (-adds[s][0], s))
        out += [(adds[s][0], n, adds[s][1], adds[s][2]) for s in ordered]
    return out


def _pass(target, terms):
    """The lines of one pass over the cells the terms reach, cut where the terms a cell
    receives change."""
    edges = sorted({a for a, n, _, _ in terms} | {a + n for a, n, _, _ in terms})
    out = []
    for lo, hi in zip(edges, edges[1:]):
        here = [t for t in terms if t[0] <= lo and hi <= t[0] + t[1]]
        if not here:
            continue
        cell = CELL if hi - lo > 1 else str(lo)
        body = [] if here[0][2] == "=" else [f"{ACC} = {target}[{cell}]"]
        for a, _, how, term in here:
            value = _K.sub(f"({cell} - {a})", term)
            body.append(f"{ACC} = {ROUNDED}({value})" if how == "=" else
                        f"{ACC} = {ROUNDED}({ACC} + ({value}))")
        body.append(f"{target}[{cell}] = {ACC}")
        out += [f"for {CELL} in range({lo}, {hi}):"] + ["    " + b for b in body] \
            if hi - lo > 1 else body
    return out


def _worth(items, target, rest):
    """Whether ``items`` may be one pass: two adds or more, a loop among them, a cell
    that receives two terms or more, no term
    reading a cell the run writes (or one moving with k), no local the run drops read
    later (``rest``: the lines after it, then those before: the next repetition's); a
    line writing another array (kept, run before the pass) neither reads nor writes
    the run's cells, nor writes what an earlier item's term reads."""
    terms = _terms(items)
    if len(terms) < 2 or all(n is None for n, _, _, _ in items):
        return False
    cells = [(a, a + n) for a, n, _, _ in terms]
    if not any(a < d and c < b for i, (a, b) in enumerate(cells) for c, d in cells[:i]):
        return False                            # (no cell receives two terms: no gain)
    if any(_reads_target(t, target, cells) for _, _, _, t in terms):
        return False
    for at, (_, _, _, kept) in enumerate(items):
        if kept is None:
            continue
        name, cell, how, expression = kept
        written = f"{name}[{cell}]" + (f" + {expression}" if how == "+=" else "")
        if _reads_target(_beside(written, target, cells), target, cells) or \
                _reads_target(_beside(expression, target, cells), target, cells):
            return False
        if any(_reads_target(t, name, [(cell, cell + 1)]) for _, adds, _, _ in items[:at]
               for _, _, t in adds):
            return False
    dropped = set().union(*(item[2] for item in items))
    return not _read_before_assigned(rest, dropped)


def _beside(expression, target, cells):
    """``expression`` without its reads of the target's view at a numbered cell that
    cannot be one of ``cells``: the repetition's window Go = G[o:] starts at o >= 0
    (loops.py checks), so G[i] below the first of them is not one, nor Go[i] above the
    last (G[1], a parameter's adjoint, beside Go's cells from 1629 on)."""
    low, high = min(a for a, _ in cells), max(b for _, b in cells)
    window = {"G": "Go", "V": "Vo"}

    def outside(found):
        name, index = found.group(1), int(found.group(2))
        apart = (window.get(name) == target and index < low) or \
            (window.get(target) == name and index >= high)
        return "0.0" if apart else found.group(0)
    return re.sub(r"(?<!\w)(\w+)\[(\d+)\]", outside, expression)


def cell_order(lines):
    """``lines`` (a reverse sweep's statements, loops nested by 4 spaces) with every run
    of two or more adds into one array, a loop over k among them, written as one pass
    over its cells (see above).

    >>> print("\\n".join(cell_order(["for k in range(3):", "    G[1 + k] += W[k]",
    ...                              "for k in range(3):", "    G[0 + k] += W[3 + k]"])))
    acc = G[0]
    acc = V.dtype.type(acc + (W[3 + (0 - 0)]))
    G[0] = acc
    for cell in range(1, 3):
        acc = G[cell]
        acc = V.dtype.type(acc + (W[(cell - 1)]))
        acc = V.dtype.type(acc + (W[3 + (cell - 0)]))
        G[cell] = acc
    acc = G[3]
    acc = V.dtype.type(acc + (W[(3 - 1)]))
    G[3] = acc
    """
    out, i = [], 0
    while i < len(lines):
        items, ends, target, defined, j = [], [], None, {}, i
        while j < len(lines):
            body, n, after = _item(lines, j)
            if body is None:
                break
            assigned = _assigned(body)
            scope = defined if n is None else dict(defined)
            adds, target_found = _adds(body, n is not None, scope, target)
            kept = None
            if adds is None:
                kept = _kept(body, n, target, defined)
                if kept is None:
                    break
                adds, target_found = [], target
            if n is not None:               # (the loop's locals hold its last
                for name in assigned:       # iteration's values after it)
                    defined.pop(name, None)
            # a local the run assigns is substituted into every term that reads it; one
            # left by name (read before its assignment, or a loop's value read after the
            # loop) would read what the dropped assignments no longer write
            dropped = assigned.union(*(item[2] for item in items))
            if any(set(_NAME.findall(t)) & dropped for _, _, t in adds) or \
                    (kept and set(_NAME.findall(kept[3])) & dropped):
                break
            target = target_found
            items.append((n, adds, assigned, kept))
            ends.append(after)
            j = after
        while items and not _worth(items, target, lines[ends[-1]:] + lines[:i]):
            items.pop()
            ends.pop()
        if not items:
            out.append(lines[i])
            i += 1
            continue
        out += [_written(kept) for _, _, _, kept in items if kept]
        out += _pass(target, _terms(items))
        i = ends[-1]
    return out


def _kept(body, n, target, defined):
    """A line of a run that writes one cell of another array than the run's ``target``
    (a scalar adjoint between a stencil's adds: ``GT[888] = gy``), as (array, cell,
    how, expression with the run's locals substituted); None for anything else. The
    run's pass goes after it (_worth says when it may)."""
    found = _ADD.match(body[0].split("  #", 1)[0]) if n is None and target else None
    if found is None or found.group(3) is not None or found.group(1) == target:
        return None
    name, cell, _, how, expression = found.groups()
    return name, int(cell), how, _substituted(expression, defined)


def _written(kept):
    name, cell, how, expression = kept
    return f"{name}[{cell}] {how} {expression}"


def _permuted(lines, i, arrays):
    """(target, index name, term, first cell, count) of a loop at lines[i] whose one
    statement adds a term at the cells of an index array that is a permutation of
    consecutive cells (``arrays``: name -> values), or at consecutive cells in order
    (index name None); None for any other item."""
    found = _LOOP.match(lines[i])
    if found is None or i + 1 >= len(lines) or (i + 2 < len(lines) and
                                                lines[i + 2].startswith("    ")):
        return None
    line, n = lines[i + 1].split("  #", 1)[0], int(found.group(1))
    add = _IN_ORDER.match(line)
    if add is not None:
        target, low, term = add.group(1), int(add.group(2)), add.group(3)
        if _INDEXED.search(term) or _reads_target(term, target, [(low, low + n)]):
            return None
        return target, None, term, low, n
    add = _PERMUTED.match(line)
    if add is None or add.group(2) not in arrays:
        return None
    target, name, _, term = add.groups()
    index = arrays[name]
    low = min(index)
    if len(index) != n or sorted(index) != list(range(low, low + n)) or \
            _INDEXED.search(term) or _reads_target(term, target, [(low, low + n)]):
        return None
    return target, name, term, low, n


def permuted_order(lines, arrays):
    """(lines, new arrays): ``lines`` with each run of two or more loops adding at
    permutations of the same cells of one array (``_permuted``; one at least through an
    index array) written as one loop over those cells, in the run's order (see above);
    the inverse permutations it reads as name -> values, for the caller to define.

    >>> lines, inverses = permuted_order(["for k in range(3):", "    G[S1[k]] += W[k]",
    ...                                   "for k in range(3):", "    G[S2[k]] += W[3 + k]"],
    ...                                  {"S1": [5, 6, 4], "S2": [6, 4, 5]})
    >>> print("\\n".join(lines))
    for k in range(3):
        acc = G[4 + k]
        acc = V.dtype.type(acc + (W[R1[k]]))
        acc = V.dtype.type(acc + (W[3 + R2[k]]))
        G[4 + k] = acc
    >>> inverses
    {'R1': [2, 0, 1], 'R2': [1, 2, 0]}
    """
    out, inverses, i = [], {}, 0
    while i < len(lines):
        run, j = [], i
        while j < len(lines):
            found = _permuted(lines, j, arrays)
            if found is None or (run and found[::3] + found[4:] != run[0][::3] + run[0][4:]):
                break
            run.append(found)
            j += 2
        while run and run[-1][1] is None:
            run.pop()                           # (in order after the last permuted:
            j -= 2                              # cell_order's)
        if len(run) < 2:
            out.append(lines[i])
            i += 1
            continue
        target, _, _, low, n = run[0]
        body = [f"{ACC} = {target}[{low} + k]"]
        for _, name, term, _, _ in run:
            if name is None:
                body.append(f"{ACC} = {ROUNDED}({ACC} + ({term}))")
                continue
            inverse = "R" + name[1:]
            index = arrays[name]
            inverses[inverse] = [0] * n
            for k, cell in enumerate(index):
                inverses[inverse][cell - low] = k
            body.append(f"{ACC} = {ROUNDED}({ACC} + ({_K.sub(inverse + '[k]', term)}))")
        body.append(f"{target}[{low} + k] = {ACC}")
        out += [f"for k in range({n}):"] + ["    " + line for line in body]
        i = j
    return out, inverses


_CELL_ADD = re.compile(r"^((\w+)\[(\d+) \+ k\]) (\+?=) (.+)$")


def local_adds(lines):
    """An element loop's body (statements at the loop's depth) with each cell that two
    or more top-level lines add to (``Go[7 + k] +=``) held in a local from its first
    add to its last, rounded as the array stores it at every add (the same bits). A
    cell that another line reads or writes in between, or that an array aliasing it
    (``G`` and ``Go``) is touched through in between, is left as it is.

    >>> print("\\n".join(local_adds(["Go[7 + k] += gx", "gy = f64(Vo[3 + k])",
    ...                               "Go[7 + k] += gy"])))
    cGo7 = V.dtype.type(f64(Go[7 + k]) + (gx))
    gy = f64(Vo[3 + k])
    cGo7 = V.dtype.type(cGo7 + (gy))
    Go[7 + k] = cGo7
    """
    adds = {}
    for i, line in enumerate(lines):
        found = _CELL_ADD.match(line.split("  #", 1)[0])
        if found:
            adds.setdefault(found.group(1), []).append(i)
    out = list(lines)
    for cell, at in adds.items():
        hows = [_CELL_ADD.match(lines[i].split("  #", 1)[0]).group(4) for i in at]
        if len(at) < 2 or "=" in hows[1:]:      # (only a first write may assign)
            continue
        name, first = _CELL_ADD.match(lines[at[0]]).group(2, 3)
        between = [lines[i] for i in range(at[0], at[-1] + 1) if i not in at] + \
            [_CELL_ADD.match(lines[i].split("  #", 1)[0]).group(5) for i in at]
        if any(_may_touch(line, name, int(first)) for line in between):
            continue
        local = f"c{name}{first}"
        if any(re.search(rf"\b{local}\b", line) for line in lines):
            continue
        for n, i in enumerate(at):
            term = _CELL_ADD.match(lines[i].split("  #", 1)[0]).group(5)
            if n == 0 and hows[0] == "=":       # (a first write that assigns: the
                out[i] = f"{local} = {ROUNDED}({term})"     # zero it replaced unread)
                continue
            value = f"f64({cell})" if n == 0 else local
            out[i] = f"{local} = {ROUNDED}({value} + ({term}))"
        out[at[-1]] += f"\n{cell} = {local}"
    return [piece for line in out for piece in line.split("\n")]


def _may_touch(line, name, first):
    """Whether ``line`` may read or write ``name[first + k]`` (or its view's cell): any
    subscript of it, or of an array aliasing it, but ``[d + k]`` with d != first."""
    def may_be(index):
        moving = re.fullmatch(r"(\d+) \+ k", index)
        return moving is None or int(moving.group(1)) == first
    return _subscripts(line, name, may_be)
