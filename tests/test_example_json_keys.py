"""Renamed keys of the examples' JSON files: the report reads the old name and the new."""

import pytest

from inference.app.experiments import EXPERIMENTS


def _mcvq_selection_data(key):
    pruning = {"claim": "VB-MCVQ ...", "seeds": 5, "raw_hits": 4, "cause_hits": 5,
               "level": "holds", "text": "holds"}
    return {key: pruning, "summary": {"K=3, J=9": {"seeds": 5, "hits_k": {"vb": 4, "cv": 3}}}}


@pytest.mark.parametrize("key", ["vb_pruning", "issue"])  # "issue": files of earlier versions
def test_mcvq_selection_reads_both_names_of_the_pruning_claim(key):
    findings = EXPERIMENTS["mcvq_selection"].extract(_mcvq_selection_data(key))
    assert findings[0]["ours"] == "4/5 (VQs), 5/5 (causes)"
    assert findings[0]["verdict"] == "holds"
    assert findings == EXPERIMENTS["mcvq_selection"].extract(
        _mcvq_selection_data("vb_pruning"))
