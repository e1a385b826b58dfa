"""Solvers on pytrees, as JAX's take them: ``linalg.cg``/``gmres`` (``b``, positional ``x0``,
three kinds of operator), ``newton`` and ``odeint`` (with ``hmax``) on dicts, lists, tuples and
NamedTuples of arrays of mixed shapes, eagerly and under ``jit``, with derivatives; and
``odeint`` under a trace with times that decrease (NaN and a failure ``info``, never a silent
success), on every device and on the interpreter.

Values against closed forms and the single-array form (the pytree raveled by hand), against
finite differences, and against JAX (x64) where installed.
"""

from typing import NamedTuple

import numpy as np
import pytest

import quabla as qb
from quabla.solvers import ConvergenceError

RNG = np.random.default_rng(11)
N = 7  # b's leaves: 3 + 2 x 2
_Q = RNG.normal(size=(N, N))
SPD = _Q @ _Q.T + N * np.eye(N)
NONSYM = SPD + 2.0 * RNG.normal(size=(N, N))
WEIGHTS = np.linspace(1.0, 2.0, N)


class Pair(NamedTuple):
    head: object
    tail: object


def _tree(v, kind):
    """The vector ``v`` [..., 7] as a pytree of ``kind`` with leaves [3] and [2, 2]."""
    v = qb.asarray(v)
    lead = tuple(v.shape[:-1])
    head, tail = v[..., :3], qb.reshape(v[..., 3:], lead + (2, 2))
    return {"dict": {"u": head, "w": tail}, "list": [head, tail], "tuple": (head, (tail,)),
            "namedtuple": Pair(head, tail)}[kind]


def _vector(tree):
    """The inverse of ``_tree``: the leaves raveled, in flatten order."""
    return np.concatenate([np.asarray(x).reshape(-1) for x in qb.tree.leaves(tree)])


def _operator(matrix, s=0.0):
    """``x -> (matrix + s I) x`` on pytrees like ``_tree``'s, coupling the leaves."""
    def apply(x):
        kind = {dict: "dict", list: "list", tuple: "tuple", Pair: "namedtuple"}[type(x)]
        leaves = qb.tree.leaves(x)
        v = qb.concat([leaves[0], qb.reshape(leaves[1], (4,))])
        return _tree(qb.matmul(matrix, v) + s * v, kind)
    return apply


class Operator:
    """An operator given as an object with ``@``."""

    def __init__(self, fun):
        self.fun = fun

    def __matmul__(self, x):
        return self.fun(x)


B = RNG.normal(size=N)
KINDS = ["dict", "list", "tuple", "namedtuple"]
SOLVERS = {"cg": (qb.linalg.cg, SPD),
           "gmres": (lambda A, b, *a, **kw: qb.linalg.gmres(A, b, *a, restart=4, **kw), NONSYM)}


def fd(fun, x, eps=1e-6):
    """Central differences of a scalar function of a float or an array."""
    x = np.asarray(x, float)
    out = np.zeros(x.shape)
    for idx in np.ndindex(x.shape):
        e = np.zeros(x.shape)
        e[idx] = eps
        out[idx] = (fun(x + e) - fun(x - e)) / (2 * eps)
    return out


@pytest.fixture(scope="module")
def jax():
    jax = pytest.importorskip("jax")
    jax.config.update("jax_enable_x64", True)
    return jax


# -- flatten_util.ravel_pytree -----------------------------------------------------------------------------------

def test_ravel_round_trip_with_mixed_shapes_dtypes_and_leading_axes():
    tree = {"a": qb.ones((2, 3), dtype=qb.float32), "b": [np.arange(2.0), 3.0],
            "c": Pair(qb.array(5.0), qb.full((1,), 2.0, dtype=qb.float32))}
    flat, unravel = qb.flatten_util.ravel_pytree(tree)
    assert flat.dtype is qb.float64 and flat.shape == (11,)  # the widest dtype
    np.testing.assert_array_equal(np.asarray(flat), [1] * 6 + [0, 1, 3, 5, 2])  # flatten order
    back = unravel(flat * 2.0)
    assert qb.tree.structure(back) == qb.tree.structure(tree)
    assert back["a"].dtype is qb.float32 and back["c"].tail.dtype is qb.float32
    np.testing.assert_array_equal(np.asarray(back["b"][0]), [0.0, 2.0])
    stacked = unravel(qb.stack([flat, 3.0 * flat]))  # leading axes go in front of each leaf
    assert stacked["a"].shape == (2, 2, 3) and stacked["b"][1].shape == (2,)
    np.testing.assert_array_equal(np.asarray(stacked["b"][1]), [3.0, 9.0])
    assert qb.flatten_util.ravel_pytree([qb.ones(2, dtype=qb.float32)])[0].dtype is qb.float32
    with pytest.raises(ValueError, match="no leaves"):
        qb.flatten_util.ravel_pytree({})
    with pytest.raises(ValueError, match="last axis of 11"):
        unravel(qb.ones(9))
    # differentiable, and the same under jit
    grad = qb.grad(lambda t: qb.sum(qb.flatten_util.ravel_pytree(t)[0] ** 2))(tree)
    np.testing.assert_array_equal(np.asarray(grad["b"][0]), [0.0, 2.0])
    assert grad["a"].dtype is qb.float32
    jitted = qb.jit(lambda f: unravel(f))(flat)
    np.testing.assert_array_equal(np.asarray(jitted["a"]), np.ones((2, 3)))


def test_ravel_matches_jax(jax):
    from jax.flatten_util import ravel_pytree

    tree = {"b": [np.arange(2.0), np.ones((2, 2))], "a": np.array(3.0)}
    np.testing.assert_array_equal(np.asarray(qb.flatten_util.ravel_pytree(tree)[0]),
                                  np.asarray(ravel_pytree(tree)[0]))


# -- cg / gmres -----------------------------------------------------------------------------------

@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("name", ["cg", "gmres"])
def test_krylov_on_pytrees_eagerly_and_under_jit(name, kind):
    solve, matrix = SOLVERS[name]
    b = _tree(B, kind)
    expected = np.linalg.solve(matrix, B)
    eager = lambda b: solve(_operator(matrix), b, tol=1e-12)  # noqa: E731
    for run in (eager, qb.jit(eager)):
        x, info = run(b)
        assert qb.tree.structure(x) == qb.tree.structure(b)
        np.testing.assert_allclose(_vector(x), expected, atol=1e-10)
        assert float(info) == 0
    # x0 as the third positional argument: starting at the solution takes no step
    x, info = solve(_operator(matrix), b, _tree(expected, kind), tol=1e-8)
    np.testing.assert_allclose(_vector(x), expected, atol=1e-10)
    assert float(info) == 0


def test_cg_operator_kinds_and_preconditioners():
    """``A`` and ``M`` as a function, an object with ``@``, or a matrix (single vector b)."""
    expected = np.linalg.solve(SPD, B)
    inverse_diagonal = np.diag(1.0 / np.diag(SPD))
    for A in (SPD, qb.array(SPD), Operator(lambda v: qb.matmul(SPD, v)),
              lambda v: qb.matmul(SPD, v)):
        for M in (None, inverse_diagonal, Operator(lambda r: r / np.diag(SPD))):
            x, info = qb.linalg.cg(A, B, np.ones(N), tol=1e-12, M=M)
            np.testing.assert_allclose(np.asarray(x), expected, atol=1e-10)
            assert float(info) == 0
    b = _tree(B, "dict")  # an object with @ that takes pytrees, and a pytree preconditioner
    x, info = qb.linalg.cg(Operator(_operator(SPD)), b, tol=1e-12,
                           M=Operator(lambda r: qb.tree.map(lambda v: v * 0.1, r)))
    np.testing.assert_allclose(_vector(x), expected, atol=1e-10)
    # closing over a tracer, under jit
    x, _ = qb.jit(lambda a, b: qb.linalg.cg(Operator(lambda v: qb.matmul(a, v)), b,
                                            tol=1e-12))(SPD, B)
    np.testing.assert_allclose(np.asarray(x), expected, atol=1e-10)


@pytest.mark.parametrize("name", ["cg", "gmres"])
def test_krylov_pytree_gradients_against_the_single_array_form(name):
    solve, matrix = SOLVERS[name]

    def loss(b, s):  # b a pytree; s a parameter of the operator
        x, _ = solve(_operator(matrix, s), b, tol=1e-12)
        return qb.sum(qb.flatten_util.ravel_pytree(x)[0] ** 2 * WEIGHTS)

    def ref(b, s):
        x = np.linalg.solve(matrix + s * np.eye(N), b)
        return np.sum(x * x * WEIGHTS)

    b = _tree(B, "tuple")
    gb, gs = qb.jit(qb.grad(loss, argnums=(0, 1)))(b, qb.array(0.3))
    assert qb.tree.structure(gb) == qb.tree.structure(b)
    np.testing.assert_allclose(_vector(gb), fd(lambda v: ref(v, 0.3), B), atol=1e-7)
    np.testing.assert_allclose(float(gs), fd(lambda s: ref(B, float(s)), 0.3), atol=1e-7)
    if name == "gmres":  # each transform of gmres compiles for seconds: cg covers the rest
        return
    gb, _ = qb.grad(loss, argnums=(0, 1))(b, qb.array(0.3))  # eagerly too
    np.testing.assert_allclose(_vector(gb), fd(lambda v: ref(v, 0.3), B), atol=1e-7)
    # forward mode in b, and vmap over a batch of pytrees
    tangent = qb.jvp(lambda b: solve(_operator(matrix), b, tol=1e-12)[0], (b,),
                     (_tree(np.ones(N), "tuple"),))[1]
    np.testing.assert_allclose(_vector(tangent), np.linalg.solve(matrix, np.ones(N)), atol=1e-9)
    rhs = RNG.normal(size=(3, N))
    xs, infos = qb.vmap(lambda b: solve(_operator(matrix), b, tol=1e-12))(_tree(rhs, "dict"))
    loop = np.linalg.solve(matrix, rhs.T).T
    np.testing.assert_allclose(np.asarray(xs["u"]), loop[:, :3], atol=1e-9)
    np.testing.assert_allclose(np.asarray(xs["w"]).reshape(3, 4), loop[:, 3:], atol=1e-9)
    np.testing.assert_array_equal(np.asarray(infos), 0.0)


def test_krylov_mixed_dtypes_keep_each_leafs_dtype():
    b = {"a": np.array([1.0, 2.0]), "b": np.array([3.0, 4.0], dtype=np.float32)}
    scale = {"a": qb.array([2.0, 4.0]), "b": qb.array([5.0, 8.0], dtype=qb.float32)}
    x, info = qb.linalg.cg(lambda x: qb.tree.map(qb.multiply, x, scale), b, tol=1e-12)
    assert x["a"].dtype is qb.float64 and x["b"].dtype is qb.float32
    np.testing.assert_allclose(np.asarray(x["a"]), [0.5, 0.5])
    np.testing.assert_allclose(np.asarray(x["b"]), [0.6, 0.5], rtol=1e-6)
    assert float(info) == 0


@pytest.mark.parametrize("name", ["cg", "gmres"])
def test_krylov_pytrees_match_jax(jax, name):
    import jax.numpy as jnp
    from jax.scipy.sparse import linalg as jsl

    jsolve = {"cg": jsl.cg, "gmres": lambda A, b, **kw: jsl.gmres(A, b, restart=4, **kw)}[name]
    solve, matrix = SOLVERS[name]

    def jop(x, s):
        v = jnp.concatenate([x["u"], x["w"].reshape(4)])
        w = jnp.asarray(matrix) @ v + s * v
        return {"u": w[:3], "w": w[3:].reshape(2, 2)}

    def jloss(b, s):
        x, _ = jsolve(lambda v: jop(v, s), b, tol=1e-12)
        return jnp.sum(x["u"] ** 2) + jnp.sum(jnp.sin(x["w"]))

    def loss(b, s):
        x, _ = solve(_operator(matrix, s), b, tol=1e-12)
        return qb.sum(x["u"] ** 2) + qb.sum(qb.sin(x["w"]))

    b = {"u": B[:3], "w": B[3:].reshape(2, 2)}
    jb = {k: jnp.asarray(v) for k, v in b.items()}
    np.testing.assert_allclose(float(loss(b, 0.3)), float(jloss(jb, 0.3)), rtol=1e-9)
    ours = qb.grad(loss, argnums=(0, 1))(b, qb.array(0.3))
    theirs = jax.grad(jloss, argnums=(0, 1))(jb, 0.3)
    for k in b:
        np.testing.assert_allclose(np.asarray(ours[0][k]), np.asarray(theirs[0][k]), atol=1e-9)
    np.testing.assert_allclose(float(ours[1]), float(theirs[1]), rtol=1e-7)


def test_krylov_structure_errors_name_both_structures():
    b = _tree(B, "dict")
    with pytest.raises(ValueError, match=r"x0, like b, must be a pytree \{'u': \*, 'w': \*\}.*"
                                         r"got a pytree \[\*, \*\]"):
        qb.linalg.cg(_operator(SPD), b, _tree(B, "list"))
    with pytest.raises(ValueError, match=r"x0.*float64\[2, 2\].*got .*float64\[4\]"):
        qb.linalg.gmres(_operator(NONSYM), b, {"u": B[:3], "w": B[3:]})
    with pytest.raises(TypeError, match=r"cg's A must return a pytree \{'u': \*, 'w': \*\}.*"
                                        r"got one array of \(float64\[3\]\)"):
        qb.linalg.cg(lambda x: x["u"], b)
    with pytest.raises(TypeError, match=r"gmres's M must return a pytree .*got a pytree "
                                        r"\{'u': \*\}"):
        qb.linalg.gmres(_operator(NONSYM), b, M=lambda x: {"u": x["u"]})
    with pytest.raises(ValueError, match=r"matrix operator must be \[n, n\]"):
        qb.linalg.cg(SPD, b)


# -- newton ---------------------------------------------------------------------------------------

def _system(x, p):
    """Root: ``r = sqrt(p["a"])``, ``v = p["c"] / r``, ``m = r * I``."""
    r, (v, m) = x["r"], x["vm"]
    return {"r": r * r - p["a"], "vm": [v * r - p["c"], qb.matmul(m, m) - p["a"] * np.eye(2)]}


def _exact(a, c):
    r = np.sqrt(a)
    return np.concatenate([[r], c / r, (r * np.eye(2)).reshape(-1)])


X0 = {"r": 1.0, "vm": [np.array([1.0, 1.0, 1.0]), np.eye(2) + 0.1]}
P = {"a": 4.0, "c": np.array([1.0, 2.0, 3.0])}


def test_newton_on_a_pytree_eagerly_under_jit_and_its_derivatives():
    for root in (qb.newton(_system, X0, P), qb.jit(lambda p: qb.newton(_system, X0, p))(P)):
        assert qb.tree.structure(root) == qb.tree.structure(X0)
        assert root["vm"][1].shape == (2, 2)
        np.testing.assert_allclose(_vector(root), _exact(4.0, P["c"]), atol=1e-10)

    def loss(p):
        x = qb.newton(_system, X0, p)
        return x["r"] ** 3 + qb.sum(x["vm"][0] * P["c"]) + qb.sum(x["vm"][1])

    def ref(a, c):
        x = _exact(a, c)
        return x[0] ** 3 + np.sum(x[1:4] * P["c"]) + np.sum(x[4:])

    for grad in (qb.grad(loss), qb.jit(qb.grad(loss))):
        g = grad(P)
        np.testing.assert_allclose(float(g["a"]), fd(lambda a: ref(float(a), P["c"]), 4.0),
                                   rtol=1e-7)
        np.testing.assert_allclose(np.asarray(g["c"]), fd(lambda c: ref(4.0, c), P["c"]),
                                   rtol=1e-7)
    # second order, through the implicit rule applied to the raveled system
    h = qb.hessian(lambda a: loss({"a": a, "c": P["c"]}))(qb.array(4.0))
    np.testing.assert_allclose(
        float(h), fd(lambda a: fd(lambda b: ref(float(b), P["c"]), a, 1e-4), 4.0, 1e-4),
        rtol=1e-5)
    # vmap over a parameter
    roots = qb.vmap(lambda a: qb.newton(_system, X0, {"a": a, "c": P["c"]}))(
        np.array([1.0, 9.0]))
    np.testing.assert_allclose(np.asarray(roots["r"]), [1.0, 3.0], atol=1e-10)


def test_newton_pytree_with_float32_leaves_uses_float32s_tolerance():
    x0 = (qb.ones(3, dtype=qb.float32), qb.array(1.0))
    c = np.array([2.0, 3.0, 5.0], dtype=np.float32)
    x = qb.newton(lambda x: (x[0] * x[0] - c, x[1] ** 3 - 8.0), x0)
    assert x[0].dtype is qb.float32 and x[1].dtype is qb.float64
    np.testing.assert_allclose(np.asarray(x[0]), np.sqrt(c), rtol=1e-5)
    np.testing.assert_allclose(float(x[1]), 2.0, rtol=1e-5)


def test_newton_pytree_failure_and_errors():
    x0 = {"p": 2.0, "q": np.array([1.0, 2.0])}
    f = lambda x, c: {"p": x["p"] ** 2 + c, "q": x["q"] - 1.0}  # noqa: E731
    with pytest.raises(ConvergenceError, match="after 5 steps"):
        qb.newton(f, x0, 1.0, maxiter=5)
    x = qb.jit(lambda c: qb.newton(f, x0, c, maxiter=5))(qb.array(1.0))
    assert all(np.isnan(np.asarray(v)).all() for v in qb.tree.leaves(x))  # every leaf
    x, info = qb.jit(lambda c: qb.newton(f, x0, c, maxiter=5, return_info=True))(qb.array(-4.0))
    assert float(info) == 0 and abs(float(x["p"]) - 2.0) < 1e-12
    with pytest.raises(TypeError, match=r"newton's f must return a pytree \{'p': \*, 'q': \*\}"
                                        r".*got a pytree \[\*, \*\]"):
        qb.newton(lambda x: [x["p"], x["q"]], x0)


# -- odeint ---------------------------------------------------------------------------------------

T = np.linspace(0.0, 2.0, 4)


def _oscillator(y, t, w):
    """Two oscillators as ``(position [2], {"v": velocity [2]})``."""
    x, v = y[0], y[1]["v"]
    return (v, {"v": -w * w * x})


def _positions(x0, v0, t, w):
    return x0 * np.cos(w * t)[:, None] + v0 / w * np.sin(w * t)[:, None]


Y0 = (np.array([1.0, 0.5]), {"v": np.array([0.0, 1.0])})


def test_odeint_on_a_pytree_against_the_closed_form():
    exact = _positions(Y0[0], Y0[1]["v"], T, 1.3)
    for ys in (qb.odeint(_oscillator, Y0, T, 1.3),
               qb.jit(lambda y0, w: qb.odeint(_oscillator, y0, T, w))(Y0, qb.array(1.3))):
        assert qb.tree.structure(ys) == qb.tree.structure(Y0)
        assert ys[0].shape == (4, 2) and ys[1]["v"].shape == (4, 2)  # a leading time axis
        np.testing.assert_allclose(np.asarray(ys[0]), exact, atol=1e-7)
    # the single-array form of the same system gives the same steps
    flat = qb.odeint(lambda y, t, w: qb.concat([y[2:], -w * w * y[:2]]),
                     np.concatenate([Y0[0], Y0[1]["v"]]), T, 1.3)
    np.testing.assert_allclose(np.asarray(ys[1]["v"]), np.asarray(flat)[:, 2:], atol=1e-12)
    # a list state with a scalar leaf: dy/dt = -k y and dz/dt = y
    ys = qb.odeint(lambda s, t, k: [-k * s[0], s[0] * qb.ones(3)], [1.0, qb.zeros(3)], T, 0.5)
    np.testing.assert_allclose(np.asarray(ys[0]), np.exp(-0.5 * T), atol=1e-7)
    np.testing.assert_allclose(np.asarray(ys[1])[:, 1], (1 - np.exp(-0.5 * T)) / 0.5, atol=1e-7)


def test_odeint_pytree_gradients_by_the_adjoint():
    def loss(y0, w):
        ys = qb.odeint(_oscillator, y0, T, w)
        return qb.sum(ys[0] ** 2) + qb.sum(ys[1]["v"][-1])

    def ref(y0, w):
        x0, v0 = y0[:2], y0[2:]
        x = _positions(x0, v0, T, w)
        v = -x0 * w * np.sin(w * T[-1]) + v0 * np.cos(w * T[-1])
        return np.sum(x ** 2) + np.sum(v)

    y0 = np.concatenate([Y0[0], Y0[1]["v"]])
    gy, gw = qb.jit(qb.grad(loss, argnums=(0, 1)))(Y0, qb.array(1.3))
    assert qb.tree.structure(gy) == qb.tree.structure(Y0)
    np.testing.assert_allclose(_vector(gy), fd(lambda y: ref(y, 1.3), y0), atol=1e-5)
    np.testing.assert_allclose(float(gw), fd(lambda w: ref(y0, float(w)), 1.3), atol=1e-5)
    tangent = qb.jvp(lambda w: qb.odeint(_oscillator, Y0, T, w)[0], (qb.array(1.3),),
                     (qb.array(1.0),))[1]
    expected = fd(lambda w: _positions(Y0[0], Y0[1]["v"], T, float(w))[2, 1], 1.3)
    np.testing.assert_allclose(float(np.asarray(tangent)[2, 1]), expected, atol=1e-6)


def test_odeint_pytree_matches_jax(jax):
    import jax.numpy as jnp
    from jax.experimental.ode import odeint as jodeint

    def field(y, t, c):
        return {"x": y["v"], "v": -qb.sin(y["x"]) - c * y["v"]}

    def jfield(y, t, c):
        return {"x": y["v"], "v": -jnp.sin(y["x"]) - c * y["v"]}

    y0 = {"x": np.array([1.0, 0.3]), "v": np.array([0.2, 0.0])}
    jy0 = {k: jnp.asarray(v) for k, v in y0.items()}
    ours = qb.odeint(field, y0, T, 0.3, hmax=0.1)
    theirs = jodeint(jfield, jy0, jnp.asarray(T), 0.3, hmax=0.1)
    for k in y0:
        np.testing.assert_allclose(np.asarray(ours[k]), np.asarray(theirs[k]), atol=1e-7)
    g = qb.grad(lambda y0, c: qb.sum(qb.odeint(field, y0, T, c)["x"] ** 2), argnums=(0, 1))(
        y0, qb.array(0.3))
    jg = jax.grad(lambda y0, c: jnp.sum(jodeint(jfield, y0, jnp.asarray(T), c)["x"] ** 2),
                  argnums=(0, 1))(jy0, 0.3)
    for k in y0:
        np.testing.assert_allclose(np.asarray(g[0][k]), np.asarray(jg[0][k]), atol=1e-6)
    np.testing.assert_allclose(float(g[1]), float(jg[1]), atol=1e-6)


def test_odeint_hmax_caps_the_step():
    t = np.array([0.0, 1.0])
    decay = lambda y, t: -y  # noqa: E731  (one step of 1 would do at these tolerances)
    # accurate with a cap, and each step at most hmax: 0.01 needs 100 steps, 0.001 1000
    ys = qb.odeint(decay, 1.0, t, hmax=0.01, mxstep=150)
    np.testing.assert_allclose(float(np.asarray(ys)[1]), np.exp(-1.0), rtol=1e-8)
    with pytest.raises(ConvergenceError, match="stopped at t="):
        qb.odeint(decay, 1.0, t, hmax=0.001, mxstep=150)
    run = qb.jit(lambda y0, h: qb.odeint(decay, y0, t, hmax=h, mxstep=150, return_info=True),
                 static_argnums=1)
    _, info = run(qb.array(1.0), 0.01)
    assert float(info) == 0
    ys, info = run(qb.array(1.0), 0.001)
    assert float(info) == 150
    ys = qb.jit(lambda y0: qb.odeint(decay, y0, t, hmax=0.001, mxstep=150))(qb.array(1.0))
    assert np.isnan(np.asarray(ys)).all()
    # the adjoint integrates back under the same cap and limit, and succeeds too
    g = qb.jit(qb.grad(lambda y0: qb.odeint(decay, y0, t, hmax=0.01, mxstep=150)[1]))(
        qb.array(1.0))
    np.testing.assert_allclose(float(g), np.exp(-1.0), rtol=1e-8)
    g = qb.jit(qb.grad(lambda y0: qb.odeint(decay, y0, t, hmax=0.001, mxstep=150)[1]))(
        qb.array(1.0))
    assert np.isnan(float(g))
    with pytest.raises(ValueError, match="hmax > 0"):
        qb.odeint(decay, 1.0, t, hmax=0.0)


def test_odeint_pytree_errors():
    with pytest.raises(TypeError, match=r"odeint's func must return a pytree \(\*, \{'v': \*\}\)"
                                        r".*got a pytree \(\*, \*\)"):
        qb.odeint(lambda y, t: (y[0], y[1]["v"]), Y0, T)
    with pytest.raises(TypeError, match=r"float64\[2\].*got .*float64\[3\]"):
        qb.odeint(lambda y, t: (qb.ones(3), y[1]), Y0, T)


# -- odeint with traced times that do not increase ------------------------------------------------

BACKWARDS = np.array([0.0, 1.0, 0.5])


def _decay(y, t):
    return -y


def test_decreasing_traced_times_fail_not_succeed():
    with pytest.raises(ValueError, match="increasing"):  # eagerly, as before
        qb.odeint(_decay, qb.array(1.0), BACKWARDS)
    ys, info = qb.jit(lambda t: qb.odeint(_decay, qb.array(1.0), t, return_info=True))(BACKWARDS)
    assert float(info) >= 1
    ys = qb.jit(lambda t: qb.odeint(_decay, qb.array(1.0), t))(BACKWARDS)
    assert np.isnan(np.asarray(ys)).all()
    # a pytree state: every leaf NaN
    ys = qb.jit(lambda t: qb.odeint(_oscillator, Y0, t, 1.0))(BACKWARDS)
    assert all(np.isnan(np.asarray(v)).all() for v in qb.tree.leaves(ys))
    # NaN times are a failure too
    _, info = qb.jit(lambda t: qb.odeint(_decay, qb.array(1.0), t, return_info=True))(
        np.array([0.0, np.nan, 1.0]))
    assert float(info) >= 1
    # repeated times are allowed, as eagerly
    t = np.array([0.0, 1.0, 1.0, 2.0])
    ys, info = qb.jit(lambda t: qb.odeint(_decay, qb.array(1.0), t, return_info=True))(t)
    assert float(info) == 0
    np.testing.assert_allclose(np.asarray(ys), np.exp(-t), rtol=1e-7)
    np.testing.assert_allclose(np.asarray(ys), np.asarray(qb.odeint(_decay, 1.0, t)), rtol=1e-12)


def test_decreasing_traced_times_give_nan_derivatives():
    loss = lambda y0, t: qb.sum(qb.odeint(_decay, y0, t))  # noqa: E731
    gy, gt = qb.jit(qb.grad(loss, argnums=(0, 1)))(qb.array(1.0), BACKWARDS)
    assert np.isnan(float(gy)) and np.isnan(np.asarray(gt)).all()
    _, tangent = qb.jit(lambda y0, t: qb.jvp(lambda y: loss(y, t), (y0,), (qb.array(1.0),)))(
        qb.array(1.0), BACKWARDS)
    assert np.isnan(float(tangent))
    # under vmap only the lane whose times go back fails
    ts = np.stack([np.array([0.0, 0.5, 1.0]), BACKWARDS])
    ys, info = qb.jit(qb.vmap(lambda t: qb.odeint(_decay, qb.array(1.0), t, return_info=True)))(
        ts)
    np.testing.assert_allclose(np.asarray(ys)[0], np.exp(-ts[0]), rtol=1e-7)
    assert float(np.asarray(info)[0]) == 0 and float(np.asarray(info)[1]) >= 1


def test_decreasing_traced_times_fail_on_the_interpreter(monkeypatch):
    monkeypatch.setenv("QUABLA_BACKEND", "interpret")  # read when a program first compiles
    ys, info = qb.jit(lambda t: qb.odeint(_decay, qb.array(1.0), t, return_info=True))(BACKWARDS)
    assert float(info) >= 1
    assert np.isnan(np.asarray(qb.jit(lambda t: qb.odeint(_decay, qb.array(1.0), t))(
        BACKWARDS))).all()
    g = qb.jit(qb.grad(lambda t: qb.sum(qb.odeint(_decay, qb.array(1.0), t))))(BACKWARDS)
    assert np.isnan(np.asarray(g)).all()


@pytest.mark.filterwarnings("ignore::quabla.PrecisionWarning")  # MLX's float32
def test_decreasing_traced_times_fail_on_every_device(on):
    def traced(fn):  # under jit on every device: eagerly, concrete times raise instead
        return qb.jit(fn, device=on.device)

    solve = traced(lambda t: qb.odeint(_decay, qb.array(1.0), t, return_info=True))
    ys, info = solve(qb.array(BACKWARDS))
    assert float(np.asarray(info)) >= 1
    ok = np.array([0.0, 0.5, 1.0])
    ys, info = solve(qb.array(ok))
    assert float(np.asarray(info)) == 0
    on.close(np.asarray(ys), np.exp(-ok), rtol=1e-7, atol=1e-9)
    ys = traced(lambda t: qb.odeint(_decay, qb.array(1.0), t))(qb.array(BACKWARDS))
    assert np.isnan(np.asarray(ys)).all()
    g = traced(qb.grad(lambda t: qb.sum(qb.odeint(_decay, qb.array(1.0), t))))(qb.array(BACKWARDS))
    assert np.isnan(np.asarray(g)).all()
