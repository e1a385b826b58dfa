"""Seeded random programs with control-flow regions, rendered for Quabla and for JAX.

A program is a small expression tree, built once by ``generate(seed)`` and rendered twice
(``render(program, "qb")``, ``render(program, "jax")``) into the source of a function
``f(x, k, xs)`` with the same semantics in both libraries. ``check_program`` applies the
transforms below to both and compares Quabla's results with JAX's (x64), on the Numba CPU
back end or on the NumPy reference interpreter. ``tests/test_region_fuzz.py`` runs a few
seeds; ``QUABLA_FUZZ_PROGRAMS=500`` runs more.

The arguments of every program::

    x   a float64 scalar: the argument differentiated (and batched by vmap);
    k   a whole number, 1 or 2, used only as a loop bound or an index, never in arithmetic
        (Quabla: a float64 array holding it; JAX: an int32 array), so it has no tangent in JAX
        and must get none in Quabla (``jvp_k`` gives it one in Quabla: nothing may change);
    xs  a W x W float64 array; loops read its rows ``xs[i]`` and elements ``xs[i][j]``.

Grammar. S is a float64 scalar, V a float64 vector of width W. Every loop index, counter and
index expression lies in ``[0, W)`` for both values of k, so it indexes any row or element;
indices are whole numbers only (a fractional traced index is not generated)::

    expr_S := x | const | ref_S | float(index) | un(expr_S) | bin(expr_S, expr_S)
            | sum(expr_V) | elem(expr_V, index) | region_S
    expr_V := row(index) | ref_V | un(expr_V) | bin(expr_V, expr) | region_V
    un     := sin | cos | tanh | sq | expt          (expt(a) = exp(tanh(a)): a bounded exp)
    bin    := add | sub | mul
    index  := a loop index | a while counter | k + c | a static int
    region := fori(lo, hi, carries, body(i, carries))   each bound static or k + c (traced)
            | scan(length, carries, body(carries, i) -> (carries, y), reverse)
                  value: the carry, sum(ys), both, or one row ys[m]
            | while(limit, stop, carries, body(n, carries))
                  a counter n from 0 while n < limit (and, with a stop, sum(c) < stop)
            | cond(expr_S > t, operand, then(o), else(o))   or cond(k > 1.5, ...)
            | let r = row(index) in expr          (a row read once, indexed by inner loops)
    carries:= one or two carries c, d (a pytree); the loop's value is c (+ sum(d))
    body   := bounded(expr) per carry, so values stay moderate: sin/tanh(...) or
              0.5 c + 0.5 sin(expr)

A ``ref`` names a carry, a cond operand ``o`` or a let-bound row ``r`` in scope. Quabla
loops may also take ``xs`` through ``operands=`` and ``unroll`` (True, or 2 steps per
iteration); JAX's take neither, but a loop Quabla unrolls fully is a Python loop in JAX, so
that both inline its steps.

Transforms (``TRANSFORMS``), functions of ``(x, k, xs)`` returning a scalar: ``value`` (f
itself), ``grad1`` ... ``grad4`` (d^n f / dx^n, nested grad), ``jvp`` (tangent 1 on x),
``jvp_k`` (tangents 1 on x and on k: the same answer as ``jvp``), ``jvp_grad`` (forward over
reverse). Wrappers (``WRAPPERS``): ``eager`` (called as is), ``jit``, ``vmap`` (over a batch
of x), ``jit_vmap``, and ``vmap_k`` (over a batch of x and of k, so bounds and indices are
batched). JAX's reference for a transform is ``jax.jit(jax.vmap(T))`` over x, called for each
k (vmap_k's lanes are read from those): k is traced, as Quabla's transforms trace every
argument. Where JAX raises (reverse mode through a ``while_loop`` or a traced-bound
``fori_loop`` whose carry a cotangent must cross), Quabla must raise
``UnsupportedOperationError``. Values agree within rtol 1e-9 and atol 1e-10 times the
reference's magnitude (at least 1).

``shrink(program, still_fails)`` reduces a failing program (greedy replacement of
sub-expressions by simpler ones), for reproducers; ``describe(program)`` prints both
sources and the arguments.
"""

import contextlib
import dataclasses
import functools
import os
import random
import traceback
from dataclasses import dataclass
from typing import Optional, Tuple

import numpy as np

W = 4                      # the width of every vector, of the rows of xs, the bound of loops
S, V = (), (W,)            # the two shapes of values
KS = (1, 2)                # the values k takes (indices are valid for both)

UNARY = ("sin", "cos", "tanh", "sq", "expt")
BINARY = ("add", "sub", "mul")
TRANSFORMS = ("value", "grad1", "grad2", "grad3", "grad4", "jvp", "jvp_k", "jvp_grad")
WRAPPERS = ("eager", "jit", "vmap", "jit_vmap", "vmap_k")
BACKENDS = ("numba", "interpret")
RTOL, ATOL = 1e-9, 1e-10   # atol is scaled by the reference's magnitude (at least 1)
CARRY_NAMES = "cd"


@functools.lru_cache(maxsize=None)
def scan_has_reverse():
    """Whether ``qb.scan`` takes ``reverse=`` (reverse scans are generated only then)."""
    import inspect

    import quabla as qb

    return "reverse" in inspect.signature(qb.scan).parameters


@functools.lru_cache(maxsize=None)
def loops_take_int_unroll():
    """Whether ``qb.scan``/``qb.fori_loop`` take ``unroll=<int>`` (steps per iteration, as in
    JAX); otherwise ``unroll=2`` is not generated."""
    import quabla as qb

    try:
        qb.scan(lambda c, i: (c + i, ()), 0.0, length=3, unroll=2)
    except (TypeError, ValueError):
        return False
    return True


# -- the expression tree ------------------------------------------------------------------------
# Indices (whole numbers): a loop index or counter by name, k + off, or a static int.

@dataclass(frozen=True)
class Idx:
    name: str


@dataclass(frozen=True)
class KIdx:
    off: int


@dataclass(frozen=True)
class SIdx:
    n: int


@dataclass(frozen=True)
class KBound:
    """A traced loop bound: k + off (a static bound is a plain int)."""
    off: int


LEAF_PARAMS = (Idx, KIdx, SIdx, KBound)   # parts of nodes that are not expressions


@dataclass(frozen=True)
class X:
    pass


@dataclass(frozen=True)
class Const:
    value: float


@dataclass(frozen=True)
class KF:
    """k as a float, only in a cond's predicate (a comparison has no derivative)."""


@dataclass(frozen=True)
class Ref:
    name: str
    shape: tuple


@dataclass(frozen=True)
class IndexF:
    """A loop index or counter used as a float64 value (sin(i), c * i)."""
    name: str


@dataclass(frozen=True)
class Un:
    op: str
    a: object


@dataclass(frozen=True)
class Bin:
    op: str
    a: object
    b: object


@dataclass(frozen=True)
class Sum:
    a: object


@dataclass(frozen=True)
class Row:
    index: object


@dataclass(frozen=True)
class Elem:
    vec: object
    index: object


@dataclass(frozen=True)
class Let:
    name: str
    value: object
    body: object


# Regions. A loop's carries are named c{id}, d{id}; its index i{id} (n{id} for while). The
# value of a loop is its first carry, plus the sum of the second where there are two.

@dataclass(frozen=True)
class Fori:
    id: int
    lo: object                # int or KBound
    hi: object
    inits: tuple              # one expr per carry
    bodies: tuple             # the new carries, over Idx(i{id}) and the carries
    unroll: object = False    # Quabla only: False, True or steps per iteration
    operands: bool = False    # Quabla only: pass xs through operands=


@dataclass(frozen=True)
class Scan:
    id: int
    length: int
    inits: tuple
    bodies: tuple
    y: object                 # what each step stacks
    combine: str              # "carry", "ys" (sum of ys), "both", "row" (ys[row])
    row: int = 0
    reverse: bool = False
    unroll: object = False
    operands: bool = False


@dataclass(frozen=True)
class While:
    id: int
    limit: object             # int or KBound: the counter runs while n < limit
    inits: tuple
    bodies: tuple             # over Idx(n{id}) and the carries
    stop: Optional[float] = None   # and while sum(c) < stop


@dataclass(frozen=True)
class Cond:
    id: int
    pred: object              # an expr_S compared with threshold
    threshold: float
    operand: object
    then: object              # over Ref(o{id})
    else_: object


@dataclass(frozen=True)
class Program:
    seed: int
    expr: object
    k: int
    xs: tuple                 # W x W, nested tuples
    xb: tuple                 # the batch of x (the first is the unbatched x)

    @property
    def kb(self):
        """The batch of k of the vmap_k wrapper (the first is the unbatched k)."""
        other = KS[1] if self.k == KS[0] else KS[0]
        return (self.k, other, self.k)


def shape_of(e):
    if isinstance(e, (X, KF, Const, IndexF, Elem, Sum)):
        return S
    if isinstance(e, Ref):
        return e.shape
    if isinstance(e, Row):
        return V
    if isinstance(e, Un):
        return shape_of(e.a)
    if isinstance(e, Bin):
        return V if V in (shape_of(e.a), shape_of(e.b)) else S
    if isinstance(e, Let):
        return shape_of(e.body)
    if isinstance(e, Scan) and e.combine == "ys":
        return S
    if isinstance(e, Scan) and e.combine == "row":
        return shape_of(e.y)
    if isinstance(e, (Fori, Scan, While)):
        return shape_of(e.inits[0])
    if isinstance(e, Cond):
        return shape_of(e.then)
    raise TypeError(e)


def _children(e):
    """The sub-expressions of ``e``, tuples of carries flattened."""
    out = []
    if dataclasses.is_dataclass(e):
        for f in dataclasses.fields(e):
            value = getattr(e, f.name)
            for v in value if isinstance(value, tuple) and f.name != "shape" else (value,):
                if dataclasses.is_dataclass(v) and not isinstance(v, LEAF_PARAMS):
                    out.append(v)
    return out


def _is_region(e):
    return isinstance(e, (Fori, Scan, While, Cond))


def _contains_region(e):
    return _is_region(e) or any(_contains_region(c) for c in _children(e))


def features(e, found=None):
    """The names of the constructs a program uses (for reports): fori_static,
    fori_traced_lo, fori_traced_hi, scan, scan_reverse, while, while_traced, while_stop,
    cond, cond_k, let, pair_carry, operands, unroll, nested."""
    found = set() if found is None else found
    for child in _children(e):
        features(child, found)
    if isinstance(e, Fori):
        if isinstance(e.lo, KBound):
            found.add("fori_traced_lo")
        if isinstance(e.hi, KBound):
            found.add("fori_traced_hi")
        if not isinstance(e.lo, KBound) and not isinstance(e.hi, KBound):
            found.add("fori_static")
    elif isinstance(e, Scan):
        found.add("scan_reverse" if e.reverse else "scan")
    elif isinstance(e, While):
        found.add("while_traced" if isinstance(e.limit, KBound) else "while")
        if e.stop is not None:
            found.add("while_stop")
    elif isinstance(e, Cond):
        found.add("cond_k" if isinstance(e.pred, KF) else "cond")
    elif isinstance(e, Let):
        found.add("let")
    if isinstance(e, (Fori, Scan, While)) and len(e.inits) > 1:
        found.add("pair_carry")
    if getattr(e, "operands", False):
        found.add("operands")
    if getattr(e, "unroll", False):
        found.add("unroll")
    if _is_region(e) and any(_contains_region(c) for c in _children(e)):
        found.add("nested")
    return found


# -- generation ---------------------------------------------------------------------------------

@dataclass(frozen=True)
class Scope:
    refs: Tuple[Tuple[str, tuple], ...] = ()
    indices: Tuple[str, ...] = ()
    loops: int = 0            # how many regions enclose this point

    def add(self, refs=(), indices=()):
        return Scope(self.refs + tuple(refs), self.indices + tuple(indices), self.loops + 1)


class Generator:
    """``Generator(seed).program()``: one random program of the grammar above.

    ``max_regions`` bounds the regions of a program, ``max_nesting`` how deep they nest,
    ``depth`` the depth of expressions; ``reverse`` allows reverse scans and ``int_unroll``
    ``unroll=2`` (default: where Quabla takes them). A seed draws the same random numbers
    whatever these allow, so it gives the same program up to those flags."""

    def __init__(self, seed, max_regions=4, max_nesting=3, depth=3, reverse=None,
                 int_unroll=None):
        self.seed = seed
        self.rng = random.Random(seed)
        self.regions_left = max_regions
        self.max_nesting = max_nesting
        self.depth = depth
        self.reverse = scan_has_reverse() if reverse is None else reverse
        self.int_unroll = loops_take_int_unroll() if int_unroll is None else int_unroll
        self.next_id = 0

    def program(self):
        rng = self.rng
        k = rng.choice(KS)
        xs = tuple(tuple(round(rng.uniform(-1.0, 1.0), 2) for _ in range(W)) for _ in range(W))
        xb = tuple(round(rng.uniform(-0.9, 0.9), 2) for _ in range(3))
        expr = self.expr(rng.choice([S, S, V]), self.depth, Scope(), force_region=True)
        return Program(self.seed, expr, k, xs, xb)

    def _id(self):
        self.next_id += 1
        return self.next_id

    def const(self):
        return Const(round(self.rng.uniform(-1.5, 1.5), 2) or 0.5)

    def index(self, scope):
        """A whole-number index in [0, W) for every k: a loop index (preferred), k + c, or a
        static int."""
        rng = self.rng
        r = rng.random()
        if scope.indices and r < 0.7:
            return Idx(rng.choice(scope.indices))
        if r < 0.85:
            return KIdx(rng.randint(-min(KS), W - 1 - max(KS)))
        return SIdx(rng.randrange(W))

    def leaf(self, shape, scope):
        rng = self.rng
        refs = [name for name, s in scope.refs if s == shape]
        if shape == V:
            if refs and rng.random() < 0.5:
                return Ref(rng.choice(refs), V)
            return Row(self.index(scope))
        options = [X()] * 3 + [self.const()] + [Ref(n, S) for n in refs] * 2
        options += [IndexF(i) for i in scope.indices] * 2
        return rng.choice(options)

    def expr(self, shape, depth, scope, force_region=False):
        rng = self.rng
        can_region = self.regions_left > 0 and scope.loops < self.max_nesting
        if force_region and can_region:
            return self.region(shape, depth, scope)
        if depth <= 0:
            return self.leaf(shape, scope)
        kinds = ["leaf", "un", "un", "bin", "bin", "bin"]
        kinds += ["sum", "elem"] if shape == S else []
        kinds += ["region"] * 2 if can_region else []
        kinds += ["let"] if scope.indices else []
        kind = rng.choice(kinds)
        if kind == "leaf":
            return self.leaf(shape, scope)
        if kind == "un":
            return Un(rng.choice(UNARY), self.expr(shape, depth - 1, scope))
        if kind == "bin":
            other = shape if shape == S or rng.random() < 0.5 else S
            a, b = self.expr(shape, depth - 1, scope), self.expr(other, depth - 1, scope)
            return Bin(rng.choice(BINARY), *((a, b) if rng.random() < 0.5 else (b, a)))
        if kind == "sum":
            return Sum(self.expr(V, depth - 1, scope))
        if kind == "elem":
            vec = (self.leaf(V, scope) if rng.random() < 0.6
                   else self.expr(V, depth - 1, scope))
            return Elem(vec, self.index(scope))
        if kind == "let":
            name = f"r{self._id()}"
            value = Row(Idx(rng.choice(scope.indices)))
            inner = Scope(scope.refs + ((name, V),), scope.indices, scope.loops)
            return Let(name, value, self.expr(shape, depth - 1, inner))
        return self.region(shape, depth, scope)

    def bounded(self, shape, depth, scope, carry):
        """A loop's new carry: a bounded function of a body expression, so that values and
        derivatives stay moderate over the iterations."""
        rng = self.rng
        e = self.expr(shape, depth, scope)
        c = Ref(carry, shape)
        form = rng.randrange(5)
        if form == 0:
            return Un("sin", e)
        if form == 1:
            return Un("tanh", Bin("add", c, e))
        if form == 2:
            return Bin("add", Bin("mul", Const(0.5), c), Bin("mul", Const(0.5), Un("sin", e)))
        if form == 3:
            return Un("sin", Bin("mul", c, e))
        return Un("sin", Bin("add", Bin("mul", c, IndexF(scope.indices[-1])), e))

    def carries(self, rid, first_shape, d, scope, index):
        """(inits, scope of the body, names): one carry of ``first_shape``, sometimes a
        second of either shape."""
        rng = self.rng
        shapes = [first_shape] + ([rng.choice([S, V])] if rng.random() < 0.3 else [])
        names = [f"{CARRY_NAMES[j]}{rid}" for j in range(len(shapes))]
        inits = tuple(self.expr(s, d - 1, scope) for s in shapes)
        inner = scope.add(zip(names, shapes), [index])
        return inits, inner, list(zip(names, shapes))

    def bodies(self, carried, d, inner):
        return tuple(self.bounded(s, d, inner, name) for name, s in carried)

    def unroll(self):
        """Quabla's ``unroll`` of a static loop: mostly False, else True or 2 steps per
        iteration (where taken)."""
        r = self.rng.random()
        if r < 0.1:
            return True
        return 2 if r < 0.2 and self.int_unroll else False  # the same draws either way

    def bound(self, value, traced):
        """``value`` for k = KS[0] as a static int, or as k + off (traced)."""
        return KBound(value - KS[0]) if traced else value

    def region(self, shape, depth, scope):
        rng = self.rng
        self.regions_left -= 1
        rid = self._id()
        d = max(depth - 1, 1)
        kind = rng.choice(["fori", "fori", "scan", "scan", "while", "cond"])
        if kind == "cond":
            o, op_shape = f"o{rid}", rng.choice([S, V])
            operand = self.expr(op_shape, d - 1, scope)
            pred = self.expr(S, d - 1, scope)
            r = rng.random()
            if r < 0.8:  # mostly a traced predicate: x or an index in it
                pred = Bin("add", rng.choice([X()] + [IndexF(i) for i in scope.indices]), pred)
            threshold = round(round(rng.uniform(-0.8, 0.8), 2) + 0.005, 3)  # no ties
            if r > 0.9:  # k > 1.5: which branch runs depends on k (per lane under vmap_k)
                pred, threshold = KF(), 1.5
            inner = scope.add([(o, op_shape)])
            return Cond(rid, pred, threshold, operand, self.expr(shape, d, inner),
                        self.expr(shape, d, inner))
        if kind == "scan":
            combine = rng.choice(["carry", "ys", "both", "row"])
            y_shape = rng.choice([S, V])
            if combine == "ys" and shape == V or combine == "row" and y_shape != shape:
                combine = "both"
            carry_shape = shape if combine in ("carry", "both") else rng.choice([S, V])
            length = rng.randint(1, W)
            inits, inner, carried = self.carries(rid, carry_shape, d, scope, f"i{rid}")
            bodies = self.bodies(carried, d, inner)
            y = self.expr(y_shape, d, inner)
            reverse = rng.random() < 0.3
            return Scan(rid, length, inits, bodies, y, combine, rng.randrange(length),
                        reverse=reverse and self.reverse, unroll=self.unroll(),
                        operands=rng.random() < 0.2)
        if kind == "while":
            traced = rng.random() < 0.5   # a limit for k = 1; counters stay < W for k = 2
            limit = self.bound(rng.randint(0, W - 1 if traced else W), traced)
            stop = round(round(rng.uniform(-0.5, 1.5), 2) + 0.005, 3)  # no ties
            stop = stop if rng.random() < 0.3 else None
            inits, inner, carried = self.carries(rid, shape, d, scope, f"n{rid}")
            return While(rid, limit, inits, self.bodies(carried, d, inner), stop)
        # bounds for k = 1 (KS[0]); a traced one is one more for k = 2, still in [0, W]
        mode = rng.choice(["static", "static", "lo", "hi", "both"])
        lo = rng.randrange(0, W - 1)
        hi = rng.randint(lo + 1 if rng.random() < 0.95 else lo, W - 1)
        hi = hi + 1 if mode in ("static", "lo") and rng.random() < 0.5 else hi
        lo, hi = self.bound(lo, mode in ("lo", "both")), self.bound(hi, mode in ("hi", "both"))
        inits, inner, carried = self.carries(rid, shape, d, scope, f"i{rid}")
        static = mode == "static"
        return Fori(rid, lo, hi, inits, self.bodies(carried, d, inner),
                    unroll=self.unroll() if static else False, operands=rng.random() < 0.2)


def generate(seed, **options):
    """The program of ``seed`` (the same on every run)."""
    return Generator(seed, **options).program()


# -- rendering ----------------------------------------------------------------------------------

class Renderer:
    """Python source of ``f(x, k, xs)`` in one dialect: "qb" (quabla as qb) or "jax" (jax.numpy
    as jnp, jax.lax as lax). JAX's loop indices and counters are integers, and its region
    inputs and outputs pass through ``F`` (float64, not weak), so carries keep their types."""

    def __init__(self, dialect):
        assert dialect in ("qb", "jax")
        self.q = dialect == "qb"
        self.m = "qb" if self.q else "jnp"

    def F(self, text):
        return text if self.q else f"F({text})"

    def index(self, ix):
        if isinstance(ix, Idx):
            return ix.name
        if isinstance(ix, KIdx):
            return "k" if ix.off == 0 else f"(k {'+' if ix.off > 0 else '-'} {abs(ix.off)})"
        return str(ix.n)

    def bound(self, b):
        return self.index(KIdx(b.off)) if isinstance(b, KBound) else str(b)

    def expr(self, e, out):
        """The text of ``e``; the definitions its regions need are appended to ``out``."""
        m = self.m
        if isinstance(e, X):
            return "x"
        if isinstance(e, KF):
            return "k"
        if isinstance(e, Const):
            return repr(e.value)
        if isinstance(e, Ref):
            return e.name
        if isinstance(e, IndexF):
            return e.name if self.q else f"F({e.name})"
        if isinstance(e, Un):
            a = self.expr(e.a, out)
            if e.op == "sq":
                return f"{m}.square({a})"
            if e.op == "expt":
                return f"{m}.exp({m}.tanh({a}))"
            return f"{m}.{e.op}({a})"
        if isinstance(e, Bin):
            a, b = self.expr(e.a, out), self.expr(e.b, out)
            return f"({a} {dict(add='+', sub='-', mul='*')[e.op]} {b})"
        if isinstance(e, Sum):
            return f"{m}.sum({self.expr(e.a, out)})"
        if isinstance(e, Row):
            return f"xs[{self.index(e.index)}]"
        if isinstance(e, Elem):
            return f"{self.expr(e.vec, out)}[{self.index(e.index)}]"
        if isinstance(e, Let):
            out.append(f"{e.name} = {self.expr(e.value, out)}")
            return self.expr(e.body, out)
        regions = {Fori: self.fori, Scan: self.scan, While: self.while_, Cond: self.cond}
        return regions[type(e)](e, out)

    # helpers of loops

    def carry_texts(self, e, out):
        """(init texts, carry names, the body's carry parameter, lines unpacking it)."""
        names = [f"{CARRY_NAMES[j]}{e.id}" for j in range(len(e.inits))]
        inits = [self.F(self.expr(init, out)) for init in e.inits]
        if len(names) == 1:
            return inits, names, names[0], []
        return inits, names, f"carry{e.id}", [f"{', '.join(names)} = carry{e.id}"]

    @staticmethod
    def pack(texts):
        return texts[0] if len(texts) == 1 else f"({', '.join(texts)})"

    def new_carry(self, e, lines):
        return [self.F(self.expr(b, lines)) for b in e.bodies]

    def value(self, e, var):
        """A loop's value from its final carry ``var``: c, or c + sum(d)."""
        if len(e.inits) == 1:
            return var
        return f"({var}[0] + {self.m}.sum({var}[1]))"

    def define(self, out, header, lines, ret):
        out.append(f"def {header}:")
        out.extend("    " + line for line in lines)
        out.append(f"    return {ret}")

    def loop_options(self, e):
        if not self.q:
            return ""
        text = ", operands=(xs,)" if e.operands else ""
        return text + (f", unroll={e.unroll}" if e.unroll else "")

    def fori(self, e, out):
        inits, _, param, lines = self.carry_texts(e, out)
        ret = self.pack(self.new_carry(e, lines))
        extra = ", xs" if self.q and e.operands else ""
        self.define(out, f"body{e.id}(i{e.id}, {param}{extra})", lines, ret)
        fn = "qb.fori_loop" if self.q else "unrolled_fori" if e.unroll is True else "lax.fori_loop"
        out.append(f"v{e.id} = {fn}({self.bound(e.lo)}, {self.bound(e.hi)}, body{e.id}, "
                   f"{self.pack(inits)}{self.loop_options(e)})")
        return self.value(e, f"v{e.id}")

    def scan(self, e, out):
        inits, _, param, lines = self.carry_texts(e, out)
        init = self.pack(inits)
        carry, y = self.pack(self.new_carry(e, lines)), self.F(self.expr(e.y, lines))
        extra = ", xs" if self.q and e.operands else ""
        self.define(out, f"body{e.id}({param}, i{e.id}{extra})", lines, f"{carry}, {y}")
        rev = ", reverse=True" if e.reverse else ""
        if self.q:
            out.append(f"v{e.id}, ys{e.id} = qb.scan(body{e.id}, {init}, length={e.length}"
                       f"{rev}{self.loop_options(e)})")
        elif e.unroll is True:
            out.append(f"v{e.id}, ys{e.id} = unrolled_scan(body{e.id}, {init}, {e.length}"
                       f"{rev})")
        else:
            out.append(f"v{e.id}, ys{e.id} = lax.scan(body{e.id}, {init}, "
                       f"jnp.arange({e.length}){rev})")
        value, total = self.value(e, f"v{e.id}"), f"{self.m}.sum(ys{e.id})"
        return {"carry": value, "ys": total, "both": f"({value} + 0.5 * {total})",
                "row": f"ys{e.id}[{e.row}]"}[e.combine]

    def while_(self, e, out):
        inits, names, _, _ = self.carry_texts(e, out)
        state = f"s{e.id}"
        lines = [f"n{e.id}, {', '.join(names)} = {state}"]
        texts = self.new_carry(e, lines)
        step = "1.0" if self.q else "1"
        self.define(out, f"body{e.id}({state})", lines, f"(n{e.id} + {step}, {', '.join(texts)})")
        test = f"{state}[0] < {self.bound(e.limit)}"
        if e.stop is not None:
            test = f"{self.m}.logical_and({test}, {self.m}.sum({state}[1]) < {e.stop!r})"
        self.define(out, f"test{e.id}({state})", [], test)
        start = "0.0" if self.q else "jnp.int32(0)"
        loop = "qb.while_loop" if self.q else "lax.while_loop"
        out.append(f"_, *w{e.id} = {loop}(test{e.id}, body{e.id}, ({start}, {', '.join(inits)}))")
        if len(names) == 1:
            return f"w{e.id}[0]"
        return f"(w{e.id}[0] + {self.m}.sum(w{e.id}[1]))"

    def cond(self, e, out):
        operand, pred = self.expr(e.operand, out), self.expr(e.pred, out)
        for name, branch in (("then", e.then), ("else", e.else_)):
            lines = []
            ret = self.F(self.expr(branch, lines))
            self.define(out, f"{name}{e.id}(o{e.id})", lines, ret)
        fn = "qb.cond" if self.q else "lax.cond"
        out.append(f"v{e.id} = {fn}({pred} > {e.threshold!r}, then{e.id}, else{e.id}, "
                   f"{self.F(operand)})")
        return f"v{e.id}"


def _unrolled_fori(jnp, lo, hi, body, carry):
    """JAX's rendering of Quabla's ``fori_loop(..., unroll=True)``: every step inlined (a
    Python loop), as Quabla inlines them, so both see the same data flow (a carry that
    depends on x only after the first step, say); ``lax.fori_loop(unroll=True)`` would
    still analyse one loop."""
    for i in range(lo, hi):
        carry = body(jnp.int32(i), carry)
    return carry


def _unrolled_scan(jnp, body, carry, length, reverse=False):
    """JAX's rendering of Quabla's ``scan(..., unroll=True)``: every step inlined; row i of
    the ys holds step i's in either direction."""
    ys = [None] * length
    for i in reversed(range(length)) if reverse else range(length):
        carry, ys[i] = body(carry, jnp.int32(i))
    return carry, jnp.stack(ys)


def render(program, dialect):
    """The source of ``f(x, k, xs)`` for ``dialect`` ("qb" or "jax")."""
    r = Renderer(dialect)
    lines = []
    text = r.expr(program.expr, lines)
    body = "".join(f"    {line}\n" for line in lines)
    return f"def f(x, k, xs):\n{body}    return {r.m}.sum({text})\n"


def build(program, dialect, jax=None):
    """The callable ``f`` of ``program`` for ``dialect`` (a fresh function on every call, so
    nothing staged for one back end is reused by another)."""
    if dialect == "qb":
        import quabla as qb

        namespace = {"qb": qb}
    else:
        namespace = {"jnp": jax.numpy, "lax": jax.lax,
                     "F": lambda v: jax.numpy.asarray(v, dtype=jax.numpy.float64),
                     "unrolled_fori": functools.partial(_unrolled_fori, jax.numpy),
                     "unrolled_scan": functools.partial(_unrolled_scan, jax.numpy)}
    exec(compile(render(program, dialect), f"<region program {program.seed} {dialect}>",
                 "exec"), namespace)
    return namespace["f"]


# -- transforms and checks ----------------------------------------------------------------------

def transformed(lib, f, name, jax=None):
    """``name`` of TRANSFORMS applied to ``f``: a function of ``(x, k, xs)``; ``lib`` is "qb"
    or "jax"."""
    if lib == "qb":
        import quabla as qb

        grad, jvp, one = qb.grad, qb.jvp, (lambda v: qb.ones(()) + 0.0 * v)
    else:
        grad, jvp, one = jax.grad, jax.jvp, jax.numpy.ones_like
    if name == "value":
        return f
    if name.startswith("grad"):
        g = f
        for _ in range(int(name[4:])):
            g = grad(g)
        return g
    if name == "jvp":
        return lambda x, k, xs: jvp(lambda x: f(x, k, xs), (x,), (one(x),))[1]
    if name == "jvp_k":
        if lib == "jax":   # k is an integer: no tangent, the same as jvp
            return transformed(lib, f, "jvp", jax)
        return lambda x, k, xs: jvp(lambda x, k: f(x, k, xs), (x, k), (one(x), one(k)))[1]
    if name == "jvp_grad":
        return lambda x, k, xs: jvp(lambda x: grad(f)(x, k, xs), (x,), (one(x),))[1]
    raise ValueError(name)


def jax_reference(program, jax, transforms=TRANSFORMS):
    """``{(transform, k): batch of results over the program's x (ndarray), or the exception
    JAX raised}`` for every k of KS, from one ``jax.jit(jax.vmap(T))`` per transform (k is
    traced, so one compile serves every k). The vmap_k wrapper's reference is read from
    these, lane by lane."""
    jnp = jax.numpy
    f = build(program, "jax", jax)
    xb, xs = jnp.array(program.xb), jnp.array(program.xs)
    ref = {}
    for name in transforms:
        if name == "jvp_k" and ("jvp", KS[0]) in ref:
            ref.update({(name, k): ref["jvp", k] for k in KS})
            continue
        try:
            g = jax.jit(jax.vmap(transformed("jax", f, name, jax), in_axes=(0, None, None)))
            ref.update({(name, k): np.asarray(g(xb, jnp.int32(k), xs)) for k in KS})
        except Exception as exc:  # noqa: BLE001 - any refusal is an expected refusal
            ref.update({(name, k): exc for k in KS})
    return ref


def expected(program, name, wrapper, reference):
    """What ``wrapper`` of transform ``name`` should give (or the exception JAX raised)."""
    value = reference[name, program.k]
    if isinstance(value, Exception) or wrapper in ("vmap", "jit_vmap"):
        return value
    if wrapper == "vmap_k":
        return np.array([reference[name, k][j] for j, k in enumerate(program.kb)])
    return value[0]


@contextlib.contextmanager
def quabla_backend(backend):
    """Run what Quabla compiles inside on ``backend`` ("numba" or "interpret"): the back end
    is read from ``QUABLA_BACKEND`` when a program compiles (its first call)."""
    old = os.environ.get("QUABLA_BACKEND")
    if backend == "interpret":
        os.environ["QUABLA_BACKEND"] = "interpret"
    else:
        os.environ.pop("QUABLA_BACKEND", None)
    try:
        yield
    finally:
        if old is None:
            os.environ.pop("QUABLA_BACKEND", None)
        else:
            os.environ["QUABLA_BACKEND"] = old


def run_quabla(program, name, wrapper, backend):
    """Quabla's result of transform ``name`` under ``wrapper`` on ``backend``: an ndarray (a
    batch for the vmap wrappers); raises what Quabla raises."""
    import quabla as qb

    with quabla_backend(backend):
        g = transformed("qb", build(program, "qb"), name)
        k, xs = qb.array(float(program.k)), qb.array(np.array(program.xs))
        x = qb.array(np.float64(program.xb[0]))
        if wrapper in ("vmap", "jit_vmap"):
            g, x = qb.vmap(g, in_axes=(0, None, None)), qb.array(np.array(program.xb))
        elif wrapper == "vmap_k":
            g, x = qb.vmap(g, in_axes=(0, 0, None)), qb.array(np.array(program.xb))
            k = qb.array(np.array(program.kb, dtype=np.float64))
        if wrapper.startswith("jit"):
            g = qb.jit(g)
        return np.asarray(g(x, k, xs), dtype=np.float64)


@dataclass
class Outcome:
    """One (transform, wrapper, backend) check of a program.

    status: "ok"; "ok_both_raise" (JAX refuses, Quabla raises UnsupportedOperationError);
    "mismatch" (values differ); "q_raises" (JAX computes, Quabla raises); "q_no_raise" (JAX
    refuses, Quabla computes); "wrong_error" (JAX refuses, Quabla raises another error)."""
    seed: int
    transform: str
    wrapper: str
    backend: str
    status: str
    detail: str = ""
    exc_type: Optional[str] = None

    @property
    def failed(self):
        return not self.status.startswith("ok")

    def signature(self):
        """What identifies a failure's kind, for grouping and for shrinking."""
        return (self.transform, self.wrapper, self.backend, self.status, self.exc_type)

    def __str__(self):
        exc = f" {self.exc_type}" if self.exc_type else ""
        return (f"seed {self.seed} {self.transform}/{self.wrapper}/{self.backend}: "
                f"{self.status}{exc}: {self.detail}")


def _first_line(exc):
    text = str(exc).strip().splitlines()
    return text[0][:300] if text else ""


def compare(program, name, wrapper, backend, reference):
    """The Outcome of one check against JAX's ``reference`` (from ``jax_reference``)."""
    from quabla.errors import UnsupportedOperationError

    want = expected(program, name, wrapper, reference)
    seed = program.seed
    try:
        got = run_quabla(program, name, wrapper, backend)
    except Exception as exc:  # noqa: BLE001 - reported, not hidden
        tb = traceback.extract_tb(exc.__traceback__)
        where = f" [at {tb[-1].filename.split('/')[-1]}:{tb[-1].lineno}]" if tb else ""
        if isinstance(want, Exception):
            ok = isinstance(exc, UnsupportedOperationError)
            return Outcome(seed, name, wrapper, backend, "ok_both_raise" if ok else "wrong_error",
                           f"JAX: {type(want).__name__}; Quabla: {_first_line(exc)}"
                           + ("" if ok else where), type(exc).__name__)
        return Outcome(seed, name, wrapper, backend, "q_raises", _first_line(exc) + where,
                       type(exc).__name__)
    if isinstance(want, Exception):
        return Outcome(seed, name, wrapper, backend, "q_no_raise",
                       f"JAX raises {type(want).__name__}: {_first_line(want)}; "
                       f"Quabla gives {got}")
    scale = max(1.0, float(np.nanmax(np.abs(want), initial=0.0)))
    try:
        np.testing.assert_allclose(got, want, rtol=RTOL, atol=ATOL * scale)
    except AssertionError:
        return Outcome(seed, name, wrapper, backend, "mismatch",
                       f"Quabla {np.array2string(np.asarray(got), precision=12)} JAX "
                       f"{np.array2string(np.asarray(want), precision=12)}")
    return Outcome(seed, name, wrapper, backend, "ok")


def check_program(program, jax, transforms=TRANSFORMS, wrappers=WRAPPERS,
                  backends=("numba",), reference=None):
    """Every Outcome of ``program`` over the given transforms, wrappers and back ends."""
    reference = reference or jax_reference(program, jax, transforms)
    for key, value in reference.items():
        if key[0] == "value" and isinstance(value, Exception):  # a generator bug
            raise AssertionError(f"JAX cannot run the program of seed {program.seed}:\n"
                                 f"{describe(program)}\n{value!r}")
    return [compare(program, name, wrapper, backend, reference)
            for backend in backends for name in transforms for wrapper in wrappers]


def describe(program):
    """Both sources and the arguments, for a failure message or a report."""
    return (f"# seed {program.seed}; {', '.join(sorted(features(program.expr)))}\n"
            f"# k = {program.k} (vmap_k: {list(program.kb)}), x = {list(program.xb)}\n"
            f"xs = np.array({[list(r) for r in program.xs]})\n"
            f"# Quabla\n{render(program, 'qb')}# JAX\n{render(program, 'jax')}")


# -- shrinking ----------------------------------------------------------------------------------

def _replacements(e):
    """Simpler expressions to try in place of ``e`` (scopes are checked by running). x,
    0.5 and xs[0] are the simplest: nothing replaces them, so shrinking cannot cycle."""
    shape = shape_of(e)
    if e in (X(), Const(0.5), Row(SIdx(0))):
        return []
    if isinstance(e, Const):
        return [Const(0.5)]
    out = [X(), Const(0.5)] if shape == S else [Row(SIdx(0))]
    out += [c for c in _children(e) if shape_of(c) == shape]
    if isinstance(e, (Fori, Scan, While)) and len(e.inits) > 1:
        out.append(dataclasses.replace(e, inits=e.inits[:1], bodies=e.bodies[:1]))
    if isinstance(e, Fori):
        if isinstance(e.lo, KBound):
            out.append(dataclasses.replace(e, lo=e.lo.off + KS[0]))
        if isinstance(e.hi, KBound):
            out.append(dataclasses.replace(e, hi=e.hi.off + KS[0]))
    if isinstance(e, (Fori, Scan)) and (e.unroll or e.operands):
        out.append(dataclasses.replace(e, unroll=False, operands=False))
    if isinstance(e, Scan):
        if e.length > 1:
            out.append(dataclasses.replace(e, length=e.length - 1, row=min(e.row, e.length - 2)))
        for combine in ("carry", "ys"):
            candidate = dataclasses.replace(e, combine=combine)
            if combine != e.combine and shape_of(candidate) == shape:
                out.append(candidate)
        if e.reverse:
            out.append(dataclasses.replace(e, reverse=False))
    if isinstance(e, While):
        if isinstance(e.limit, KBound):
            out.append(dataclasses.replace(e, limit=e.limit.off + KS[0]))
        if e.stop is not None:
            out.append(dataclasses.replace(e, stop=None))
    if isinstance(e, Elem) and not isinstance(e.index, SIdx):
        out.append(dataclasses.replace(e, index=SIdx(1)))
    return [r for r in out if r != e]


def _positions(e, path=()):
    """Every sub-expression of ``e`` with its path (field names and tuple positions)."""
    yield path, e
    if dataclasses.is_dataclass(e):
        for f in dataclasses.fields(e):
            value = getattr(e, f.name)
            if isinstance(value, tuple) and f.name != "shape":
                for j, v in enumerate(value):
                    if dataclasses.is_dataclass(v):
                        yield from _positions(v, path + ((f.name, j),))
            elif dataclasses.is_dataclass(value) and not isinstance(value, LEAF_PARAMS):
                yield from _positions(value, path + ((f.name, None),))


def _replace_at(e, path, new):
    if not path:
        return new
    (name, j), rest = path[0], path[1:]
    value = getattr(e, name)
    if j is None:
        return dataclasses.replace(e, **{name: _replace_at(value, rest, new)})
    items = list(value)
    items[j] = _replace_at(items[j], rest, new)
    return dataclasses.replace(e, **{name: tuple(items)})


def size(e):
    return sum(1 for _ in _positions(e))


def shrink(program, still_fails, max_tries=400):
    """A smaller program for which ``still_fails(program)`` holds: sub-expressions are
    replaced by simpler ones (outermost first), one pass after another until a pass changes
    nothing, or ``max_tries`` candidates have been run."""
    tries, changed = 0, True
    while changed and tries < max_tries:
        changed, position = False, 0
        while tries < max_tries:
            positions = list(_positions(program.expr))
            if position >= len(positions):
                break
            path, e = positions[position]
            for new in _replacements(e):
                candidate = dataclasses.replace(program,
                                                expr=_replace_at(program.expr, path, new))
                if size(candidate.expr) > size(program.expr):
                    continue
                tries += 1
                if still_fails(candidate):
                    program, changed = candidate, True
                    break
            else:
                position += 1   # nothing replaces this one: on to the next
    return program
