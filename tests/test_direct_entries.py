"""Parts translated to LLVM IR without Numba (lowering/numba_cpu/direct.py): the same bits as
Numba's compile of the same source for every helper, ``math`` function and typing rule that
generated code uses (sums whose adds may be reordered: to rounding, their vectorisation being
fixed by the translation); every primitive's program translated but for the constructs left to
Numba, which still compiles those; and a process whose parts all translate never imports
Numba, and gives the interpreter's results, cold and again from the cache.
"""

import ast
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import quabla as qb
import device_cases
from lowering import cache, fortran, native
from lowering.numba_cpu import direct, entry_module, module_source, numba_entry, scalar_ir

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_DTYPE_NAMES = {"float64": "float64", "float32": "float32", "int64": "int64", "bool": "bool_"}
SPECIAL = [np.nan, np.inf, -np.inf, 0.0, -0.0, 1e-300, -2.5, 0.3, 1.0, 700.0, -745.0, 1e308,
           0.5, -1.0, 3.7, 22.5, -0.625, 0.624, 1e-8, -30.0]
N = len(SPECIAL)


def _source(body):
    body = textwrap.indent(textwrap.dedent(body), "    ")
    return entry_module("def quabla_entry(args):\n" + body)


def _run(entry, arrays):
    code, symbols = entry.result()
    handle, address = native.load(code, entry.native_name, native.resolve(symbols))
    copies = tuple(np.array(a, copy=True) for a in arrays)
    native.entry_function(address)(copies)
    return copies


def both(body, **arrays):
    """The arrays after ``body`` ran as translated here and as Numba compiled it, each bound
    to its name (``name = _arg(args, k, 0, np.<dtype>)``) in the order given."""
    header = "".join(f"{name} = _arg(args, {k}, 0, np.{_DTYPE_NAMES[a.dtype.name]})\n"
                     for k, (name, a) in enumerate(arrays.items()))
    arrays = list(arrays.values())
    source = _source(header + textwrap.dedent(body))
    key = cache.entry_key(source)
    translated = _run(direct.compile_entry(key, source), arrays)
    compiled = _run(numba_entry(key, source, "part.py"), arrays)
    return translated, compiled


def assert_same_bits(body, **arrays):
    translated, compiled = both(body, **arrays)
    for a, b in zip(translated, compiled):
        assert a.dtype == b.dtype
        assert a.tobytes() == b.tobytes(), f"{body}\n{a}\n{b}"
    return translated


def _unary_body(call, n=N):
    return f"""
        i0 = 0
        while i0 < {n}:
            r0[i0] = {call}(v0[i0])
            i0 += 1
        """


UNARY = sorted(scalar_ir.FLOAT_HELPERS) + ["_tanh", "abs", "math.exp", "math.log", "math.sin",
                                           "math.cos", "math.log1p", "math.expm1", "math.sqrt",
                                           "math.tanh", "math.sinh", "math.atan", "math.erf",
                                           "math.exp2", "math.log10", "math.fabs"]


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("call", UNARY)
def test_a_function_of_one_float_has_numba_s_bits(call, dtype):
    with np.errstate(over="ignore"):
        values = np.array(SPECIAL, dtype)
    assert_same_bits(_unary_body(call), v0=values, r0=np.zeros(N, dtype))


@pytest.mark.parametrize("call, result", [
    ("_cast_float64", "float64"), ("_cast_float32", "float32"), ("_cast_bool", "bool_"),
    ("np.float32", "float32"), ("math.isnan", "bool_"), ("math.isinf", "bool_"),
    ("math.isfinite", "bool_"), ("_sqrt", "float64")])
@pytest.mark.parametrize("dtype", ["float64", "float32", "int64", "bool_"])
def test_casts_and_tests_have_numba_s_bits(call, result, dtype):
    if dtype == "bool_" and call.startswith(("math.", "_sqrt")):
        pytest.skip("Numba types no math function of a bool")
    with np.errstate(all="ignore"):
        values = np.array(SPECIAL[3:] if dtype in ("int64", "bool_") else SPECIAL).astype(dtype)
    assert_same_bits(_unary_body(call, len(values)), v0=values, r0=np.zeros(len(values), result))


@pytest.mark.parametrize("call", ["_xlogy", "_xlog1py", "_max", "_min", "_pow", "math.atan2",
                                  "math.hypot", "floordiv", "mod"])
@pytest.mark.parametrize("dtypes", [("float64", "float64"), ("float32", "float32"),
                                    ("float32", "float64")])
def test_a_function_of_two_floats_has_numba_s_bits(call, dtypes):
    a, b = dtypes
    out = "float32" if dtypes == ("float32", "float32") else "float64"
    operator = {"floordiv": "//", "mod": "%"}.get(call)
    expression = f"v0[i0] {operator} v1[i1]" if operator else f"{call}(v0[i0], v1[i1])"
    with np.errstate(over="ignore"):
        x, y = np.array(SPECIAL, a), np.array(SPECIAL, b)
    body = f"""
        i0 = 0
        while i0 < {N}:
            i1 = 0
            while i1 < {N}:
                r0[{N} * i0 + i1] = {expression}
                i1 += 1
            i0 += 1
        """
    assert_same_bits(body, v0=x, v1=y, r0=np.zeros(N * N, out))


def test_powers_indices_and_bool_extrema_have_numba_s_bits():
    values = np.array(SPECIAL)
    flags = np.array([True, False, True, True, False])
    body = f"""
        i0 = 0
        while i0 < {N}:
            r0[i0] = _integer_pow(v0[i0], 7) + _integer_pow(v0[i0], 0)
            k0[i0] = _clamp_index(v0[i0], 7) + 10 * _clamp_index(i0 - 12, 7)
            i0 += 1
        i0 = 0
        while i0 < 4:
            b1[i0] = _max(b0[i0], b0[i0 + 1])
            b1[i0 + 4] = _min(b0[i0], b0[i0 + 1])
            i0 += 1
        """
    assert_same_bits(body, v0=values, b0=flags, r0=np.zeros(N), k0=np.zeros(N, np.int64),
                     b1=np.zeros(8, bool))


def test_selects_of_clamped_reads_have_numba_s_bits():
    """``_where`` (a guard a loop segment does not decide): both values computed, one picked,
    over floats, mixed int64 and float32 (NumPy's promotion), bools and NaN."""
    body = f"""
        i0 = 0
        while i0 < {N}:
            r0[i0] = _where(i0 >= 3, v0[(i0 - 3 if i0 >= 3 else 0)], 0.0)
            r0[i0 + {N}] = _where(v0[i0] > 0.5, i0, w0[i0 % 5])
            b1[i0] = _where(i0 < 7, v0[i0] != v0[i0], i0 > 15)
            i0 += 1
        """
    assert_same_bits(body, v0=np.array(SPECIAL), w0=np.arange(5, dtype=np.float32),
                     r0=np.zeros(2 * N), b1=np.zeros(N, bool))


def test_sums_whose_adds_may_be_reordered_agree_with_numba_s():
    """``_sum_add`` (an add LLVM may reorder among its sum's: partial sums in vector lanes),
    float64 and float32 in one loop: the translation fixes the loop's vector width and
    interleaving (the same bits from every pipeline: test_tiers.py), Numba's compile leaves
    them to LLVM's cost model, so the two agree to rounding, not bit for bit."""
    rng = np.random.default_rng(5)
    body = """
        s = 0.0
        t = np.float32(0.0)
        i0 = 0
        while i0 < 1000:
            s = _sum_add(s, v0[i0] * v0[i0])
            t = _sum_add(t, w0[i0])
            i0 += 1
        r0[0] = s
        r1[0] = t
        """
    v0, w0 = rng.normal(size=1000), rng.normal(size=1000).astype(np.float32)
    translated, compiled = both(body, v0=v0, w0=w0, r0=np.zeros(1), r1=np.zeros(1, np.float32))
    for k, tolerance in ((2, 1e-13), (3, 1e-5)):
        np.testing.assert_allclose(translated[k], compiled[k], rtol=tolerance)
    np.testing.assert_allclose(translated[2], [np.sum(v0 * v0)], rtol=1e-13)
    np.testing.assert_allclose(translated[3], [np.sum(w0.astype(np.float64))], rtol=1e-5,
                               atol=1e-4)


def test_integer_division_by_a_constant_has_numba_s_bits():
    """``//`` and ``%`` of int64s by positive constants (a pad's interior), negative
    dividends included: Python's floor and the divisor's sign."""
    body = """
        i0 = 0
        while i0 < 40:
            k0[i0] = (i0 - 20) // 3 + 100 * ((i0 - 20) % 3)
            k0[i0 + 40] = (i0 - 17) // 1 + 100 * ((i0 - 17) % 7)
            r0[i0] = v0[i0 % 20] if (i0 - 3) % 4 == 0 and i0 >= 3 else 0.0
            i0 += 1
        """
    assert_same_bits(body, v0=np.array(SPECIAL), k0=np.zeros(80, np.int64), r0=np.zeros(40))


def test_the_typing_rules_have_numba_s_bits():
    """Integer and float promotion, true division, a variable widened by a later assignment,
    float32 arithmetic with float64 literals, bools in memory, ``and``/``or``/``not``,
    conditional expressions of two types, ``if``/``else`` and ``break``, swapped pointers."""
    v = np.array(SPECIAL)
    with np.errstate(over="ignore"):
        w = np.array(SPECIAL, np.float32)
    body = f"""
        acc = 0
        i0 = 0
        while i0 < {N}:
            acc = acc + v0[i0] * 2
            r0[i0] = (i0 / 3) + np.float32(1.5) * w0[i0] - (-i0)
            r1[i0] = w0[i0] * 1.1 + w0[i0] * w0[i0] / np.float32(3.0)
            r1[i0 + {N}] = w0[i0] * 2 + abs(i0 - 7) * w0[i0]
            s = v0[i0] if (i0 > 4) and (v0[i0] == v0[i0]) else -1
            b0[i0] = (v0[i0] > 0.0) or not (i0 < 3)
            b0[i0 + {N}] = b0[i0] == (w0[i0] != w0[i0])
            r2[i0] = s if s != 0.5 else math.inf
            i0 += 1
        r2[{N}] = acc
        p = _offset(ws0, 0)
        q = _offset(ws0, 4)
        p[0] = 1.0
        k = 0
        while True:
            if k >= 9:
                break
            elif k == 3:
                q[0] = p[0] * 3.0
            else:
                q[0] = p[0] + 0.5
            p, q = q, p
            k += 1
        r2[{N} + 1] = p[0]
        r2[{N} + 2] = q[0]
        """
    assert_same_bits(body, v0=v, w0=w, r0=np.zeros(N), r1=np.zeros(2 * N, np.float32),
                     r2=np.zeros(N + 3), b0=np.zeros(2 * N, bool), ws0=np.zeros(8))


def test_variables_bound_once_are_values_where_their_binding_dominates_every_read():
    """A temporary in a loop's body, a pointer bound before a loop, a variable bound once in a
    loop and read after it (the last iteration's value: a slot), one read in the loop's next
    statements and then after the loop, one bound in both branches of an ``if``."""
    v = np.array(SPECIAL)
    body = f"""
        p = _offset(r0, 1)
        i0 = 0
        while i0 < {N - 1}:
            t = v0[i0] * 2.0
            p[i0] = t + t
            last = v0[i0]
            i0 += 1
        r1[0] = last
        k = 0
        prev = 0.0
        while k < 4:
            carried = v0[k] + prev
            prev = carried
            r1[k + 1] = carried
            k += 1
        r1[7] = carried
        if v0[5] > 0.0:
            branch = 1.5
        else:
            branch = -1.5
        if v0[6] < 0.0:
            only = 2.5
            r1[6] = only
        r1[5] = branch
        """
    values = {name for name in direct._single_values(ast.parse(textwrap.dedent(body)).body)}
    assert {"p", "t", "only"} <= values and not values & {"last", "carried", "branch"}
    assert_same_bits(body, v0=v, r0=np.zeros(N), r1=np.zeros(8))  # (r1[6] is 0 or 2.5)


def test_loads_and_stores_are_scoped_by_the_argument_they_point_into():
    """Each access through a pointer into one argument (``_arg``, an ``_offset`` of it, a copy
    of such a pointer) is in that argument's alias scope and declared apart from the others',
    so LLVM vectorises a loop without run-time overlap checks; a pointer that may point into
    two arguments (a swapped carry, one bound to another's pointer after) has no scope; the
    results keep Numba's bits."""
    body = """
        a = _arg(args, 0, 0, np.float64)
        b = _arg(args, 1, 0, np.float64)
        c = _offset(a, 8)
        d = c
        a, b = b, a
        e = _arg(args, 2, 0, np.float64)
        e = _offset(b, 2)
        """
    bases, arguments = direct._pointer_bases(ast.parse(textwrap.dedent(body)).body)
    assert bases == {} and arguments == {0, 1, 2}
    body = f"""
        q = _offset(r0, 2)
        i0 = 0
        while i0 < {N - 2}:
            q[i0] = v0[i0] * 2.0 + v0[i0 + 1]
            i0 += 1
        r1[0] = v0[0]
        """
    header = "".join(f"{name} = _arg(args, {k}, 0, np.float64)\n"
                     for k, name in enumerate(("v0", "r0", "r1")))
    full = header + textwrap.dedent(body)
    bases = direct._pointer_bases(ast.parse(full).body)[0]
    assert bases["q"] == bases["r0"] == 1 and bases["v0"] == 0
    text = direct.translate(_source(full), "f")
    tagged = [line for line in text.splitlines() if ("load double" in line or "store double"
                                                     in line) and "getelementptr" not in line]
    assert tagged and all("!alias.scope" in line and "!noalias" in line for line in tagged)
    assert_same_bits(body, v0=np.array(SPECIAL), r0=np.zeros(N), r1=np.zeros(1))


def test_copies_zero_fills_and_products_have_numba_s_bits():
    rng = np.random.default_rng(0)
    a, b = rng.normal(size=(2, 5, 3)), rng.normal(size=(2, 3, 4))
    body = """
        _matmul_float64(v0, v1, r0, ws0, 2, 5, 3, 4, 0, 0)
        _copy(r1, v0, 30)
        _zero(_offset(r1, 3), 4)
        """
    translated = assert_same_bits(body, v0=a, v1=b, r0=np.zeros(40), ws0=np.zeros(40),
                                  r1=np.zeros(30))
    np.testing.assert_allclose(translated[2].reshape(2, 5, 4), a @ b, rtol=1e-14)
    if fortran.available():
        body = """
            _gemm(v0, v1, r0, 5, 3, 4, 0, 0)
            """
        translated = assert_same_bits(body, v0=a[0], v1=b[0], r0=np.zeros(20))
        np.testing.assert_allclose(translated[2].reshape(5, 4), a[0] @ b[0], rtol=1e-14)


@pytest.mark.parametrize("line", ["r0[0] = i0 % i0", "r0[0] = i0 // -2",
                                  "r0[0] = _digamma(i0)", "r0[0] = math.copysign(v0[0], 1.0)",
                                  "r0[0] = _pow(v0[0], 2)", "r0[0] = v1 + 1.0"])
def test_what_it_does_not_know_is_left_to_numba(line):
    source = _source(f"""
        i0 = 3
        {line}
        v1 = 1.0
        """)
    with pytest.raises(direct.Unsupported):
        direct.translate(source, "f")


def test_every_primitive_s_program_translates():
    """The first rule-test case of each primitive with its gradient (device_cases): every part
    of its entry translates, so no primitive needs Numba but to compile an array kernel's or
    a special function's C function once (their results are checked against the interpreter
    by every back-end test, which compiles them this way)."""
    cases = list(device_cases.first_primitive_cases(np.random.default_rng(11)))
    for case in cases:
        for source in module_source(qb.jit(case.fn).lower(*case.args).graph)[0]:
            direct.translate(source, "f")  # Unsupported fails the test
    assert len(cases) > 80


def test_a_process_whose_parts_translate_never_imports_numba(tmp_path):
    """A cold process (empty cache) compiles an MLP's gradient, a solve and a loop without
    importing Numba, with the interpreter's results; a warm one links them from the cache."""
    script = textwrap.dedent("""
        import sys
        import numpy as np
        import quabla as qb
        from quabla.core.interpret import evaluate

        def loss(ws, x):
            h = x
            for w in ws:
                h = qb.tanh(h @ w)
            return qb.sum(qb.sin(h) ** 2) + qb.sum(qb.maximum(h, 0.1))

        def loop(x):
            return qb.fori_loop(0, 5, lambda i, c: c * 0.5 + qb.exp(-c), x)

        rng = np.random.default_rng(4)
        ws = [rng.normal(size=(3, 8)), rng.normal(size=(8, 8)), rng.normal(size=(8, 1))]
        x = rng.normal(size=(16, 3))
        for fn, args in ((qb.grad(loss), (ws, x)), (loop, (x,))):
            jitted = qb.jit(fn)
            graph = jitted.lower(*args).graph
            values = [np.asarray(v) for v in qb.tree.flatten(args)[0]]
            expected = evaluate(graph, values)
            for _ in range(2):
                got = qb.tree.flatten(jitted(*args))[0]
                for a, e in zip(got, expected):
                    np.testing.assert_allclose(np.asarray(a), e, rtol=1e-12, atol=1e-12)
        print("numba" in sys.modules)
    """)
    env = dict(os.environ, QUABLA_CACHE_DIR=str(tmp_path), PYTHONPATH=ROOT)
    for _ in ("cold", "warm"):
        out = subprocess.run([sys.executable, "-c", script], env=env, check=True,
                             capture_output=True, text=True).stdout.split()
        assert out[-1] == "False"


BITS_SCRIPT = textwrap.dedent("""
    import hashlib, sys
    import numpy as np
    import quabla as qb
    import device_cases
    from lowering.numba_cpu import parts
    parts.PART_LINES = 12  # many parts per program
    kernels = ("cholesky", "eigh", "qr", "slogdet", "solve", "sort", "svd", "triangular_solve",
               "digamma", "polygamma", "lgamma", "erf_inv", "ndtri")
    primitive = {c.name for c in device_cases.primitive_cases(np.random.default_rng(11))}
    cases = [c for c in device_cases.cases()
             if c.name not in primitive or c.name.split("-")[0] in kernels]
    for case in cases:
        out = qb.tree.flatten(qb.jit(case.fn)(*case.args))[0]
        digest = hashlib.sha256(b"".join(np.asarray(o).tobytes() for o in out)).hexdigest()
        print(case.name, digest)
    print("numba" in sys.modules)
""")


def test_whole_programs_give_numba_s_bits(tmp_path):
    """The device corpus's array-kernel and special-function primitives (with their
    gradients), transformed,
    control-flow, math and indexing programs (float32, cut into parts of a few lines),
    compiled in one process with every part given to Numba (``QUABLA_DIRECT=0``) and in
    another translated here (the kernels called through kernel_calls.py): the same bits,
    case by case."""
    runs = []
    for direct_on in ("0", "1"):
        env = dict(os.environ, QUABLA_CACHE_DIR=str(tmp_path / direct_on), QUABLA_DIRECT=direct_on,
                   PYTHONPATH=os.pathsep.join([ROOT, os.path.join(ROOT, "tests")]))
        env.pop("QUABLA_BACKEND", None)
        runs.append(subprocess.run([sys.executable, "-c", BITS_SCRIPT], env=env, check=True,
                                   capture_output=True, text=True).stdout.split("\n"))
    by_numba, translated = runs
    assert len(by_numba) > 20 and by_numba[:-2] == translated[:-2]
    assert by_numba[-2] == "True"


SOLVE_SCRIPT = textwrap.dedent("""
    import sys
    import numpy as np
    import quabla as qb
    from lowering.numba_cpu import parts_compiled
    a = np.eye(6) * 3.0 + np.linspace(0.0, 0.5, 36).reshape(6, 6)
    b = np.linspace(-1.0, 1.0, 6)
    term = float(sys.argv[1])  # another program each time
    loss = lambda a, b: qb.sum(qb.linalg.eigh(a @ a.T)[0] ** 2) + term * qb.sum(qb.sort(b) * b)
    value, grad = qb.jit(qb.value_and_grad(loss))(a, b)
    want = np.sum(np.linalg.eigvalsh(a @ a.T) ** 2) + term * np.sum(np.sort(b) * b)
    assert abs(float(value) - want) < 1e-10 * abs(want), (float(value), want)
    print(parts_compiled() > 0, "numba" in sys.modules)
""")


def test_a_program_with_array_kernels_compiles_without_numba_once_they_are_cached(tmp_path):
    """The first program that sorts and decomposes compiles the kernels' C functions with Numba
    (kernel_calls.py); another program calling them in a new process compiles its own parts
    without importing Numba, with the right values."""
    env = dict(os.environ, QUABLA_CACHE_DIR=str(tmp_path), PYTHONPATH=ROOT)
    env.pop("QUABLA_BACKEND", None)
    outs = [subprocess.run([sys.executable, "-c", SOLVE_SCRIPT, term], env=env, check=True,
                           capture_output=True, text=True).stdout.split()
            for term in ("0.5", "0.25")]
    assert outs[0] == ["True", "True"]
    assert outs[1] == ["True", "False"]


LINEAR_SCRIPT = textwrap.dedent("""
    import sys
    import numpy as np
    import quabla as qb
    rng = np.random.default_rng(3)
    a = rng.normal(size=(2, 7, 7)) + 7.0 * np.eye(7)
    k = a @ np.swapaxes(a, -1, -2)
    b = rng.normal(size=(2, 7, 3))
    def loss(k, b):
        c = qb.linalg.cholesky(k)
        y = qb.linalg.solve_triangular(c, b, lower=True)
        z = qb.linalg.solve_triangular(c, y, lower=True, trans=1)
        return qb.sum(y * y) + qb.sum(qb.log(qb.diagonal(c, axis1=-2, axis2=-1))) + qb.sum(
            qb.linalg.solve(k + 1.0, z))
    value, grads = qb.jit(qb.value_and_grad(loss, argnums=(0, 1)))(k, b)
    c = np.linalg.cholesky(k)
    y = np.linalg.solve(c, b)
    want = np.sum(y * y) + np.sum(np.log(np.diagonal(c, axis1=-2, axis2=-1))) + np.sum(
        np.linalg.solve(k + 1.0, np.linalg.solve(np.swapaxes(c, -1, -2), y)))
    assert abs(float(value) - want) < 1e-10 * abs(want), (float(value), want)
    print("numba" in sys.modules)
""")


def test_solve_cholesky_and_triangular_solve_compile_without_numba(tmp_path):
    """``solve``, ``cholesky`` and ``triangular_solve`` (and their gradients) are loops in the
    part itself: a program of them compiles in a fresh cache without importing Numba (the
    kernels' C functions cost a Numba compile each, ~2 s for a Gaussian process's first
    call), with the right values."""
    env = dict(os.environ, QUABLA_CACHE_DIR=str(tmp_path), PYTHONPATH=ROOT)
    env.pop("QUABLA_BACKEND", None)
    out = subprocess.run([sys.executable, "-c", LINEAR_SCRIPT], env=env, check=True,
                         capture_output=True, text=True).stdout.split()
    assert out == ["False"]


def test_a_tampered_kernel_function_is_compiled_again(tmp_path):
    """A kernel's C function is a cache entry like any other: its object corrupted, the next
    process refuses it, compiles it again (eigh's with Numba, sort's from external.py's IR)
    and gets the right values."""
    import glob
    import json

    env = dict(os.environ, QUABLA_CACHE_DIR=str(tmp_path), PYTHONPATH=ROOT)
    env.pop("QUABLA_BACKEND", None)
    run = lambda: subprocess.run([sys.executable, "-c", SOLVE_SCRIPT, "0.5"], env=env,  # noqa: E731
                                 check=True, capture_output=True, text=True).stdout.split()
    run()
    tampered = 0
    for manifest in glob.glob(str(tmp_path / "qb_*.manifest.json")):
        with open(manifest) as f:
            entry = json.load(f)["entry"]
            if "quabla_kernel_call" in entry or entry.startswith("quabla_n_sort"):
                with open(manifest.replace(".manifest.json", ".o"), "r+b") as obj:
                    obj.write(b"\x00planted\x00")
                tampered += 1
    assert tampered >= 2  # eigh, sort and what their gradients call
    assert run() == ["False", "True"]  # the program's own parts from the cache; Numba again
    assert run() == ["False", "False"]  # and the kernels stored again


def test_programs_translated_on_several_threads_at_once_give_their_own_results():
    """Four threads each compile six programs new to the cache at the same moment: each part's
    module is built and compiled in an LLVM context of its own (machine.ObjectCode), so none
    sees another's, and every result is its own program's."""
    import concurrent.futures
    import threading

    x = np.linspace(-1.0, 1.0, 300)
    salt = float(np.random.default_rng().integers(1, 2**30)) / 2**33  # new to any cache
    errors = []
    barrier = threading.Barrier(4)

    def work(t):
        try:
            barrier.wait()
            for k in range(6):
                c = 1.0 + t * 0.1 + k * 0.013 + salt
                f = qb.jit(qb.grad(lambda x, c=c: qb.sum(qb.tanh(c * x) ** 2 + qb.sin(x * c))))
                want = 2 * c * np.tanh(c * x) * (1 - np.tanh(c * x) ** 2) + c * np.cos(c * x)
                np.testing.assert_allclose(np.asarray(f(x)), want, rtol=1e-12, atol=1e-12)
        except Exception as error:  # noqa: BLE001 - reported below
            errors.append(repr(error))

    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        list(pool.map(work, range(4)))
    assert errors == []


SORT_SCRIPT = textwrap.dedent("""
    import sys
    import numpy as np
    import quabla as qb
    rng = np.random.default_rng(8)
    for dtype in (np.float64, np.float32):
        for n in (1, 2, 5, 16, 37, 300):
            x = rng.normal(size=(3, n)).astype(dtype)
            x[0, rng.integers(0, n, max(1, n // 5))] = np.nan  # NaN last, in order
            x[0, rng.integers(0, n, max(1, n // 4))] = 1.5     # ties keep their order
            x[0, rng.integers(0, n, max(1, n // 5))] = 0.0
            x[0, 0] = -0.0                                      # equal to 0.0
            for fn, want in ((qb.sort, np.sort), (qb.argsort, np.argsort)):
                got = np.asarray(qb.jit(lambda a: fn(a, axis=-1))(qb.array(x)))
                expected = want(x, axis=-1, kind="stable")
                assert got.dtype == expected.dtype or fn is qb.argsort, (got.dtype, dtype)
                assert np.array_equal(got.view(np.uint8) if fn is qb.sort else got,
                                      expected.view(np.uint8) if fn is qb.sort else expected)
    print("numba" in sys.modules)
""")


@pytest.mark.parametrize("direct", ["1", "0"])
def test_sort_gives_numpys_stable_order_and_compiles_without_numba(tmp_path, direct):
    """A translated part's sort is external.py's merge sort in LLVM IR: NumPy's stable order
    bit for bit (NaN last, ties and -0.0 in their order, float32 too), in a cold process that
    never imports Numba; under QUABLA_DIRECT=0 Numba's kernel gives the same."""
    env = dict(os.environ, QUABLA_CACHE_DIR=str(tmp_path), PYTHONPATH=ROOT, QUABLA_DIRECT=direct)
    env.pop("QUABLA_BACKEND", None)
    out = subprocess.run([sys.executable, "-c", SORT_SCRIPT], env=env, check=True,
                         capture_output=True, text=True).stdout.split()
    assert out == (["False"] if direct == "1" else ["True"])
