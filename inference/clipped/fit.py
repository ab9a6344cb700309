"""Learning the clipped-Gaussian model by moment matching, and using it.

The model and its learning rule are those of D. D. Lee and H. Sompolinsky, "Learning
a continuous hidden variable model for binary data", Advances in Neural Information
Processing Systems 11 (NIPS 1998), 1999 (the model is the program
:func:`ppl_models.clipped_gaussian.model`). The paper's algorithm,
:func:`fit_clipped_gaussian`:

1. empirical means <s_a> and second moments C_ss_ab = <s_a s_b> of the patterns;
2. biases xi_a = sqrt(2) erfinv(<s_a>) (eq. 9 with unit variances), so that
   P(s_a = +1) = Phi(xi_a);
3. the Gaussian correlations C_xx: without biases the arcsine law inverted,
   C_xx = sin(pi C_ss / 2) (eq. 7); with biases, for every pair the rho that
   solves 4 Phi2(xi_a, xi_b; rho) - 2 Phi(xi_a) - 2 Phi(xi_b) + 1 = C_ss_ab
   (eq. 10; :func:`inference.clipped.orthant.solve_pair_correlations`, all pairs at once,
   in float64);
4. W from the P leading eigenvectors of C_xx: W = U_P diag(sqrt(lambda_P)), the
   best rank-P approximation C_xx ~ W W^T.

C_xx need not be positive semidefinite (the paper's "shortcoming": data with
global constraints, such as patterns with zero sum, have no Gaussian behind
them); negative eigenvalues are reported with a warning and a flag, and
``project=True`` replaces C_xx by the nearest correlation matrix first.

The fitted model is the program ``ppl_models.clipped_gaussian.model``.
:func:`program_parameters` gives its arguments at a noise sigma with the fitted
marginals kept (the biases rescaled to the variance ``|W_a|^2 + sigma^2`` of x_a);
:func:`model_moments` computes the means and second moments that the program
predicts, the score of every learner (:func:`moment_error`, against held-out
patterns). :func:`infer_hidden` finds the MAP hidden causes of patterns from the
program's log-density, and :func:`morph` interpolates between two patterns in
hidden space and clips (the paper's Fig. 4).
"""

from __future__ import annotations

import functools
import math
import numbers
import warnings
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.scipy.special import erfinv, ndtr
from numpyro import handlers
from numpyro.infer.util import log_density

from inference.clipped.batch_moments import stream_moments
from inference.clipped.orthant import (
    nearest_correlation,
    pair_density,
    pair_second_moment,
    solve_pair_correlations,
)
from inference.engine.protocol import closed_form_protocol
from inference.engine.sharding import resolve_mesh, sum_over_shards
from inference.engine.streaming import is_stream
from inference.program.handlers import noiseless
from inference.program.optimize import lbfgs_minimize
from ppl_models import clipped_gaussian
from ppl_models.diagnostics import NumericalWarning
from ppl_models.validation import check_bool, check_choice, check_positive, check_positive_int

__all__ = ["ClippedGaussianFit", "fit_clipped_gaussian", "program_parameters", "model_moments",
           "moment_error", "infer_hidden", "morph", "empirical_moments", "NEGATIVE_TOLERANCE"]

#: An eigenvalue of C_xx counts as negative below -NEGATIVE_TOLERANCE * largest
#: eigenvalue (rounding in float64 leaves about 1e-15 on zero eigenvalues).
NEGATIVE_TOLERANCE = 1e-9


def _residual_variance(fit) -> float:
    """The mean over the N Gaussian units of the variance that the P hidden units leave
    unexplained, (trace(C_xx) - sum of its P largest eigenvalues) / N: the one entry of
    the closed-form fit's trace (the result protocol: one iteration, always converged;
    trouble is flagged by ``has_negative_eigenvalues`` and ``num_boundary_pairs``)."""
    eigenvalues = np.asarray(fit.eigenvalues, dtype=float)
    num_hidden = int(np.shape(fit.weights)[-1])
    return (eigenvalues.sum() - eigenvalues[:num_hidden].sum()) / max(len(eigenvalues), 1)


@closed_form_protocol("residual_variance", _residual_variance)
class ClippedGaussianFit(NamedTuple):
    """Result of :func:`fit_clipped_gaussian`.

    Attributes
    ----------
    weights : array (N, P)
        W = U_P diag(sqrt(lambda_P)) (columns: leading eigenvectors of C_xx).
    bias : array (N,)
        xi, in units of the Gaussian's standard deviation (zeros with ``bias=False``).
    gaussian_corr : array (N, N)
        C_xx, unit diagonal (after projection when ``projected``); rows and
        columns of constant units are zero (``constant_columns="independent"``).
    eigenvalues : array (N,)
        Eigenvalues of ``gaussian_corr``, largest first.
    binary_corr : array (N, N)
        C_ss = <s_a s_b> of the data (unit diagonal).
    means : array (N,)
        <s_a> of the data (as used: see ``constant_columns``).
    has_negative_eigenvalues : bool
        Whether C_xx (before any projection) has an eigenvalue below
        -NEGATIVE_TOLERANCE times its largest.
    min_eigenvalue : float
        Smallest eigenvalue of C_xx before any projection.
    eigenvalue_noise : float
        How far sampling noise alone moves the eigenvalues of C_xx: 2 sqrt(N) times
        the root mean square standard error of its entries (the spectral norm of
        a symmetric random matrix with such entries; standard errors by the delta
        method through eq. 7 or eq. 10, as if the patterns were independent
        draws). A low-rank C_xx estimated from samples always has small negative
        eigenvalues; only those below -eigenvalue_noise are warned about.
    projected : bool
        Whether C_xx was replaced by the nearest correlation matrix.
    num_boundary_pairs : int
        Pairs whose second moment lies outside what any rho reaches for their
        biases (set to rho = -1 or +1).
    constant_columns : int array
        Units with the same value in every pattern.
    num_examples : int
    """

    weights: jax.Array
    bias: jax.Array
    gaussian_corr: jax.Array
    eigenvalues: jax.Array
    binary_corr: jax.Array
    means: jax.Array
    has_negative_eigenvalues: bool
    min_eigenvalue: float
    eigenvalue_noise: float
    projected: bool
    num_boundary_pairs: int
    constant_columns: np.ndarray
    num_examples: int


def empirical_moments(s, *, mesh=None):
    """Means (N,) and second moments <s_a s_b> (N, N) of -1 / +1 patterns (num_examples, N).

    With a ``mesh`` (:func:`inference.engine.sharding.resolve_mesh`) the patterns are split
    over its devices by rows (padded with zero rows, which add nothing) and the sums
    sum_mu s_mu and sum_mu s_mu s_mu^T are added over the devices (``psum``).
    """
    s = jnp.asarray(s)
    if mesh is None:
        # exact sums of +-1 divided by N, as the streamed moments divide theirs
        return jnp.sum(s, axis=0) / s.shape[0], (s.T @ s) / s.shape[0]
    first, second = sum_over_shards(_moment_sums, mesh, [s])
    return first / s.shape[0], second / s.shape[0]


def _moment_sums(shard, valid):
    """sum_mu s_mu and sum_mu s_mu s_mu^T of one shard (:func:`empirical_moments`; module
    level, so that the sharded program is compiled once per mesh and shape). Padded rows
    are zeros: no masking needed."""
    return jnp.sum(shard, axis=0), shard.T @ shard


def fit_clipped_gaussian(s, num_hidden: int, *, bias: bool = True, project: bool = False,
                         constant_columns: str = "error", tol: float = 1e-10,
                         chunk_size: int = 65536, devices=None, mesh=None) -> ClippedGaussianFit:
    """Learn W (and biases) of the clipped-Gaussian model from binary patterns.

    Parameters
    ----------
    s : array (num_examples, N)
        Patterns of -1 / +1, or of 0 / 1 (read as 0 -> -1, 1 -> +1). Also a stream
        too large for memory (an ``np.memmap``, a callable returning a fresh iterator
        of batches, a list of batches, an :class:`inference.engine.streaming.BatchSource`):
        the moments are then summed over the batches in one pass
        (:func:`inference.clipped.batch_moments.stream_moments`; what
        :func:`inference.clipped.stream.fit_clipped_gaussian_stream` does, same result).
    num_hidden : int
        P, the number of hidden causes (columns of W), 1 <= P <= N.
    bias : bool
        Fit biases from the means (eq. 8-10). ``False`` is the zero-bias model:
        xi = 0 and the arcsine law C_xx = sin(pi C_ss / 2) (eq. 7), the right
        model for data with zero means (such as the translation-invariant bumps).
    project : bool
        Replace C_xx by the nearest correlation matrix (Higham 2002) before the
        eigendecomposition when it has negative eigenvalues.
    constant_columns : {"error", "independent"}
        A unit with the same value in every pattern has an infinite bias
        (<s_a> = +-1). ``"error"`` raises; ``"independent"`` keeps it with the
        mean clipped to +-(1 - 1/num_examples) (a finite bias: the unit is +-1
        with probability 1 - 1/(2 num_examples)) and no part in C_xx: its row
        and column there are zero (diagonal included), so it adds no eigenvalue
        and W has a zero row for it; the unit is set by its bias alone.
    tol : float
        Tolerance of the pairwise solve in rho.
    chunk_size : int
        Pairs solved together (memory).
    devices : None, int or sequence of jax.Device
        Split the patterns over these devices for the moments, the one pass over
        the examples (:func:`inference.engine.sharding.resolve_mesh`): ``None`` uses all of
        ``jax.devices()`` when there are several (else the single-device path), an
        int the first that many. The pair moments <s_a s_b> are summed over the
        devices (``shard_map`` and ``psum``; sums of +-1 products, exact in float32
        below 2^24 patterns, so the fit is the same). The pairwise solve and the
        eigendecomposition act on N x N matrices and run on one device.
    mesh : jax.sharding.Mesh, optional
        A mesh of your own instead of ``devices`` (one axis, or one named ``"data"``).

    Returns
    -------
    ClippedGaussianFit

    Warns
    -----
    NumericalWarning
        When C_xx has negative eigenvalues beyond what sampling noise explains
        (``eigenvalue_noise``: the model cannot represent the data's
        correlations; smaller ones only set ``has_negative_eigenvalues``), or fewer
        than ``num_hidden`` positive ones (W then has zero columns).

    References
    ----------
    Lee and Sompolinsky (1999), eq. 7-10 and the learning rule of the
    translation-invariant example.

    Examples
    --------
    >>> import jax, jax.numpy as jnp
    >>> from ppl_models import clipped_gaussian
    >>> data = clipped_gaussian.generate(jax.random.key(0), 2000, 8, 2)  # N = 8, P = 2
    >>> fit = fit_clipped_gaussian(data.s, 2)
    >>> fit.weights.shape, fit.num_examples
    ((8, 2), 2000)
    >>> bool(jnp.abs(fit.bias - data.bias).max() < 0.2)  # the planted biases
    True
    >>> # W is found up to a rotation of its columns: compare W W^T
    >>> bool(jnp.abs(fit.weights @ fit.weights.T - data.weights @ data.weights.T).max() < 0.3)
    True
    """
    streamed = is_stream(s)  # np.memmap, callable, list of batches, BatchSource
    if streamed and (devices is not None or mesh is not None):
        raise ValueError("devices= and mesh= apply to an in-memory s, not to a stream of "
                         f"batches; got devices={devices!r}, mesh={mesh!r}")
    if not streamed:
        mesh = resolve_mesh(devices, mesh)
        spins = clipped_gaussian.to_spins(s, "s")
        num_examples, num_units = spins.shape
        num_hidden = check_positive_int(num_hidden, "num_hidden", maximum=num_units,
                                        why=f" (the number of units N = {num_units} in s)")
    check_choice(constant_columns, "constant_columns", ("error", "independent"))
    check_positive(tol, "tol")
    check_positive_int(chunk_size, "chunk_size")
    check_bool(bias, "bias")
    check_bool(project, "project")
    if streamed:  # one pass of sums over the batches (the streamed fit)
        means, second, num_examples = stream_moments(s)
        num_units = int(means.shape[0])
        num_hidden = check_positive_int(num_hidden, "num_hidden", maximum=num_units,
                                        why=f" (the number of units N = {num_units} in source)")
    else:
        means, second = empirical_moments(spins, mesh=mesh)
    return _fit_moments(means, second, num_examples, num_hidden, bias=bias, project=project,
                        constant_columns=constant_columns, tol=tol, chunk_size=chunk_size)


def _fit_moments(means, second, num_examples, num_hidden, *, bias, project, constant_columns,
                 tol, chunk_size, stacklevel=3):
    """:func:`fit_clipped_gaussian` from the patterns' means (N,) and <s_a s_b> (N, N)
    (checked arguments), whether they came from an array or from a pass over batches."""
    num_units = int(np.shape(means)[0])
    means_np = np.asarray(means)
    constant = np.flatnonzero(np.abs(means_np) == 1.0)
    if bias and constant.size and constant_columns == "error":
        shown = f"{constant[:10].tolist()}{' ...' if constant.size > 10 else ''}"
        raise ValueError(
            f"s has {constant.size} constant column(s) {shown}"
            " (the same value in every pattern: <s_a> = +-1 needs an infinite bias); drop them "
            "or pass constant_columns='independent'")
    with jax.enable_x64(True):
        second64 = jnp.asarray(np.asarray(second, np.float64))
        if bias:
            limit = 1.0 - 1.0 / num_examples
            means64 = jnp.clip(jnp.asarray(means_np, jnp.float64), -limit, limit)
            xi = math.sqrt(2.0) * erfinv(means64)
            rows, cols = np.triu_indices(num_units, k=1)
            rho, boundary, unsolved = solve_pair_correlations(
                xi[rows], xi[cols], second64[rows, cols], tol=tol, chunk_size=chunk_size)
            if constant.size:
                free = ~(np.isin(rows, constant) | np.isin(cols, constant))
                rho = jnp.where(jnp.asarray(free), rho, 0.0)
                boundary = boundary & jnp.asarray(free)
            corr = jnp.zeros((num_units, num_units), jnp.float64).at[rows, cols].set(rho)
            corr = corr + corr.T + jnp.diag(jnp.asarray(
                np.where(np.isin(np.arange(num_units), constant), 0.0, 1.0)))
            num_boundary = int(jnp.sum(boundary))
            if unsolved:
                warnings.warn(f"fit_clipped_gaussian: {unsolved} pair(s) did not reach tol={tol} "
                              "in the correlation solve", NumericalWarning, stacklevel=stacklevel)
        else:
            means64 = jnp.zeros(num_units, jnp.float64)
            xi = means64
            corr = jnp.sin(0.5 * math.pi * second64)
            num_boundary = 0
        noise_scale = _eigenvalue_noise(corr, second64, xi, num_examples, constant, bias)
        eigenvalues, eigenvectors = jnp.linalg.eigh(corr)
        eigenvalues, eigenvectors = eigenvalues[::-1], eigenvectors[:, ::-1]
        largest = float(jnp.max(jnp.abs(eigenvalues)))
        min_eigenvalue = float(eigenvalues[-1])
        negative = min_eigenvalue < -NEGATIVE_TOLERANCE * largest
        significant = negative and min_eigenvalue < -noise_scale
        projected = False
        if negative:
            num_negative = int(jnp.sum(eigenvalues < -NEGATIVE_TOLERANCE * largest))
            message = (f"fit_clipped_gaussian: the Gaussian correlation matrix C_xx has "
                       f"{num_negative} negative eigenvalue(s) (smallest {min_eigenvalue:.3g}, "
                       f"largest {largest:.3g}), beyond the sampling noise of "
                       f"{num_examples} patterns (about {noise_scale:.2g}): no clipped Gaussian "
                       "matches these correlations")
            if project:  # over the units that take part (constant ones stay zero)
                free = np.flatnonzero(~np.isin(np.arange(num_units), constant))
                block, _, converged = nearest_correlation(corr[np.ix_(free, free)])
                corr = jnp.zeros_like(corr).at[np.ix_(free, free)].set(block)
                eigenvalues, eigenvectors = jnp.linalg.eigh(corr)
                eigenvalues, eigenvectors = eigenvalues[::-1], eigenvectors[:, ::-1]
                projected = True
                message += "; projected to the nearest correlation matrix"
                if not bool(converged):
                    message += " (the projection did not converge)"
                    significant = True
            else:
                message += "; project=True uses the nearest correlation matrix instead"
            if significant:
                warnings.warn(message, NumericalWarning, stacklevel=stacklevel)
        leading = eigenvalues[:num_hidden]
        num_positive = int(jnp.sum(leading > NEGATIVE_TOLERANCE * largest))
        if num_positive < num_hidden:
            warnings.warn(f"fit_clipped_gaussian: C_xx has only {num_positive} positive "
                          f"eigenvalue(s) for num_hidden={num_hidden}; the other columns of W "
                          "are zero", NumericalWarning, stacklevel=stacklevel)
        weights = eigenvectors[:, :num_hidden] * jnp.sqrt(jnp.maximum(leading, 0.0))
        arrays = {name: np.asarray(value) for name, value in (
            ("weights", weights), ("bias", xi), ("gaussian_corr", corr),
            ("eigenvalues", eigenvalues), ("binary_corr", second64), ("means", means64))}
    dtype = jnp.result_type(float)  # float32 unless the caller enabled x64
    return ClippedGaussianFit(
        **{name: jnp.asarray(value, dtype) for name, value in arrays.items()},
        has_negative_eigenvalues=bool(negative), min_eigenvalue=min_eigenvalue,
        eigenvalue_noise=noise_scale,
        projected=projected, num_boundary_pairs=num_boundary, constant_columns=constant,
        num_examples=int(num_examples))


def _eigenvalue_noise(corr, second, xi, num_examples, constant, bias):
    """Sampling-noise scale of the eigenvalues of C_xx (see ``ClippedGaussianFit``)."""
    num_units = corr.shape[0]
    if num_units < 2:
        return 0.0
    rows, cols = np.triu_indices(num_units, k=1)
    t = second[rows, cols]
    se_t = jnp.sqrt(jnp.maximum(1.0 - t * t, 1.0 / num_examples) / num_examples)
    if bias:
        slope = 4.0 * pair_density(xi[rows], xi[cols], corr[rows, cols])
        se = jnp.minimum(se_t / jnp.maximum(slope, 1e-300), 2.0)
    else:
        se = se_t * 0.5 * math.pi * jnp.cos(0.5 * math.pi * t)
    if constant.size:
        se = jnp.where(jnp.asarray(np.isin(rows, constant) | np.isin(cols, constant)), 0.0, se)
    return float(2.0 * jnp.sqrt(num_units * jnp.mean(se * se)))


def program_parameters(fit: ClippedGaussianFit, noise: float = clipped_gaussian.DEFAULT_NOISE):
    """``model`` keyword arguments (weights, bias, noise) that keep the fitted marginals.

    In the program x_a = W_a y + xi_a + noise has variance ``|W_a|^2 + sigma^2``, not
    the unit variance the fit assumed, so the biases are rescaled by its
    standard deviation: P(s_a = +1) = Phi(xi_a) as fitted.
    """
    noise = check_positive(noise, "noise") if noise else 0.0
    scale = jnp.sqrt(jnp.sum(fit.weights ** 2, axis=1) + noise ** 2)
    scale = jnp.where(scale > 0, scale, 1.0)
    return {"weights": fit.weights, "bias": fit.bias * scale, "noise": noise}


def model_moments(weights, bias, noise: float = 0.0):
    """Means (N,) and second moments <s_a s_b> (N, N) that the program predicts.

    x = W y + xi + noise is Gaussian with covariance W W^T + sigma^2 I, so each
    unit is +1 with probability Phi(xi_a / sd_a) and each pair follows eq. 10 with
    the correlation of x_a and x_b (computed in float64, returned in float32).
    """
    with jax.enable_x64(True):
        w = jnp.asarray(np.asarray(weights, np.float64))
        b = jnp.asarray(np.asarray(bias, np.float64))
        cov = w @ w.T + noise ** 2 * jnp.eye(w.shape[0], dtype=jnp.float64)
        sd = jnp.sqrt(jnp.maximum(jnp.diag(cov), 1e-300))
        h = b / sd
        corr = jnp.clip(cov / (sd[:, None] * sd[None, :]), -1.0, 1.0)
        second = pair_second_moment(h[:, None], h[None, :], corr)
        second = second.at[jnp.diag_indices(w.shape[0])].set(1.0)
        means, second = np.asarray(2.0 * ndtr(h) - 1.0), np.asarray(second)
    dtype = jnp.result_type(float)
    return jnp.asarray(means, dtype), jnp.asarray(second, dtype)


def moment_error(predicted, s_heldout):
    """How far predicted moments are from held-out patterns.

    ``predicted`` is ``(means, second_moments)`` (:func:`model_moments`). Returns a
    dict: ``corr_rmse`` (root mean square over pairs a < b of the difference in
    <s_a s_b>), ``mean_rmse`` (over units, in <s_a>), and ``noise_floor_corr``,
    the same RMS expected from sampling alone (sqrt(mean (1 - <s_a s_b>^2) / M)),
    below which no model can be told apart from the truth on M held-out patterns.
    """
    spins = clipped_gaussian.to_spins(s_heldout, "s_heldout")
    means, second = empirical_moments(spins)
    pred_means, pred_second = (jnp.asarray(v) for v in predicted)
    if pred_second.shape != second.shape:
        raise ValueError(f"predicted moments are for {pred_second.shape[0]} units; s_heldout has "
                         f"{second.shape[0]}")
    rows, cols = np.triu_indices(second.shape[0], k=1)
    diff = (pred_second - second)[rows, cols]
    floor = jnp.sqrt(jnp.mean(1.0 - second[rows, cols] ** 2) / spins.shape[0])
    return {"corr_rmse": float(jnp.sqrt(jnp.mean(diff ** 2))),
            "mean_rmse": float(jnp.sqrt(jnp.mean((pred_means - means) ** 2))),
            "noise_floor_corr": float(floor)}


def infer_hidden(s, weights, bias, *, noise: float = clipped_gaussian.DEFAULT_NOISE,
                 max_iterations: int = 200):
    """MAP hidden causes y (num_examples, P) of patterns under the program at noise sigma.

    Maximises log N(y; 0, I) + sum_a log Phi(s_a (W y + xi)_a / sigma), the
    program's log-density read by ``numpyro.infer.util.log_density`` (a concave
    function of y, so the maximum is unique), per pattern by L-BFGS
    (:func:`inference.program.optimize.lbfgs_minimize`), vectorised over patterns.
    Small sigma approaches the deterministic clip: y then sits just inside the
    cell of hidden space whose clip is the pattern, or as close to it as the
    prior allows when no y reproduces the pattern exactly.
    """
    spins = clipped_gaussian.to_spins(s, "s")
    weights = jnp.asarray(weights, spins.dtype)
    if weights.ndim != 2 or weights.shape[0] != spins.shape[1]:
        raise ValueError(f"weights must have shape (N, P) = ({spins.shape[1]}, P) to match s; "
                         f"got {weights.shape}")
    bias = jnp.broadcast_to(jnp.asarray(bias, spins.dtype), (spins.shape[1],))
    noise = check_positive(noise, "noise")
    max_iterations = check_positive_int(max_iterations, "max_iterations")
    if isinstance(noise, numbers.Real):  # a number: a constant of the program, as before
        return _infer_hidden(spins, weights, bias, None, noise=noise,
                             max_iterations=max_iterations)
    return _infer_hidden(spins, weights, bias, jnp.asarray(noise), noise=None,
                         max_iterations=max_iterations)


@functools.partial(jax.jit, static_argnames=("noise", "max_iterations"))
def _infer_hidden(spins, weights, bias, noise_array, *, noise, max_iterations):
    """:func:`infer_hidden` after the checks, jitted once per shape and option (weights
    and bias are arguments, so that new values reuse the compiled program). ``noise``
    is the static number, or None and ``noise_array`` the array given instead."""
    kwargs = {"weights": weights, "bias": bias,
              "noise": noise_array if noise is None else noise}

    def one(pattern):
        def objective(y):
            logp, _ = log_density(clipped_gaussian.model, (pattern[None],), kwargs, {"y": y[None]})
            return -logp

        y, _, _ = lbfgs_minimize(objective, jnp.zeros(weights.shape[1], spins.dtype),
                                 max_iterations=max_iterations, tol=1e-6)
        return y

    return jax.vmap(one)(spins)


def morph(pattern_a, pattern_b, steps: int, *, weights, bias,
          noise: float = clipped_gaussian.DEFAULT_NOISE):
    """Frames between two patterns, interpolated in hidden space and clipped (Fig. 4).

    The hidden causes of both patterns are inferred (:func:`infer_hidden`), the
    ``steps`` points y_t = (1 - t) y_a + t y_b, t = 0 .. 1, are clipped by the
    program's deterministic limit (``inference.program.handlers.noiseless``: s = sign(W y + xi)).
    Returns ``(frames, hidden)``: -1 / +1 arrays (steps, N) and (steps, P).
    """
    steps = check_positive_int(steps, "steps")
    if steps < 2:
        raise ValueError(f"steps must be at least 2 (the two end points); got {steps}")
    a = clipped_gaussian.to_spins(jnp.atleast_2d(jnp.asarray(pattern_a)), "pattern_a")
    b = clipped_gaussian.to_spins(jnp.atleast_2d(jnp.asarray(pattern_b)), "pattern_b")
    if a.shape != b.shape or a.shape[0] != 1:
        raise ValueError(f"pattern_a and pattern_b must be single patterns of the same length; "
                         f"got shapes {a.shape} and {b.shape}")
    ends = infer_hidden(jnp.concatenate([a, b]), weights, bias, noise=noise)
    t = jnp.linspace(0.0, 1.0, steps)[:, None]
    hidden = (1.0 - t) * ends[0] + t * ends[1]
    program = handlers.condition(noiseless(clipped_gaussian.model, sites="s"), {"y": hidden})
    trace = handlers.trace(handlers.seed(program, 0)).get_trace(
        None, weights=jnp.asarray(weights, a.dtype), bias=bias, noise=noise, num_examples=steps)
    return trace["s"]["value"], hidden
