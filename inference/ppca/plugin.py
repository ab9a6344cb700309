"""The PPCA family's plug-in: fits, results, baselines, comparison and bad-input cases.

The one place where probabilistic PCA (Tipping & Bishop 1999; its sigma -> 0 limit, EM
for PCA, Roweis 1998) declares itself to the zoo's tools
(:class:`ppl_models.registry.Family`).
"""

import numpy as np

from inference.ppca.baselines import PPCAMCMCResult, PPCASVIResult, fit_ppca_mcmc, fit_ppca_svi
from inference.ppca.compare import compare_ppca
from inference.ppca.em import PPCAResult, fit_ppca
from inference.ppca.selection import PPCAScorer, check_candidates
from ppl_models.references import cite
from ppl_models.registry import BadInput, Family, Selection, register_family
from ppl_models.validation import MissingKeyError

__all__ = ["FAMILY", "PAPER"]

PAPER = cite("ppca").rstrip(".") + "; " + cite("ppca_em").rstrip(".")


def _bad_inputs():
    """Bad-input rows of the family's entry points (checked before anything compiles)."""
    import jax

    from ppl_models import ppca

    key = jax.random.key(0)
    x = np.array([[1.0, 0.0, 1.0], [0.0, 2.0, 1.0], [1.0, 2.0, 2.0], [0.0, 0.0, 0.0],
                  [2.0, 1.0, 0.5], [0.5, 1.5, 1.0]], np.float32)  # (6, 3)
    nan_x = x.copy()
    nan_x[1, 2] = np.nan

    def rows(entry, base, table):
        return [BadInput(entry, argument, (lambda o=overrides: base(**o)), error, pattern)
                for argument, overrides, error, pattern in table]

    def fit(x=x, q=2, **kw):
        return fit_ppca(x, q, **{"rng_key": key, "max_iterations": 2, **kw})

    def svi(x=x, q=2, **kw):
        return fit_ppca_svi(x, q, **{"rng_key": key, "num_steps": 1, **kw})

    def mcmc(x=x, q=2, **kw):
        return fit_ppca_mcmc(x, q, **{"rng_key": key, "num_warmup": 1, "num_samples": 4, **kw})

    def trace(x=x, **kw):
        from numpyro import handlers

        return handlers.trace(handlers.seed(ppca.model, 0)).get_trace(
            x, **{"num_components": 2, **kw})

    def generate(n=10, **kw):
        return ppca.generate(kw.pop("rng_key", key), n, kw.pop("dim", 3), 2, **kw)

    nan = ("x", dict(x=nan_x), ValueError, r"^x contains 1 NaN or infinite")
    missing = ("rng_key", dict(rng_key=None), MissingKeyError, r"^rng_key must be a single")
    return (
        rows("fit_ppca", fit, [
            nan, missing,
            ("x", dict(x=x[0]), ValueError, r"^x must be 2-D"),
            ("num_components", dict(q=4), ValueError,
             r"^num_components must be at most 3 .*got 4"),
            ("num_components", dict(q=3, noise="ml"), ValueError,
             r"^num_components must be at most 2 .*got 3"),
            ("num_components", dict(x=x[:2], q=2), ValueError,
             r"^num_components must be at most num_examples - 1 = 1"),
            ("num_components", dict(q=0), ValueError, r"^num_components must be at least 1"),
            ("noise", dict(noise=-1.0), ValueError, r"^noise must be positive"),
            ("noise", dict(noise=0.0), ValueError, r"^noise must be positive"),
            ("noise", dict(noise="mle"), ValueError, r"^noise must be None .*got 'mle'"),
            ("noise", dict(noise=True), TypeError, r"^noise must be None"),
            ("rng_key", dict(rng_key=0), TypeError, r"^rng_key must be a single"),
            ("max_iterations", dict(max_iterations=0), ValueError,
             r"^max_iterations must be at least 1"),
            ("tol", dict(tol=-1.0), ValueError, r"^tol must be a non-negative"),
            ("num_restarts", dict(num_restarts=0), ValueError,
             r"^num_restarts must be at least 1"),
            ("init_weights", dict(init_weights=np.ones((3, 3))), ValueError,
             r"^init_weights must have shape \(q, d\) = \(2, 3\)"),
            ("x", dict(x=[x, nan_x]), ValueError, r"^x batch 1 .*NaN or infinite"),
            ("batch_size", dict(batch_size=2), ValueError, r"^batch_size applies to a stream"),
        ])
        + rows("fit_ppca_svi", svi, [
            nan, missing,
            ("num_components", dict(q=3), ValueError, r"^num_components must be at most 2"),
            ("num_steps", dict(num_steps=0), ValueError, r"^num_steps must be at least 1"),
            ("learning_rate", dict(learning_rate=0.0), ValueError,
             r"^learning_rate must be positive"),
        ])
        + rows("fit_ppca_mcmc", mcmc, [
            nan, missing,
            ("num_samples", dict(num_samples=2), ValueError, r"^num_samples must be at least 4"),
            ("num_chains", dict(num_chains=0), ValueError, r"^num_chains must be at least 1"),
            ("target_accept_prob", dict(target_accept_prob=1.5), ValueError,
             r"^target_accept_prob must be in \(0, 1\)"),
        ])
        + rows("ppca.model", trace, [
            nan,
            ("num_components", dict(num_components=None), ValueError,
             r"^num_components must be given"),
            ("weights", dict(weights=np.ones(3)), ValueError, r"^weights must be 2-D"),
            ("mean", dict(mean=np.ones(4)), ValueError, r"^mean must have shape"),
            ("sigma", dict(sigma=-1.0), ValueError, r"^sigma must be positive"),
        ])
        + rows("ppca.generate", generate, [
            missing,
            ("num_examples", dict(n=0), ValueError, r"^num_examples must be at least 1"),
            ("dim", dict(dim=1), ValueError, r"^dim must be at least num_components=2"),
            ("noise", dict(noise=0.0), ValueError, r"^noise must be positive"),
        ])
    )


FAMILY = register_family(Family(
    name="ppca",
    paper=PAPER,
    description="x = z W + mu + noise with Gaussian z; EM for W and sigma, and EM for PCA "
                "in the sigma -> 0 limit",
    fits={"fit_ppca": fit_ppca},
    results=(PPCAResult, PPCASVIResult, PPCAMCMCResult),
    baselines={"fit_ppca_svi": fit_ppca_svi, "fit_ppca_mcmc": fit_ppca_mcmc},
    comparisons={"ppca": compare_ppca},
    bad_inputs=_bad_inputs,
    selection=Selection(
        label="q", size="number of principal components",
        criteria=("cv", "train", "bic", "aic", "loo", "waic", "evidence", "laplace", "pca_mle"),
        default_criteria=("cv", "bic", "aic", "laplace", "pca_mle"),
        scorer=PPCAScorer, candidates=check_candidates, options=("fit",)),
))
