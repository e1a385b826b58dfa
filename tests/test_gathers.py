"""Index maps read through one another (lowering/loopnest/gathers.py): ``pad`` and
``concatenate`` are guarded reads in the loops that read them, and an index map of an index map
gathers from the first one's sources, so a ``roll`` (slices and a concatenate), its transpose
(pads) or a stencil built of shifted copies costs no pass over memory of its own.

Checked against the reference interpreter, each compiled program called twice: pads of every
kind (low, high, interior, negative widths), concatenates of two to eleven operands along
each axis, chains of maps of maps, their gradients, in a ``scan``, in tile loops over a batch
axis (where a map that moves rows must keep the loop from tiling), and float32.
"""

import numpy as np
import pytest

import quabla as qb
from quabla import ops as qb_ops
from quabla.core.interpret import evaluate
from lowering.loopnest.schedule import Group, TileBegin, schedule
from lowering.numba_cpu import compile_graph, module_source

TOL = {np.float64: dict(rtol=1e-10, atol=1e-12), np.float32: dict(rtol=2e-5, atol=2e-6)}


def _check(fn, *args, dtype=np.float64):
    """``jit(fn)`` compiled for ``args`` (cast to ``dtype``), called twice, against the
    interpreter; returns the graph."""
    args = [qb.array(np.asarray(a, dtype)) for a in args]
    graph = qb.jit(fn).lower(*args).graph
    values = [np.asarray(a) for a in args]
    expected = evaluate(graph, values)
    executable = compile_graph(graph, {})
    first, again = executable(*values), executable(*values)
    for a, b, e in zip(first, again, expected):
        assert a.dtype == e.dtype and a.shape == e.shape
        np.testing.assert_allclose(a, e, **TOL[dtype])
        np.testing.assert_array_equal(a, b)
    return graph


def _pad(x, low, high, interior=None):
    return qb_ops.bind("pad", x, low=tuple(low), high=tuple(high),
                       interior=tuple(interior or (0,) * len(low)))


def _stencil(u, k):
    return u + 0.1 * k * (qb.roll(u, 1) - 2.0 * u + qb.roll(u, -1))


def _with_gradient(fn):
    """``fn``'s value and the gradient of the sum of its sine w.r.t. every argument."""
    def both(*args):
        loss = lambda *a: qb.sum(qb.sin(fn(*a)))  # noqa: E731
        return fn(*args), qb.grad(loss, argnums=tuple(range(len(args))))(*args)
    return both


RNG = np.random.default_rng(5)
M35, M24, V9 = RNG.uniform(-1, 1, (3, 5)), RNG.uniform(-1, 1, (2, 4)), RNG.uniform(-1, 1, 9)

PROGRAMS = {
    "roll-stencil": (_stencil, (V9, RNG.uniform(0.5, 1.5, 9))),
    "roll-2d-both-axes": (lambda x: qb.roll(x, 2, axis=1) * qb.roll(x, -1, axis=0)
                          + qb.roll(x, (1, 3), axis=(0, 1)), (M35,)),
    "pad-low-high": (lambda x: qb.exp(_pad(x, (1, 2), (2, 0))), (M35,)),
    "pad-interior": (lambda x: _pad(x, (0, 1), (1, 1), (2, 1)) * 3.0, (M24,)),
    "pad-negative-widths": (lambda x: _pad(x, (-1, 2), (1, -2), (0, 1)) + 1.0, (M35,)),
    "pad-of-pad-of-slice": (lambda x: _pad(_pad(x[:, 1::2], (1, 0), (0, 1)), (0, 2), (1, 1),
                                           (1, 0)) - 0.5, (M35,)),
    "concatenate-axis-0": (lambda x, y: qb.tanh(qb.concat([x, y[:1] * 2.0, x[::-1]], axis=0)),
                           (M35, M35)),
    "concatenate-axis-1": (lambda x, y: qb.concat([y, x.T, y[:, ::-1]], axis=1) ** 2,
                           (M35[:, :2], M35[:2])),
    "stack-eleven": (lambda v: qb.stack([v[k:k + 3] * (k + 1) for k in range(11)]) + v[0],
                     (RNG.uniform(-1, 1, 13),)),
    "maps-of-maps": (lambda x: qb.transpose(qb.concat(
        [_pad(x, (1, 0), (0, 1)), qb.broadcast_to(x[None, :, 0], (4, 3))[::-1]],
        axis=1))[::2, 1:], (M35,)),
    "concatenate-of-pads": (lambda v: qb.concat([_pad(v, (2,), (0,)), _pad(v[::-1], (0,), (3,)),
                                                 v[2:4]]) * qb.sum(v), (V9,)),
}


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_index_maps_read_through_each_other(name, dtype):
    fn, args = PROGRAMS[name]
    _check(_with_gradient(fn), *args, dtype=dtype)


def test_a_roll_stencil_stores_no_shifted_copy():
    """The stencil step and its gradient: no pad, concatenate or slice has a buffer, and the
    step is one loop."""
    fn, args = PROGRAMS["roll-stencil"]
    graph = _check(_with_gradient(fn), *args)
    statements = schedule(graph)
    maps = {"pad", "concatenate", "slice"}
    assert any(graph.nodes[m].op in maps for st in statements if isinstance(st, Group)
               for m in st.members) or not any(n.op in maps for n in graph.nodes)
    for st in statements:
        if isinstance(st, Group):
            assert not {graph.nodes[m].op for m in st.materialized} & maps, st
    step = qb.jit(fn).lower(*[qb.array(a) for a in args]).graph
    assert [type(st) for st in schedule(step) if isinstance(st, Group)
            or step.nodes[st.nid].op != "constant"] == [Group]


def test_a_scan_of_roll_stencils():
    """Heat steps by ``scan`` (the carry read shifted by rolls every step), and the gradient
    of the final misfit w.r.t. the diffusivities (pads of the cotangent, backwards)."""
    u0, k = RNG.uniform(0, 1, 16), RNG.uniform(0.5, 1.5, 16)

    def misfit(k, u0):
        u, us = qb.scan(lambda u, i: (_stencil(u, k), qb.roll(u, 3)[:4] * i), u0, length=7)
        return qb.sum(u ** 2) + qb.sum(us)
    _check(qb.value_and_grad(misfit, argnums=(0, 1)), k, u0)
    _check(qb.value_and_grad(misfit, argnums=(0, 1)), k, u0, dtype=np.float32)


TILE_PROGRAMS = {
    # rows kept: the tile loop runs, each map reading rows of the tile
    "roll-along-rows": lambda x, w: qb.roll(x, 1, axis=1) * w[None, :] + qb.roll(x, -2, axis=1),
    "pad-and-concatenate-of-a-tile-and-a-full-array": lambda x, w: qb.concat(
        [_pad(qb.tanh(x), (0, 1), (0, 0))[:, :4], qb.broadcast_to(w[:3], (64, 3)).T.T,
         qb.broadcast_to(w[None, ::-1], (64, 5))], axis=1),
    # rows moved: a map of the tile's array across its rows (cannot run tile by tile)
    "rows-reversed": lambda x, w: qb.tanh(x)[::-1] * 2.0 + w[None, :],
    "rows-rolled": lambda x, w: qb.roll(qb.tanh(x), 1, axis=0) + w,
    "rows-padded": lambda x, w: _pad(qb.tanh(x), (1, 0), (0, 0))[:64] * w,
}


@pytest.mark.parametrize("name", sorted(TILE_PROGRAMS))
def test_index_maps_in_tile_loops(name):
    """A batch of 64 rows whose products run in tiles: maps that keep rows in place read the
    tile's arrays at the tile's rows and full arrays at the global row; maps that move rows
    read what the whole array holds."""
    rng = np.random.default_rng(8)
    x, w, m = rng.uniform(-1, 1, (64, 5)), rng.uniform(-1, 1, 5), rng.uniform(-1, 1, (5, 3))
    fn = TILE_PROGRAMS[name]

    def program(x, w, m):
        h = qb.tanh(x @ m) @ m.T  # products of the batch: what makes tiles worth having
        return _with_gradient(fn)(h, w)
    graph = _check(program, x, w, m)
    tiled = any(isinstance(st, TileBegin) for st in schedule(graph))
    assert tiled or name.startswith("rows-")


def test_guarded_reads_translate_without_numba():
    """A pad with interior (integer ``//`` and ``%`` of the index by a constant) and a
    concatenate's comparisons are in the part of generated code translated straight to LLVM."""
    from lowering.numba_cpu import direct
    def fn(x):
        return _pad(x, (1, 0), (0, 2), (1, 2)) + qb.sum(qb.concat([x, x[:, ::-1]], axis=1)[:, :5])
    graph = qb.jit(_with_gradient(fn)).lower(qb.array(M35)).graph
    sources = module_source(graph)[0]
    assert any(" % " in s and " // " in s for s in sources)
    for source in sources:
        direct.translate(source, "f")


def test_a_stencil_loop_is_split_where_its_guards_change():
    """The roll stencil's loop runs as three loops, the first and last index and the middle,
    none with a guard; eleven pieces along one axis would need too many: guards stay, as
    selects of clamped reads."""
    fn, args = PROGRAMS["roll-stencil"]
    graph = qb.jit(_with_gradient(fn)).lower(*[qb.array(a) for a in args]).graph
    (source,) = module_source(graph)[0]
    assert " if " not in source and "_where(" not in source
    assert source.count("    i0 = 1\n    while i0 < 8:") == 2  # the middles, forward and back
    fn, args = PROGRAMS["stack-eleven"]
    graph = qb.jit(fn).lower(*[qb.array(a) for a in args]).graph
    assert any("_where(" in s for s in module_source(graph)[0])
    fn, args = PROGRAMS["roll-2d-both-axes"]  # the rows' guards: selects, the columns split
    graph = qb.jit(_with_gradient(fn)).lower(*[qb.array(a) for a in args]).graph
    source = "".join(module_source(graph)[0])
    assert "_where(i0 < " in source and "_where(i1" not in source
