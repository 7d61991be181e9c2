"""A compiled loop that settles: its repetitions after a fixed point of its state, left out.

Every repetition of a loop body (kernels/loops.py) computes the same function of the
state the repetition before it wrote (when no per-repetition constant enters it and it
reads back only one repetition). So once a repetition writes, bit for bit, the state it
read, every later one writes the same values again: an adaptive ODE solve past its end
(steps of size 0), a converged fixed-point iteration. The forward stops there and
copies that repetition's values to the last repetition's place, which the code after
the loop reads; the results are those of running every repetition.

The reverse sweep still owes one pass per left-out repetition, and a pass is not the
identity in general (a converged Newton iteration's passes multiply by its Jacobian).
It sweeps the settled repetition's values again, at the last repetition's place, pass
after pass, handing each pass's adjoints of the state back to the next, until one
pass changes nothing: the adjoints of the state it hands back equal those it received
and the adjoints it adds to the loop's fixed operands (parameters) stay as they were,
bit for bit. The passes after it would do the same, so they are left out too. Only
the active slots count there (those whose values depend on the inputs through ops that
pass a derivative): the adjoints of the others never reach an input (an ODE solve's
time, whose adjoint changes with every pass, is computed from frozen step sizes).

Values are compared as bits: -0.0 is not 0.0 and a nan never settles.

Code after the loop may read values of earlier repetitions too (an ODE solve's table of
steps, which its dense output picks rows from). The forward fills those slots of the
repetitions it left out with the settled repetition's (``fill_left_out``: the values
running them would give). Their adjoints are another matter: a pass sweeps the settled
copy with only the state's adjoints handed on. So the driver zeroes those slots'
adjoints first and, where the code after the loop gave one of them an adjoint
(``reaches_left_out``), runs every repetition again and sweeps them all.
"""
import math

from numba.extending import register_jitable


@register_jitable
def same(a, b):
    """Whether two floats are the same bits (a nan is never the same)."""
    return a == b and (a != 0.0 or math.copysign(1.0, a) == math.copysign(1.0, b))


@register_jitable
def settled(Vo, state, delta, C):
    """Whether the repetition at ``Vo`` wrote the state the one before it wrote: every
    state slot (offsets in ``state``, slot-major over C points) the same bits."""
    for m in range(state.size):
        s = state[m]
        for j in range(C):
            if not same(Vo[s * C + j], Vo[(s - delta) * C + j]):
                return False
    return True


@register_jitable
def copy_settled(V, settled_at, last, delta, base, state, C):
    """The values of repetition ``settled_at`` (offset ``settled_at * delta``) copied to
    the last repetition's place, and its state to the place of the one before, which
    the last one reads back: as if every repetition had run."""
    src, dst = (base + settled_at * delta) * C, (base + last * delta) * C
    V[dst:dst + delta * C] = V[src:src + delta * C]
    if last - 1 > settled_at:
        for m in range(state.size):
            s = state[m]
            for j in range(C):
                V[(s + (last - 1) * delta) * C + j] = V[(s + settled_at * delta) * C + j]


@register_jitable
def move_adjoints(G, state, src, dst, C):
    """Add the state's adjoints at ``src`` (an offset from the state slots) to those at
    ``dst``, and clear them at ``src``: a pass's adjoints handed back to the state it
    read, made those of the state the next pass (or the settled repetition) wrote."""
    for m in range(state.size):
        s = state[m]
        for j in range(C):
            G[(s + dst) * C + j] += G[(s + src) * C + j]
            G[(s + src) * C + j] = 0.0


@register_jitable
def keep_adjoints(A, Go, active_state, G, fixed, C):
    """Write into A the adjoints of the active state a pass receives and of the fixed
    operands it adds to, before it runs."""
    n = 0
    for m in range(active_state.size):
        for j in range(C):
            A[n] = Go[active_state[m] * C + j]
            n += 1
    for m in range(fixed.size):
        for j in range(C):
            A[n] = G[fixed[m] * C + j]
            n += 1


@register_jitable
def pass_changed_nothing(A, Go, active_state, delta, G, fixed, C):
    """Whether the pass just run handed back the active state's adjoints it received
    (kept in A by ``keep_adjoints``) and left the fixed operands' adjoints as they were,
    bit for bit: every pass after it would do the same."""
    n = 0
    for m in range(active_state.size):
        for j in range(C):
            if not same(Go[(active_state[m] - delta) * C + j], A[n]):
                return False
            n += 1
    for m in range(fixed.size):
        for j in range(C):
            if not same(G[fixed[m] * C + j], A[n]):
                return False
            n += 1
    return True


@register_jitable
def another_pass(at, A, Go, G, state, active_state, fixed, assigned, delta, shift, ran, C):
    """After a pass over a settled copy (``at``: the repetition swept, the copies left):
    whether another one follows (the caller clears the pass's adjoints and hands its
    state's adjoints on); if not (none left, or this one changed nothing), the
    settled repetition ``ran - 1`` takes what it handed back, and is swept next."""
    at[1] -= 1
    if at[1] > 0 and not pass_changed_nothing(A, Go, active_state, delta, G, fixed, C):
        return True
    t = at[0]
    settled_at = (ran - 1) * delta - shift      # (the state slots whose first write
    for m in range(assigned.size):              # assigns, ``assigned``, the clear left
        for j in range(C):                      # as they were: no repetition after
            G[(assigned[m] + settled_at) * C + j] = 0.0     # it was swept; loops.py)
    move_adjoints(G, state, (t - 1) * delta - shift, settled_at, C)
    at[0], at[1] = ran - 1, 0
    return False


@register_jitable
def fill_left_out(V, settled_at, last, delta, base, earlier, C):
    """The slots ``earlier`` (offsets in a repetition, the ones code after the loop
    reads) of repetitions settled_at + 1 .. last - 1, the settled repetition's values."""
    for t in range(settled_at + 1, last):
        for m in range(earlier.size):
            src, dst = (base + settled_at * delta + earlier[m]) * C, \
                (base + t * delta + earlier[m]) * C
            for j in range(C):
                V[dst + j] = V[src + j]


@register_jitable
def zero_left_out(G, ran, last, delta, base, earlier, C):
    """Zero the adjoints of the slots ``earlier`` of repetitions ran .. last - 1 (those
    a settled forward left out, which ``clear`` leaves as they were)."""
    for t in range(ran, last):
        for m in range(earlier.size):
            s = (base + t * delta + earlier[m]) * C
            for j in range(C):
                G[s + j] = 0.0


@register_jitable
def reaches_left_out(G, ran, last, delta, base, earlier, C):
    """Whether the code after the loop gave an adjoint to a slot ``earlier`` of the
    repetitions ran .. last - 1 that a settled forward left out."""
    for t in range(ran, last):
        for m in range(earlier.size):
            s = (base + t * delta + earlier[m]) * C
            for j in range(C):
                if G[s + j] != 0.0:
                    return True
    return False
