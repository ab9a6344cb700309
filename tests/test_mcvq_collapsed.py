"""One MCVQ VQ's evidence with its parameters integrated (:mod:`inference.mcvq.collapsed`).

The one-dimensional marginal M(y) against a two-dimensional grid integral over
(mu, log tau) with the program's densities; the collapsed sequential importance sampler
against the exact sum over all J^N state assignments of small problems (Gaussian data
and noise-free +-1 patterns); bad input.
"""

import itertools

import jax
import numpy as np
import pytest
from scipy import integrate, stats
from scipy.special import logsumexp

from inference.mcvq.collapsed import log_marginal, vq_log_evidence
from ppl_models.mcvq import MCVQPrior

PRIOR = MCVQPrior(0.2, 1.5, 1.0, 0.3)


def test_marginal_matches_a_two_dimensional_integral():
    """Both mu and log tau on a fine grid (trapezoid rule), the program's densities."""
    y = np.array([0.5, 0.9, 0.7])
    mu = np.linspace(-8.0, 8.0, 1601)[:, None]
    u = np.linspace(-14.0, 8.0, 1101)[None, :]
    tau = np.exp(u)
    log_f = (np.sum(stats.norm.logpdf(y[:, None, None], mu, 1 / np.sqrt(tau)), axis=0)
             + stats.norm.logpdf(mu, PRIOR.mean, PRIOR.mean_scale)
             + stats.gamma.logpdf(tau, PRIOR.shape, scale=1 / PRIOR.rate) + u)
    value = integrate.trapezoid(integrate.trapezoid(np.exp(log_f), u[0], axis=1), mu[:, 0])
    assert log_marginal(y, PRIOR) == pytest.approx(np.log(value), abs=1e-4)
    assert log_marginal(np.zeros(0), PRIOR) == pytest.approx(0.0, abs=1e-4)  # no data


def _enumerated(x, pi, prior):
    """log sum over every assignment s of prod_n pi_{s_n} prod_{j, d} M(x[s == j, d])."""
    cache = {}

    def marginal(values):
        key = tuple(sorted(values.tolist()))
        if key not in cache:
            cache[key] = log_marginal(values, prior)
        return cache[key]

    terms = []
    for s in itertools.product(range(len(pi)), repeat=len(x)):
        s = np.asarray(s)
        term = np.sum(np.log(pi[s]))
        for j in set(s.tolist()):
            term += sum(marginal(x[s == j, d]) for d in range(x.shape[1]))
        terms.append(term)
    return float(logsumexp(terms))


@pytest.mark.parametrize("num_sweeps", [0, 2])
@pytest.mark.parametrize("case", ["gaussian", "noise-free patterns", pytest.param(
    "two groups", marks=pytest.mark.slow)])  # slow: 1,024 assignments summed in Python
def test_sampler_matches_the_sum_over_assignments(case, num_sweeps):
    """With and without Gibbs moves of the placed examples (resample-move); "two groups"
    (10 examples, 1,024 assignments) resamples and moves particles with unequal weights."""
    rng = np.random.default_rng(0)
    if case == "gaussian":
        x, pi, prior = rng.normal(size=(5, 2)), np.array([0.3, 0.7]), PRIOR
    elif case == "two groups":
        rng = np.random.default_rng(7)
        x = rng.normal(size=(10, 2)) + 2.0 * rng.integers(0, 2, (10, 1))
        pi, prior = np.array([0.5, 0.5]), PRIOR
    else:
        patterns = np.array([[1, 1, -1], [-1, 1, 1], [1, -1, -1]], float)
        x, pi = patterns[rng.integers(0, 3, 6)], np.full(3, 1 / 3)
        prior = MCVQPrior(0.0, 1.0, 1.0, 0.01)
    exact = _enumerated(x, pi, prior)
    result = vq_log_evidence(x, pi, prior, rng_key=jax.random.key(1),
                             num_particles=2000 if num_sweeps == 0 else 300,
                             num_sweeps=num_sweeps)
    assert result.converged and result.runs.shape == (4,)
    assert abs(result.log_evidence - exact) < 3 * result.standard_error + 0.02, (result, exact)


def test_missing_entries_are_left_out():
    """A masked entry counts as absent: the evidence of x with column 1 masked is that
    of column 0 alone."""
    rng = np.random.default_rng(2)
    x = rng.normal(size=(5, 2))
    mask = np.ones(x.shape, bool)
    mask[:, 1] = False
    pi = np.array([0.4, 0.6])
    masked = vq_log_evidence(x, pi, PRIOR, mask=mask, rng_key=jax.random.key(3),
                             num_particles=2000)
    exact = _enumerated(x[:, :1], pi, PRIOR)
    assert abs(masked.log_evidence - exact) < 3 * masked.standard_error + 0.02


@pytest.mark.parametrize("kwargs, match", [
    (dict(weights=np.array([0.5, 0.6])), "weights"),
    (dict(weights=np.array([1.0, 0.0])), "weights"),
    (dict(num_repeats=1), "num_repeats"),
    (dict(num_particles=0), "num_particles"),
    (dict(num_sweeps=-1), "num_sweeps"),
    (dict(num_sweeps=1.5), "num_sweeps"),
    (dict(x=np.zeros(4)), "x must be 2-D"),
])
def test_bad_input_names_the_argument(kwargs, match):
    args = {"x": np.zeros((4, 2)), "weights": np.array([0.5, 0.5]), **kwargs}
    with pytest.raises(ValueError, match=match):
        vq_log_evidence(args.pop("x"), args.pop("weights"), PRIOR, rng_key=jax.random.key(0),
                        **args)


def test_one_assignment_is_a_term_of_the_sum():
    rng = np.random.default_rng(4)
    x, pi = rng.normal(size=(4, 2)), np.array([0.3, 0.7])
    from inference.mcvq.collapsed import assignment_log_joint

    terms = {s: assignment_log_joint(x, np.asarray(s), pi, PRIOR)
             for s in itertools.product(range(2), repeat=4)}
    assert float(logsumexp(list(terms.values()))) == pytest.approx(_enumerated(x, pi, PRIOR),
                                                                   abs=1e-4)
    with pytest.raises(ValueError, match="states"):
        assignment_log_joint(x, np.zeros(3, int), pi, PRIOR)
