"""The CPU generator's statement tree: loops keep their structure until rendered, and the
names each statement binds are fields, not parsed from text."""

import pytest

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
