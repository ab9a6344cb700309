"""The paper experiments of the mixture family for ``ppl-zoo reproduce``."""

from __future__ import annotations

from inference.engine.reporting import (
    Experiment,
    finding,
    rate,
)
from ppl_models.references import cite

__all__ = ["EXPERIMENTS"]

YINGYANG = cite("yingyang").rstrip(".")


def _yingyang(data):
    summary, seeds = data["summary"], data["settings"]["seeds"]
    rules = (("J", "J(k) of k-means (eq. 24) selects k", "sec. 5.1"),
             ("L_map", "L_map of hard-cut EM (eq. 20) selects k", "sec. 5.1"),
             ("L_stocha", "L_stocha of EM (eq. 14-16) selects k", "sec. 5.1"),
             ("prune, hard-cut EM (literal)", "Starting large and removing components selects "
              "k automatically", "sec. 5.2"),
             ("RPCL", "RPCL's rival penalty drives extra units away", "sec. 6.2"))
    out = []
    for rule, claim, section in rules:
        if rule not in summary:
            out.append(finding(claim, f"no number ({section})", None, "not checked",
                               f"rule {rule!r} not in the example's output"))
            continue
        s = summary[rule]
        verdict, detail = rate(s["hits"], seeds)
        out.append(finding(claim, f"claimed, no experiment ({section})",
                           f"true k in {s['hits']}/{seeds} (too few {s['under']}, too many "
                           f"{s['over']})", verdict, detail))
    return out


#: The family's experiments, in report order.
EXPERIMENTS = (
    Experiment("yingyang_selection", YINGYANG, "sec. 5-6", "the criteria and pruning select "
               "the number of clusters", "claims, no numbers", "yingyang_selection.py",
               "yingyang_selection.json", _yingyang),
)
