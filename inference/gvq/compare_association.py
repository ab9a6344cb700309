"""``ppl-zoo compare gvq_association``: every association method against NumPyro's.

Sec. 4.3 of M. Westerdijk, D. Barber and W. Wiegerinck, "Deterministic generative
models for fast feature discovery", Data Mining and Knowledge Discovery 5(4), 2001,
compares the association methods on random planted problems
(``examples/gvq_association.py`` reproduces its figures); this is the small
side-by-side version on the same program and data. Planted problems
from :func:`ppl_models.gvq.generate_planted` (s* ~ Bernoulli(1/2), noise 0.3
by default):

* "sparse": n = 12 features, dim 8, every visible unit has k = 4 parents,
  weights N(2, 1) (Fig. 4a's set-up, where the directed methods apply);
* "dense": n = 10 features, dim 8, fully connected, weights N(0, 1) (Fig. 4b's
  set-up; left out by ``quick``).

Rows: every method of :data:`inference.association.core.METHODS` through
``associate`` (ours: exhaustive search, BP, BR, MF, Gibbs, BR+MF, and DBR,
DBP when :mod:`inference.association.directed` provides them), NumPyro's
``infer_discrete(temperature=0)`` (:func:`~inference.gvq.baselines.map_associate`)
and NumPyro's ``DiscreteGibbs`` (:func:`~inference.gvq.baselines.gibbs_associate`)
at sigma equal to the data's noise and at three times it (single-site Gibbs
hardly moves between modes at small sigma; the larger sigma lets it mix).
The objective is the mean sigma -> 0 energy ||x - s F||^2; the extra columns
give the mean relative energy gap to exhaustive search, the fraction of
examples at the exact minimum energy (relative tolerance 1e-4), the fraction
of examples whose method reported convergence, and the number of examples.
A method that refuses the problem (DBR with too many parents per visible
unit) gets a row marked not applicable.
"""

from __future__ import annotations

import math

import jax
import numpy as np
from tqdm.auto import tqdm

from inference.association import core as association
from inference.association.core import associate
from inference.engine.figures import new_figure, save_figure
from inference.engine.reporting import ComparisonResult, ComparisonRow, timed
from inference.gvq.baselines import gibbs_associate, map_associate
from ppl_models import gvq
from ppl_models.references import REFERENCES

__all__ = ["compare_gvq_association", "plot_gvq_association", "METHOD_NAMES"]

#: Readable names of the association methods (Westerdijk, Barber and Wiegerinck (2001),
#: sec. 4).
METHOD_NAMES = {
    "exact": "exhaustive search",
    "bp": "BP, annealed loopy sum-product",
    "br": "BR, belief revision (min-sum)",
    "mf": "MF, annealed mean field",
    "gibbs": "annealed Gibbs sampling",
    "br+mf": "BR, MF where BR did not converge",
    "dbr": "DBR, directed belief revision",
    "dbp": "DBP, directed BP (Gauss-Hermite)",
}
#: Two energies within this relative distance count as equal (float32 rounding).
ENERGY_RTOL = 1e-4
#: Sigma of the second NumPyro Gibbs run, in units of the data's noise.
GIBBS_SIGMA_FACTOR = 3.0


def _problems(quick: bool):
    """(name, num_features, dim, num_parents, feature_mean) of the planted problems."""
    sparse = ("sparse", 12, 8, 4, 2.0)
    return [sparse] if quick else [sparse, ("dense", 10, 8, None, 0.0)]


def _gap_columns(energy, exact_energy, converged, num_examples):
    energy, exact_energy = np.asarray(energy), np.asarray(exact_energy)
    gap = (energy - exact_energy) / np.maximum(exact_energy, 1e-12)
    optimal = energy <= exact_energy + ENERGY_RTOL * (1.0 + np.abs(exact_energy))
    return {"energy_gap": float(np.mean(gap)), "fraction_optimal": float(np.mean(optimal)),
            "fraction_converged": None if converged is None else float(np.mean(converged)),
            "num_examples": num_examples}


def compare_gvq_association(rng_key, *, quick: bool = False, progress_bar: bool = True,
                            num_examples: int | None = None, noise: float = 0.3,
                            gibbs_sweeps: int | None = None) -> ComparisonResult:
    """Run the association comparison; see the module docstring.

    Parameters
    ----------
    rng_key : jax.random key
    quick : bool
        Only the sparse problem, 100 examples, fewer NumPyro Gibbs sweeps.
    progress_bar : bool
        Show a tqdm bar over the rows.
    num_examples : int, optional
        Examples per problem (default 500, quick 100).
    noise : float
        Noise standard deviation of the data (default 0.3).
    gibbs_sweeps : int, optional
        Warm-up and kept sweeps of NumPyro's Gibbs, each (default 50, quick 20).

    Returns
    -------
    ComparisonResult
        One row per (problem, method); ``arrays`` holds the planted features.
    """
    num_examples = num_examples or (100 if quick else 500)
    gibbs_sweeps = gibbs_sweeps or (20 if quick else 50)
    association.load_methods()
    methods = [m for m in METHOD_NAMES if m in association.METHODS and m != "exact"]
    methods += [m for m in association.METHODS if m not in METHOD_NAMES]
    problems = _problems(quick)
    settings = dict(num_examples=num_examples, noise=noise, quick=quick,
                    problems=[f"{name}: n={n}, dim={d}, parents={k or n}, F ~ N({mean:g}, 1)"
                              for name, n, d, k, mean in problems],
                    gibbs_sweeps=gibbs_sweeps, methods=methods)
    energy_name = "mean ||x - sF||^2"
    rows, arrays = [], {}
    steps = tqdm(total=len(problems) * (len(methods) + 4), desc="compare gvq_association",
                 disable=not progress_bar, leave=False)
    for index, (name, n, d, k, mean) in enumerate(problems):
        key_data, key_run = jax.random.split(jax.random.fold_in(rng_key, index))
        data = gvq.generate_planted(key_data, num_examples, n, d, num_parents=k,
                                    feature_mean=mean, noise_scale=noise)
        F, x = data.features, data.x
        arrays[f"{name}_features"] = np.asarray(F)
        task = f"association, {name} (n={n}, dim={d}, parents={k or n}, F ~ N({mean:g}, 1))"

        steps.set_postfix_str(f"{name}: exact")
        exact, t, t0, notes = timed(associate, F, x, method="exact", check=False)
        exact_energy = exact.energy
        rows.append(ComparisonRow(task, METHOD_NAMES["exact"], "ours", energy_name,
                                  float(np.mean(exact_energy)), t, t0,
                                  bool(np.all(exact.converged)),
                                  _gap_columns(exact_energy, exact_energy, exact.converged,
                                               num_examples), notes))
        steps.update()

        for number, method in enumerate(methods):
            steps.set_postfix_str(f"{name}: {method}")
            options = {}
            if method == "dbr":  # enumerate only the true number of parents (O(d 2^K K))
                options["max_parents"] = int(np.max(np.sum(np.asarray(F) != 0, axis=0)))
            label = METHOD_NAMES.get(method, method)
            try:
                result, t, t0, notes = timed(
                    associate, F, x, method=method, check=False,
                    rng_key=jax.random.fold_in(key_run, number), **options)
            except ValueError as err:
                rows.append(ComparisonRow(
                    task, label, "ours", energy_name, math.nan, math.nan, math.nan, False,
                    {"energy_gap": None, "fraction_optimal": None, "fraction_converged": None,
                     "num_examples": num_examples}, f"not applicable: {err}"))
            else:
                rows.append(ComparisonRow(
                    task, label, "ours", energy_name, float(np.mean(result.energy)), t, t0,
                    bool(np.all(result.converged)),
                    _gap_columns(result.energy, exact_energy, result.converged, num_examples),
                    notes))
            steps.update()

        steps.set_postfix_str(f"{name}: infer_discrete")
        peer, t, t0, notes = timed(map_associate, F, x, noise=noise)
        rows.append(ComparisonRow(
            task, f"infer_discrete(temperature=0), sigma={noise:g}", "numpyro", energy_name,
            float(np.mean(peer.energy)), t, t0, bool(np.all(peer.converged)),
            _gap_columns(peer.energy, exact_energy, peer.converged, num_examples), notes))
        steps.update()

        for factor in (1.0, GIBBS_SIGMA_FACTOR):
            sigma = factor * noise
            steps.set_postfix_str(f"{name}: DiscreteGibbs sigma={sigma:g}")
            peer, t, t0, notes = timed(gibbs_associate, F, x,
                                       rng_key=jax.random.fold_in(key_run, 1000 + int(factor)),
                                       noise=sigma, num_warmup=gibbs_sweeps,
                                       num_samples=gibbs_sweeps)
            # A sampler has no convergence criterion: fraction_converged is left empty.
            rows.append(ComparisonRow(
                task, f"DiscreteGibbs, sigma={sigma:g}, {2 * gibbs_sweeps} sweeps, best kept",
                "numpyro", energy_name, float(np.mean(peer.energy)), t, t0,
                bool(np.all(peer.converged)),
                _gap_columns(peer.energy, exact_energy, None, num_examples), notes))
            steps.update()
    steps.close()
    return ComparisonResult("gvq_association", rows, settings, arrays, plot_gvq_association)


def plot_gvq_association(result: ComparisonResult, path) -> None:
    """Bar charts per problem: mean relative energy gap and warm time of every method."""
    import textwrap

    from matplotlib.patches import Patch

    tasks = list(dict.fromkeys(row.task for row in result.rows))
    height = 0.42 * len(result.rows) + 1.1 * len(tasks) + 0.8
    fig, axes = new_figure(len(tasks), 2, figsize=(11, height), squeeze=False)
    for (ax_gap, ax_time), task in zip(axes, tasks, strict=True):
        rows = [row for row in result.rows if row.task == task]
        labels = [textwrap.fill(f"{row.algorithm} ({row.implementation})", 44) for row in rows]
        gaps = [np.nan if row.extra.get("energy_gap") is None else row.extra["energy_gap"]
                for row in rows]
        colours = ["tab:blue" if row.implementation == "ours" else "tab:orange" for row in rows]
        where = np.arange(len(rows))
        ax_gap.barh(where, np.nan_to_num(gaps), color=colours)
        for i, gap in enumerate(gaps):
            ax_gap.text(0 if np.isnan(gap) else max(gap, 0.0), i,
                        " not applicable" if np.isnan(gap) else f" {gap:.3g}", va="center",
                        fontsize=7)
        ax_gap.set_xlim(0.0, 1.15 * max(np.nan_to_num(gaps).max(), 0.1))
        ax_gap.set_yticks(where, labels, fontsize=7)
        ax_gap.invert_yaxis()
        ax_gap.set_xlabel("energy gap to exhaustive search, mean (E - E*) / E*")
        ax_gap.set_title(textwrap.fill(task, 60), fontsize=9)
        times = np.asarray([row.time_s for row in rows], float)
        shown = np.isfinite(times) & (times > 0)
        ax_time.barh(where[shown], times[shown], color=np.asarray(colours)[shown])
        ax_time.set_xscale("log")
        ax_time.set_yticks(where, [""] * len(rows))
        ax_time.invert_yaxis()
        ax_time.set_xlabel("warm time (s, log scale)")
        ax_time.set_title("time of a warm call", fontsize=9)
    fig.legend(handles=[Patch(color="tab:blue", label="ours"),
                        Patch(color="tab:orange", label="NumPyro")],
               loc="outside lower center", ncols=2, fontsize=8)
    fig.suptitle(f"GVQ association on the problems of {REFERENCES['gvq'].short}, sec. 4.3")
    save_figure(fig, path)
