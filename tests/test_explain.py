"""``Compiled.explain`` (explain.py): what a compiled function's calls run and why not
something faster, naming f's lines: a decision taken in Python, an op without a lean
form, and where a time-stepping loop stops repeating (kernels/loops.py's
``repetition``). Also: the loop finder looks for a loop around the quarters of the
program when an event cuts the one through its middle short."""
import inspect
import math

import numpy as np

import autotape as at
from autotape.explain import _Lines


def _line(fn, marker):
    """The number of fn's source line that holds ``marker``."""
    lines, first = inspect.getsourcelines(fn)
    return first + next(k for k, line in enumerate(lines) if marker in line)


def kicked(theta):
    x, v = theta[0], theta[1]
    h = 0.01
    for i in range(300):
        a = -theta[2] * at.sin(x) - 0.1 * v + 0.5 * math.cos(i * h)
        x, v = x + h * v, v + h * a
        if i == 150:
            v = v * 0.5 + at.cos(x)                 # the kick
    return x * x + v * v


THETA = np.array([0.3, 0.1, 1.0])


def test_a_loop_cut_short_names_the_line_that_breaks_it():
    c = at.compile(kicked, THETA)
    text = c.explain(THETA)
    assert "Its loop: 150 repetitions of 10 instructions" in text
    assert f"test_explain.py, lines {_line(kicked, 'a = -theta')}-{_line(kicked, 'x + h * v')}" \
        in text
    kick = _line(kicked, "the kick")
    assert f"The repetition ends at test_explain.py, line {kick} (`v = v * 0.5 + " \
           "at.cos(x)                 # the kick`): mul where the repetition before has" \
           in text
    assert c.traces == 1                           # (explain's recording is not a call's)


def test_the_loop_finder_looks_past_an_event_at_the_middle():
    """Before: only stretches through the middle instruction, where the kick is."""
    lean = at.compile(kicked, THETA)._lean("value", [THETA]).lean
    assert lean.loop is not None and lean.loop[2] == 150
    value, grad = at.compile(kicked, THETA).value_and_grad(THETA)
    t = at.tensor(THETA, requires_grad=True)
    want = kicked(t)
    np.testing.assert_allclose(grad.numpy(), at.grad(want, t)[0].numpy(), rtol=1e-12)


def test_too_few_repetitions_are_said():
    def three_steps(x):
        for _ in range(3):
            for k in range(40):
                x = at.sin(x) * (0.5 + 0.01 * k)    # the step's ops
        return x.sum()
    text = at.compile(three_steps, np.ones(2)).explain(np.ones(2))
    assert "No loop is compiled: the longest repeating stretch is" in text
    assert "under the 4 repetitions of at least 256 instructions in all a loop needs" in text


def test_a_decision_in_python_is_named_with_its_line():
    def guarded(x):
        s = x.sum()
        if s > 0:                                   # the decision
            return s * 2.0
        return s
    text = at.compile(guarded, np.ones(3)).explain(np.ones(3))
    assert f"test_explain.py, line {_line(guarded, 'the decision')}" in text
    assert "1 decision(s) in Python on traced values" in text


def test_an_op_without_a_lean_form_is_named_with_its_line():
    def gram(x):
        return at.linalg.inv(x @ x.T).sum()         # the inverse
    text = at.compile(gram, np.eye(3)).explain(np.eye(3))
    assert f"Its inv at test_explain.py, line {_line(gram, 'the inverse')}" in text
    assert "has no lean form, so calls replay its tape" in text


def test_a_program_without_repetition_says_so():
    text = at.compile(lambda x: (at.sin(x) * x).sum(), np.ones(3)).explain(np.ones(3))
    assert "No stretch of it repeats" in text


def rhs(x):
    return at.sin(x) * 0.3                          # the right-hand side


def stepped(theta):
    x = theta
    for _ in range(300):
        x = x + 0.01 * rhs(x)                       # the step
    return (x * x).sum()


def test_the_rest_of_a_line_after_a_call_is_the_callers():
    """The ops of `x + 0.01 * rhs(x)` after rhs returns are the step's line's (Python
    reports no new line event there: explain notes the return)."""
    text = at.compile(stepped, THETA).explain(THETA)
    assert (f"(test_explain.py, lines {_line(rhs, 'right-hand side')}-"
            f"{_line(stepped, 'the step')})") in text
    assert "The repetition" not in text             # (the loop is the program: no breaks)


def test_lines_run_on_another_tape_do_not_hide_the_recordings():
    """A finalizer the garbage collector runs during a recording (code of a test, or of
    the user, on the thread's old tape of 5000 rows) notes a line too; the recording's
    rows are placed by the lines run on its own tape (they came out "lines not known"
    after a long test run)."""
    class Tape:
        def __init__(self, nrows):
            self.nrows = nrows
    old, recording = Tape(5000), Tape(0)
    lines = _Lines()
    for tape, count, place in ((old, 5000, ("other.py", 9)), (recording, 1, ("f.py", 2)),
                               (recording, 4, ("f.py", 3)), (recording, 7, ("f.py", 2))):
        lines.tapes.append(id(tape))
        lines.counts.append(count)
        lines.places.append(place)
    assert [lines.place(recording, r) for r in (0, 1, 5, 8)] == \
        [None, ("f.py", 2), ("f.py", 3), ("f.py", 2)]


def pushed(theta):
    x, v = theta[0], theta[1]
    for i in range(300):
        push = theta[2] if i < 100 else 0.0
        a = -at.sin(x) - 0.1 * v + push             # the push's sum
        x, v = x + 0.01 * v, v + 0.01 * a
    return x * x + v * v


def pushed_by_arithmetic(theta):
    x, v = theta[0], theta[1]
    for i in range(300):
        a = -at.sin(x) - 0.1 * v + theta[2] * (i < 100)
        x, v = x + 0.01 * v, v + 0.01 * a
    return x * x + v * v


def test_a_second_phase_of_the_loop_is_said_with_the_line_where_it_parts():
    """A push for the first 100 steps, then none: the steps record other ops, two
    stretches, of which the program compiles one; explain names both, the line where
    their steps part, and how to make them one loop (which it then is)."""
    text = at.compile(pushed, THETA).explain(THETA)
    assert "Its loop: 200 repetitions of 9 instructions" in text
    assert "Before it, another stretch repeats: 98 repetitions of 9 instructions " \
           f"(test_explain.py, lines {_line(pushed, 'push = theta')}-" in text \
        or "Before it, another stretch repeats: 98 repetitions of 9 instructions " \
           f"(test_explain.py, lines {_line(pushed, 'the push')}-" in text
    assert "on the interpreter (a program compiles one loop)" in text
    assert f"part from the loop's at test_explain.py, line {_line(pushed, 'the push')} " \
           "(`a = -at.sin(x)" in text
    assert "(`p[3] * (i < 40)`)" in text
    one = at.compile(pushed_by_arithmetic, THETA).explain(THETA)
    assert "Its loop: 299 repetitions" in one and "another stretch" not in one
    value, grad = at.compile(pushed, THETA).value_and_grad(THETA)
    again, grad_again = at.compile(pushed_by_arithmetic, THETA).value_and_grad(THETA)
    np.testing.assert_allclose(grad.numpy(), grad_again.numpy(), rtol=1e-12)
