"""Every paper experiment that ``ppl-zoo reproduce`` runs, from the families' plug-ins.

Each family declares its experiments (:class:`inference.engine.reporting.Experiment`:
the paper and section, the claim in one line, the paper's number, the example script
with its quick and full arguments, the JSON it writes, and ``extract(data) -> list of
findings``) in its plug-in; :data:`EXPERIMENTS` gathers them in the registry's order
(GVQ, the clipped-Gaussian model, mixtures, MCVQ).

Quick arguments keep the whole default run short (about 17 minutes on 2 CPU cores,
:data:`inference.app.run_times.RUN_TIMES`): the example's ``--quick`` where that still
tests the claim, its full size where that costs about a minute or less. Quick verdicts
rest on few seeds and trials: a smoke test of the claim, not a replication. Full
arguments are the examples' defaults (the papers' sizes as far as the examples reach
them), except the model-selection study's: its complete grid (300 rows, about a day of
compute on 2 cores) is the study runner's work (``ppl-zoo study run
examples/studies/selection.toml``), and ``reproduce --full`` runs a bounded part of it
(:data:`SELECTION_STUDY_FULL_ARGS`), so that the whole full run takes about 20 minutes on
two quiet cores (an hour on busy ones).
"""

from __future__ import annotations

from inference.app.families import load_families
from inference.engine.reporting import VERDICTS, Experiment, finding, rate
from ppl_models.references import cite

__all__ = ["EXPERIMENTS", "STUDIES", "SELECTION_STUDY_FULL_ARGS", "Experiment", "VERDICTS",
           "finding"]


def _levels_text(family):
    """"all three levels", or the levels recorded so far (a study in progress)."""
    levels = list(family["summary"])
    return "all three levels" if len(levels) == 3 else "recorded levels: " + ", ".join(levels)


def _selection_study(data):
    """Per family: the evidence's hit rate on well-separated data, each criterion's hit
    rate there, and the criterion agreeing best with the evidence."""
    out = []
    for name, family in data["families"].items():
        if "separated" not in family["summary"]:
            continue
        # a study in progress (--saved-only) counts each level's own rows
        seeds = family.get("seeds", {}).get("separated", data["settings"]["seeds"])
        separated = family["summary"]["separated"]
        planted = family["planted"]
        for criterion in family["criteria"]:
            hits = separated[criterion]["hits"]
            verdict, detail = rate(hits, seeds)
            what = "the reference evidence" if criterion == "evidence" else criterion
            out.append(finding(f"{name}: {what} chooses the planted size {planted} on "
                               "well-separated data", "the planted size (a study, no paper "
                               "value)", f"{hits}/{seeds} seeds", verdict, detail))
        best = family["best"]
        if best is not None and "evidence" in family["criteria"]:
            verdict, detail = rate(best["agree"], best["total"])
            rho = "-" if best["rho"] is None else f"{best['rho']:+.2f}"
            cost = ("" if best.get("seconds") is None or best.get("evidence_seconds") is None
                    else f", {best['seconds']:.3g} s per seed (the evidence "
                         f"{best['evidence_seconds']:.3g} s)")
            out.append(finding(f"{name}: the criterion that agrees best with the reference "
                               f"evidence ({_levels_text(family)})", "(a study, no paper value)",
                               f"{best['criterion']}: same choice in {best['agree']}/"
                               f"{best['total']} runs, mean Spearman rho {rho}{cost}", verdict,
                               detail.replace("seeds", "runs")))
    shapes = data.get("shapes")
    if shapes:
        v = shapes["verdict"]
        n = v["seeds"]
        reliable = v.get("reliable", n)
        if reliable <= n / 2:
            verdict, side = "not checked", (
                f"the evidence estimates are reliable in only {reliable}/{n} seeds (below "
                "their exact one-assignment terms elsewhere)")
        elif v["evidence_prefers_vb"] > n / 2:
            verdict, side = "holds", "the evidence sides with the bound"
        elif v["evidence_prefers_planted"] > n / 2:
            verdict, side = "differs", "the evidence sides with the planted 3 shapes"
        else:
            verdict, side = "partly", "the evidence sides with neither in most seeds"
        terms = ("" if "terms_prefer_vb" not in v else
                 f"; exact one-assignment terms prefer it in {v['terms_prefer_vb']}/{n}")
        out.append(finding(
            "mcvq on shapes: the reference evidence sides with VB-MCVQ's pruned model (more "
            "VQs than the 3 shapes, preferred by the VB bound) over the planted structure",
            "(a study, no paper value)",
            f"bound prefers VB's model in {v['bound_prefers_vb']}/{n} seeds{terms}; "
            f"evidence prefers it in {v['evidence_prefers_vb']}/{n}, the planted structure "
            f"in {v['evidence_prefers_planted']}/{n} (by more than 2 SE)", verdict,
            f"{side}; holds: in more than half of the seeds"))
    if not out:
        raise KeyError("families")
    return out


#: The model-selection study's size in ``reproduce --full``: 3 seeds (the fewest whose
#: hit rates get a verdict) of the well-separated level for PPCA (every criterion, the
#: reference evidence included) and the clipped Gaussian, with the 500 SMC particles of
#: the saved rows and without the MCVQ shapes question: about 16 minutes on 2 cores
#: (the saved rows of those seeds took 889 s and 47 s). The complete study (every
#: family and level, 20 seeds) runs with ``ppl-zoo study run
#: examples/studies/selection.toml``.
SELECTION_STUDY_FULL_ARGS = ("--families", "ppca", "clipped", "--levels", "separated",
                             "--seeds", "3", "--shapes-seeds", "0", "--particles", "500")

#: Experiments of the zoo itself (not of one family's paper), after the families'.
STUDIES = (
    Experiment("selection_study", "; ".join(cite(k).rstrip(".") for k in (
                   "smc_samplers", "psis_loo", "minka_pca", "vb_mixture")),
               "model selection for every family", "Each criterion against the reference "
               "log evidence (tempered SMC) at three difficulty levels",
               "(a study: no paper value)", "selection_study.py", "selection_study.json",
               _selection_study,
               # The default run's smoke test: the three families whose fits compile
               # fastest (about 1.5 minutes); --full: SELECTION_STUDY_FULL_ARGS.
               quick_args=("--quick", "--families", "ppca", "clipped", "mixture"),
               full_args=SELECTION_STUDY_FULL_ARGS),
)

#: Name -> experiment, in report order.
EXPERIMENTS: dict[str, Experiment] = {
    experiment.name: experiment
    for family in load_families().values() for experiment in family.experiments}
EXPERIMENTS.update((experiment.name, experiment) for experiment in STUDIES)
