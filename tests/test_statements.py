"""The CPU generator's statement tree: loops keep their structure until rendered, and the
names each statement binds are fields, not parsed from text."""

import pytest

from lowering.numba_cpu.passes import propagate
from lowering.numba_cpu.statements import Assign, Block, Code, Loop, assigned, names, render


def build(*entries):
    code = Code()
    for depth, statement in entries:
        code.add(statement, depth)
    return code.items


def test_counted_loops_render_as_while_and_single_steps_as_their_body():
    items = build((1, Loop("i0", 3)), (2, Loop("i1", 1)), (3, "v2[3 * i0 + i1] = v1[3 * i0 + i1]"),
                  (1, Loop("k", -1, start=4, step=-1)), (2, Assign("s", "s + 1.0")))
    assert render(items) == [
        "    i0 = 0",
        "    while i0 < 3:",
        "        i1 = 0",  # the counter of a one-step loop is bound, its body lifted
        "        o0 = 3 * i0 + i1",
        "        v2[o0] = v1[o0]",
        "        i0 += 1",
        "    k = 4",
        "    while k > -1:",
        "        s = s + 1.0",
        "        k += -1",
    ]


def test_innermost_loops_bind_repeated_offsets_once():
    items = build((1, Loop("i0", 8)), (2, "v3[i0 + 2] = v1[i0 + 2] * v2[i0 + 2]"))
    assert render(items) == ["    i0 = 0", "    while i0 < 8:", "        o0 = i0 + 2",
                             "        v3[o0] = v1[o0] * v2[o0]", "        i0 += 1"]


def test_loops_with_expression_bounds_stay_range_loops():
    items = build((1, Loop("r", "n", start=0, step=4)), (2, "pass"))
    assert render(items)[0] == "    for r in range(0, n, 4):"


def test_blocks_nest_and_an_empty_body_is_pass():
    items = build((1, Block("while True:", loops=True)), (2, Block("if not go:")), (3, "break"),
                  (2, Assign(("a", "b"), "b, a")), (1, Block("if q:")), (1, Block("else:")),
                  (2, Assign("x", "1.0")))
    assert render(items) == ["    while True:", "        if not go:", "            break",
                             "        a, b = b, a", "    if q:", "        pass", "    else:",
                             "        x = 1.0"]
    assert assigned(items) == {"a", "b", "x"}
    assert {"go", "q", "a", "b", "x"} <= names(items)


def test_a_statement_under_no_block_is_refused():
    with pytest.raises(AssertionError, match="under no block"):
        build((1, "x = 1"), (3, "y = 2"))


# -- copies read in place (passes.propagate) --------------------------------------------------


def test_copies_and_literals_are_read_in_place_and_their_names_dropped():
    items = [Assign("x1", "_arg(args, 0, 0, np.float64)"), Assign("x2", "x1"), Assign("x3", "x2"),
             Assign("c", "-0.5"), Assign("x4", "x3[0] ** 2 * c")]
    assert render(propagate(items)) == ["    x1 = _arg(args, 0, 0, np.float64)",
                                         "    x4 = x1[0] ** 2 * (-0.5)"]


def test_a_loop_of_one_step_is_its_body_with_the_counter_zero():
    items = build((1, Assign("x1", "_arg(args, 0, 0, np.float64)")), (1, Loop("i0", 1)),
                  (2, "x1[i0] = 1.0"))
    assert render(propagate(items)) == ["    x1 = _arg(args, 0, 0, np.float64)",
                                        "    x1[0] = 1.0"]


def test_names_rebound_or_read_before_their_copy_stay():
    """A swapped pair (a double buffer), a copy whose source is rebound later in a loop,
    and a name read around a loop before its copy is made keep their assignments."""
    items = build(
        (1, Assign("a", "_arg(args, 0, 0, np.float64)")),
        (1, Assign("b", "_arg(args, 1, 0, np.float64)")),
        (1, Assign("s", "0.0")),
        (1, Block("while True:", loops=True)),
        (2, Assign("p", "a")),          # a is rebound below: p keeps this iteration's a
        (2, Assign(("a", "b"), "b, a")),
        (2, "a[0] = p[0] + s"),
        (2, Assign("s", "s + 1.0")),    # s is rebound: not a literal
        (2, Assign("t", "q")),          # q is bound after this copy (loop-carried): kept
        (2, Assign("q", "a")),
        (2, "b[1] = t[0] + q[0]"))
    text = render(propagate(items))
    assert "        p = a" in text and "        a[0] = p[0] + s" in text
    assert "        t = q" in text and "    s = 0.0" in text
    assert "        b[1] = t[0] + q[0]" in text


def test_a_copy_made_in_a_block_is_read_in_place_only_inside_it():
    items = build((1, Assign("x1", "_arg(args, 0, 0, np.float64)")),
                  (1, Block("if x1[0] > 0:")), (2, Assign("x2", "x1")), (2, "x2[0] = 0.0"),
                  (1, "x1[1] = x2[0]"))
    assert render(propagate(items)) == [
        "    x1 = _arg(args, 0, 0, np.float64)", "    if x1[0] > 0:", "        x2 = x1",
        "        x1[0] = 0.0", "    x1[1] = x2[0]"]


def test_short_loops_of_plain_statements_are_written_out_with_literal_indices():
    items = build((1, Assign("x1", "_arg(args, 0, 0, np.float64)")),
                  (1, Loop("i0", 2)), (2, "x1[2 * i0 + 1] = x1[2 * i0]"),
                  (1, Loop("i1", 5)), (2, "x1[i1] = 0.0"),          # too many steps
                  (1, Loop("i2", 2)), (2, Loop("i3", 3)), (3, "x1[i2 + i3] = 1.0"))  # a nest
    assert render(propagate(items)) == [
        "    x1 = _arg(args, 0, 0, np.float64)",
        "    x1[1] = x1[0]",
        "    x1[3] = x1[2]",
        "    i1 = 0", "    while i1 < 5:", "        x1[i1] = 0.0", "        i1 += 1",
        "    i2 = 0", "    while i2 < 2:",
        "        x1[i2 + 0] = 1.0", "        x1[i2 + 1] = 1.0", "        x1[i2 + 2] = 1.0",
        "        i2 += 1"]


def test_copies_bound_in_exclusive_branches_are_read_in_place_in_each():
    # a cond region's branches: each binds its own literal and alias of one name
    items = build((1, Assign("w", "_arg(args, 3, 0, np.float64)")), (1, Block("if q == 0:")),
                  (2, Assign("c", "1.0")), (2, Assign("v", "w")), (2, "r[0] = c + v[0]"),
                  (1, Block("elif q == 1:")), (2, Assign("c", "2.0")), (2, "r[1] = c"),
                  (1, Block("else:")), (2, Assign("w", "_offset(w, 4)")), (2, Assign("v", "w")),
                  (2, "r[2] = v[1]"))
    assert render(propagate(items)) == [
        "    w = _arg(args, 3, 0, np.float64)",
        # ``w`` is bound again in the last branch (the counts are the function's): the
        # aliases of it stay
        "    if q == 0:", "        v = w", "        r[0] = 1.0 + v[0]",
        "    elif q == 1:", "        r[1] = 2.0",
        "    else:", "        w = _offset(w, 4)", "        v = w", "        r[2] = v[1]"]


def test_a_name_bound_in_a_branch_and_after_it_is_not_a_copy():
    items = build((1, Block("if q:")), (2, Assign("c", "1.0")), (2, "r[0] = c"),
                  (1, Assign("c", "2.0")), (1, "r[1] = c"))
    assert render(propagate(items)) == ["    if q:", "        c = 1.0", "        r[0] = c",
                                        "    c = 2.0", "    r[1] = c"]
