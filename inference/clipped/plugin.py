"""The clipped-Gaussian family's plug-in: fits, results, baselines, comparison, experiments.

The one place where the clipped-Gaussian model for binary data declares itself to the
zoo's tools (:class:`ppl_models.registry.Family`).
"""

from inference.clipped import experiments
from inference.clipped.baselines import (
    ClippedMCMCResult,
    ClippedSVIResult,
    fit_clipped_mcmc,
    fit_clipped_svi,
)
from inference.clipped.compare import compare_clipped
from inference.clipped.fit import ClippedGaussianFit, fit_clipped_gaussian
from inference.clipped.scorer import ClippedScorer, check_candidates
from inference.clipped.stream import fit_clipped_gaussian_stream
from ppl_models.registry import Family, Selection, register_family

__all__ = ["FAMILY"]

FAMILY = register_family(Family(
    name="clipped",
    paper=experiments.CLIPPED,
    description="binary patterns as a clipped Gaussian of continuous causes; arcsine law "
                "and PCA",
    fits={"fit_clipped_gaussian": fit_clipped_gaussian,
          "fit_clipped_gaussian_stream": fit_clipped_gaussian_stream},
    results=(ClippedGaussianFit, ClippedSVIResult, ClippedMCMCResult),
    baselines={"fit_clipped_svi": fit_clipped_svi, "fit_clipped_mcmc": fit_clipped_mcmc},
    comparisons={"clipped": compare_clipped},
    experiments=experiments.EXPERIMENTS,
    selection=Selection(
        label="P", size="number of hidden units",
        criteria=("cv", "train", "bic", "aic"), default_criteria=("cv", "train", "bic", "aic"),
        scorer=ClippedScorer, candidates=check_candidates, options=("noise",)),
))
