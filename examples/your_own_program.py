"""Your own program: the association methods and the sigma -> 0 EM on programs a user writes.
==========================================================================================

Three variants of the generative vector quantiser of M. Westerdijk, D. Barber and
W. Wiegerinck ("Deterministic generative models for fast feature discovery", Data
Mining and Knowledge Discovery 5(4), 2001), each written as a plain NumPyro program with
one binary site per unit (so that NumPyro's own enumeration applies too):

* ``offset_ising``: x ~ N(b + s F, 0.1) with a learned offset b and an Ising factor
  coupling the units of s (quadratic in s; the prior couples units, so the directed
  methods do not apply);
* ``sparse_coding``: x ~ N(s F, 0.3) with a learned Bernoulli prior per unit
  (quadratic in s, factorised prior: every method applies; the prior only counts at
  finite noise, so this variant is solved as written, ``noise="program"``);
* ``sigmoid_layer``: binary data y ~ Bernoulli(sigmoid(4 (s F - 1/2))) (not quadratic
  in s: only ``"exact"`` and ``"gibbs"`` apply; the others say so).

For each, with the planted parameters, every association method of
:func:`inference.map_states` and NumPyro's generic inference
(:func:`inference.numpyro_map_states`: ``infer_discrete(temperature=0)``) find the
MAP states; the table gives the mean energy (or the error a method gets), the time of
a second call (compiled) and the share of examples at the exhaustive search's
energy. Then :func:`inference.fit_map_em` learns the first two variants from data (4
restarts) and the table compares the learned parameters' mean energy with the planted
ones'; ``fit_gvq`` learns the first variant written for it (offset given, without
the Ising prior), which its least squares would get wrong, through ``fit_map_em``.

Run: ``python examples/your_own_program.py [--quick] [--seed S] [--output-dir DIR]
[--json]`` (about a minute on 2 CPU cores, most of it compilation).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist
from numpyro import handlers

from inference import fit_gvq, fit_map_em, map_states, numpyro_map_states
from inference.association.base import METHODS
from inference.engine.figures import new_figure, save_figure

NUM_UNITS, DIM = 5, 8
#: An Ising coupling between neighbouring units (a chain), in nats.
COUPLINGS = 1.5 * (np.eye(NUM_UNITS, k=1) + np.eye(NUM_UNITS, k=-1))


def _units(probs=None, logits=None):
    """One Bernoulli site per unit, inside the caller's data plate."""
    return [numpyro.sample(f"s_{i}", dist.Bernoulli(
        probs=None if probs is None else probs[i],
        logits=None if logits is None else logits[i])) for i in range(NUM_UNITS)]


def _linear(units, features):
    """sum_i s_i f_i, written so that it broadcasts under enumeration."""
    return sum(u[..., None] * features[i] for i, u in enumerate(units))


def offset_ising(x):
    features = numpyro.param(
        "features", lambda key: 2.0 + jax.random.normal(key, (NUM_UNITS, x.shape[1])))
    offset = numpyro.param("offset", jnp.zeros(x.shape[1]))
    with numpyro.plate("data", x.shape[0]):
        units = _units(probs=jnp.full(NUM_UNITS, 0.5))
        numpyro.factor("ising", sum(COUPLINGS[i, j] * units[i] * units[j]
                                    for i in range(NUM_UNITS) for j in range(i + 1, NUM_UNITS)))
        numpyro.sample("x", dist.Normal(offset + _linear(units, features), 0.1).to_event(1),
                       obs=x)


def sparse_coding(x):
    features = numpyro.param(
        "features", lambda key: 2.0 + jax.random.normal(key, (NUM_UNITS, x.shape[1])))
    logits = numpyro.param("logits", jnp.zeros(NUM_UNITS))
    with numpyro.plate("data", x.shape[0]):
        units = _units(logits=logits)
        numpyro.sample("x", dist.Normal(_linear(units, features), 0.3).to_event(1), obs=x)


def sigmoid_layer(y):
    features = numpyro.param("features", jnp.zeros((NUM_UNITS, y.shape[1])))
    with numpyro.plate("data", y.shape[0]):
        units = _units(probs=jnp.full(NUM_UNITS, 0.3))
        logits = 4.0 * (_linear(units, features) - 0.5)
        numpyro.sample("y", dist.Bernoulli(logits=logits).to_event(1), obs=y)


def planted(rng_key, num_examples):
    """Planted parameters and data of the three variants."""
    keys = jax.random.split(rng_key, 8)
    features = 2.0 + jax.random.normal(keys[0], (NUM_UNITS, DIM))
    offset = jnp.linspace(-1.0, 1.0, DIM)
    states = jax.random.bernoulli(keys[1], 0.4, (num_examples, NUM_UNITS)).astype(jnp.float32)
    x1 = offset + states @ features + 0.1 * jax.random.normal(keys[2], (num_examples, DIM))
    logits = jnp.array([-2.0, -1.0, 0.0, 1.0, -1.5])
    sparse = jax.random.bernoulli(keys[3], jax.nn.sigmoid(logits),
                                  (num_examples, NUM_UNITS)).astype(jnp.float32)
    x2 = sparse @ features + 0.3 * jax.random.normal(keys[4], (num_examples, DIM))
    binary = jax.random.bernoulli(keys[5], 0.5, (NUM_UNITS, DIM)).astype(jnp.float32)
    y = jax.random.bernoulli(keys[6], jax.nn.sigmoid(4.0 * (states @ binary - 0.5)))
    return {
        "offset_ising": (offset_ising, x1, {"features": features, "offset": offset}, None),
        "sparse_coding": (sparse_coding, x2, {"features": features, "logits": logits},
                          "program"),
        "sigmoid_layer": (sigmoid_layer, y.astype(jnp.float32), {"features": binary},
                          "program"),
    }


def _timed(fn):
    fn()  # compile
    start = time.perf_counter()
    result = fn()
    jax.block_until_ready(result.energy)
    return result, time.perf_counter() - start


def associate_all(name, model, data, params, noise, rng_key):
    """Every method and NumPyro's enumeration on one variant: rows of the table."""
    program = handlers.substitute(model, data=params)
    exact, _ = _timed(lambda: map_states(program, data, noise=noise))
    rows = []
    for method in ["exact", *sorted(m for m in METHODS if m != "exact"), "numpyro"]:
        try:
            if method == "numpyro":
                result, seconds = _timed(lambda: numpyro_map_states(program, data, noise=noise))
            else:
                result, seconds = _timed(lambda method=method: map_states(
                    program, data, method=method, noise=noise, rng_key=rng_key))
        except ValueError as error:
            rows.append(dict(variant=name, method=method, error=str(error)))
            continue
        gap = np.asarray(result.energy) - np.asarray(exact.energy)
        agree = np.abs(gap) <= 1e-4 * (1.0 + np.abs(np.asarray(exact.energy)))
        rows.append(dict(variant=name, method=method, energy=float(jnp.mean(result.energy)),
                         seconds=seconds, agreement=float(np.mean(agree)),
                         below_exact=bool(np.any(gap < -1e-3))))
    return rows


def _gvq_shaped_offset_ising(x=None, *, features, offset):
    """The first variant written for fit_gvq (features and offset as arguments)."""
    with numpyro.plate("data", x.shape[0]):
        s = numpyro.sample("s", dist.Bernoulli(0.5).expand([NUM_UNITS]).to_event(1))
        numpyro.sample("x", dist.Normal(offset + s @ features, 0.1).to_event(1), obs=x)


def learn(name, model, data, params, noise, rng_key, restarts):
    """fit_map_em on one variant: learned against planted mean energy."""
    reference = float(jnp.mean(map_states(handlers.substitute(model, data=params), data,
                                          noise=noise).energy))
    start = time.perf_counter()
    fit = fit_map_em(model, data, rng_key=rng_key, num_restarts=restarts, noise=noise,
                     max_iterations=50)
    return dict(variant=name, planted=reference, learned=fit.objective,
                ratio=fit.objective / reference, closed_form=fit.closed_form,
                converged=fit.converged, iterations=fit.num_iterations,
                seconds=time.perf_counter() - start)


def figure(rows, path):
    variants = list(dict.fromkeys(r["variant"] for r in rows))
    fig, axes = new_figure(1, len(variants), figsize=(3.6 * len(variants) + 0.6, 3.6),
                           sharey=True, squeeze=False)
    for ax, variant in zip(axes[0], variants, strict=True):
        mine = [r for r in rows if r["variant"] == variant]
        heights = [r.get("agreement", 0.0) for r in mine]
        colours = ["tab:blue" if "error" not in r else "lightgrey" for r in mine]
        ax.bar(range(len(mine)), heights, color=colours)
        ax.set_xticks(range(len(mine)), [r["method"] for r in mine], rotation=90, fontsize=8)
        ax.set_title(variant, fontsize=10)
        ax.set_xlabel("association method")
        for i, r in enumerate(mine):
            if "error" in r:
                ax.text(i, 0.02, "n/a", ha="center", fontsize=7, rotation=90)
    axes[0, 0].set_ylabel("share of examples at exact's energy")
    save_figure(fig, path)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer examples and restarts")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--output-dir", default=".")
    parser.add_argument("--json", action="store_true", help="also write your_own_program.json")
    args = parser.parse_args(argv)
    out = Path(args.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    num_examples, restarts = (60, 2) if args.quick else (300, 4)
    key = jax.random.key(args.seed)
    variants = planted(key, num_examples)
    rows = []
    for index, (name, (model, data, params, noise)) in enumerate(variants.items()):
        rows += associate_all(name, model, data, params, noise, jax.random.fold_in(key, index))
    print(f"MAP states with the planted parameters ({num_examples} examples, "
          f"{NUM_UNITS} units; time of a second, compiled call)")
    print(f"{'variant':<15}{'method':<10}{'mean energy':>13}{'time (s)':>10}{'at exact':>10}")
    for r in rows:
        if "error" in r:
            print(f"{r['variant']:<15}{r['method']:<10}  n/a ({r['error'].rsplit('; ', 1)[-1]})")
        else:
            print(f"{r['variant']:<15}{r['method']:<10}{r['energy']:>13.4f}{r['seconds']:>10.4f}"
                  f"{r['agreement']:>10.0%}")
    learned = [learn(name, *variants[name], jax.random.fold_in(key, 10 + i), restarts)
               for i, name in enumerate(["offset_ising", "sparse_coding"])]
    print(f"\nLearning by fit_map_em ({restarts} restarts): mean energy, learned / planted")
    for r in learned:
        form = "closed form" if r["closed_form"] else "L-BFGS"
        print(f"{r['variant']:<15}{r['learned']:>10.4f} / {r['planted']:.4f} = {r['ratio']:.3f}"
              f"  (M-step {form}, {r['iterations']} iterations, {r['seconds']:.1f} s)")
    model, data, params, _ = variants["offset_ising"]
    given = {"offset": params["offset"]}
    reference = float(jnp.mean(map_states(_gvq_shaped_offset_ising, data,
                                          features=params["features"], **given).energy))
    start = time.perf_counter()
    fitted = fit_gvq(data, NUM_UNITS, model=_gvq_shaped_offset_ising, rng_key=key,
                     model_kwargs=given, num_restarts=2 * restarts)
    through_gvq = dict(learned=float(fitted.error), planted=reference,
                       ratio=float(fitted.error) / reference,
                       seconds=time.perf_counter() - start)
    print(f"\nfit_gvq on the variant written for it (offset given, features learned; its "
          f"least squares would ignore the offset, so it learns through fit_map_em, "
          f"{2 * restarts} restarts): mean energy {through_gvq['learned']:.4f} / planted "
          f"{reference:.4f} = {through_gvq['ratio']:.3f}")
    exact_rows = [r for r in rows if r["method"] == "exact"]
    findings = {
        "numpyro_enumeration_equals_exact": all(
            r.get("agreement") == 1.0 for r in rows if r["method"] == "numpyro"),
        "no_method_below_exact": not any(r.get("below_exact") for r in rows),
        # The offset-plus-Ising variant must be learned to within 5% of the planted
        # parameters' energy; the sparse-coding ratio is shown for information (hard EM
        # on a learned prior can empty a unit whose prior falls).
        "offset_ising_learned_within_5_percent": learned[0]["ratio"] <= 1.05,
        "fit_gvq_learns_offset_variant_within_5_percent": through_gvq["ratio"] <= 1.05,
    }
    print("\nFindings: " + ", ".join(f"{k} = {v}" for k, v in findings.items()))
    figure(rows, out / "your_own_program.png")
    result = dict(settings=dict(num_examples=num_examples, restarts=restarts, seed=args.seed),
                  association=rows, learning=learned, fit_gvq=through_gvq, findings=findings,
                  exact=exact_rows)
    if args.json:
        (out / "your_own_program.json").write_text(json.dumps(result, indent=2))
    return result


if __name__ == "__main__":
    main()
