"""The mixture family's plug-in: fits, results, baselines, comparison and experiments.

The one place where Gaussian mixtures as YING-YANG machines declare themselves to the
zoo's tools (:class:`ppl_models.registry.Family`).
"""

from inference.mixture import experiments
from inference.mixture.baselines import (
    MixtureLOO,
    MixtureMCMCResult,
    MixtureSVIResult,
    fit_mixture_mcmc,
    fit_mixture_svi,
    mixture_loo,
)
from inference.mixture.compare import compare_mixture
from inference.mixture.em import MixtureResult, fit_mixture
from inference.mixture.online import OnlineResult, fit_online
from inference.mixture.online_stream import OnlineStreamResult, fit_online_stream
from inference.mixture.scorer import (
    YINGYANG_CRITERIA,
    MixtureScorer,
    check_candidates,
    contains,
)
from inference.mixture.selection import SelectionResult, compare_criteria, select_num_components
from inference.mixture.stream import fit_mixture_stream
from inference.mixture.vb import VBMixtureResult, fit_vb_mixture
from ppl_models.registry import Family, Selection, register_family

__all__ = ["FAMILY"]

FAMILY = register_family(Family(
    name="mixture",
    paper=experiments.YINGYANG,
    description="Gaussian mixtures: EM, hard-cut EM and k-means as limits of one program; "
                "criteria, pruning, online learning; the VB mixture",
    fits={"fit_mixture": fit_mixture, "fit_mixture_stream": fit_mixture_stream,
          "fit_online": fit_online, "fit_online_stream": fit_online_stream,
          "select_num_components": select_num_components,
          "compare_criteria": compare_criteria, "fit_vb_mixture": fit_vb_mixture},
    results=(MixtureResult, OnlineResult, SelectionResult, OnlineStreamResult,
             VBMixtureResult, MixtureSVIResult, MixtureMCMCResult, MixtureLOO),
    baselines={"fit_mixture_svi": fit_mixture_svi, "fit_mixture_mcmc": fit_mixture_mcmc,
               "mixture_loo": mixture_loo},
    comparisons={"mixture": compare_mixture},
    experiments=experiments.EXPERIMENTS,
    selection=Selection(
        label="k", size="number of components",
        criteria=("vb", "cv", "train", "bic", "aic", "loo", "waic", "evidence",
                  *YINGYANG_CRITERIA),
        default_criteria=("vb", "cv", "train", "bic", "loo"),
        scorer=MixtureScorer, candidates=check_candidates, contains=contains,
        options=("covariance", "prior_scale", "loo_options")),
))
