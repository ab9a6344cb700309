"""Bivariate normal orthant probabilities and the pairwise correlation solve.

Phi2(h, k; rho) = P(u_a < h, u_b < k) for standard normals (u_a, u_b) with
correlation rho is computed by Genz's method (2004), written here in JAX and
vectorised: for |rho| < 0.925 Gauss-Legendre quadrature of Plackett's identity
in the variable t = asin(r),

    Phi2 = Phi(h) Phi(k)
           + 1/(2 pi) int_0^{asin rho} exp(-(h^2 + k^2 - 2 h k sin t) / (2 cos^2 t)) dt,

and for |rho| >= 0.925 Drezner and Wesolowsky's expansion around |rho| = 1 with
a quadrature of the remainder, which stays accurate where the first integrand
turns into a step (|rho| -> 1 with h close to k). :data:`NUM_NODES`
Gauss-Legendre nodes in both. Accuracy, measured against SciPy's Owen's T
function (``tests/test_clipped_gaussian.py``): below 1e-14 absolute in float64
for |h|, |k| < 6 and every rho in [-1, 1].

The clipped-Gaussian model with biases (Lee and Sompolinsky (1999), eq. 10; the
program :func:`ppl_models.clipped_gaussian.model`) relates the binary second moment
of a pair of units to the correlation rho of their Gaussians:

    <s_a s_b> = 4 Phi2(xi_a, xi_b; rho) - 2 Phi(xi_a) - 2 Phi(xi_b) + 1,

increasing in rho with derivative 4 phi2(xi_a, xi_b; rho) > 0.
:func:`solve_pair_correlations` inverts it for every pair at once by Newton's
method kept inside a shrinking bracket (bisection where a Newton step would
leave it), vectorised over pairs in chunks.

References
----------
D. D. Lee and H. Sompolinsky, "Learning a continuous hidden variable model for binary
data", Advances in Neural Information Processing Systems 11 (NIPS 1998), 1999,
eq. 7-10. Drezner, Wesolowsky (1990), "On the computation of the bivariate normal
integral", J. Stat. Comput. Simul. 35, 101-107; Genz (2004), "Numerical computation
of rectangular bivariate and trivariate normal and t probabilities", Stat. Comput.
14, 251-260.
"""

from __future__ import annotations

import functools
import math

import jax
import jax.numpy as jnp
import numpy as np
from jax.scipy.special import ndtr

from inference.engine import host

__all__ = ["bivariate_normal_cdf", "pair_density", "pair_second_moment", "solve_pair_correlations",
           "nearest_correlation", "NUM_NODES"]

#: Gauss-Legendre nodes of both Phi2 quadratures (Genz uses 20 for |rho| > 0.75).
NUM_NODES = 20
_NODES, _WEIGHTS = np.polynomial.legendre.leggauss(NUM_NODES)


def _upper_orthant(h, k, r):
    """P(u_a > h, u_b > k), Genz's BVND, for arrays of one float dtype."""
    dtype = h.dtype
    nodes = jnp.asarray(_NODES, dtype)
    weights = jnp.asarray(_WEIGHTS, dtype)
    r = jnp.clip(r, -1.0, 1.0)
    # |r| < 0.925: quadrature of Plackett's identity in t = asin(r).
    hk = h * k
    hs = 0.5 * (h * h + k * k)
    asr = jnp.arcsin(r)
    sn = jnp.sin(asr[..., None] * (nodes + 1.0) / 2.0)
    terms = jnp.exp((sn * hk[..., None] - hs[..., None]) / (1.0 - sn * sn))
    small = asr * jnp.sum(weights * terms, axis=-1) / (4.0 * math.pi) + ndtr(-h) * ndtr(-k)
    # |r| >= 0.925: expansion around |r| = 1 (Drezner, Wesolowsky) plus quadrature.
    kk = jnp.where(r > 0, k, -k)
    hk = h * kk
    one_minus = jnp.maximum((1.0 - r) * (1.0 + r), 10.0 * jnp.finfo(dtype).eps)
    a = jnp.sqrt(one_minus)
    bs = (h - kk) ** 2
    c = (4.0 - hk) / 8.0
    d = (12.0 - hk) / 16.0
    big = a * jnp.exp(-(bs / one_minus + hk) / 2.0) * (
        1.0 - c * (bs - one_minus) * (1.0 - d * bs / 5.0) / 3.0 + c * d * one_minus ** 2 / 5.0)
    b = jnp.sqrt(bs)
    tail = (jnp.exp(-hk / 2.0) * math.sqrt(2.0 * math.pi) * ndtr(-b / a) * b
            * (1.0 - c * bs * (1.0 - d * bs / 5.0) / 3.0))
    big = big - jnp.where(hk > -160.0, tail, 0.0)
    half = (a / 2.0)[..., None]
    xs = (half * (nodes + 1.0)) ** 2
    rs = jnp.sqrt(1.0 - xs)
    exponent = -(bs[..., None] / xs + hk[..., None]) / 2.0
    c_, d_ = c[..., None], d[..., None]
    inner = jnp.exp(exponent) * (jnp.exp(-hk[..., None] * xs / (2.0 * (1.0 + rs) ** 2)) / rs
                                 - (1.0 + c_ * xs * (1.0 + d_ * xs)))
    inner = jnp.where(exponent > -100.0, inner, 0.0)
    big = -(big + half[..., 0] * jnp.sum(weights * inner, axis=-1)) / (2.0 * math.pi)
    positive = big + ndtr(-jnp.maximum(h, kk))
    negative = -big + jnp.where(kk > h, jnp.where(h < 0, ndtr(kk) - ndtr(h),
                                                  ndtr(-h) - ndtr(-kk)), 0.0)
    near_one = jnp.where(r > 0, positive, negative)
    # |r| = 1 exactly: u_b = +-u_a, a one-dimensional probability.
    at_one = jnp.where(r > 0, ndtr(-jnp.maximum(h, k)), jnp.maximum(ndtr(-k) - ndtr(h), 0.0))
    return jnp.where(jnp.abs(r) < 0.925, small, jnp.where(jnp.abs(r) == 1.0, at_one, near_one))


def bivariate_normal_cdf(h, k, rho):
    """Phi2(h, k; rho) = P(u_a < h, u_b < k) for standard normals with correlation rho.

    Broadcasts ``h``, ``k`` and ``rho`` (rho in [-1, 1]) and computes in their
    common float dtype: float64 (under ``jax.enable_x64``) is accurate to 1e-14;
    float32 to about 1e-6 for |rho| <= 0.999 (closer to +-1, 1 - rho^2 itself
    loses its digits in float32: use float64 there).

    >>> import jax.numpy as jnp
    >>> round(float(bivariate_normal_cdf(0.0, 0.0, 0.5)), 6)  # 1/4 + asin(1/2) / (2 pi)
    0.333333
    """
    h, k, rho = jnp.broadcast_arrays(*(jnp.asarray(v) for v in (h, k, rho)))
    dtype = jnp.result_type(h, k, rho, float)
    h, k, rho = (v.astype(dtype) for v in (h, k, rho))
    return _upper_orthant(-h, -k, rho)


def pair_density(h, k, rho):
    """phi2(h, k; rho), the derivative of Phi2 in rho."""
    one_minus = jnp.maximum(1.0 - rho * rho, jnp.finfo(jnp.result_type(rho)).tiny)
    exponent = -(h * h - 2.0 * rho * h * k + k * k) / (2.0 * one_minus)
    return jnp.exp(exponent) / (2.0 * math.pi * jnp.sqrt(one_minus))


def pair_second_moment(h, k, rho):
    """<s_a s_b> for s = sign(u + threshold): 4 Phi2(h, k; rho) - 2 Phi(h) - 2 Phi(k) + 1."""
    return 4.0 * bivariate_normal_cdf(h, k, rho) - 2.0 * ndtr(h) - 2.0 * ndtr(k) + 1.0


def _moment_range(h, k):
    """<s_a s_b> at rho = -1 and at rho = +1 (the reachable interval)."""
    ph, pk = ndtr(h), ndtr(k)
    at_plus = 4.0 * jnp.minimum(ph, pk) - 2.0 * ph - 2.0 * pk + 1.0
    at_minus = 4.0 * jnp.maximum(ph + pk - 1.0, 0.0) - 2.0 * ph - 2.0 * pk + 1.0
    return at_minus, at_plus


def _prepare(h, k, target):
    """Reachability, stand-in targets for unreachable pairs, and the arcsine start."""
    low_value, high_value = _moment_range(h, k)
    below, above = target <= low_value, target >= high_value
    # Unreachable targets are set to -1 / +1 at the end; solve an easy stand-in meanwhile.
    target = jnp.where(below | above, pair_second_moment(h, k, jnp.zeros_like(h)), target)
    start = jnp.clip(jnp.sin(0.5 * math.pi * target), -0.999, 0.999)  # the zero-bias answer
    return target, start, below, above


@functools.partial(jax.jit, static_argnames=("max_iterations",))
def _iterate(h, k, target, rho, low, high, tol, max_iterations):
    """Bracketed Newton on a chunk of pairs until every pair is done or the cap is hit.

    A pair is done when its step is at most ``tol`` or its moment residual is
    negligible (which decides where the moment hardly depends on rho).
    """
    moment_tol = 100.0 * jnp.finfo(h.dtype).eps

    def body(carry):
        rho, low, high, done, it = carry
        value = pair_second_moment(h, k, rho) - target
        low = jnp.where(value < 0, rho, low)
        high = jnp.where(value >= 0, rho, high)
        slope = 4.0 * pair_density(h, k, rho)
        newton = rho - value / jnp.where(slope > 0, slope, 1.0)
        inside = (slope > 0) & (newton > low) & (newton < high)
        settled = jnp.abs(value) <= moment_tol
        new = jnp.where(settled, rho, jnp.where(inside, newton, 0.5 * (low + high)))
        done = settled | (jnp.abs(new - rho) <= tol)
        return new, low, high, done, it + 1

    def running(carry):
        return ~jnp.all(carry[3]) & (carry[4] < max_iterations)

    init = (rho, low, high, jnp.zeros(rho.shape, bool), 0)
    return jax.lax.while_loop(running, body, init)


def _chunked(fn, arrays, chunk_size):
    """``fn`` over equal chunks of 1-D ``arrays`` (zero-padded), results concatenated."""
    size = arrays[0].shape[0]
    num_chunks = -(-size // chunk_size)
    padded = num_chunks * chunk_size - size
    stacked = [jnp.pad(v, (0, padded)).reshape(num_chunks, chunk_size) for v in arrays]
    out = jax.lax.map(lambda chunk: fn(*chunk), tuple(stacked))
    return [v.reshape(-1)[:size] if v.ndim == 2 else v for v in out]


#: Iterations every pair gets before the unfinished pairs are gathered and solved on.
_FIRST_PHASE = 8


@functools.partial(jax.jit, static_argnames=("num_iterations", "chunk_size"))
def _first_phase(h, k, target, tol, num_iterations, chunk_size):
    """:func:`_prepare`, then ``num_iterations`` for every pair, chunk by chunk.

    Jitted as a whole (compiled once per number of pairs and chunk size) so that
    repeated solves do not re-trace the chunked loop.
    """
    target, start, below, above = _prepare(h, k, target)
    ones = jnp.ones_like(start)
    rho, low, high, done, _ = _chunked(
        lambda *a: _iterate(*a, tol, max_iterations=num_iterations),
        (h, k, target, start, -ones, ones), chunk_size)
    return target, rho, low, high, done, below, above


def solve_pair_correlations(h, k, target, *, tol=1e-10, max_iterations=100, chunk_size=65536):
    """rho with 4 Phi2(h, k; rho) - 2 Phi(h) - 2 Phi(k) + 1 = target, for every pair.

    Parameters
    ----------
    h, k, target : arrays (num_pairs,)
        Thresholds (biases xi_a, xi_b) and the binary second moments <s_a s_b>.
    tol : float
        A pair is solved when its last step moved rho by at most ``tol`` (or its
        moment residual is at rounding level).
    max_iterations : int
        Cap on Newton / bisection iterations per pair (bisection alone halves the
        bracket [-1, 1] per iteration, so 40 iterations give 1e-12).
    chunk_size : int
        Pairs solved together (memory: a few chunk_size * NUM_NODES floats).

    Returns
    -------
    rho : array (num_pairs,)
        In [-1, 1]; a target outside the moments reachable for these thresholds
        (sampling noise, or a unit that copies another) gives rho = -1 or +1.
    at_boundary : bool array (num_pairs,)
        Which pairs were set to -1 or +1.
    unsolved : int
        Pairs that did not meet ``tol`` within ``max_iterations``.

    All pairs first get a few iterations together, chunk by chunk; the few that
    need more (near-degenerate pairs that fall back to bisection) are then
    gathered and iterated on alone, so they do not hold up the rest. Computes in
    the inputs' dtype: call under ``jax.enable_x64(True)`` with float64 inputs
    for 1e-10 in rho.
    """
    h, k, target = (jnp.atleast_1d(jnp.asarray(v)) for v in (h, k, target))
    num_pairs = target.shape[0]
    if num_pairs == 0:
        return target, jnp.zeros(0, bool), 0
    chunk_size = max(1, min(int(chunk_size), num_pairs))
    first = min(_FIRST_PHASE, max_iterations)
    target, rho, low, high, done, below, above = _first_phase(
        h, k, target, tol, num_iterations=first, chunk_size=chunk_size)
    rest = np.flatnonzero(~np.asarray(done))
    if rest.size and max_iterations > first:
        size = 1 << int(np.ceil(np.log2(rest.size)))  # few distinct shapes to compile
        index = host.array(np.pad(rest, (0, size - rest.size), mode="edge"))
        rho, done = _second_phase(h, k, target, rho, low, high, done, index, tol,
                                  num_iterations=max_iterations - first)
    rho = jnp.where(below, -1.0, jnp.where(above, 1.0, rho))
    return rho, below | above, int(np.sum(~np.asarray(done)))


@functools.partial(jax.jit, static_argnames=("num_iterations",))
def _second_phase(h, k, target, rho, low, high, done, index, tol, *, num_iterations):
    """The unfinished pairs ``index`` (padded to a power of two with copies of the last)
    gathered, iterated on alone and scattered back: one program per number of pairs and
    padded size (the gathers and scatters outside ``jit`` were compiled one by one)."""
    more = _iterate(h[index], k[index], target[index], rho[index], low[index], high[index],
                    tol, max_iterations=num_iterations)
    return rho.at[index].set(more[0]), done.at[index].set(more[3])


def nearest_correlation(matrix, *, tol=None, max_iterations=500, min_eigenvalue=0.0):
    """The nearest correlation matrix in the Frobenius norm (Higham 2002).

    Alternating projections with Dykstra's correction between the positive
    semidefinite cone (eigenvalues clipped at ``min_eigenvalue``) and the
    symmetric matrices with unit diagonal, until the iterate moves by less than
    ``tol`` (relative, Frobenius). Returns ``(matrix, iterations, converged)``.

    ``tol=None`` is 1e-9, or 4 n machine epsilons of the input's float type for an
    n x n matrix where that is larger (1.4e-6 for n = 3 in float32): near the fixed
    point the rounding of each eigendecomposition moves the iterate by some n
    epsilons, so a smaller tolerance is met only where the rounding happens to cancel,
    which changes with the compiler's choices. The result is positive semidefinite to
    about ``tol`` (its smallest eigenvalue may be that far below zero).

    >>> import jax.numpy as jnp
    >>> c = jnp.array([[1.0, 0.9, -0.9], [0.9, 1.0, 0.9], [-0.9, 0.9, 1.0]])
    >>> out, _, ok = nearest_correlation(c)
    >>> bool(ok), bool(jnp.linalg.eigvalsh(out).min() > -1e-5), float(out[0, 0])
    (True, True, 1.0)
    """
    a = jnp.asarray(matrix)
    if not jnp.issubdtype(a.dtype, jnp.floating):
        a = a.astype(jnp.result_type(float))
    if tol is None:
        tol = max(1e-9, 4 * a.shape[0] * float(jnp.finfo(a.dtype).eps))
    a = 0.5 * (a + a.T)
    eye = jnp.eye(a.shape[0], dtype=a.dtype)
    return _nearest_correlation_loop(a, eye, tol=tol, max_iterations=max_iterations,
                                     min_eigenvalue=min_eigenvalue)


@functools.partial(jax.jit, static_argnames=("tol", "max_iterations", "min_eigenvalue"))
def _nearest_correlation_loop(a, eye, *, tol, max_iterations, min_eigenvalue):
    """The projections of :func:`nearest_correlation` from the symmetrised ``a``: jitted
    once per shape and option (a loop called outside ``jit`` with a new body closure
    would be compiled again on every call)."""

    def psd(x):
        values, vectors = jnp.linalg.eigh(x)
        return (vectors * jnp.maximum(values, min_eigenvalue)) @ vectors.T

    def body(carry):
        y, correction, _, it = carry
        r = y - correction
        x = psd(r)
        correction = x - r
        new = x * (1.0 - eye) + eye
        change = jnp.linalg.norm(new - y) / jnp.maximum(jnp.linalg.norm(y), 1.0)
        return new, correction, change, it + 1

    def running(carry):
        return (carry[2] > tol) & (carry[3] < max_iterations)

    init = (a, jnp.zeros_like(a), jnp.asarray(jnp.inf, a.dtype), 0)
    y, _, change, iterations = jax.lax.while_loop(running, body, init)
    return y, iterations, change <= tol
