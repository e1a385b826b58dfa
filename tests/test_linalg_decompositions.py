"""qb.linalg's decompositions and the functions made of them (issue 25): values against NumPy,
the CPU back end against the reference interpreter, derivatives against finite differences
(and JAX in x64 where installed), vmap against a loop, degenerate inputs, errors. One
compiled program serves each group of checks (module-scoped fixtures), shapes are tiny."""

import math

import numpy as np
import pytest

import quabla as qb
from quabla.errors import UnsupportedOperationError

from helpers import assert_close, fd_jacobian, np64

LA = qb.linalg
RNG = np.random.default_rng(25)
SQ = RNG.standard_normal((2, 3, 3)) + 3.0 * np.eye(3)  # well conditioned, batch of 2
SYM = SQ + np.swapaxes(SQ, -1, -2) + np.diag([0.0, 1.0, 5.0])  # distinct eigenvalues
TALL = RNG.standard_normal((2, 4, 3))
WIDE = np.swapaxes(TALL, -1, -2)[..., :2, :]  # (2, 2, 4)
SPD = SQ @ np.swapaxes(SQ, -1, -2) + np.eye(3)
ORDS = [None, "fro", "nuc", 1, -1, 2, -2, math.inf, -math.inf]


def _interpreted(fn, *args):
    """``fn(*args)`` staged and run by the reference interpreter: the derivative rules' math
    is checked without compiling (the CPU parity of their programs is _primitives')."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("QUABLA_BACKEND", "interpret")
        return fn(*args)


def _leading_positive(v):
    big = np.argmax(np.abs(v), axis=-2)[..., None, :]
    return np.where(np.take_along_axis(v, big, axis=-2) < 0, -1.0, 1.0)


def _np_eigh(a):
    w, v = np.linalg.eigh(a)
    return w, v * _leading_positive(v)


def _np_svd(a):
    """NumPy's reduced SVD with quabla's signs (u's columns, vh's rows follow)."""
    u, s, vh = np.linalg.svd(a, full_matrices=False)
    flip = _leading_positive(u)
    return u * flip, s, vh * np.swapaxes(flip, -1, -2)


def _np_qr(a, mode="reduced"):
    q, r = np.linalg.qr(a, mode=mode)
    k = min(a.shape[-2:])
    flip = np.where(np.diagonal(r[..., :k, :k], axis1=-2, axis2=-1) < 0, -1.0, 1.0)
    q, r = q.copy(), r.copy()
    q[..., :, :k] *= flip[..., None, :]
    r[..., :k, :] *= flip[..., :, None]
    return q, r


def _np_expm_symmetric(a):
    w, v = np.linalg.eigh(a)
    return (v * np.exp(w)[..., None, :]) @ np.swapaxes(v, -1, -2)


def _everything(sq, sym, tall, wide, spd):
    """Every function on the test matrices: one program for all value checks."""
    sign, logdet = LA.slogdet(sq)
    w, v = LA.eigh(sym)
    u, s, vh = LA.svd(tall, full_matrices=False)
    uw, sw, vhw = LA.svd(wide, full_matrices=False)
    uf, sf, vhf = LA.svd(tall, full_matrices=True)
    q, r = LA.qr(tall)
    qw, rw = LA.qr(wide)
    qc, rc = LA.qr(tall, mode="complete")
    chol = LA.cholesky(spd)
    x, res, rank, sl = LA.lstsq(tall[0], tall[0] @ qb.array([1.0, 2.0, 3.0]) + 0.1)
    out = dict(
        det=LA.det(sq), sign=sign, logdet=logdet, inv=LA.inv(sq), w=w, v=v,
        eigvalsh=LA.eigvalsh(sym), eigh_upper=LA.eigh(sym, UPLO="U", symmetrize_input=False)[0],
        u=u, s=s, vh=vh, uw=uw, sw=sw, vhw=vhw, uf=uf, sf=sf, vhf=vhf,
        s_only=LA.svd(tall, compute_uv=False), q=q, r=r, qw=qw, rw=rw, qc=qc, rc=rc,
        r_only=LA.qr(tall, mode="r"), pinv=LA.pinv(tall), lstsq_x=x, lstsq_res=res,
        lstsq_rank=rank, lstsq_s=sl,
        pow3=LA.matrix_power(sq, 3), pow_neg2=LA.matrix_power(sq, -2), pow0=LA.matrix_power(sq, 0),
        cond=LA.cond(sq), cond1=LA.cond(sq, 1),
        cho_solve=LA.cho_solve((chol, True), tall[..., :3, :]),
        solve_triangular=LA.solve_triangular(sq, tall[..., :3, :], trans="T", lower=True),
        vector_norms=qb.stack([LA.norm(tall, o, axis=-1) for o in (None, 1, math.inf, -math.inf, 0, 3)]),
        keepdims=LA.norm(tall, 2, axis=(-2, -1), keepdims=True),
        expm_sym=LA.expm(sym), expm_big=LA.expm(20.0 * sym), expm_zero=LA.expm(0.0 * sq),
    )
    for k, o in enumerate(ORDS):
        out[f"norm{k}"] = LA.norm(tall, o, axis=(1, 2))
    return out


ARGS = (SQ, SYM, TALL, WIDE, SPD)


@pytest.fixture(scope="module")
def compiled():
    return {k: np64(v) for k, v in qb.jit(_everything)(*map(qb.array, ARGS)).items()}


@pytest.fixture(scope="module")
def interpreted():
    return {k: np64(v) for k, v in _interpreted(_everything, *map(qb.array, ARGS)).items()}


def _numpy():
    sign, logdet = np.linalg.slogdet(SQ)
    w, v = _np_eigh(SYM)
    u, s, vh = _np_svd(TALL)
    uw, sw, vhw = _np_svd(WIDE)
    q, r = _np_qr(TALL)
    qw, rw = _np_qr(WIDE)
    x, res, rank, sl = np.linalg.lstsq(TALL[0], TALL[0] @ np.array([1.0, 2.0, 3.0]) + 0.1, rcond=None)
    chol = np.linalg.cholesky(SPD)
    out = dict(
        det=np.linalg.det(SQ), sign=sign, logdet=logdet, inv=np.linalg.inv(SQ), w=w, v=v,
        eigvalsh=w, eigh_upper=np.linalg.eigvalsh(SYM, UPLO="U"), u=u, s=s, vh=vh, uw=uw,
        sw=sw, vhw=vhw, sf=s, s_only=s, q=q, r=r, qw=qw, rw=rw, r_only=r,
        pinv=np.linalg.pinv(TALL), lstsq_x=x, lstsq_res=res[0], lstsq_rank=rank, lstsq_s=sl,
        pow3=np.linalg.matrix_power(SQ, 3), pow_neg2=np.linalg.matrix_power(SQ, -2),
        pow0=np.broadcast_to(np.eye(3), SQ.shape), cond=np.linalg.cond(SQ),
        cond1=np.linalg.cond(SQ, 1),
        cho_solve=np.linalg.solve(SPD, TALL[..., :3, :]),
        solve_triangular=np.linalg.solve(np.swapaxes(np.tril(SQ), -1, -2), TALL[..., :3, :]),
        vector_norms=np.stack([np.linalg.norm(TALL, o, axis=-1) for o in (None, 1, np.inf, -np.inf, 0, 3)]),
        keepdims=np.linalg.norm(TALL, 2, axis=(-2, -1), keepdims=True),
        expm_sym=_np_expm_symmetric(SYM), expm_big=_np_expm_symmetric(20.0 * SYM),
        expm_zero=np.broadcast_to(np.eye(3), SQ.shape),
    )
    for k, o in enumerate(ORDS):
        out[f"norm{k}"] = np.linalg.norm(TALL, o, axis=(1, 2))
    return out


def test_values_against_numpy(compiled, interpreted):
    for name, expected in _numpy().items():
        assert_close(interpreted[name], expected, rtol=1e-10, atol=1e-11, err_msg=name)
        assert_close(compiled[name], expected, rtol=1e-10, atol=1e-11, err_msg=name)


def test_expm_against_scipy():
    scipy_linalg = pytest.importorskip("scipy.linalg")
    a = RNG.standard_normal((2, 3, 3)) * np.array([0.1, 4.0])[:, None, None]
    expected = np.stack([scipy_linalg.expm(x) for x in a])
    assert_close(LA.expm(qb.array(a)), expected, rtol=1e-13, atol=1e-14)


def test_cpu_matches_the_interpreter(compiled, interpreted):
    unique = {"uf", "vhf", "qc", "rc"}  # complements of a basis: compared by their properties
    for name in interpreted:
        if name not in unique:
            assert_close(compiled[name], interpreted[name], rtol=1e-10, atol=1e-12, err_msg=name)


@pytest.mark.parametrize("values", ["compiled", "interpreted"])
def test_complete_factors_are_orthonormal_and_reconstruct(values, request):
    out = request.getfixturevalue(values)
    uf, sf, vhf, qc, rc = (out[k] for k in ("uf", "sf", "vhf", "qc", "rc"))
    eye4 = np.broadcast_to(np.eye(4), (2, 4, 4))
    assert_close(np.swapaxes(uf, -1, -2) @ uf, eye4, atol=1e-12)
    assert_close(np.swapaxes(qc, -1, -2) @ qc, eye4, atol=1e-12)
    assert_close(uf[..., :, :3] * sf[..., None, :] @ vhf, TALL, atol=1e-12)
    assert_close(qc @ rc, TALL, atol=1e-12)
    assert np.all(np.diagonal(rc, axis1=-2, axis2=-1) >= 0)
    assert_close(np.tril(rc, -1), 0 * rc, atol=0)


# -- derivatives -------------------------------------------------------------------------------

C3 = RNG.standard_normal((3, 3))
C4 = RNG.standard_normal((4, 3))


def _losses(xp, la):
    """Scalar losses per function, written once for quabla and for JAX (``xp``, ``la``), each
    invariant to the signs of singular and eigen vectors (JAX does not fix them)."""
    c3, c4 = xp.asarray(C3), xp.asarray(C4)
    return {
        "det": lambda a: la.det(a),
        "slogdet": lambda a: la.slogdet(a)[1],
        "inv": lambda a: xp.sum(la.inv(a) * c3),
        "eigh": lambda a: xp.sum(la.eigh(a)[0] * c3[0]) + xp.sum(la.eigh(a)[1] ** 2 * c3),
        "eigvalsh": lambda a: xp.sum(la.eigvalsh(a) ** 3),
        "svd_tall": lambda a: xp.sum(la.svd(a @ c4.T, full_matrices=False)[1] * c3[0][:3])
        + xp.sum(la.svd(c4 @ a, full_matrices=False)[0] ** 2 * c4),
        "svd_wide": lambda a: xp.sum(la.svd(c4[:2] @ a, full_matrices=False)[2] ** 2 * c3[:2]),
        "svd_s": lambda a: xp.sum(la.svd(a, compute_uv=False) ** 2 * c3[1]),
        "qr": lambda a: xp.sum(la.qr(c4 @ a)[0] ** 2 * c4) + xp.sum(la.qr(c4 @ a)[1] ** 2 * c3),
        "pinv": lambda a: xp.sum(la.pinv(c4 @ a) * c4.T),
        "matrix_power": lambda a: xp.sum(la.matrix_power(a, 3) * c3) + xp.sum(la.matrix_power(a, -1) * c3),
        "norm_nuc": lambda a: la.norm(a, "nuc") + la.norm(a, 2) + la.norm(a, -2) + la.norm(a, 1),
        "cond": lambda a: la.cond(a),
        "expm": lambda a: xp.sum(la.expm(0.3 * a) * c3),
        "lstsq": lambda a: xp.sum(la.lstsq(c4 @ a, c4[:, 0])[0] * c3[0]),
        "cho_solve": lambda a: xp.sum(la.cho_solve((la.cholesky(a @ a.T + 4.0 * xp.eye(3)), True), c3)),
    }


def _jax_linalg(jax):
    """jnp.linalg with jax.scipy.linalg's expm and cho_solve: the namespace _losses reads."""
    import types

    return types.SimpleNamespace(**{k: getattr(jax.numpy.linalg, k) for k in dir(jax.numpy.linalg)
                                    if not k.startswith("_")},
                                 expm=jax.scipy.linalg.expm, cho_solve=jax.scipy.linalg.cho_solve)


LOSSES = sorted(_losses(qb, LA))
A0 = SQ[0] + SQ[0].T + np.diag([0.0, 1.0, 5.0])  # symmetric, distinct eigen/singular values


@pytest.fixture(scope="module")
def gradients():
    losses = _losses(qb, LA)
    both = _interpreted(qb.jit(lambda a: [qb.grad(losses[k])(a) for k in LOSSES]), qb.array(A0))
    return dict(zip(LOSSES, map(np64, both)))


@pytest.mark.parametrize("name", LOSSES)
def test_gradients_against_finite_differences(gradients, name):
    loss = _losses(qb, LA)[name]
    expected = _interpreted(fd_jacobian, loss, [A0]).reshape(3, 3)
    if name in ("eigh", "eigvalsh"):  # symmetrized input: the symmetric part only
        expected = 0.5 * (expected + expected.T)
    assert_close(gradients[name], expected, rtol=1e-6, atol=1e-6, err_msg=name)


@pytest.mark.parametrize("name", LOSSES)
def test_gradients_against_jax(gradients, name):
    jax = pytest.importorskip("jax")
    jax.config.update("jax_enable_x64", True)
    jnp = jax.numpy
    expected = jax.grad(_losses(jnp, _jax_linalg(jax))[name])(jnp.asarray(A0))
    assert_close(gradients[name], np.asarray(expected), rtol=1e-8, atol=1e-9, err_msg=name)


def test_forward_mode_matches_reverse_mode(gradients):
    """jvp along a direction equals <grad, direction> (each primitive's JVP against its VJP)."""
    losses = _losses(qb, LA)
    d = RNG.standard_normal((3, 3))
    d = d + d.T  # symmetric: eigh's symmetrized input sees all of it
    tangents = _interpreted(qb.jit(lambda a, t: [qb.jvp(losses[k], (a,), (t,))[1] for k in LOSSES]),
                            qb.array(A0), qb.array(d))
    for name, t in zip(LOSSES, tangents):
        assert_close(t, np.sum(gradients[name] * d), rtol=1e-9, atol=1e-10, err_msg=name)


# -- batching ----------------------------------------------------------------------------------

def _per_matrix(a, b):
    w, v = LA.eigh(a)
    u, s, vh = LA.svd(b, full_matrices=False)
    q, r = LA.qr(b)
    return [LA.slogdet(a)[1], LA.det(a), w, v, u, s, vh, q, r, LA.eigvalsh(a),
            LA.svd(b, compute_uv=False), qb.grad(lambda x: qb.sum(LA.eigh(x)[1] ** 2 * C3)
                                                   + LA.slogdet(x)[1])(a)]


def test_vmap_equals_a_loop():
    vmapped = _interpreted(qb.jit(qb.vmap(_per_matrix)), qb.array(SYM), qb.array(TALL))
    batched = _interpreted(_per_matrix, qb.array(SYM[0]), qb.array(TALL[0]))
    stacked = _interpreted(_per_matrix, qb.array(SYM[1]), qb.array(TALL[1]))
    for k, (v, b0, b1) in enumerate(zip(vmapped, batched, stacked)):
        assert_close(np64(v)[0], b0, rtol=1e-10, atol=1e-12, err_msg=str(k))
        assert_close(np64(v)[1], b1, rtol=1e-10, atol=1e-12, err_msg=str(k))


# -- degenerate inputs -------------------------------------------------------------------------

def _degenerate(a):
    u, s, vh = LA.svd(a)
    q, r = LA.qr(a)
    w, v = LA.eigh(a)
    return dict(slogdet=qb.stack(list(LA.slogdet(a))), det=LA.det(a), w=w, v=v, s=s, u=u, vh=vh,
                q=q, r=r, pinv=LA.pinv(a), norm2=LA.norm(a, 2), inv=LA.inv(a),
                grad_eigvalsh=qb.grad(lambda x: qb.sum(LA.eigvalsh(x) * C3[0]))(a),
                grad_s=qb.grad(lambda x: qb.sum(LA.svd(x, compute_uv=False) * C3[0]))(a),
                grad_det=qb.grad(LA.det)(a))


CASES = {"zero": np.zeros((3, 3)), "identity": np.eye(3), "singular": np.outer([1.0, 2, 3], [1.0, 2, 3]),
         "nan": np.where(np.eye(3) > 0, np.nan, 1.0)}


@pytest.fixture(scope="module")
def degenerate():
    run = qb.jit(_degenerate)
    return {name: {k: np64(v) for k, v in run(qb.array(a)).items()} for name, a in CASES.items()}


def test_degenerate_inputs_give_ieee_results(degenerate):
    zero, eye, singular, nan = (degenerate[k] for k in ("zero", "identity", "singular", "nan"))
    assert_close(zero["slogdet"], [0.0, -np.inf], atol=0)
    assert zero["det"] == 0.0 and np.all(zero["s"] == 0.0) and np.all(zero["pinv"] == 0.0)
    for f in (zero, eye):  # the vectors of a zero or repeated spectrum: an orthonormal basis
        for m in (f["u"], f["vh"], f["v"], f["q"]):
            assert_close(m.T @ m, np.eye(3), atol=1e-14)
    assert_close(eye["w"], [1.0, 1.0, 1.0], atol=0)
    assert np.isnan(zero["inv"]).all() and np.isnan(nan["inv"]).all()
    assert_close(eye["grad_eigvalsh"], np.diag(C3[0]), atol=1e-14)  # finite at a repeated value
    assert np.isfinite(eye["grad_s"]).all() and np.isfinite(zero["grad_s"]).all()
    assert singular["slogdet"][0] == 0.0 or singular["slogdet"][1] < -20  # rank 1
    assert abs(singular["det"]) < 1e-10
    for k in ("slogdet", "det", "w", "v", "s", "u", "vh", "q", "r", "pinv", "norm2"):
        assert np.isnan(nan[k]).all(), k


def test_degenerate_inputs_match_the_interpreter(degenerate):
    for name in ("zero", "nan"):
        a = CASES[name]
        reference = _interpreted(_degenerate, qb.array(a))
        for k in ("slogdet", "det", "w", "s", "r", "pinv", "norm2", "grad_eigvalsh", "grad_s"):
            assert_close(degenerate[name][k], reference[k], rtol=1e-10, atol=1e-12,
                         err_msg=f"{name} {k}")


# -- errors ------------------------------------------------------------------------------------

def test_bad_arguments_are_clear_errors():
    a = qb.array(SQ[0])
    with pytest.raises(ValueError, match="UPLO"):
        LA.eigh(a, UPLO="X")
    with pytest.raises(ValueError, match="mode"):
        LA.qr(a, mode="raw")
    with pytest.raises(ValueError, match="square"):
        LA.det(qb.array(TALL))
    with pytest.raises(TypeError, match="int"):
        LA.matrix_power(a, 1.5)
    with pytest.raises(ValueError, match="ord"):
        LA.norm(a, "nuc", axis=0)
    with pytest.raises(UnsupportedOperationError, match="full_matrices"):
        qb.grad(lambda x: qb.sum(LA.svd(x, full_matrices=True)[0]))(qb.array(TALL[0]))
    with pytest.raises(UnsupportedOperationError, match="qr"):
        qb.grad(lambda x: qb.sum(LA.qr(x)[1]))(qb.array(WIDE[0]))


# -- MLX ---------------------------------------------------------------------------------------

def _primitives(sq, sym, tall, wide):
    """The four decomposition primitives and their derivatives, for the device checks."""
    return [LA.slogdet(sq)[1], *LA.eigh(sym), LA.eigvalsh(sym), *LA.svd(tall, full_matrices=False),
            LA.svd(wide, compute_uv=False), *LA.qr(tall), LA.qr(wide)[1],
            qb.grad(lambda a: qb.sum(LA.slogdet(a)[1]) + qb.sum(LA.eigh(a)[1] ** 2 * C3))(sq),
            qb.grad(lambda a: qb.sum(LA.svd(a, full_matrices=False)[0] ** 2 * C4)
                    + qb.sum(LA.qr(a)[1] ** 2))(tall)]


def test_cpu_primitives_and_gradients_match_the_interpreter():
    args = [qb.array(x) for x in ARGS[:4]]
    expected = _interpreted(_primitives, *args)
    for k, (value, expected) in enumerate(zip(qb.jit(_primitives)(*args), expected)):
        assert_close(value, expected, rtol=1e-10, atol=1e-12, err_msg=str(k))


def test_mlx_matches_the_interpreter_in_float32():
    if "mlx" not in qb.devices():
        pytest.skip("MLX is not installed")
    import warnings

    args = [qb.array(x) for x in ARGS[:4]]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        got = qb.jit(_primitives, device="mlx")(*args)
    for k, (value, expected) in enumerate(zip(got, _interpreted(_primitives, *args))):
        assert_close(value, expected, rtol=2e-3, atol=2e-4, err_msg=str(k))


# -- the CPU's LAPACK path (matrices of LAPACK_MIN rows or more, a LAPACK found: fortran.py) ------

def _lapack_sized(sq, sym, tall, wide):
    u, s, vh = LA.svd(tall, full_matrices=True)
    return [qb.stack(list(LA.slogdet(sq)), -1), *LA.eigh(sym), LA.eigvalsh(sym),
            *LA.svd(tall, full_matrices=False), *LA.svd(wide, full_matrices=False),
            LA.svd(wide, compute_uv=False), u, s, vh,
            qb.grad(lambda a: qb.sum(LA.slogdet(a)[1]) + qb.sum(LA.eigh(a)[1] ** 3))(sym),
            qb.grad(lambda a: qb.sum(LA.svd(a, full_matrices=False)[0] ** 3))(tall)]


def test_the_lapack_path_matches_the_interpreter():
    from lowering.numba_cpu.lapack import LAPACK_MIN, lapack_available

    if not lapack_available():
        pytest.skip("no LAPACK here (neither NumPy's OpenBLAS nor SciPy's)")
    n = LAPACK_MIN + 1
    rng = np.random.default_rng(7)
    sq = rng.standard_normal((3, n, n))
    sq[1] = 0.0  # singular (and a zero spectrum)
    sq[2, 0, 0] = np.nan
    sym = sq + np.swapaxes(sq, -1, -2)
    tall = np.concatenate([sq, rng.standard_normal((3, 3, n))], axis=-2)
    args = [qb.array(x) for x in (sq, sym, tall, np.swapaxes(tall, -1, -2))]
    got = qb.jit(_lapack_sized)(*args)
    expected = _interpreted(_lapack_sized, *args)
    for k, (value, reference) in enumerate(zip(got, expected)):
        # matrix 1 is singular: its singular vectors are not unique, their derivatives inf
        checked = [0, 1, 2] if k in (0, 1, 2, 3, 5, 8, 10, 12, 14) else [0, 2]
        assert_close(np64(value)[checked], np64(reference)[checked], rtol=1e-9, atol=1e-11,
                     err_msg=str(k))
    assert_close(np64(got[0])[1], [0.0, -np.inf], atol=0)
    assert np.isnan(np64(got[1])[2]).all() and np.isnan(np64(got[4])[2]).all()


def test_cholesky_of_larger_matrices_calls_lapack_and_matches_the_interpreter():
    """From LAPACK_MIN rows on, the factor is LAPACK's ``dpotrf`` on a float64 copy (called
    from the part itself): the interpreter's values, NaN for a matrix that is not positive
    definite (and one holding a NaN), float32 and stacks, with its gradient; the loops below."""
    from lowering.numba_cpu.lapack import LAPACK_MIN, lapack_available

    if not lapack_available():
        pytest.skip("no LAPACK here (neither NumPy's OpenBLAS nor SciPy's)")
    rng = np.random.default_rng(3)
    for n in (LAPACK_MIN, 2 * LAPACK_MIN + 3, LAPACK_MIN - 1):
        m = rng.standard_normal((4, n, n))
        spd = m @ np.swapaxes(m, -1, -2) + n * np.eye(n)
        spd[1, 2, 2] = -50.0  # not positive definite
        spd[2, 0, 1] = spd[2, 1, 0] = np.nan
        fn = lambda a: (qb.cholesky(a), qb.grad(lambda a: qb.sum(qb.cholesky(a)[3] ** 3))(a))  # noqa: E731
        assert ("_potrf(" in qb.jit(fn).lower(qb.array(spd)).source) == (n >= LAPACK_MIN)
        for dtype, tol in ((np.float64, 1e-10), (np.float32, 1e-4)):
            args = [qb.array(spd.astype(dtype))]
            got = qb.jit(fn)(*args)
            expected = _interpreted(fn, *args)
            for value, reference in zip(got, expected):
                assert np.asarray(value).dtype == dtype
                assert_close(np64(value)[[0, 3]], np64(reference)[[0, 3]], rtol=tol, atol=tol)
            low = np64(got[0])
            assert np.isnan(low[1]).all() and np.isnan(low[2]).all()
            assert (np.triu(low[0], 1) == 0).all()
