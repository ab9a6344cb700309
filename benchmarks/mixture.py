"""Benchmark: full-covariance EM and k-means, ours against scikit-learn and gmmx.

Compares, in one run, on the same planted data, the same start and the same
machine (L. Xu, "YING-YANG machine: a Bayesian-Kullback scheme for unified learnings
and new results on vector quantization", ICONIP'95, 1995, sec. 4;
:mod:`inference.mixture.em`):

* EM, full covariances (``"em"``): ours, :func:`inference.fit_mixture` with
  ``mode="stochastic", covariance="full", prune=False`` (pruning off, so that
  every peer does the same work); scikit-learn's
  ``GaussianMixture(covariance_type="full")``; gmmx's jitted
  ``EMFitter(...).fit(x, GaussianMixtureModelJax)`` (gmmx 0.7, a JAX GMM
  library: its whole EM loop is one ``jax.jit``; it accepts float32 only, so
  its float64 row records the error it raises);
* k-means (``"kmeans"``): ours, ``fit_mixture(mode="nearest")`` (Lloyd's
  algorithm as the sigma -> 0 limit of the program), against scikit-learn's
  ``KMeans(algorithm="lloyd", n_init=1)``.

Same work for every peer: the data are ``ppl_models.mixture.generate`` (N
examples from a planted mixture of k components in d dimensions, separation
``--separation``, unequal weights and shapes), drawn once in float32 and cast
to float64 for the float64 rows. The start: means (k-means centres) are k
distinct examples picked by ``--seed``, weights equal, covariances the
identity (scikit-learn: ``precisions_init`` = identity), ``reg_covar`` 1e-6
everywhere. Early stopping is off (``tol=0`` for all; gmmx stops when the
change of its log-likelihood is below ``tol``, never with ``tol=0``), so each
peer runs exactly ``--iterations`` iterations; the table's ``iters`` column
shows the counts each peer reports (ours ``num_iterations``, scikit-learn
``n_iter_``, gmmx ``n_iter``). The k-means peers stop early only on a
fixed point (no label changes), which both detect alike.

Quality, on one yardstick for all peers: the mean log-likelihood per example
of the final parameters (EM) and the inertia per example, the mean squared
distance to the nearest final centre (k-means), both evaluated in float64
numpy by this script. ``agree`` is ``yes`` when ours and the peer differ by
at most ``rtol`` relative (1e-4 for float32 rows, 1e-8 for float64), plus,
for k-means, the fraction of examples with the same final label. Speed at
unequal quality is not a result: a goal counts as met only where the
qualities agree and the iteration counts match.

Timing: every peer warm. The first call (JAX: compilation included) is in
its own column; then ``--repeats`` warm calls, interleaved across peers so
that machine noise hits them alike, median and [min-max]. Ours is timed
twice: the public ``fit_mixture`` (input validation including a
``np.unique`` over a prefix of the rows, then the jitted loop) and its
jitted core (the engine's EM loop, ``run_em`` below) alone (the EM loop followed by the
criteria L_stocha, L_map, L_NN, J and the labels at the final parameters,
which reuse the loop's features in the same call; the counterpart of gmmx's
``EMFitter.fit``, which computes no criteria). Goals are judged on the
public call; the core ratio is printed beside it. scikit-learn has nothing
to compile: its first call is also its first timed call (and so is our core's, which the public call
compiled before it, when it compiles nothing). A peer whose first timed call
lasts longer than ``--long-fit`` seconds (default 20) is timed
``--long-repeats`` times (default 1) instead of ``--repeats``: at the full
size an EM fit of scikit-learn or gmmx lasts 15-40 s on 2 shared cores (ours
about 2-4 s), and three of each would double the run; the notes give every peer's
number of timed calls, and a [min-max] of one call is that call.

scikit-learn's BLAS/OpenMP threads (threadpoolctl) are chosen per estimator
by ``--sklearn-threads auto``: a 2-iteration fit on 10,000 rows (GaussianMixture;
KMeans: the whole problem at full length, since its fits are short and which
setting wins depends on the size) with the default thread count and with 1
thread, the faster is used (on a shared,
loaded 2-core machine OpenBLAS's two threads were 30-60x slower than one on
GaussianMixture's many small products).

Precision: every peer gets the data and the start in the row's dtype.
scikit-learn 1.9 keeps float32 data as float32 (``validate_data(dtype=
[float64, float32])``) and, given a float32 start, computes GaussianMixture
in float32 throughout (``means_`` come out float32; the JSON records the
dtype). Given a float64 start it would run mixed precision (float64 products
stored into a float32 log-probability buffer), about 2x slower, so the float32
start is its best. It is not the case that scikit-learn always computes in
float64. KMeans computes in the data's dtype. gmmx accepts float32 only.

Throughput, counted per iteration with the same
nominal count for every peer (extra work a peer does, e.g. scikit-learn's
final E-step or our criteria, is not counted; Cholesky factors and
triangular inverses of the k (d, d) covariances, O(k d^3), are neglected):

* EM, full covariances: E-step: whitening x @ [P_1^T ... P_k^T] with the
  precision Cholesky factors, 2 N k d^2; centring, squaring and summing the
  whitened vectors, 3 N k d; log-weights, log-sum-exp and exp of the
  responsibilities, ~5 N k. M-step: counts N k; weighted means R^T x,
  2 N k d; scatter: centring N k d, weighting N k d, the weighted outer
  products sum_n r_ny (x_n - m_y)(x_n - m_y)^T, 2 N k d^2. Total
  ``4 N k d^2 + 7 N k d + 6 N k`` (7.31 GFLOP per iteration at N = 200,000,
  d = 16, k = 32; 146 GFLOP for 20 iterations).
* k-means: distances ||x||^2 - 2 x . m + ||m||^2, 2 N k d + 2 N k;
  comparisons N k; centre update N d. Total ``2 N k d + 3 N k + N d``.

Achieved GFLOP/s = count / warm median time, against three jitted references
timed in the same run, in each dtype: the plain matmul (N, d) @ (d, k d) of the
E-step's whitening above (at d = 16 its (N, k d) output makes it memory-bound),
the same product in 2048-row blocks reduced at once to the (N, k) sums of
squares (the Mahalanobis distances; the output stays in cache), and the plain
matmul (N, p) @ (p, k), p = d (d + 3) / 2 + 1 = 153, that our EM is built on.

Our own FLOPs are fewer than the nominal count, and the ``actual`` column
says what ours does: ``inference.mixture.em`` evaluates every component's
log-density as one GEMM on the data's quadratic features t(x) = [x_i x_j
(i <= j), x, 1] (p columns, built once per fit) against the natural
parameters read from the program, and takes the M-step's counts, sums and
second moments as one GEMM R^T t(x): 4 N k p + ~6 N k per iteration (4.0
GFLOP at the full size, against the nominal 7.3), plus N p once. k-means
uses t(x) = [||x||^2, x, 1] (p = d + 2): 2 N k (d + 2) for the energies, a
segment sum N (d + 2) for the centres, ~3 N k for the assignment.

Goals: EM at least 10x faster than scikit-learn and faster than
gmmx; k-means within 1.5x of scikit-learn (peer / ours >= 1/1.5). The table
says MET / NOT met (never asserted: benchmarks are not tests).

Run::

    python benchmarks/mixture.py            # N = 200,000, d = 16, k = 32, 20 it., ~5-6 min
    python benchmarks/mixture.py --quick    # N = 20,000, k = 8, 1 repeat, ~1-2 min
    python benchmarks/mixture.py --dtypes float32 --cases em   # a part only

The table is printed and written as JSON to ``--output``
(default ``benchmarks/results/mixture.json``).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
import warnings
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import scipy.linalg
import scipy.special

REPO_ROOT = Path(__file__).resolve().parents[1]
if str(REPO_ROOT) not in sys.path:  # run as a script from anywhere
    sys.path.insert(0, str(REPO_ROOT))

from benchmarks.association_exact import machine_info  # noqa: E402
from inference import fit_mixture  # noqa: E402
from inference.engine import run as engine_run  # noqa: E402
from inference.engine.loop import _run_jit as _engine_loop  # noqa: E402
from inference.engine.reporting import jsonable  # noqa: E402
from inference.mixture import algorithm as mixture_algorithm  # noqa: E402
from inference.mixture import em as mixture_fit  # noqa: E402
from inference.mixture.checks import data_scale  # noqa: E402
from inference.mixture.features import project  # noqa: E402


def run_em(x, state, tol, reg_covar, min_count, variance_floor, weight_offset, *, mode,
           covariance, max_iterations, prune):
    """fit_mixture's EM loop through the engine and its criteria, without the checks:
    (final state, iterations run, the criteria of the final state)."""
    num, dim = x.shape
    block, rows = mixture_algorithm.layout(num, dim, covariance)
    data, shift = mixture_algorithm.prepare(x, covariance=covariance, block=block, rows=rows)
    # The collapse test's per-coordinate scale, as fit_mixture computes it for this x.
    inv_scale = data_scale(x, covariance, reg_covar, 0.0).inv_scale
    params = mixture_algorithm.Params(shift, *(jnp.asarray(v, x.dtype) for v in (
        tol, reg_covar, min_count, variance_floor, weight_offset, inv_scale)))
    algorithm = mixture_algorithm.em_algorithm(mode=mode, covariance=covariance, prune=prune,
                                               block=block, num=num)
    states = mixture_algorithm.initial_states(state, labels=rows if mode != "stochastic" else 1)
    fitted = engine_run(algorithm, states, data, params,
                        keys=jax.random.split(jax.random.key(0), 1),
                        max_iterations=max_iterations, tol=tol)
    final = jax.tree.map(lambda leaf: leaf[0], fitted.state)
    final = EMState(final.weights, final.means, final.covariances, final.active)
    finished = mixture_algorithm.finish(x, data[1], data[2], shift, final,
                                        covariance=covariance, block=block,
                                        map_is_nearest=mode == "nearest")
    return final, fitted.num_iterations[0], finished
from inference.mixture.sweep import EMState  # noqa: E402
from ppl_models import mixture  # noqa: E402

#: Goals: EM >= 10x scikit-learn and > 1x gmmx; k-means within 1.5x of sklearn.
GOALS = {("em", "sklearn"): 10.0, ("em", "gmmx"): 1.0, ("kmeans", "sklearn"): 1.0 / 1.5}
GOAL_TEXT = {("em", "sklearn"): ">=10x", ("em", "gmmx"): ">1x", ("kmeans", "sklearn"): ">=0.67x"}
#: Relative tolerance on the quality (log-likelihood / inertia) for "agree", per dtype.
RTOL = {"float32": 1e-4, "float64": 1e-8}
REG_COVAR = 1e-6
#: Rows of the blocked reference product (the block size of our E-step).
BLOCK = 2048
DEFAULT_OUTPUT = REPO_ROOT / "benchmarks" / "results" / "mixture.json"


def parse_args(argv=None) -> argparse.Namespace:
    """Parse the command line (see the module docstring)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true",
                        help="N = 20,000, k = 8, 1 repeat (about a minute or two)")
    parser.add_argument("--num-examples", type=int, default=None,
                        help="N (default 200,000; 20,000 with --quick)")
    parser.add_argument("--num-components", type=int, default=None,
                        help="k (default 32; 8 with --quick)")
    parser.add_argument("--dim", type=int, default=16, help="d (default 16)")
    parser.add_argument("--iterations", type=int, default=20,
                        help="EM / Lloyd iterations every peer runs (default 20)")
    parser.add_argument("--repeats", type=int, default=None,
                        help="timed calls per peer (default 3; 1 with --quick)")
    parser.add_argument("--long-fit", type=float, default=20.0,
                        help="seconds: a peer whose first timed call lasts longer is timed "
                             "--long-repeats times (default 20)")
    parser.add_argument("--long-repeats", type=int, default=1,
                        help="timed calls of a long fit (default 1)")
    parser.add_argument("--sklearn-threads", default="auto",
                        help="'auto' (the faster of the default and 1 thread on a short fit), "
                             "'default', or a thread count for threadpoolctl")
    parser.add_argument("--dtypes", nargs="+", default=["float32", "float64"],
                        choices=["float32", "float64"])
    parser.add_argument("--cases", nargs="+", default=["em", "kmeans"], choices=["em", "kmeans"])
    parser.add_argument("--separation", type=float, default=3.0,
                        help="separation of the planted components (default 3: overlapping)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the data and the start")
    parser.add_argument("--output", type=Path, default=DEFAULT_OUTPUT, help="JSON output path")
    args = parser.parse_args(argv)
    if args.num_examples is None:
        args.num_examples = 20_000 if args.quick else 200_000
    if args.num_components is None:
        args.num_components = 8 if args.quick else 32
    if args.repeats is None:
        args.repeats = 1 if args.quick else 3
    if min(args.repeats, args.long_repeats, args.iterations) < 1:
        parser.error("--repeats, --long-repeats and --iterations must be at least 1")
    if args.num_components > args.num_examples:
        parser.error("--num-components must be at most --num-examples")
    if args.sklearn_threads not in ("auto", "default"):
        try:
            args.sklearn_threads = int(args.sklearn_threads)
        except ValueError:
            parser.error(f"--sklearn-threads must be auto, default or an integer; "
                         f"got {args.sklearn_threads!r}")
    return args


# --------------------------------------------------------------------------- counts, quality

def em_flops(num, k, dim) -> float:
    """FLOPs of one full-covariance EM iteration (module docstring)."""
    return float(4 * num * k * dim * dim + 7 * num * k * dim + 6 * num * k)


def kmeans_flops(num, k, dim) -> float:
    """FLOPs of one Lloyd iteration (module docstring)."""
    return float(2 * num * k * dim + 3 * num * k + num * dim)


def feature_width(dim) -> int:
    """Columns p of the quadratic features of a full-covariance Gaussian (module docstring)."""
    return dim * (dim + 3) // 2 + 1


def ours_flops(case, num, k, dim, iterations) -> float:
    """FLOPs our fit actually does (module docstring): per iteration plus the features once."""
    if case == "em":
        p = feature_width(dim)
        return float(iterations * (4 * num * k * p + 6 * num * k) + 2 * num * p)
    p = dim + 2
    return float(iterations * (2 * num * k * p + 3 * num * k + num * p) + 2 * num * p)


def mean_log_likelihood(x, weights, means, covariances) -> float:
    """Mean log-likelihood per example of a full-covariance mixture, in float64 numpy."""
    x = np.asarray(x, np.float64)
    weights, means = np.asarray(weights, np.float64), np.asarray(means, np.float64)
    covariances = np.asarray(covariances, np.float64)
    num, dim = x.shape
    log_prob = np.empty((num, means.shape[0]))
    eye = np.eye(dim)
    with np.errstate(divide="ignore"):
        log_weights = np.log(weights)
    for y in range(means.shape[0]):
        chol = np.linalg.cholesky(covariances[y])
        precision_tril = scipy.linalg.solve_triangular(chol, eye, lower=True)
        white = (x - means[y]) @ precision_tril.T
        log_prob[:, y] = (-0.5 * (dim * math.log(2 * math.pi) + np.sum(white * white, axis=1))
                          - np.sum(np.log(np.diag(chol))) + log_weights[y])
    return float(np.mean(scipy.special.logsumexp(log_prob, axis=1)))


def inertia_and_labels(x, centres):
    """Mean squared distance to the nearest centre (inertia / N) and the labels, float64."""
    x = np.asarray(x, np.float64)
    centres = np.asarray(centres, np.float64)
    distances = np.stack([np.sum((x - c) ** 2, axis=1) for c in centres], axis=1)
    labels = np.argmin(distances, axis=1)
    return float(np.mean(distances[np.arange(x.shape[0]), labels])), labels


# --------------------------------------------------------------------------- timing helpers

def _timed(fn):
    """Seconds taken by ``fn()``, blocking on its result; and the result."""
    start = time.perf_counter()
    out = jax.block_until_ready(fn())
    return time.perf_counter() - start, out


def _summary(first, seconds) -> dict:
    seconds = np.asarray(seconds, float)
    return {"first_call_s": float(first), "median_s": float(np.median(seconds)),
            "min_s": float(seconds.min()), "max_s": float(seconds.max()),
            "seconds": seconds.tolist()}


def run_interleaved(methods: dict, warm_up: dict, args) -> tuple[dict, dict]:
    """First call of every method, then warm calls interleaved across methods.

    Each method gets ``args.repeats`` timed calls, or ``args.long_repeats`` when
    its first timed call lasts longer than ``args.long_fit`` seconds.

    ``warm_up[name]``: True, the first call is not timed with the warm ones;
    False, it is (nothing to compile); or a function giving the size of a
    compilation cache, and the first call counts as warm when it compiled
    nothing (our core, compiled by the public call before it). Returns the
    timing summaries and each first result.
    """
    first, results, times = {}, {}, {name: [] for name in methods}
    repeats = dict.fromkeys(methods, args.repeats)

    def record(name, seconds):
        times[name].append(seconds)
        if len(times[name]) == 1 and seconds > args.long_fit:
            repeats[name] = min(repeats[name], args.long_repeats)

    for name, fn in methods.items():
        cache = warm_up[name]() if callable(warm_up[name]) else None
        first[name], results[name] = _timed(fn)
        if warm_up[name] is False or (cache is not None and warm_up[name]() == cache):
            record(name, first[name])
    for _ in range(args.repeats):
        for name, fn in methods.items():
            if len(times[name]) < repeats[name]:
                record(name, _timed(fn)[0])
    return {name: _summary(first[name], times[name]) for name in methods}, results


def sklearn_thread_limit(make_estimator, x, setting, *, probe_rows=10_000,
                         probe_iterations=2) -> tuple:
    """threadpoolctl limit for a scikit-learn estimator: None (default threads) or a count.

    ``setting="auto"``: fit ``make_estimator(probe_iterations)`` on the first
    ``probe_rows`` rows (None: all) twice with the default threads and twice with
    1 thread; the faster wins. Short fits (k-means) are probed on the whole
    problem, since which setting wins depends on its size.
    """
    from threadpoolctl import threadpool_limits

    if setting == "default":
        return None, {}
    if setting != "auto":
        return int(setting), {}
    small = x if probe_rows is None else x[:probe_rows]
    best = {}
    for limit in (None, 1):
        with threadpool_limits(limit), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            best[limit] = min(_timed(lambda: make_estimator(probe_iterations).fit(small))[0]
                              for _ in range(2))
    choice = min(best, key=best.get)
    return choice, {"default_threads_s": best[None], "one_thread_s": best[1],
                    "probe_rows": int(small.shape[0]), "probe_iterations": probe_iterations}


def _with_threads(fn, limit):
    """``fn`` run under threadpoolctl's ``limit`` (None: default threads)."""
    from threadpoolctl import threadpool_limits

    def call():
        with threadpool_limits(limit), warnings.catch_warnings():
            warnings.simplefilter("ignore")  # scikit-learn's not-converged note (tol=0)
            return fn()

    return call


def _quiet(fn):
    def call():
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # ConvergenceWarning: early stopping is off
            return fn()

    return call


# --------------------------------------------------------------------------- the problem

def make_problem(args):
    """Float32 data (N, d) from the planted program and the common start (numpy, float64)."""
    key = jax.random.key(args.seed)
    data = mixture.generate(key, args.num_examples, args.num_components, args.dim,
                            separation=args.separation)
    x = np.asarray(data.x, np.float32)
    rng = np.random.default_rng(args.seed)
    k, dim = args.num_components, args.dim
    start = {"means": x[rng.choice(x.shape[0], k, replace=False)].astype(np.float64),
             "weights": np.full(k, 1.0 / k),
             "covariances": np.broadcast_to(np.eye(dim), (k, dim, dim)).copy()}
    planted = mean_log_likelihood(x, data.weights, data.means, data.covariances)
    return x, start, planted


def _core_call(x, k, start, *, mode, iterations):
    """The jitted EM loop ``run_em`` with exactly the arguments ``fit_mixture`` passes it."""
    dim = x.shape[1]
    spread = float(jnp.mean(jnp.var(x, axis=0)))
    covariance = "spherical" if mode == "nearest" else "full"
    if mode == "nearest":  # fit_mixture's defaults: equal weights, spread / k * I
        weights = jnp.full(k, 1.0 / k, x.dtype)
        cov = jnp.broadcast_to(spread / k * jnp.eye(dim, dtype=x.dtype), (k, dim, dim))
    else:
        weights = jnp.asarray(start["weights"], x.dtype)
        cov = jnp.asarray(start["covariances"], x.dtype)
    state = EMState(weights / jnp.sum(weights), jnp.asarray(start["means"], x.dtype),
                   project(cov, covariance), jnp.ones(k, bool))
    # fit_mixture pads small k with inactive components up to a compiled size, where
    # the version at hand does (``pad``); the same here, so the work is the same.
    state = getattr(mixture_fit, "pad", lambda s: s)(state)

    def call():
        return run_em(x, state, 0.0, REG_COVAR, dim + 1, 1e-6 * spread, 0.0, mode=mode,
                    covariance=covariance, max_iterations=iterations, prune=False)

    return call


def bench_em(x_np, start, args, dtype: str) -> dict:
    """Time and compare EM: ours (public and core), scikit-learn, gmmx (float32 only)."""
    from sklearn.mixture import GaussianMixture

    k, it = args.num_components, args.iterations
    x = jnp.asarray(x_np, dtype)
    assert x.dtype == jnp.dtype(dtype), (x.dtype, dtype)
    x_host = np.asarray(x_np, dtype)

    # The start in the row's dtype: a float64 start makes scikit-learn's float32 fit
    # mixed precision and about 2x slower (module docstring).
    start_host = {name: np.asarray(value, dtype) for name, value in start.items()}
    precisions = np.linalg.inv(start_host["covariances"])

    def make_sklearn(max_iter):
        return GaussianMixture(k, covariance_type="full", max_iter=max_iter, tol=0.0,
                               reg_covar=REG_COVAR, weights_init=start_host["weights"],
                               means_init=start_host["means"], precisions_init=precisions)

    limit, calibration = sklearn_thread_limit(make_sklearn, x_host, args.sklearn_threads)
    methods = {
        "ours": _quiet(lambda: fit_mixture(
            x, k, mode="stochastic", covariance="full", prune=False,
            init_means=start["means"], init_weights=start["weights"],
            init_covariances=start["covariances"], max_iterations=it, tol=0.0,
            reg_covar=REG_COVAR)),
        "ours_core": _core_call(x, k, start, mode="stochastic", iterations=it),
        "sklearn": _with_threads(lambda: make_sklearn(it).fit(x_host), limit),
    }
    gmmx_error = None
    try:
        from gmmx import EMFitter, GaussianMixtureModelJax

        gmm0 = GaussianMixtureModelJax.from_squeezed(
            means=jnp.asarray(start["means"], dtype),
            covariances=jnp.asarray(start["covariances"], dtype),
            weights=jnp.asarray(start["weights"], dtype))
        fitter = EMFitter(max_iter=it, tol=0.0, reg_covar=REG_COVAR)
        methods["gmmx"] = lambda: fitter.fit(x, gmm0)
    except ValueError as err:  # gmmx checks that every array is float32
        gmmx_error = f"{type(err).__name__}: {err}"
    # Our core compiles nothing when the public call before it compiled the loop.
    warm_up = ({name: name != "sklearn" for name in methods}
               | {"ours_core": _engine_loop._cache_size})
    timing, results = run_interleaved(methods, warm_up, args)
    ours, core, skl = results["ours"], results["ours_core"], results["sklearn"]
    peers = {
        "ours": {"iterations": ours.num_iterations,
                 "quality": mean_log_likelihood(x_host, ours.weights, ours.means,
                                                ours.covariances),
                 "reported": -ours.L_stocha},
        "ours_core": {"iterations": int(core[1]),
                      "quality": mean_log_likelihood(x_host, core[0].weights, core[0].means,
                                                     core[0].covariances)},
        "sklearn": {"iterations": int(skl.n_iter_),
                    "quality": mean_log_likelihood(x_host, skl.weights_, skl.means_,
                                                   skl.covariances_),
                    "reported": float(skl.lower_bound_), "dtype": str(skl.means_.dtype),
                    "thread_limit": limit, "thread_calibration": calibration},
    }
    if "gmmx" in results:
        g = results["gmmx"]
        peers["gmmx"] = {"iterations": int(g.n_iter),
                         "quality": mean_log_likelihood(x_host, g.gmm.weights_numpy,
                                                        g.gmm.means_numpy,
                                                        g.gmm.covariances.values_numpy),
                         "reported": float(g.log_likelihood)}
    else:
        peers["gmmx"] = {"error": gmmx_error}
    for name, entry in timing.items():
        peers[name]["timing"] = entry
    return {"case": "em", "dtype": dtype, "flops_per_fit": it * em_flops(x.shape[0], k, x.shape[1]),
            "ours_flops_per_fit": ours_flops("em", x.shape[0], k, x.shape[1], it), "peers": peers}


def bench_kmeans(x_np, start, args, dtype: str) -> dict:
    """Time and compare k-means: ours (public and core) and scikit-learn's KMeans (lloyd)."""
    from sklearn.cluster import KMeans

    k, it = args.num_components, args.iterations
    x = jnp.asarray(x_np, dtype)
    x_host = np.asarray(x_np, dtype)
    centres = np.asarray(start["means"], dtype)

    def make_sklearn(max_iter):
        return KMeans(k, init=centres, n_init=1, algorithm="lloyd", max_iter=max_iter, tol=0.0,
                      random_state=args.seed)

    limit, calibration = sklearn_thread_limit(make_sklearn, x_host, args.sklearn_threads,
                                              probe_rows=None, probe_iterations=it)
    methods = {
        "ours": _quiet(lambda: fit_mixture(x, k, mode="nearest", prune=False,
                                           init_means=start["means"], max_iterations=it,
                                           tol=0.0, reg_covar=REG_COVAR)),
        "ours_core": _core_call(x, k, start, mode="nearest", iterations=it),
        "sklearn": _with_threads(lambda: make_sklearn(it).fit(x_host), limit),
    }
    warm_up = {"ours": True, "ours_core": _engine_loop._cache_size, "sklearn": False}
    timing, results = run_interleaved(methods, warm_up, args)
    ours, core, skl = results["ours"], results["ours_core"], results["sklearn"]
    inertia_ours, labels_ours = inertia_and_labels(x_host, ours.means)
    inertia_core, _ = inertia_and_labels(x_host, core[0].means)
    inertia_skl, labels_skl = inertia_and_labels(x_host, skl.cluster_centers_)
    peers = {
        "ours": {"iterations": ours.num_iterations, "quality": inertia_ours},
        "ours_core": {"iterations": int(core[1]), "quality": inertia_core},
        "sklearn": {"iterations": int(skl.n_iter_), "quality": inertia_skl,
                    "reported": float(skl.inertia_) / x.shape[0],
                    "dtype": str(skl.cluster_centers_.dtype),
                    "label_agreement": float(np.mean(labels_ours == labels_skl)),
                    "thread_limit": limit, "thread_calibration": calibration},
    }
    for name, entry in timing.items():
        peers[name]["timing"] = entry
    return {"case": "kmeans", "dtype": dtype,
            "flops_per_fit": it * kmeans_flops(x.shape[0], k, x.shape[1]),
            "ours_flops_per_fit": ours_flops("kmeans", x.shape[0], k, x.shape[1], it),
            "peers": peers}


def matmul_reference(num, k, dim, dtype: str, repeats: int) -> dict:
    """GFLOP/s of a plain jitted (N, d) @ (d, k d) and of the blocked product + reduction."""
    key_a, key_b = jax.random.split(jax.random.key(1))
    a = jax.random.normal(key_a, (num, dim), dtype)
    b = jax.random.normal(key_b, (dim, k * dim), dtype)
    plain = jax.jit(jnp.matmul)

    @jax.jit
    def blocked(a, b):
        def block(rows):  # (d,) -> (k,): the squared norms of the k whitened vectors
            white = (rows @ b).reshape(k, dim)
            return jnp.sum(white * white, axis=-1)

        return jax.lax.map(block, a, batch_size=min(BLOCK, num))

    p = feature_width(dim)
    features = jax.random.normal(key_a, (num, p), dtype)
    eta = jax.random.normal(key_b, (p, k), dtype)
    out = {"shape": [num, dim, k * dim], "dtype": dtype, "flops": 2.0 * num * dim * k * dim,
           "features_shape": [num, p, k], "features_flops": 2.0 * num * p * k}
    for name, fn, operands, flops in (("plain", plain, (a, b), out["flops"]),
                                      ("blocked", blocked, (a, b), out["flops"]),
                                      ("features", plain, (features, eta),
                                       out["features_flops"])):
        first, _ = _timed(lambda fn=fn, operands=operands: fn(*operands))
        seconds = [_timed(lambda fn=fn, operands=operands: fn(*operands))[0]
                   for _ in range(max(3, repeats))]
        out[name] = _summary(first, seconds)
        out[name]["gflops"] = flops / out[name]["median_s"] / 1e9
    return out


# --------------------------------------------------------------------------- report

def table_rows(cases: list[dict]) -> list[dict]:
    """One row per (case, dtype, peer): times, ratios, qualities, goal verdict."""
    rows = []
    for case in cases:
        peers = case["peers"]
        ours, core = peers["ours"], peers["ours_core"]
        rtol = RTOL[case["dtype"]]
        for name in ("sklearn", "gmmx"):
            if name not in peers:
                continue
            peer = peers[name]
            row = {"case": case["case"], "dtype": case["dtype"], "peer": name,
                   "goal": GOAL_TEXT[(case["case"], name)]}
            if "error" in peer:
                row.update(available=False, note=peer["error"], met=None)
                rows.append(row)
                continue
            ratio = peer["timing"]["median_s"] / ours["timing"]["median_s"]
            ratio_core = peer["timing"]["median_s"] / core["timing"]["median_s"]
            gap = abs(ours["quality"] - peer["quality"])
            agree = gap <= rtol * abs(peer["quality"])
            same_iterations = ours["iterations"] == peer["iterations"] == core["iterations"]
            required = GOALS[(case["case"], name)]
            fast = ratio >= required if name == "sklearn" else ratio > required
            row.update(available=True, ours=ours["timing"], ours_core=core["timing"],
                       peer_timing=peer["timing"], ratio=ratio, ratio_core=ratio_core,
                       quality_ours=ours["quality"], quality_peer=peer["quality"],
                       quality_gap=gap, agree=bool(agree), same_iterations=same_iterations,
                       iterations=[ours["iterations"], peer["iterations"]],
                       required_ratio=required, fast_enough=bool(fast),
                       met=bool(fast and agree and same_iterations))
            if "label_agreement" in peer:
                row["label_agreement"] = peer["label_agreement"]
            rows.append(row)
    return rows


def _spread(t) -> str:
    return f"{t['median_s']:.3f} [{t['min_s']:.3f}-{t['max_s']:.3f}]"


def format_table(rows: list[dict]) -> str:
    """The printed table."""
    header = (f"{'case':6} {'dtype':7} {'peer':7} {'iters':>6} | {'ours 1st':>8} "
              f"{'ours s med [min-max]':>24} {'core s med':>10} | {'peer 1st':>8} "
              f"{'peer s med [min-max]':>24} | {'ratio':>6} {'core':>6} | "
              f"{'quality ours':>13} {'quality peer':>13} {'agree':>5} | {'goal':>7} "
              f"{'met':>7}")
    lines = [header, "-" * len(header)]
    for r in rows:
        if not r["available"]:
            lines.append(f"{r['case']:6} {r['dtype']:7} {r['peer']:7} n/a: {r['note']}")
            continue
        iters = f"{r['iterations'][0]}/{r['iterations'][1]}"
        agree = "yes" if r["agree"] else "NO"
        lines.append(
            f"{r['case']:6} {r['dtype']:7} {r['peer']:7} {iters:>6} | "
            f"{r['ours']['first_call_s']:>8.2f} {_spread(r['ours']):>24} "
            f"{r['ours_core']['median_s']:>10.3f} | {r['peer_timing']['first_call_s']:>8.2f} "
            f"{_spread(r['peer_timing']):>24} | {r['ratio']:>6.2f} {r['ratio_core']:>6.2f} | "
            f"{r['quality_ours']:>13.6f} {r['quality_peer']:>13.6f} {agree:>5} | "
            f"{r['goal']:>7} {'MET' if r['met'] else 'NOT met':>7}")
    return "\n".join(lines)


def throughput(cases: list[dict], references: dict) -> list[dict]:
    """Achieved GFLOP/s of every peer against the matmul references of its dtype."""
    out = []
    for case in cases:
        ref = references[case["dtype"]]
        entry = {"case": case["case"], "dtype": case["dtype"],
                 "flops_per_fit": case["flops_per_fit"],
                 "ours_actual_flops_per_fit": case["ours_flops_per_fit"],
                 "plain_matmul_gflops": ref["plain"]["gflops"],
                 "blocked_matmul_gflops": ref["blocked"]["gflops"],
                 "features_matmul_gflops": ref["features"]["gflops"], "gflops": {}}
        for name, peer in case["peers"].items():
            if "timing" in peer:
                entry["gflops"][name] = case["flops_per_fit"] / peer["timing"]["median_s"] / 1e9
        entry["ours_core_actual_gflops"] = (case["ours_flops_per_fit"]
                                            / case["peers"]["ours_core"]["timing"]["median_s"]
                                            / 1e9)
        # What the goal against scikit-learn asks of ours, in the same units.
        entry["goal_gflops"] = GOALS[(case["case"], "sklearn")] * entry["gflops"]["sklearn"]
        out.append(entry)
    return out


def format_throughput(entries: list[dict]) -> str:
    lines = []
    for e in entries:
        peers = ", ".join(f"{name} {value:.2f}" for name, value in e["gflops"].items())
        lines.append(f"  {e['case']:6} {e['dtype']:7} ({e['flops_per_fit'] / 1e9:.1f} GFLOP/fit): "
                     f"{peers} GFLOP/s (the goal vs scikit-learn needs {e['goal_gflops']:.2f}); "
                     f"plain matmul {e['plain_matmul_gflops']:.2f}, blocked matmul + reduce "
                     f"{e['blocked_matmul_gflops']:.2f}, (N, p) @ (p, k) "
                     f"{e['features_matmul_gflops']:.2f} GFLOP/s; ours_core actual "
                     f"{e['ours_actual_flops_per_fit'] / 1e9:.1f} GFLOP/fit, "
                     f"{e['ours_core_actual_gflops']:.2f} GFLOP/s")
    return "\n".join(lines)


def main(argv=None) -> dict:
    """Run the benchmark, print the table and write the JSON; return the results."""
    from importlib.metadata import version

    args = parse_args(argv)
    info = machine_info()
    info.update(sklearn=version("scikit-learn"), gmmx=version("gmmx"),
                threadpoolctl=version("threadpoolctl"))
    print(f"jax {info['jax']} scikit-learn {info['sklearn']} on {info['backend']} "
          f"{info['devices']}, {info['usable_cpus']}/{info['cpu_count']} CPUs; N "
          f"{args.num_examples}, d {args.dim}, k {args.num_components}, {args.iterations} "
          f"iterations, repeats {args.repeats} ({args.long_repeats} for fits over "
          f"{args.long_fit:g} s)", flush=True)
    started = time.perf_counter()
    x, start, planted = make_problem(args)
    print(f"data: {x.shape} float32, planted log-likelihood per example {planted:.6f} "
          f"({time.perf_counter() - started:.0f} s)", flush=True)
    cases, references = [], {}
    for dtype in args.dtypes:
        with jax.enable_x64(dtype == "float64"):
            for case in args.cases:
                bench = bench_em if case == "em" else bench_kmeans
                cases.append(bench(x, start, args, dtype))
                t = cases[-1]["peers"]
                print(f"  {case} {dtype}: ours {t['ours']['timing']['median_s']:.3f} s, core "
                      f"{t['ours_core']['timing']['median_s']:.3f} s, sklearn "
                      f"{t['sklearn']['timing']['median_s']:.3f} s"
                      + (f", gmmx {t['gmmx']['timing']['median_s']:.3f} s"
                         if "timing" in t.get("gmmx", {}) else "")
                      + f" ({time.perf_counter() - started:.0f} s)", flush=True)
            references[dtype] = matmul_reference(args.num_examples, args.num_components,
                                                 args.dim, dtype, args.repeats)
    rows = table_rows(cases)
    rates = throughput(cases, references)
    elapsed = time.perf_counter() - started

    print()
    print(f"Mixtures, N {args.num_examples}, d {args.dim}, k {args.num_components}, "
          f"{args.iterations} iterations, same data and start. Seconds per fit; 1st = first "
          "call (JAX: incl. compile);")
    print("ours = fit_mixture (public), core = its jitted EM loop and criteria run_em; "
          "ratio = peer/ours, core = peer/core; iters = ours/peer;")
    print("quality = mean log-likelihood per example (EM, higher is better) or inertia per "
          "example (k-means, lower), float64;")
    print(f"agree = within rtol {RTOL['float32']:g} (float32) / {RTOL['float64']:g} "
          "(float64); goal met = ratio on the public call AND agree AND equal iterations.")
    print(format_table(rows))
    for r in rows:
        if "label_agreement" in r:
            print(f"k-means {r['dtype']}: same final label for {100 * r['label_agreement']:.3f}% "
                  f"of the examples (ours vs scikit-learn)")
    print()
    print("Throughput (nominal FLOPs per fit / warm median; references (N, d) @ (d, k d) "
          "in the same dtype):")
    print(format_throughput(rates))
    notes = [
        "dtypes of scikit-learn's fitted parameters (it computes in them): " + "; ".join(
            f"{c['case']} {c['dtype']}: {c['peers']['sklearn']['dtype']}" for c in cases)
        + "; gmmx accepts float32 only.",
        "scikit-learn threads (threadpoolctl limit, None = default): "
        + "; ".join(f"{c['case']} {c['dtype']}: {c['peers']['sklearn']['thread_limit']}"
                    for c in cases),
        "timed calls (scikit-learn's first call, and our core's when it compiled nothing, "
        "included): " + "; ".join(
            f"{c['case']} {c['dtype']}: " + ", ".join(
                f"{name} {len(peer['timing']['seconds'])}" for name, peer in c["peers"].items()
                if "timing" in peer) for c in cases),
        f"planted parameters' log-likelihood per example: {planted:.6f}.",
    ]
    print("Notes: " + "\n       ".join(notes))
    print(f"({elapsed:.0f} s)")
    output = {"benchmark": "mixture",
              "goal": "EM (full covariance) >= 10x faster than scikit-learn GaussianMixture and "
                      "faster than gmmx; k-means within 1.5x of scikit-learn KMeans",
              "machine": info,
              "config": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
              "planted_log_likelihood": planted, "cases": cases, "rows": rows,
              "references": references, "throughput": rates, "notes": notes,
              "seconds": elapsed}
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(jsonable(output), indent=2) + "\n")
    print(f"wrote {args.output}")
    return output


if __name__ == "__main__":
    main()
