"""Overcomplete GVQ on image patches: EM with tabu-search association against BR+MF.
=================================================================================

GVQ (M. Westerdijk, D. Barber and W. Wiegerinck, "Deterministic generative models for
fast feature discovery", Data Mining and Knowledge Discovery 5(4), 2001) explains
every example as a sum of binary-switched features, x = s F + noise, and learns F by
EM in the sigma -> 0 limit: associate every example with its best state s, then
solve least squares for F. The paper's association methods (belief revision, mean
field, "br+mf" = BR then MF) find the best state when there are fewer features than
dimensions; with *more* features than dimensions (an overcomplete codebook) sums of
features nearly cancel, the energy ||x - s F||^2 has many deep local minima, and
these methods stop far above the optimum. ``method="tabu"`` (multi-walk one-flip
tabu search, F. Glover, "Tabu search -- Part I", ORSA Journal on Computing 1(3),
1989; :mod:`inference.association.tabu`) keeps searching past local minima.
This script learns overcomplete GVQ codebooks on natural image patches with both.

**Data.** Grey 4 x 4 and 2 x 4 patches (ITU-R BT.601 luma of RGB, not rounded) cut
at random positions from scikit-learn's two bundled photographs
(``sklearn.datasets.load_sample_image("china.jpg")`` and ``"flower.jpg"``, half of
the patches from each; no network). Each patch's mean is removed (so the data lie in
a subspace of dim - 1 dimensions: 15 for 4 x 4, 7 for 2 x 4), and all patches are
divided by one common scale so that the average variance per pixel is 1 (the mean of
||x||^2 is dim). Flat patches (sky) are kept.

**Main run: n = 32 features on 4 x 4 patches (dim 16, twice overcomplete).**
:func:`inference.gvq.em.fit_gvq` with ``method="tabu"`` (the library's default
budget and tenure for this size, :func:`inference.association.tabu.default_budget`;
the script prints them) and with ``method="br+mf"``,
from the same initial features (``init_features``, drawn once by
:func:`inference.gvq.em.initial_features`), the same key and the same number of EM
iterations (*(choice)* ``tol=0``: EM stops when no association changes or the error
does not change at all, else after ``--iterations``; the same rule for every method).
The fit's own error is that of the last E-step's states under the features of the
last M-step; the table then re-associates every patch under each run's final
features with each method: br+mf, tabu (the fit's budget) and a reference tabu with
twice the walks and four times the moves (twice both with ``--quick``), the lowest
energy we can afford to find. Rows: features learned with A; columns: associated
with B. The gap of br+mf's run to the tabu run then splits into a part due to worse
association (br+mf against the reference on the br+mf features) and a part due to
worse features (both sets of features under the reference). Exhaustive search is
not feasible at n = 32 (2^32 states per patch; the library's ``"exact"`` stops at
n = 24), so the optimum itself is not known here.

**Small run: n = 16 features on 2 x 4 patches (dim 8, twice overcomplete)**, where
exhaustive search (2^16 states per patch) is affordable: EM with ``"exact"``,
``"tabu"`` and ``"br+mf"`` from the same start, and on the final features of each
run the fraction of patches whose tabu state equals the exact one (and whose tabu
energy equals the exact minimum within 1e-4 relative). *(choice)* Tabu here uses
16 walks of 512 moves with tenure 8 (n / 2). The library's defaults for this size,
tuned on random planted features, leave some of these learned features' patches
above the exact minimum (the full run prints how many); and one missed patch in one
E-step is enough to move EM off the exact path (measured: along an exact EM path of
30 iterations on 2000 patches, 16 walks of 256 moves with tenure 8 missed 6 of the
60000 associations, 16 walks of 512 moves none).

**Measured** (full run, seed 0, 1200 patches, 30 iterations; tabu's default budget
at n = 32 then 32 walks of 512 moves): EM with tabu ended 38% below EM with br+mf
(0.923 against 1.491 per patch, 5.8% and 9.3% of the variance left); of the gap,
72% was br+mf's association and 28% its features. Tabu is not exact at n = 32 on
these learned features: the fit's budget was above the reference on 23% of the
patches (3.3% on average). At n = 16 EM with tabu followed EM with exact search to
the same error (0.4909), with the exact state on every patch; br+mf ended 19%
above, and the default tabu options of that time (16 walks of 64 moves, tenure 4;
now 32 walks) reached the exact minimum on 76% of the patches of the exact-learned
features. ``--quick`` (seed 0, 1, 2): tabu 33-39% below br+mf,
and equal to exact at n = 16.

Figures: ``overcomplete_gvq_features.png`` (the 32 learned 4 x 4 features of the tabu
run and of the br+mf run, each sorted by how many patches use it under the
reference association); the numbers go to ``overcomplete_gvq.json``, both into
``--output-dir`` (default ``zoo-results``).

Run: ``python examples/overcomplete_gvq.py [--quick] [--output-dir DIR] [--seed S]
[--patches N] [--iterations N]`` (full: 1200 patches and at most 30 EM iterations per
run, about 3 minutes on 2 busy CPU cores; ``--quick``: 300 patches, 6 iterations,
under a minute, most of it compilation).

References
----------
M. Westerdijk, D. Barber and W. Wiegerinck, "Deterministic generative models for fast
feature discovery", Data Mining and Knowledge Discovery 5(4), 2001, sec. 3.1, 4.
F. Glover, "Tabu search -- Part I", ORSA Journal on Computing 1(3), 1989.
"""

from __future__ import annotations

import argparse
import json
import time
import warnings
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

from inference.association.base import MAX_EXACT_FEATURES
from inference.association.core import associate
from inference.association.tabu import default_budget, default_tenure
from inference.engine.figures import empty_figure, image_axes, save_figure
from inference.engine.reporting import jsonable
from inference.gvq.em import fit_gvq, initial_features
from ppl_models.diagnostics import ZooWarning

#: The two bundled photographs, half of the patches from each.
IMAGES = ("china.jpg", "flower.jpg")
#: ITU-R BT.601 luma weights (R, G, B).
LUMA = (0.299, 0.587, 0.114)
#: Main run: 32 features on 4 x 4 patches.
MAIN = {"height": 4, "width": 4, "num_features": 32}
#: Small run, where exhaustive search is affordable: 16 features on 2 x 4 patches.
SMALL = {"height": 2, "width": 4, "num_features": 16}
#: *(choice)* Tabu's options in the small run (the module docstring says why).
SMALL_TABU = {"num_walks": 16, "num_iterations": 512, "tenure": 8}
#: The reference association of the main run: tabu's default walks and moves times these
#: (with ``--quick``: :data:`QUICK_REFERENCE`).
REFERENCE = {"num_walks": 2, "num_iterations": 4}
QUICK_REFERENCE = {"num_walks": 2, "num_iterations": 2}
#: Two energies within this relative distance count as equal (float32 rounding).
ENERGY_RTOL = 1e-4
#: Column and row order of the tables.
METHODS = ("tabu", "br+mf")


def load_patches(rng, num_patches, height, width):
    """Random grey patches of the bundled photographs, each patch's mean removed.

    Parameters
    ----------
    rng : numpy.random.Generator
        Draws the patch positions.
    num_patches : int
        Patches in all, half from each of :data:`IMAGES` (one more from the first
        when odd).
    height, width : int
        Patch size in pixels.

    Returns
    -------
    x : float32 array (num_patches, height * width)
        Patches, rows concatenated, mean removed per patch and divided by ``scale``.
    scale : float
        The common divisor: the root of the average variance per pixel (grey levels).
    """
    from sklearn.datasets import load_sample_image

    counts = (num_patches - num_patches // 2, num_patches // 2)
    rows = []
    for name, count in zip(IMAGES, counts, strict=True):
        grey = load_sample_image(name).astype(np.float64) @ np.asarray(LUMA)
        top = rng.integers(0, grey.shape[0] - height + 1, count)
        left = rng.integers(0, grey.shape[1] - width + 1, count)
        rows += [grey[i:i + height, j:j + width].ravel() for i, j in zip(top, left, strict=True)]
    x = np.stack(rows)
    x -= x.mean(axis=1, keepdims=True)
    scale = float(np.sqrt(np.mean(np.square(x))))
    return (x / scale).astype(np.float32), scale


def mean_error(x, features, states):
    """Mean over patches of ||x - s F||^2."""
    recon = np.asarray(states, np.float64) @ np.asarray(features, np.float64)
    return float(np.mean(np.sum(np.square(np.asarray(x, np.float64) - recon), axis=1)))


def _quietly(function, *args, **kwargs):
    """``function(*args, **kwargs)`` with the zoo's warnings caught: (value, messages)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ZooWarning)
        value = function(*args, **kwargs)
    for w in caught:
        if not issubclass(w.category, ZooWarning):
            warnings.showwarning(w.message, w.category, w.filename, w.lineno)
    return value, sorted({str(w.message) for w in caught if issubclass(w.category, ZooWarning)})


def run_fit(x, num_features, method, *, init, rng_key, iterations, options=None):
    """EM with one association method from the given start.

    Returns
    -------
    dict
        ``method``, ``features``, ``fit_error`` (the fit's own error), ``iterations``,
        ``converged``, ``seconds`` (JIT compilation included), ``trace`` (error after
        every iteration), ``options`` and ``warnings``.
    """
    options = dict(options or {})
    start = time.perf_counter()
    result, caught = _quietly(fit_gvq, x, num_features, method=method, rng_key=rng_key,
                              init_features=init, num_restarts=1, max_iterations=iterations,
                              tol=0.0, **options)
    jax.block_until_ready(result.features)
    return {"method": method, "features": np.asarray(result.features),
            "fit_error": float(result.error), "iterations": int(result.num_iterations),
            "converged": bool(result.converged), "seconds": time.perf_counter() - start,
            "trace": np.asarray(result.trace.objective).tolist(), "options": options,
            "warnings": caught}


def run_association(x, features, method, *, rng_key, options=None):
    """Associate every patch under ``features``.

    Returns
    -------
    dict
        ``states`` (num_patches, n), ``energy`` (num_patches,), ``error`` (their mean),
        ``agree`` (fraction of patches whose method reports convergence; for tabu: at
        least two walks reached the same lowest energy) and ``seconds``.
    """
    start = time.perf_counter()
    result, _ = _quietly(associate, jnp.asarray(features), x, method, rng_key=rng_key,
                         **(options or {}))
    states = np.asarray(result.states)
    energy = np.sum(np.square(np.asarray(x, np.float64) - states @ np.asarray(features,
                                                                             np.float64)),
                    axis=1)
    return {"states": states, "energy": energy, "error": float(np.mean(energy)),
            "agree": float(np.mean(np.asarray(result.converged))),
            "seconds": time.perf_counter() - start}


def above(energy, reference):
    """Fraction of patches whose ``energy`` exceeds ``reference`` by more than ENERGY_RTOL."""
    energy, reference = np.asarray(energy), np.asarray(reference)
    return float(np.mean(energy > reference + ENERGY_RTOL * np.maximum(np.abs(reference), 1.0)))


def percent(a, b):
    """How far ``a`` is above ``b``, in percent of ``b``."""
    return 100.0 * (a - b) / b


def main_run(x, *, rng_key, iterations, reference_options):
    """The n = 32 run: both fits from one start, then the re-association table.

    Returns
    -------
    dict
        ``start`` (the shared initial features), ``fits`` (method -> :func:`run_fit`),
        ``table`` (learned-with -> associated-with -> error; columns :data:`METHODS`
        , ``"reference"``, and ``"best"``: per patch the lower of the two tabu
        energies), ``reference_options``, ``details`` (per learned-with: fractions of
        patches where the fit's tabu is above the reference and the reverse, where
        br+mf is above the best, the walks' agreement, seconds), ``usage`` (per
        learned-with: fraction of patches using each feature under the reference) and
        ``split`` (the association / features parts of br+mf's gap).
    """
    n = MAIN["num_features"]
    key_init, key_fit, key_assoc = jax.random.split(rng_key, 3)
    start = np.asarray(initial_features(key_init, x, n))
    fits = {m: run_fit(x, n, m, init=start, rng_key=key_fit, iterations=iterations)
            for m in METHODS}
    table, details, usage = {}, {}, {}
    for learned, fit in fits.items():
        row = {m: run_association(x, fit["features"], m, rng_key=key_assoc) for m in METHODS}
        row["reference"] = run_association(x, fit["features"], "tabu", rng_key=key_assoc,
                                           options=reference_options)
        # The reference is the lowest energy found by any of the three, patch by patch.
        best = np.minimum(row["reference"]["energy"], row["tabu"]["energy"])
        table[learned] = {m: r["error"] for m, r in row.items()}
        table[learned]["best"] = float(np.mean(best))
        details[learned] = {
            "tabu_above_reference": above(row["tabu"]["energy"], row["reference"]["energy"]),
            "reference_above_tabu": above(row["reference"]["energy"], row["tabu"]["energy"]),
            "brmf_above_best": above(row["br+mf"]["energy"], best),
            "tabu_agree": row["tabu"]["agree"], "reference_agree": row["reference"]["agree"],
            "seconds": {m: r["seconds"] for m, r in row.items()}}
        usage[learned] = row["reference"]["states"].mean(axis=0)
    t, b = table["tabu"], table["br+mf"]
    split = {"gap": b["br+mf"] - t["reference"],
             "association": b["br+mf"] - b["reference"],
             "features": b["reference"] - t["reference"]}
    return {"start": start, "fits": fits, "table": table, "details": details, "usage": usage,
            "split": split, "reference_options": reference_options}


def small_run(x, *, rng_key, iterations, more_checks=True):
    """The n = 16 run: exact, tabu and br+mf from one start; tabu against exact at the end.

    Parameters
    ----------
    x : array (num_patches, 8)
    rng_key : jax.random key
    iterations : int
        Largest number of EM iterations per fit.
    more_checks : bool
        Also associate the final features with the library's default tabu options and
        with br+mf (two more compilations; ``--quick`` skips them).

    Returns
    -------
    dict
        ``start``, ``fits`` (method -> :func:`run_fit`), ``errors`` (method -> error
        of its final features under exact association), ``check`` (per learned-with:
        fractions of patches whose tabu state equals the exact one and whose tabu energy
        is the exact minimum; with ``more_checks`` the latter also for the default tabu
        options and for br+mf, else None).
    """
    n = SMALL["num_features"]
    key_init, key_fit, key_assoc = jax.random.split(rng_key, 3)
    start = np.asarray(initial_features(key_init, x, n))
    fits = {m: run_fit(x, n, m, init=start, rng_key=key_fit, iterations=iterations,
                       options=SMALL_TABU if m == "tabu" else None)
            for m in ("exact", *METHODS)}
    errors, check = {}, {}
    for learned, fit in fits.items():
        exact = run_association(x, fit["features"], "exact", rng_key=key_assoc)
        tabu = run_association(x, fit["features"], "tabu", rng_key=key_assoc,
                               options=SMALL_TABU)
        errors[learned] = exact["error"]
        check[learned] = {
            "tabu_same_state": float(np.mean(np.all(tabu["states"] == exact["states"], axis=1))),
            "tabu_optimal": 1.0 - above(tabu["energy"], exact["energy"]),
            "tabu_error": tabu["error"], "default_tabu_optimal": None,
            "default_tabu_error": None, "brmf_optimal": None, "brmf_error": None}
        if more_checks:
            plain = run_association(x, fit["features"], "tabu", rng_key=key_assoc)
            brmf = run_association(x, fit["features"], "br+mf", rng_key=key_assoc)
            check[learned].update(
                default_tabu_optimal=1.0 - above(plain["energy"], exact["energy"]),
                default_tabu_error=plain["error"],
                brmf_optimal=1.0 - above(brmf["energy"], exact["energy"]),
                brmf_error=brmf["error"])
    return {"start": start, "fits": fits, "errors": errors, "check": check}


def plot_features(path, main):
    """The learned 4 x 4 features of the tabu run and of the br+mf run, most used first."""
    fig = empty_figure(figsize=(11.0, 3.4))
    panels = fig.subfigures(1, 2, wspace=0.04)
    rows, columns = 4, MAIN["num_features"] // 4
    for panel, method in zip(panels, METHODS, strict=True):
        features = main["fits"][method]["features"]
        usage = main["usage"][method]
        order = np.argsort(-usage, kind="stable")
        limit = float(np.max(np.abs(features))) or 1.0
        axes = panel.subplots(rows, columns)
        for ax, k in zip(axes.ravel(), order, strict=True):
            ax.imshow(features[k].reshape(MAIN["height"], MAIN["width"]), cmap="gray",
                      vmin=-limit, vmax=limit)
            ax.set_title(f"{usage[k]:.2f}", fontsize=7, pad=2)
        image_axes(axes)
        error = main["table"][method][method]
        panel.suptitle(f"learned with {method}: error {error:.3f} per patch", fontsize=9)
    fig.suptitle("Overcomplete GVQ, 32 features of 4 x 4 patches (title: fraction of patches "
                 "using the feature; grey scale shared per panel, mid-grey = 0)", fontsize=9)
    save_figure(fig, path)


def _print_table(main):
    columns = (*METHODS, "reference")
    print(f"  {'learned with':>14s} | associated with: " + " ".join(f"{c:>10s}" for c in columns)
          + f" {'fit own':>9s}")
    for learned in METHODS:
        row = main["table"][learned]
        print(f"  {learned:>14s} | {'':16s} " + " ".join(f"{row[c]:10.4f}" for c in columns)
              + f" {main['fits'][learned]['fit_error']:9.4f}")


def main(argv=None):
    """Learn both overcomplete codebooks, print the errors and conclusions; save figure and JSON.

    Returns
    -------
    dict
        ``settings``, ``data``, ``main`` (:func:`main_run`), ``small`` (:func:`small_run`),
        ``conclusions`` (the printed sentences), ``paths`` and ``seconds``.
    """
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true",
                        help="300 patches, 6 EM iterations (a smoke test, about 40 s)")
    parser.add_argument("--output-dir", default="zoo-results", help="folder for PNG and JSON")
    parser.add_argument("--seed", type=int, default=0, help="random seed (patches, JAX key)")
    parser.add_argument("--patches", type=int, default=None,
                        help="patches per run (default 1200)")
    parser.add_argument("--iterations", type=int, default=None,
                        help="largest number of EM iterations per run (default 30)")
    args = parser.parse_args(argv)
    num_patches = args.patches or (300 if args.quick else 1200)
    iterations = args.iterations or (6 if args.quick else 30)
    for name, value in (("--patches", num_patches), ("--iterations", iterations)):
        if value < 2:
            parser.error(f"{name} must be >= 2; got {value}")
    total_start = time.perf_counter()
    rng = np.random.default_rng(args.seed)
    key_main, key_small = jax.random.split(jax.random.key(args.seed))
    n, dim = MAIN["num_features"], MAIN["height"] * MAIN["width"]
    walks, moves = default_budget(n, dim)
    times = QUICK_REFERENCE if args.quick else REFERENCE
    reference_options = {"num_walks": times["num_walks"] * walks,
                         "num_iterations": times["num_iterations"] * moves}
    factor = times["num_walks"] * times["num_iterations"]

    x, scale = load_patches(rng, num_patches, MAIN["height"], MAIN["width"])
    print(f"Data: {num_patches} random grey {MAIN['height']}x{MAIN['width']} patches of "
          f"scikit-learn's {' and '.join(IMAGES)}, each patch's mean removed, divided by "
          f"{scale:.2f} grey levels (average variance per pixel 1: mean ||x||^2 = {dim})")
    print(f"\n== n = {n} features, dim = {dim} (twice overcomplete): EM from one shared start, "
          f"<= {iterations} iterations each ==")
    print(f"tabu: the library's default budget ({walks} walks x {moves} moves, tenure "
          f"{default_tenure(n)}); reference: tabu with {reference_options['num_walks']} walks x "
          f"{reference_options['num_iterations']} moves ({factor}x the budget)")
    print(f"exact search: not feasible at n = {n} (2^{n} = {2.0 ** n:.2g} states per patch; "
          f"method='exact' allows n <= {MAX_EXACT_FEATURES}), so the optimum is not known")
    stage = time.perf_counter()
    main = main_run(x, rng_key=key_main, iterations=iterations,
                    reference_options=reference_options)
    main["seconds"] = time.perf_counter() - stage
    for method, fit in main["fits"].items():
        print(f"  EM with {method:>5s}: {fit['iterations']} iterations, converged "
              f"{fit['converged']}, {fit['seconds']:.1f} s (compilation included), fit's own "
              f"error {fit['fit_error']:.4f}")
    print("Final error, mean ||x - s F||^2 per patch (rows: features learned with; columns: "
          "association of every patch under them; 'fit own': the fit's last E-step):")
    _print_table(main)
    t, b = main["table"]["tabu"], main["table"]["br+mf"]
    d = main["details"]
    split = main["split"]
    share = (100.0 * split["association"] / split["gap"]) if split["gap"] > 0 else float("nan")
    conclusions = [
        f"EM with tabu ends {-percent(t['tabu'], b['br+mf']):.1f}% below EM with br+mf "
        f"(each associated with its own method: {t['tabu']:.4f} against {b['br+mf']:.4f}; "
        f"{t['tabu'] / dim:.3f} and {b['br+mf'] / dim:.3f} of the variance left).",
        f"On the same (tabu-learned) features br+mf's association is "
        f"{percent(t['br+mf'], t['best']):.1f}% above the best energies found (per patch "
        f"the lower of tabu's and the reference's; {100 * d['tabu']['brmf_above_best']:.1f}% "
        f"of the patches above); on its own "
        f"features {percent(b['br+mf'], b['best']):.1f}% "
        f"({100 * d['br+mf']['brmf_above_best']:.1f}% of the patches).",
        f"Of the gap between EM with br+mf ({b['br+mf']:.4f}) and the tabu-learned features "
        f"under the reference association ({t['reference']:.4f}), {split['association']:.4f} "
        f"({share:.0f}%) is worse association (br+mf against the reference on br+mf's "
        f"features) and {split['features']:.4f} ({100 - share:.0f}%) worse features (both "
        f"sets of features under the reference).",
        (f"The fit's tabu budget is not exact here: on the tabu-learned features it is above "
         f"the reference on {100 * d['tabu']['tabu_above_reference']:.1f}% of the patches"
         if d["tabu"]["tabu_above_reference"] > 0 else
         "On the tabu-learned features the fit's tabu budget is nowhere above the reference")
        + f" (mean {percent(t['tabu'], t['reference']):.2f}%; the reference above it on "
        f"{100 * d['tabu']['reference_above_tabu']:.1f}%), and two of its walks agree on the "
        f"lowest energy on {100 * d['tabu']['tabu_agree']:.1f}% of the patches "
        f"({100 * d['tabu']['reference_agree']:.1f}% for the reference).",
    ]

    xs, small_scale = load_patches(rng, num_patches, SMALL["height"], SMALL["width"])
    ns, dims = SMALL["num_features"], SMALL["height"] * SMALL["width"]
    print(f"\n== n = {ns} features, dim = {dims} ({SMALL['height']}x{SMALL['width']} patches, "
          f"twice overcomplete), where exact search is feasible: EM from one shared start, <= "
          f"{iterations} iterations each ==")
    print(f"tabu: {SMALL_TABU['num_walks']} walks x {SMALL_TABU['num_iterations']} moves, tenure "
          f"{SMALL_TABU['tenure']} (library default: {default_budget(ns, dims)[0]} x "
          f"{default_budget(ns, dims)[1]}, tenure {default_tenure(ns)})")
    stage = time.perf_counter()
    small = small_run(xs, rng_key=key_small, iterations=iterations, more_checks=not args.quick)
    small["seconds"] = time.perf_counter() - stage
    print(f"  {'learned with':>12s} {'iterations':>10s} {'fit own':>9s} {'exact':>9s} "
          f"{'tabu=exact state':>16s} {'tabu optimal':>12s} {'default tabu':>12s} "
          f"{'br+mf optimal':>13s}")
    for learned, fit in small["fits"].items():
        c = small["check"][learned]
        extra = [f"{v:{w}.4f}" if v is not None else f"{'-':>{w}s}"
                 for v, w in ((c["default_tabu_optimal"], 12), (c["brmf_optimal"], 13))]
        print(f"  {learned:>12s} {fit['iterations']:10d} {fit['fit_error']:9.4f} "
              f"{small['errors'][learned]:9.4f} {c['tabu_same_state']:16.4f} "
              f"{c['tabu_optimal']:12.4f} {extra[0]} {extra[1]}")
    print("  (exact: error of the final features under exact association; the last four "
          "columns: fraction of patches" + ("; --quick skips the last two)" if args.quick
                                           else ")"))
    es, ts, bs = (small["errors"][m] for m in ("exact", "tabu", "br+mf"))
    c = small["check"]["tabu"]
    relative = abs(ts - es) / es
    if relative <= ENERGY_RTOL:
        versus = f"at the error of EM with exact search (relative difference {relative:.1e})"
    else:
        versus = (f"{abs(percent(ts, es)):.2f}% {'above' if ts > es else 'below'} EM with "
                  f"exact search (relative difference {relative:.1e})")
    conclusions += [
        f"At n = {ns}, EM with tabu ends {versus}: {ts:.4f} against {es:.4f}; on its final "
        f"features tabu finds the exact state on {100 * c['tabu_same_state']:.2f}% of the "
        f"patches and the exact minimum energy on {100 * c['tabu_optimal']:.2f}%.",
        f"At n = {ns}, EM with br+mf ends {percent(bs, es):.1f}% above EM with exact search.",
    ]
    if not args.quick:
        worst = min(small["check"].items(), key=lambda item: item[1]["default_tabu_optimal"])
        conclusions.append(
            f"At n = {ns}, the library's default tabu options reach the exact minimum on "
            f"{100 * worst[1]['default_tabu_optimal']:.1f}% of the patches of the {worst[0]}-"
            f"learned features (the least of the three; {SMALL_TABU['num_walks']} walks x "
            f"{SMALL_TABU['num_iterations']} moves, tenure {SMALL_TABU['tenure']}: "
            f"{100 * min(v['tabu_optimal'] for v in small['check'].values()):.1f}%).")
    print("\nConclusions (from the numbers above):")
    for line in conclusions:
        print(f"  * {line}")

    results = {
        "settings": {"quick": args.quick, "seed": args.seed, "patches": num_patches,
                     "iterations": iterations, "tol": 0.0, "main": MAIN, "small": SMALL,
                     "main_tabu": {"num_walks": walks, "num_iterations": moves,
                                   "tenure": default_tenure(n)},
                     "reference_tabu": reference_options, "small_tabu": SMALL_TABU,
                     "energy_rtol": ENERGY_RTOL},
        "data": {"source": "sklearn.datasets.load_sample_image: " + ", ".join(IMAGES),
                 "scale": scale, "small_scale": small_scale},
        "main": {"table": main["table"], "details": main["details"], "split": main["split"],
                 "fits": {m: {k: v for k, v in f.items() if k != "features"}
                          for m, f in main["fits"].items()}},
        "small": {"errors": small["errors"], "check": small["check"],
                  "fits": {m: {k: v for k, v in f.items() if k != "features"}
                           for m, f in small["fits"].items()}},
        "conclusions": conclusions,
    }
    out = Path(args.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = {"json": out / "overcomplete_gvq.json"}
    try:
        import matplotlib
    except ImportError:
        print('matplotlib is not installed (pip install -e ".[examples]"): no figure')
    else:
        matplotlib.use("Agg")
        paths["features"] = out / "overcomplete_gvq_features.png"
        plot_features(paths["features"], main)
    results["seconds"] = time.perf_counter() - total_start
    record = jsonable(results)
    record["main"]["features"] = {m: np.round(f["features"], 5).tolist()
                                  for m, f in main["fits"].items()}
    paths["json"].write_text(json.dumps(record, indent=1))
    print(f"\nwrote {', '.join(str(p) for p in paths.values())} ({results['seconds']:.0f} s: "
          f"n = {n} {main['seconds']:.0f} s, n = {ns} {small['seconds']:.0f} s)")
    results.update(main=main, small=small, paths=paths)
    return results


if __name__ == "__main__":
    main()
