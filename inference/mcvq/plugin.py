"""The MCVQ family's plug-in: fits, results, baselines, comparison and experiments.

The one place where multiple cause vector quantization declares itself to the zoo's
tools (:class:`ppl_models.registry.Family`).
"""

from inference.mcvq import experiments
from inference.mcvq.baselines import (
    MCVQScore,
    MCVQSVIResult,
    fit_mcvq_meanfield_svi,
    fit_mcvq_svi,
    fit_variational,
)
from inference.mcvq.compare import compare_mcvq
from inference.mcvq.em import MCVQResult, fit_mcvq, infer_states, reconstruct
from inference.mcvq.selection import MCVQScorer, check_candidates, contains
from inference.mcvq.stream import fit_mcvq_stream
from inference.mcvq.vb import VBMCVQResult, fit_vb_mcvq
from ppl_models.registry import Family, Selection, register_family

__all__ = ["FAMILY"]

FAMILY = register_family(Family(
    name="mcvq",
    paper=experiments.MCVQ,
    description="several vector quantizers, each explaining a subset of the dimensions; "
                "variational EM and its VB version",
    fits={"fit_mcvq": fit_mcvq, "fit_mcvq_stream": fit_mcvq_stream,
          "infer_states": infer_states, "reconstruct": reconstruct,
          "fit_vb_mcvq": fit_vb_mcvq},
    results=(MCVQResult, VBMCVQResult, MCVQScore, MCVQSVIResult),
    baselines={"fit_mcvq_svi": fit_mcvq_svi, "fit_mcvq_meanfield_svi": fit_mcvq_meanfield_svi,
               "fit_variational": fit_variational},
    comparisons={"mcvq": compare_mcvq},
    experiments=experiments.EXPERIMENTS,
    selection=Selection(
        label="(K, J)", size="number of VQs K and states per VQ J",
        criteria=("vb", "cv", "train", "bic", "aic", "loo", "waic", "evidence"),
        default_criteria=("vb", "cv", "train", "bic", "loo"),
        scorer=MCVQScorer, candidates=check_candidates, contains=contains,
        options=("mask",)),
))
