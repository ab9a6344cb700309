"""GVQ learned by EM on planted features, against NumPyro's SVI on the same program.
=================================================================================

Westerdijk, Barber and Wiegerinck (2001), sec. 3.1 (EM in the sigma -> 0 limit), on
the generator of their sec. 4.3:
features with entries N(2, 1), binary states with p = 1/2, Gaussian noise.
For several data seeds the script fits

* EM with exact association from one random start and from the best of four;
* SVI with ``TraceEnum_ELBO`` and a point-mass guide on F, at two noise levels
  of the program, from the same four starts;

and reports how often each recovers the planted features (max abs error
< 0.05 after matching rows), the final mean squared error against the noise
floor dim * sigma^2, and the time. It saves a figure of the EM error traces
and of planted vs learned features.

The paper gives no recovery rates for this set-up (its sec. 4.3 compares the
association step, which the association example covers); the check here is
against the planted truth and the noise floor.

Run: ``python examples/gvq_planted.py [--quick] [--output-dir DIR] [--json]``
(``--json``: the table's numbers also to ``gvq_planted.json``).

References
----------
M. Westerdijk, D. Barber and W. Wiegerinck, "Deterministic generative models for fast
feature discovery", Data Mining and Knowledge Discovery 5(4), 2001, sec. 3.1 and 4.3.
"""

from __future__ import annotations

import argparse
import json
import time
import warnings
from pathlib import Path

import jax
import numpy as np

from inference import fit_gvq
from inference.engine.figures import new_figure, save_figure
from inference.engine.reporting import jsonable
from inference.gvq.baselines import fit_gvq_svi
from inference.gvq.em import initial_features, match_features
from ppl_models import gvq
from ppl_models.diagnostics import ZooWarning


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="3 seeds, fewer SVI steps")
    parser.add_argument("--seeds", type=int, default=10, help="number of data seeds")
    parser.add_argument("--output-dir", default="zoo-results", help="folder for the figure")
    parser.add_argument("--noise", type=float, default=0.1, help="noise std of the data")
    parser.add_argument("--json", action="store_true",
                        help="also write the numbers to gvq_planted.json in --output-dir")
    args = parser.parse_args(argv)
    num_seeds = 3 if args.quick else args.seeds
    num_examples, num_features, dim = (200 if args.quick else 500), 6, 16
    svi_steps = 300 if args.quick else 1500
    floor = dim * args.noise**2

    methods = ["EM, 1 start", "EM, best of 4", f"SVI sigma={args.noise:g}", "SVI sigma=0.3"]
    stats = {m: {"recovered": 0, "error": [], "time": []} for m in methods}
    traces, shown = [], None
    for seed in range(num_seeds):
        data = gvq.generate_planted(jax.random.key(1000 + seed), num_examples, num_features,
                                    dim, noise_scale=args.noise)
        key = jax.random.key(seed)
        starts = jax.vmap(lambda k, x=data.x: initial_features(k, x, num_features))(
            jax.random.split(key, 4))
        runs = {
            methods[0]: lambda d=data, k=key, s=starts: fit_gvq(
                d.x, num_features, rng_key=k, num_restarts=1, init_features=s[:1]),
            methods[1]: lambda d=data, k=key, s=starts: fit_gvq(
                d.x, num_features, rng_key=k, num_restarts=4, init_features=s),
            methods[2]: lambda d=data, k=key, s=starts: fit_gvq_svi(
                d.x, num_features, rng_key=k, noise=args.noise, num_steps=svi_steps,
                num_restarts=4, init_features=s),
            methods[3]: lambda d=data, k=key, s=starts: fit_gvq_svi(
                d.x, num_features, rng_key=k, noise=0.3, num_steps=svi_steps,
                num_restarts=4, init_features=s),
        }
        for name, run in runs.items():
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", ZooWarning)
                start = time.perf_counter()
                result = jax.block_until_ready(run())
                elapsed = time.perf_counter() - start
            _, feature_error = match_features(result.features, data.features)
            stats[name]["recovered"] += feature_error < 0.05
            stats[name]["error"].append(float(result.error))
            stats[name]["time"].append(elapsed)
            if name == methods[1]:
                traces.append(np.asarray(result.trace.objective))
                if shown is None:
                    perm, _ = match_features(result.features, data.features)
                    shown = (np.asarray(data.features), np.asarray(result.features)[perm])

    print(f"GVQ on planted data: {num_seeds} seeds, {num_examples} examples, "
          f"{num_features} features, dim {dim}, noise {args.noise:g} "
          f"(noise floor dim*sigma^2 = {floor:.3g})")
    print(f"{'method':22s} {'recovered':>10s} {'median error':>13s} {'median time s':>14s}")
    for name in methods:
        s = stats[name]
        print(f"{name:22s} {s['recovered']:>4d} / {num_seeds:<3d} {np.median(s['error']):13.4g} "
              f"{np.median(s['time']):14.3g}")
    print("Times include compilation on the first seed. The paper reports no recovery rates "
          "for this set-up; a recovered fit sits at the noise floor.")
    if args.json:
        out = Path(args.output_dir)
        out.mkdir(parents=True, exist_ok=True)
        record = {"settings": {"seeds": num_seeds, "num_examples": num_examples,
                               "num_features": num_features, "dim": dim, "noise": args.noise,
                               "noise_floor": floor, "svi_steps": svi_steps},
                  "methods": stats}
        (out / "gvq_planted.json").write_text(json.dumps(jsonable(record), indent=1))

    try:
        import matplotlib

        matplotlib.use("Agg")
    except ImportError:
        print('matplotlib is not installed (pip install -e ".[examples]"): no figure')
        return stats
    out = Path(args.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    path = _plot(out / "gvq_planted.png", traces, shown, floor)
    print(f"wrote {path}")
    return stats


def _plot(path, traces, shown, floor):
    """EM's error per iteration for every seed; planted and learned F of the first seed."""
    from matplotlib.ticker import MaxNLocator

    fig, axes = new_figure(1, 3, figsize=(13, 3.8), width_ratios=[1.2, 1.0, 1.0])
    for seed, trace in enumerate(traces):
        axes[0].semilogy(np.arange(1, len(trace) + 1), trace, marker=".",
                         label=f"seed {seed}")
    axes[0].axhline(floor, color="k", ls="--", label="noise floor dim * sigma^2")
    axes[0].set_xlabel("EM iteration")
    axes[0].set_ylabel("mean ||x - sF||^2 (squared, per example)")
    axes[0].set_title("EM error per iteration (best of 4 starts)")
    axes[0].xaxis.set_major_locator(MaxNLocator(integer=True))
    axes[0].legend(fontsize=7, ncols=2 if len(traces) > 5 else 1)
    vmax = float(np.abs(shown[0]).max())
    for ax, matrix, title in zip(axes[1:], shown, ("planted F", "learned F (EM)"), strict=True):
        image = ax.imshow(matrix, cmap="RdBu_r", vmin=-vmax, vmax=vmax, aspect="auto")
        ax.set_title(title)
        ax.set_xlabel("dimension d")
        ax.set_ylabel("feature k")
        ax.xaxis.set_major_locator(MaxNLocator(nbins=6, integer=True))
        ax.yaxis.set_major_locator(MaxNLocator(integer=True))
    fig.colorbar(image, ax=axes[1:].tolist(), shrink=0.9, label="F_kd")
    return save_figure(fig, path)


if __name__ == "__main__":
    main()
