"""The GVQ family's plug-in: its fits, results, baselines, comparisons and experiments.

The one place where generative vector quantisation declares itself to the zoo's tools
(:class:`ppl_models.registry.Family`): ``ppl-zoo list`` / ``compare`` / ``reproduce``,
saving and loading results, and the contract and bad-input tests read it from here.
"""

from inference.association.core import AssociationResult, associate
from inference.gvq import experiments
from inference.gvq.baselines import (
    GVQMCMCResult,
    fit_gvq_mcmc,
    fit_gvq_svi,
    gibbs_associate,
    map_associate,
)
from inference.gvq.compare import compare_gvq
from inference.gvq.compare_association import compare_gvq_association
from inference.gvq.compare_learning import compare_gvq_learning
from inference.gvq.constraints import associate_sets
from inference.gvq.description_length import DescriptionLength
from inference.gvq.em import GVQResult, fit_gvq
from inference.gvq.scorer import GVQScorer, check_candidates
from inference.gvq.stream import fit_gvq_stream
from ppl_models.registry import Family, Selection, register_family

__all__ = ["FAMILY"]

FAMILY = register_family(Family(
    name="gvq",
    paper=experiments.GVQ,
    description="binary combinations of features, x = s F + noise; association and EM in "
                "the sigma -> 0 limit",
    fits={"associate": associate, "associate_sets": associate_sets, "fit_gvq": fit_gvq,
          "fit_gvq_stream": fit_gvq_stream},
    results=(AssociationResult, GVQResult, GVQMCMCResult, DescriptionLength),
    baselines={"fit_gvq_svi": fit_gvq_svi, "fit_gvq_mcmc": fit_gvq_mcmc,
               "map_associate": map_associate, "gibbs_associate": gibbs_associate},
    comparisons={"gvq": compare_gvq, "gvq_association": compare_gvq_association,
                 "gvq_learning": compare_gvq_learning},
    experiments=experiments.EXPERIMENTS,
    selection=Selection(
        label="n", size="number of features",
        criteria=("cv", "train", "bic", "aic", "loo", "waic", "evidence"),
        default_criteria=("cv", "bic", "aic"),
        scorer=GVQScorer, candidates=check_candidates,
        options=("noise", "feature_scale")),
))
