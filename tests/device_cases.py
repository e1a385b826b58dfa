"""The device parity corpus: small float32 programs covering every primitive, transformed
programs (grad, jvp, vjp, vmap, jacobian, hessian) and control-flow regions (cond, scan,
fori_loop, while_loop, checkpoint), for every back end.

``cases()`` lists ``Case(name, fn, args)``; ``check(device, case)`` lowers ``jit(fn)`` for the
case's arguments, compiles the graph on ``device`` with ``lowering.compile``, calls the
executable twice and compares both results with the NumPy interpreter within float32
tolerance. The primitive cases are those of ``test_rules`` (whose coverage test makes every
differentiable primitive have one), each staged with its gradient as ``test_backend_parity``
does; so a new primitive joins this corpus with its rule-test case.
"""

import warnings
from typing import NamedTuple

import numpy as np

import quabla as qb
from helpers import mlp_net
from quabla.lower import compile_graph as lower_compile
from quabla.core.interpret import evaluate
from quabla import ops as qb_ops
from test_rules import CASES, NONDIFF_CASES

# float32 results of a device against the interpreter's (transcendental functions of device
# libraries differ by a few ulps, and gradients compound that)
TOL = dict(rtol=2e-4, atol=2e-5)


class Case(NamedTuple):
    name: str
    fn: object      # a function of ``args`` (pytrees of float32 arrays)
    args: tuple


def _f32(values):
    return tuple(qb.array(np.asarray(v), dtype=qb.float32) for v in values)


def _with_gradient(fn):
    """``fn`` and the gradient of a smooth scalar of it, in one program."""
    def both(*args):
        out = fn(*args)
        grads = qb.grad(lambda *a: qb.sum(qb.sin(fn(*a))), argnums=tuple(range(len(args))))(*args)
        return out, grads
    return both


def first_primitive_cases(rng):
    """The first case of each primitive (with its gradient) of ``primitive_cases``."""
    seen = set()
    for case in primitive_cases(rng):
        primitive = case.name.split("-")[0]
        if primitive not in seen:
            seen.add(primitive)
            yield case


def primitive_cases(rng):
    out = []
    for name, group in sorted(CASES.items()):
        for i, case in enumerate(group):
            out.append(Case(f"{name}-{case.name or i}", _with_gradient(case.fn),
                            _f32(case.args(rng))))
    for name, fn in sorted(NONDIFF_CASES.items()):
        out.append(Case(name, fn, _f32([rng.uniform(0.1, 2.0, (2, 3)),
                                         rng.uniform(-1, 1, (2, 3))])))
    return out


def _special_values(x):
    """IEEE corner cases every back end must give as the interpreter does."""
    return (qb.relu(x), qb.maximum(x, 0.0), qb.minimum(x, 1.0), qb.sign(x), qb.sqrt(x),
            qb.log(x), x ** 0.5, qb.tanh(x), qb.sigmoid(x), qb.softplus(x), qb.isnan(x),
            qb.isfinite(x), qb.max(x), qb.min(x[1:]), qb.abs(x) ** 2.0)


def _mlp_params(rng, width=8):
    return {"W1": rng.normal(size=(1, width)), "b1": rng.normal(size=width),
            "W2": rng.normal(size=(width, width)) / 3, "b2": rng.normal(size=width),
            "W3": rng.normal(size=(width, 1)) / 3, "b3": rng.normal(size=1)}


def _pinn_loss(p, x):
    u_xx = qb.vmap(qb.grad(qb.grad(lambda t: mlp_net(p, t))))
    return qb.mean((u_xx(x) + qb.sin(3.0 * x)) ** 2)


def _energy(x):
    """A Lennard-Jones-like pair energy of points on a line (all pairs by broadcasting)."""
    d = x[:, None] - x[None, :] + qb.eye(x.shape[0], dtype=x.dtype)
    r2 = d * d
    return qb.sum(1.0 / r2 ** 6 - 2.0 / r2 ** 3) * 0.5


def _transformed_cases(rng):
    f = lambda x: qb.sum(qb.tanh(x) * x[::-1]) + qb.max(x)
    vec = lambda x: qb.tanh(x[:, None] * x[None, :]) @ x
    params = {k: qb.array(v, dtype=qb.float32) for k, v in _mlp_params(rng).items()}
    x5, v5 = _f32([rng.uniform(-1, 1, 5), rng.uniform(-1, 1, 5)])
    spd = rng.uniform(-0.5, 0.5, (3, 3)) + 3.0 * np.eye(3)
    return [
        Case("grad", qb.grad(f), (x5,)),
        Case("value_and_grad-energy", qb.value_and_grad(_energy),
             _f32([np.array([0.0, 1.1, 2.05, 3.2])])),
        Case("jvp", lambda x, v: qb.jvp(vec, (x,), (v,)), (x5, v5)),
        Case("vjp", lambda x, v: qb.vjp(vec, x)[1](v), (x5, v5)),
        Case("vmap-solve", qb.vmap(qb.solve, in_axes=(None, 0)),
             _f32([spd, rng.uniform(-1, 1, (4, 3))])),
        Case("vmap-grad", qb.vmap(qb.grad(f)), _f32([rng.uniform(-1, 1, (3, 5))])),
        Case("jacobian-forward", qb.jacobian(vec), (x5,)),
        Case("jacobian-reverse", qb.jacobian(lambda x: qb.sum(vec(x) ** 2, axis=0, keepdims=True)),
             (x5,)),
        Case("hessian", qb.hessian(lambda x: qb.sum(qb.sin(x) * x[0] + qb.exp(x * x[1]))),
             _f32([[0.3, -0.7, 1.1]])),
        Case("pinn-value_and_grad", qb.value_and_grad(_pinn_loss),
             (params, qb.linspace(0.0, 1.0, 4, dtype=qb.float32))),
        Case("special-values", _special_values,
             _f32([np.array([np.nan, np.inf, -np.inf, -0.0, 0.0, 1.5, -2.0])])),
        Case("dot_general-batched-free", lambda a, b: qb_ops.dot_general(
            a, b, ((2,), (1,)), ((0,), (0,))), _f32([rng.uniform(-1, 1, (2, 3, 4)),
                                                     rng.uniform(-1, 1, (2, 4, 3))])),
        Case("reduce-all-axes", lambda x: (qb.sum(x), qb.max(x, axis=(0, 2)), qb.mean(x, axis=1)),
             _f32([rng.uniform(-1, 1, (2, 3, 4))])),
    ]


def _cumulative(x):
    """scan: running sums and the row read at the loop index (dynamic_index)."""
    return qb.scan(lambda c, i: (c + x[i], c * x[i]), qb.zeros(x.shape[1:], dtype=x.dtype),
                   length=x.shape[0])


def _newton_sqrt(a):
    """while_loop: Newton's iteration for sqrt(a) until it is converged."""
    def step(c):
        x, n = c
        return 0.5 * (x + a / x), n + 1.0
    return qb.while_loop(lambda c: qb.max(qb.abs(c[0] * c[0] - a)) > 1e-5, step, (a, 0.0))


def _branches(x):
    """cond on a traced predicate, one branch holding a loop."""
    looped = lambda x: qb.fori_loop(0, 3, lambda i, c: qb.sin(c) + i, x)
    return (qb.cond(qb.sum(x) > 0.0, lambda x: x * 2.0, qb.cos, x),
            qb.cond(qb.sum(x) < 0.0, looped, lambda x: x - 1.0, x))


def _control_cases(rng):
    x = _f32([rng.uniform(-1, 1, (4, 3))])
    return [
        Case("scan", _cumulative, x),
        Case("fori_loop", lambda y: qb.fori_loop(0, 4, lambda i, c: qb.tanh(c) * y + i, y),
             _f32([rng.uniform(-1, 1, 3)])),
        Case("while_loop", _newton_sqrt, _f32([rng.uniform(0.5, 2.0, 3)])),
        Case("cond", _branches, _f32([rng.uniform(-1, 1, 3)])),
        Case("cond-vmap", qb.vmap(lambda x: qb.cond(x[0] > 0.0, qb.exp, lambda y: -y, x)),
             _f32([rng.uniform(-1, 1, (4, 2))])),
        Case("dynamic_update_add", qb.grad(lambda x, i: qb.sum(qb.sin(x[i])), argnums=0),
             _f32([rng.uniform(-1, 1, (3, 2)), 1.0])),
        Case("remat-value_and_grad", qb.value_and_grad(_checkpointed_layers),
             _f32([rng.uniform(-1, 1, (3, 3)), rng.uniform(-1, 1, (2, 3))])),
    ]


def _checkpointed_layers(w, x):
    """checkpoint: reverse mode recomputes each layer's forward values in a remat region."""
    layer = qb.checkpoint(lambda w, x: qb.tanh(qb.tanh(x @ w) @ w))
    return qb.sum(layer(w, layer(w, x)) ** 2)


def _math_special_values(x):
    """Issue 24's elementwise math at IEEE corner cases (ops whose scalar code never calls a
    Python ``math`` function outside its domain, as the CUDA simulator runs it)."""
    return (qb.floor(x), qb.ceil(x), qb.round(x), qb.isinf(x), qb.arctan(x), qb.sinh(x),
            qb.cosh(x), qb.arcsinh(x), qb.exp2(x), qb.cbrt(x), x % 1.5, x // 1.5,
            qb.clip(x, -1.0, 2.0), qb.nan_to_num(x), qb.isclose(x, 1.5),
            qb.logaddexp(x, 0.5), qb.special.erf(x), qb.special.erfc(x),
            qb.special.erfinv(x * 0.5), qb.special.ndtri(x * 0.25 + 0.5),
            qb.special.digamma(x), qb.special.polygamma(1, x), qb.special.xlogy(x, 2.0))


def _math_cases(rng):
    return [Case("math-special-values", _math_special_values,
                 _f32([np.array([np.nan, np.inf, -np.inf, -0.0, 0.0, 1.5, -2.0, 2.5, -0.5])]))]


def _indexing(x, i, v):
    """Issue 24's indexing forms with traced indices (out of range, negative and repeated
    ones): gathers, scatters of every mode (dropped, clamped and repeated updates, the last
    ``set`` winning), take with its NaN fill, dynamic slices and a traced qb.array."""
    j = i[:2]
    return (x[i], x[:, j], x[i, j[:, None]], x.at[i].add(v), x.at[i].set(v),
            x.at[i].set(v, mode="clip"), x.at[:, j].multiply(v[0, :2]),
            x.at[i].min(v, mode="clip"), x.at[i].max(v), qb.take(x, i, axis=1),
            qb.take_along_axis(x, qb.stack([i, -i]), axis=0),
            qb.dynamic_slice(x, (i[0], i[1]), (2, 2)),
            qb.dynamic_update_slice(x, v[:2, :2], (i[2], i[0])),
            qb.array([x[0, 0], 1.0, i[0]]))


def _indexing_gradients(x, i, v):
    def scalar(x, v):
        outs = _indexing(x, i, v)
        return sum(qb.sum(qb.sin(qb.nan_to_num(o))) for o in outs)
    return qb.grad(scalar, argnums=(0, 1))(x, v)


def _indexing_cases(rng):
    args = _f32([rng.uniform(-1, 1, (4, 3)), np.array([2.0, -1.0, 2.0]),
                 rng.uniform(-1, 1, (3, 3))])
    wild = _f32([rng.uniform(-1, 1, (4, 3)), np.array([5.0, -7.0, 1.5]),
                 rng.uniform(-1, 1, (3, 3))])
    return [Case("indexing", _indexing, args), Case("indexing-grad", _indexing_gradients, args),
            Case("indexing-out-of-range", _indexing, wild),
            Case("scatter-set-repeated", lambda x, i, v: qb_ops.bind(
                "scatter", x, i, v, batch_dims=1, mode="set"),
                _f32([rng.uniform(-1, 1, (2, 3, 2)), np.array([[0.0, 2.0, 0.0, 0.0, 1.0],
                                                               [2.0, 2.0, -1.0, 1.0, 2.0]]),
                      rng.uniform(-1, 1, (2, 5, 2))]))]


def _stencil(u, k):
    """A periodic Laplacian step by rolls: slices, a concatenate and (its gradient) pads,
    read through one another in one loop (lowering/loopnest/gathers.py)."""
    return u + 0.1 * k * (qb.roll(u, 1) - 2.0 * u + qb.roll(u, -1))


def _mapped(x):
    """Maps of maps: a pad with interior and negative widths, a concatenate of four, a
    transpose and slices of them."""
    padded = qb_ops.bind("pad", x, low=(1, -1), high=(0, 2), interior=(0, 1))  # (4, 8)
    column = qb.concat([x[:, ::-1][:, :1], padded[:1, :1] * 3.0], axis=0)
    joined = qb.concat([padded, column, padded[:, 2:5],
                        qb.broadcast_to(x[None, 0, :3], (4, 3))], axis=1)[::-1]
    return qb.transpose(joined)[1::2] * 2.0


def _stencil_2d(u, k):
    """A 2D Laplacian of a zero-padded grid by slices (sunk into pads by the rewriter) and a
    periodic one by rolls along the rows: guards along the rows, which no loop split decides,
    are selects of clamped reads (``_where``)."""
    p = qb.pad(u, 1)
    lap = p[2:, 1:-1] + p[:-2, 1:-1] + p[1:-1, 2:] + p[1:-1, :-2] - 4.0 * u
    return u + k * lap + qb.roll(u, 1, axis=0) * qb.roll(u, -2, axis=0)


def _gather_cases(rng):
    return [Case("roll-stencil", _with_gradient(_stencil),
                 _f32([rng.uniform(-1, 1, 8), rng.uniform(0.5, 1.5, 8)])),
            Case("maps-of-maps", _with_gradient(_mapped), _f32([rng.uniform(-1, 1, (3, 4))])),
            Case("stencil-2d", _with_gradient(_stencil_2d),
                 _f32([rng.uniform(-1, 1, (5, 6)), rng.uniform(0.5, 1.5, (5, 6))]))]


def cases():
    """Every case of the corpus, with fixed data."""
    rng = np.random.default_rng(11)
    return (primitive_cases(rng) + _transformed_cases(rng) + _control_cases(rng)
            + _math_cases(rng) + _indexing_cases(rng) + _gather_cases(rng))


def check(device, case, tol=TOL):
    """Compile ``case`` on ``device`` and compare two calls with the interpreter."""
    leaves = qb.tree.flatten(case.args)[0]
    graph = qb.jit(case.fn).lower(*case.args).graph
    values = [np.asarray(leaf) for leaf in leaves]
    expected = evaluate(graph, values)
    with warnings.catch_warnings():  # float64 inside a float32 case (cast) may warn
        warnings.simplefilter("ignore", RuntimeWarning)
        executable = lower_compile(graph, device)
    for _ in range(2):
        actual = executable(*values)
        assert len(actual) == len(expected), case.name
        for i, (a, e) in enumerate(zip(actual, expected)):
            a = np.asarray(a)
            where = f"{case.name} on {device}: output {i}"
            assert a.dtype == e.dtype and a.shape == e.shape, (
                f"{where} is {a.dtype}{list(a.shape)}, expected {e.dtype}{list(e.shape)}")
            if a.dtype == np.bool_:
                np.testing.assert_array_equal(a, e, err_msg=where)
            else:
                np.testing.assert_allclose(a, e, err_msg=where, **tol)
