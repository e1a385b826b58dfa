"""Shared helpers of the transform tests: finite differences, graphs of staged functions, and
comparisons. Everything here is backend-agnostic: values come back through ``np.asarray``."""

import math

import numpy as np

import quabla as qb
from quabla import tree

# Tolerances of derivative checks against float64 finite differences, per dtype of the program.
FD_TOL = {qb.float64: dict(rtol=1e-6, atol=1e-7), qb.float32: dict(rtol=2e-4, atol=2e-4)}
# Tolerances of identities that hold up to rounding (dot-product test, vmap vs a loop).
EXACT_TOL = {qb.float64: dict(rtol=1e-12, atol=1e-12), qb.float32: dict(rtol=2e-5, atol=2e-5)}


def np64(x):
    """A float64 NumPy copy of an array (Tensor, ndarray or number)."""
    return np.array(np.asarray(x), dtype=np.float64)


def assert_close(actual, expected, rtol=1e-12, atol=1e-12, err_msg=""):
    np.testing.assert_allclose(np64(actual), np64(expected), rtol=rtol, atol=atol, err_msg=err_msg)


class OnDevice:
    """The device of a device-parametrised test (conftest.py runs a test that takes ``on`` once
    per device of ``qb.devices()``). ``on(fn)`` is ``fn`` itself on "cpu", the transforms' own
    staging path, and ``jit(fn, device=...)`` elsewhere. ``on.close`` compares with the test's
    tolerance, or with float32's on a device that runs float64 programs as float32 (MLX)."""

    FLOAT32 = dict(rtol=2e-4, atol=2e-5)

    def __init__(self, device):
        self.device = device
        self.narrows = device == "mlx"

    def __repr__(self):
        return self.device

    def __call__(self, fn):
        return fn if self.device == "cpu" else qb.jit(fn, device=self.device)

    def forms(self, fn):
        """``fn`` as this device runs it: eagerly and under jit on "cpu", under jit elsewhere."""
        return [fn, qb.jit(fn)] if self.device == "cpu" else [self(fn)]

    def close(self, actual, expected, rtol=1e-12, atol=1e-12):
        if self.narrows:
            rtol, atol = max(rtol, self.FLOAT32["rtol"]), max(atol, self.FLOAT32["atol"])
        assert_close(actual, expected, rtol=rtol, atol=atol)


def assert_results_match(actual, expected, rtol, atol):
    """A back end's results against the interpreter's: the same number, dtypes and shapes;
    bool results equal, the others within tolerance."""
    assert len(actual) == len(expected)
    for a, e in zip(actual, expected):
        assert a.dtype == e.dtype and a.shape == e.shape
        if e.dtype == np.bool_:
            np.testing.assert_array_equal(a, e)
        else:
            np.testing.assert_allclose(a, e, rtol=rtol, atol=atol)


def fd_jacobian(f, args, eps=1e-6, side=0):
    """The central-difference Jacobian of ``f(*args)`` (float64 NumPy arrays in, one array out),
    shaped ``[out.size, total input size]``; ``f`` is evaluated eagerly in float64. ``side``
    +1 or -1 takes forward or backward differences instead (they differ at a kink)."""
    args = [np.array(a, dtype=np.float64) for a in args]
    out = np64(f(*[qb.array(a) for a in args]))
    columns = []
    for k, a in enumerate(args):
        for i in range(a.size):
            plus = [b.copy() for b in args]
            minus = [b.copy() for b in args]
            plus[k].reshape(-1)[i] += eps if side >= 0 else 0.0
            minus[k].reshape(-1)[i] -= eps if side <= 0 else 0.0
            fp = np64(f(*[qb.array(b) for b in plus]))
            fm = np64(f(*[qb.array(b) for b in minus]))
            columns.append(((fp - fm) / (eps * (2 if side == 0 else 1))).reshape(-1))
    return np.stack(columns, axis=1).reshape(out.size, -1)


def flat(values):
    """Concatenate arrays (or a tuple of them) into one float64 vector."""
    if not isinstance(values, (list, tuple)):
        values = [values]
    return np.concatenate([np64(v).reshape(-1) for v in values])


def staged_graph(fn, *args):
    """The graph a staged (transformed) function builds for ``args``.

    Uses ``fn.lower(*args).graph`` when ahead-of-time lowering is available, otherwise calls
    ``fn`` once and reads the graph of the program it cached for this signature.
    """
    try:
        return fn.lower(*args).graph
    except ImportError:
        pass
    fn(*args)
    return next(reversed(fn._cache.values())).graph  # the entry just used is the most recent


def op_counts(graph):
    """``{op name: count}`` of a graph's operations (inputs excluded)."""
    counts = {}
    for node in graph.nodes:
        if node.op != "input":
            counts[node.op] = counts.get(node.op, 0) + 1
    return counts


def traced_graph(f, *args):
    """The graph of ``f`` traced (not transformed) for the shapes and dtypes of ``args``."""
    from quabla.staging.signature import Aval
    from quabla.staging.transform import trace_function

    leaves, treedef = tree.flatten(tuple(args))
    template = [Aval(np.shape(leaf), qb.asarray(leaf).dtype) for leaf in leaves]
    return trace_function(f, treedef, template).graph


def mlp_net(p, t):
    """The MLP PINN's network (1 -> W -> W -> 1, tanh) at one scalar point ``t``."""
    h = qb.tanh(t * p["W1"][0] + p["b1"])
    h = qb.tanh(h @ p["W2"] + p["b2"])
    return (h @ p["W3"] + p["b3"])[0]


def _readme_u(x, w):
    return qb.sin(x * w)


_readme_u_xx = qb.vmap(qb.grad(qb.grad(_readme_u)), in_axes=(0, None))


def pinn_loss(w, x):
    """The README PINN's loss: the residual of u'' = -pi^2 sin(pi x) for u = sin(w x)."""
    return qb.mean((_readme_u_xx(x, w) + math.pi ** 2 * qb.sin(math.pi * x)) ** 2)


PINN_X = qb.linspace(0.05, 0.95, 8)  # its collocation points


def mse(params, xs, ys):
    """The linear-regression loss the Trainer tests train."""
    pred = xs @ params["w"] + params["b"]
    return qb.mean((pred - ys) ** 2)


def linear_data(n, seed=0):
    """``(xs, ys)``: ``n`` rows of 3 features and their exact linear targets."""
    rng = np.random.default_rng(seed)
    xs = rng.normal(size=(n, 3))
    return xs, xs @ np.array([1.0, -2.0, 0.5]) + 0.3


def linear_params():
    """Parameters of ``mse``, with a bool leaf that gets no gradient."""
    return {"w": qb.zeros(3), "b": qb.array(0.0), "frozen": qb.array([True])}


# every float elementwise primitive of elementwise.yaml, as a function of two float32 arrays
FLOAT_ELEMENTWISE = {
    "neg": lambda x, y: -x, "sin": lambda x, y: qb.sin(x), "cos": lambda x, y: qb.cos(x),
    "exp": lambda x, y: qb.exp(x), "log": lambda x, y: qb.log(x),
    "log1p": lambda x, y: qb.log1p(x), "expm1": lambda x, y: qb.expm1(x),
    "tanh": lambda x, y: qb.tanh(x), "sqrt": lambda x, y: qb.sqrt(x),
    "abs": lambda x, y: qb.abs(x), "sign": lambda x, y: qb.sign(x) * x,
    "logistic": lambda x, y: qb.sigmoid(x), "relu": lambda x, y: qb.relu(x),
    "softplus": lambda x, y: qb.softplus(x), "integer_pow": lambda x, y: x ** 3,
    "stop_gradient": lambda x, y: qb.stop_gradient(x * y),
    "add": qb.add, "sub": qb.subtract, "mul": qb.multiply, "div": qb.divide, "pow": qb.power,
    "max": qb.maximum, "min": qb.minimum,
    # issue 24's elementwise math and special functions
    "floor": lambda x, y: qb.floor(x * 5.0) * y, "ceil": lambda x, y: qb.ceil(x * 5.0) * y,
    "round": lambda x, y: qb.round(x * 5.0) * y, "remainder": lambda x, y: (x * 5.0) % y,
    "floor_divide": lambda x, y: ((x * 5.0) // y) * x, "tan": lambda x, y: qb.tan(x),
    "asin": lambda x, y: qb.arcsin(x), "acos": lambda x, y: qb.arccos(x),
    "atan": lambda x, y: qb.arctan(x), "atan2": qb.arctan2, "sinh": lambda x, y: qb.sinh(x),
    "cosh": lambda x, y: qb.cosh(x), "asinh": lambda x, y: qb.arcsinh(x),
    "acosh": lambda x, y: qb.arccosh(x + y + 1.0), "atanh": lambda x, y: qb.arctanh(x),
    "log2": lambda x, y: qb.log2(x), "log10": lambda x, y: qb.log10(x),
    "exp2": lambda x, y: qb.exp2(x), "cbrt": lambda x, y: qb.cbrt(x - 0.4), "hypot": qb.hypot,
    "erf": lambda x, y: qb.special.erf(x), "erfc": lambda x, y: qb.special.erfc(x),
    "erf_inv": lambda x, y: qb.special.erfinv(x), "ndtri": lambda x, y: qb.special.ndtri(x),
    "lgamma": lambda x, y: qb.special.gammaln(x + y),
    "digamma": lambda x, y: qb.special.digamma(x + y),
    "polygamma": lambda x, y: qb.special.polygamma(1, x + y),
    "xlogy": qb.special.xlogy, "xlog1py": qb.special.xlog1py,
}
