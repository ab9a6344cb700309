"""Which scores a model-selection criterion may choose from: the checks of degenerate fits.

:func:`inference.model_selection` excludes a candidate from a criterion's choice where
the number it would choose by is not trustworthy, and says why (the result's
``excluded``: criterion -> candidate -> reason). A criterion left with no trustworthy
candidate, or one whose decision lies within its own noise, makes *no choice* (the
result's ``no_choice``: criterion -> reason). The checks and their thresholds:

* a collapsed fit -- a component whose scale shrank onto a point (the family fit's
  ``collapsed`` flag; for a program, a positive parameter or a Cholesky factor's
  diagonal below :data:`COLLAPSE_RTOL` times the data's smallest per-dimension
  standard deviation), whose likelihood grows without bound;
* a covariance that is not positive definite (smallest eigenvalue at most
  :data:`PD_RTOL` times the largest);
* a non-finite maximised log-likelihood;
* MCMC chains that have not mixed (``"loo"``, ``"waic"``): the largest rank-normalised
  split R-hat above :data:`RHAT_MAX` (1.01) with several chains, or above
  :data:`RHAT_MAX_ONE_CHAIN` (1.05) for one chain split in halves, or the smallest
  bulk effective sample size below :data:`ESS_PER_CHAIN` (100) times the number of
  chains (Vehtari, Gelman, Simpson, Carpenter and Buerkner 2021, sec. 4: R-hat < 1.01
  and bulk-ESS > 400 for four chains). The one-chain threshold is looser because the
  two halves of one chain of a few hundred draws give a noisier R-hat than four
  chains, and 1.05 is the earlier threshold (Gelman et al., "Bayesian Data Analysis",
  3rd ed., 2013) that the same paper reports as too lenient for several chains;
* a PSIS-LOO estimate with any Pareto k above :data:`PARETO_K_MAX` (0.7): the
  importance weights of that example have too heavy a tail for the estimate to be
  reliable (Vehtari, Simpson, Gelman, Yao and Gabry 2024, "Pareto smoothed importance
  sampling", JMLR 25, sec. 3; Vehtari, Gelman and Gabry 2017, Statistics and
  Computing 27, sec. 2.1);
* an evidence whose tempered-SMC run did not reach temperature 1, or was not finite;
  and an evidence choice whose lead is smaller than its noise: when the combined
  standard error of the best and the runner-up exceeds the gap between their log
  evidences (total nats), the two are marked and the criterion makes no choice.

References
----------
A. Vehtari, A. Gelman, D. Simpson, B. Carpenter and P.-C. Buerkner, "Rank-normalization,
folding, and localization: an improved R-hat for assessing convergence of MCMC",
Bayesian Analysis 16(2), 2021. A. Vehtari, D. Simpson, A. Gelman, Y. Yao and J. Gabry,
"Pareto smoothed importance sampling", Journal of Machine Learning Research 25, 2024.
A. Vehtari, A. Gelman and J. Gabry, "Practical Bayesian model evaluation using
leave-one-out cross-validation and WAIC", Statistics and Computing 27, 2017.
"""

from __future__ import annotations

import math
import warnings

import numpy as np

__all__ = ["COLLAPSE_RTOL", "PD_RTOL", "RHAT_MAX", "RHAT_MAX_ONE_CHAIN", "ESS_PER_CHAIN",
           "PARETO_K_MAX", "chains_reason", "pareto_reason", "covariance_reason",
           "params_reason", "evidence_gap_reason"]

#: A positive parameter (a standard deviation) or a Cholesky diagonal below this times
#: the data's smallest per-dimension standard deviation is a collapsed component.
COLLAPSE_RTOL = 1e-3
#: A covariance whose smallest eigenvalue is at most this times its largest is not
#: (numerically) positive definite (float32 resolves about 1e-7).
PD_RTOL = 1e-7
#: Largest acceptable rank-normalised split R-hat with two or more chains.
RHAT_MAX = 1.01
#: Largest acceptable split R-hat of one chain (its two halves).
RHAT_MAX_ONE_CHAIN = 1.05
#: Smallest acceptable bulk effective sample size per chain.
ESS_PER_CHAIN = 100
#: Largest acceptable Pareto k of PSIS-LOO.
PARETO_K_MAX = 0.7


def chains_reason(idata) -> str | None:
    """Why the chains of ``idata`` (an ``arviz.InferenceData`` with a ``posterior``
    group) are not trustworthy, or None: R-hat or bulk ESS past the thresholds."""
    import arviz as az
    import xarray as xr

    posterior = idata.posterior
    num_chains = int(posterior.sizes.get("chain", 1))
    num_draws = int(posterior.sizes.get("draw", 0))
    if num_draws < 4:
        return f"only {num_draws} draws per chain"
    if num_chains == 1:  # its two halves as two chains: the split R-hat of one chain
        half = num_draws // 2
        first = posterior.isel(draw=slice(0, half))
        second = posterior.isel(draw=slice(half, 2 * half)).assign_coords(
            draw=first.coords["draw"].values)
        posterior = xr.concat([first, second], dim="chain").assign_coords(chain=[0, 1])
    with warnings.catch_warnings():  # arviz's notes on constant draws
        warnings.simplefilter("ignore")
        rhat = az.rhat(posterior)
        ess = az.ess(posterior, method="bulk")
    worst_rhat = max((float(np.nanmax(np.asarray(v))) for v in rhat.data_vars.values()
                      if np.asarray(v).size and np.isfinite(np.asarray(v)).any()),
                     default=math.nan)
    least_ess = min((float(np.nanmin(np.asarray(v))) for v in ess.data_vars.values()
                     if np.asarray(v).size and np.isfinite(np.asarray(v)).any()),
                    default=math.nan)
    limit = RHAT_MAX if num_chains > 1 else RHAT_MAX_ONE_CHAIN
    parts = []
    if worst_rhat > limit:
        parts.append(f"R-hat {worst_rhat:.3f} > {limit}"
                     + (" (one chain, split)" if num_chains == 1 else ""))
    if least_ess < ESS_PER_CHAIN * num_chains:
        parts.append(f"bulk ESS {least_ess:.0f} < {ESS_PER_CHAIN * num_chains}")
    return "chains not mixed: " + ", ".join(parts) if parts else None


def pareto_reason(loo) -> str | None:
    """Why a PSIS-LOO estimate (arviz's ``ELPDData`` with ``pareto_k``) is not
    trustworthy, or None: examples with Pareto k above :data:`PARETO_K_MAX`."""
    k = np.asarray(loo.pareto_k, dtype=float)
    bad = int(np.sum(~(k <= PARETO_K_MAX)))
    if bad:
        return (f"Pareto k > {PARETO_K_MAX} for {bad} of {k.size} examples "
                f"(largest {float(np.nanmax(k)):.2f})")
    return None


def covariance_reason(covariances) -> str | None:
    """Why full covariances (..., d, d) are not positive definite, or None."""
    c = np.asarray(covariances, dtype=float)
    if c.ndim < 2 or c.shape[-1] != c.shape[-2]:
        return None
    c = c.reshape(-1, c.shape[-1], c.shape[-1])
    if not np.all(np.isfinite(c)):
        return "covariance not finite"
    eig = np.linalg.eigvalsh(0.5 * (c + np.swapaxes(c, -1, -2)))
    for i, e in enumerate(eig):
        if e[0] <= PD_RTOL * max(e[-1], 0.0) or e[-1] <= 0:
            return (f"covariance {i} not positive definite (eigenvalues {e[0]:.3g} .. "
                    f"{e[-1]:.3g})")
    return None


def params_reason(params: dict, constraints: dict, data_scale: float) -> str | None:
    """Why fitted program parameters are degenerate, or None.

    Parameters
    ----------
    params : dict
        Site name -> fitted (constrained) value.
    constraints : dict
        Site name -> its numpyro constraint.
    data_scale : float
        The data's smallest positive per-dimension standard deviation.
    """
    from numpyro.distributions import constraints as c

    floor = COLLAPSE_RTOL * data_scale
    for name, value in params.items():
        value = np.asarray(value, dtype=float)
        if not np.all(np.isfinite(value)):
            return f"parameter {name!r} not finite"
        constraint = constraints.get(name)
        base = getattr(constraint, "base_constraint", constraint)
        if isinstance(base, type(c.positive)) and value.size and value.min() < floor:
            return (f"collapsed: parameter {name!r} reaches {value.min():.3g} < "
                    f"{COLLAPSE_RTOL} x the data's scale {data_scale:.3g}")
        if isinstance(base, type(c.lower_cholesky) | type(c.corr_cholesky)):
            diagonal = np.diagonal(value, axis1=-2, axis2=-1)
            if diagonal.size and np.abs(diagonal).min() < floor:
                return (f"collapsed: Cholesky factor {name!r} has a diagonal entry "
                        f"{np.abs(diagonal).min():.3g} < {COLLAPSE_RTOL} x the data's "
                        f"scale {data_scale:.3g}")
            reason = covariance_reason(value @ np.swapaxes(value, -1, -2))
            if reason:
                return f"{name!r}: {reason}"
        if isinstance(base, type(c.positive_definite)):
            reason = covariance_reason(value)
            if reason:
                return f"{name!r}: {reason}"
    return None


def evidence_gap_reason(values, errors, names, num) -> tuple[str | None, tuple]:
    """(reason or None, indices it concerns): no evidence choice when the combined
    standard error of the best and the runner-up exceeds the gap between them.

    ``values`` and ``errors`` are per example (as the result stores them), ``num`` the
    number of examples: the comparison is made in total nats.
    """
    values = np.asarray(values, dtype=float)
    errors = np.asarray(errors, dtype=float)
    finite = np.flatnonzero(np.isfinite(values))
    if finite.size < 2:
        return None, ()
    order = finite[np.argsort(-values[finite], kind="stable")]
    best, second = int(order[0]), int(order[1])
    gap = (values[best] - values[second]) * num
    se = math.hypot(errors[best] if np.isfinite(errors[best]) else math.inf,
                    errors[second] if np.isfinite(errors[second]) else math.inf) * num
    if se > gap:
        return (f"the standard error {se:.3g} nats exceeds the gap {gap:.3g} nats between "
                f"{names[best]} and {names[second]}"), (best, second)
    return None, ()
