"""``ppl-zoo compare mcvq``: variational EM against NumPyro's SVI on the MCVQ program.

The model and its fit are those of D. A. Ross and R. S. Zemel, "Multiple cause
vector quantization", Advances in Neural Information Processing Systems 15
(NIPS 2002), 2003 (sections cited below).

Data: one planted MCVQ of :func:`ppl_models.mcvq.generate` (by default D = 12
dimensions split among K = 3 VQs of J = 4 states, means ~ Normal(0, 3),
noise 0.3), 200 training and 400 held-out examples from the same planted
model (``quick``: D = 9, J = 3, 100 + 200). Every learner fits the same
program, :func:`ppl_models.mcvq.model` with r and s per example (sec. 2),
with K VQs of J states, uniform selection priors, the same variance floor
and the same start (:func:`inference.mcvq.em.init` with one key, one start each):

* ours (:func:`inference.mcvq.em.fit_mcvq`): the paper's variational EM with the
  inverse temperature annealed from N - 1 to 1 (sec. 3, 5.1; it ends on the
  shared-r free energy F_1), and the same at the constant T = N, which lowers
  the program's own free energy F_N (:mod:`inference.mcvq.core`);
* NumPyro SVI (:mod:`inference.mcvq.baselines`): ``TraceEnum_ELBO`` with r
  and s summed out (maximum likelihood of mu, sigma), and ``TraceEnum_ELBO``
  with the paper's mean-field guide enumerated (it lowers F_N by gradient steps);
* the planted parameters, for reference.

Every row is scored alike (:func:`inference.mcvq.baselines.score_mcvq`):
``objective`` is the exact held-out mean log-likelihood (1/N) sum_c log p(x^c |
mu, sigma), r and s summed out by enumeration (higher is better);
``train_loglik`` the same on the training data; ``elbo`` is -F_N / N on the
training data at the row's own factorised guide (EM and mean-field SVI: their
g and m; the ``TraceEnum_ELBO`` fit and the planted parameters have none, so
theirs is from coordinate ascent on (g, m) at fixed parameters,
:func:`~inference.mcvq.baselines.fit_variational`); ``heldout_rms`` is the
paper's reconstruction error of the held-out data, x_hat = sum_k g_dk sum_j
m_kj mu_dkj with m from one E-step. Times follow :func:`inference.app.compare.timed`
(``first_call_s`` includes compilation, ``time_s`` is a warm second call).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from tqdm.auto import tqdm

from inference.engine.figures import new_figure, save_figure
from inference.engine.reporting import ComparisonResult, ComparisonRow, timed
from inference.mcvq.baselines import (
    fit_mcvq_meanfield_svi,
    fit_mcvq_svi,
    fit_variational,
    score_mcvq,
)
from inference.mcvq.em import fit_mcvq
from ppl_models import mcvq

__all__ = ["compare_mcvq", "plot_mcvq"]

OBJECTIVE = "held-out mean log-likelihood, exact (higher is better)"

_TITLES = {"em": "EM, T annealed\n(ours)", "em_n": "EM, T = N\n(ours)",
           "svi": "SVI, r, s enum.\n(NumPyro)", "svi_meanfield": "SVI, mean-field\n(NumPyro)",
           "planted": "planted\npartition"}


def compare_mcvq(rng_key, *, quick: bool = False, progress_bar: bool = True,
                 num_examples: int | None = None, dim: int | None = None, num_vqs: int = 3,
                 num_states: int | None = None, em_iterations: int = 200,
                 svi_steps: int | None = None, svi_learning_rate: float = 0.3) -> ComparisonResult:
    """Run the MCVQ comparison; see the module docstring. ``quick`` shrinks sizes.

    ``num_examples`` training examples and twice as many held-out ones; the
    planted model and every fit have ``num_vqs`` VQs of ``num_states`` states
    in ``dim`` dimensions; ``em_iterations`` bounds the EM iterations;
    ``svi_steps`` Adam steps at ``svi_learning_rate`` for both SVI rows.
    """
    num_examples = num_examples or (100 if quick else 200)
    dim = dim or (9 if quick else 12)
    num_states = num_states or (3 if quick else 4)
    svi_steps = svi_steps or (300 if quick else 1000)
    key_data, key_fit = jax.random.split(rng_key)
    data = mcvq.generate(key_data, 3 * num_examples, dim, num_vqs, num_states)
    x, x_heldout = data.x[:num_examples], data.x[num_examples:]
    settings = dict(num_examples=num_examples, num_heldout=2 * num_examples, dim=dim,
                    num_vqs=num_vqs, num_states=num_states, em_iterations=em_iterations,
                    svi_steps=svi_steps, svi_learning_rate=svi_learning_rate, quick=quick)
    rows = []
    arrays = {"planted_r": np.asarray(data.r)}

    def add(key, label, implementation, fit, g, m, t, t0, converged, trace, extra, notes=""):
        score = score_mcvq(x, g, m, fit.mu, fit.sigma, x_heldout=x_heldout)
        arrays[key] = {"g": np.asarray(g), "trace": np.asarray(trace)}
        rows.append(ComparisonRow(
            "learning", label, implementation, OBJECTIVE, score.heldout_log_likelihood, t, t0,
            bool(converged),
            {"train_loglik": score.train_log_likelihood, "elbo": score.elbo,
             "heldout_rms": score.heldout_rms, **extra}, notes))

    steps = tqdm(total=5, desc="compare mcvq", disable=not progress_bar, leave=False)
    schedules = {"em": (None, "variational EM, T annealed N-1 -> 1 (sec. 3)"),
                 "em_n": (float(num_examples), "variational EM, T = N (F_N)")}
    for key, (schedule, label) in schedules.items():
        steps.set_postfix_str(label)
        fit, t, t0, notes = timed(fit_mcvq, x, num_vqs, num_states, rng_key=key_fit,
                                  max_iterations=em_iterations, temperature_schedule=schedule)
        add(key, label, "ours", fit, fit.g, fit.m, t, t0, fit.converged,
            -fit.trace.objective / num_examples, {"iterations": fit.num_iterations}, notes)
        steps.update()

    steps.set_postfix_str("SVI")
    svi, t, t0, notes = timed(fit_mcvq_svi, x, num_vqs, num_states, rng_key=key_fit,
                              num_steps=svi_steps, learning_rate=svi_learning_rate)
    g, m = fit_variational(x, svi.mu, svi.sigma)
    add("svi", "SVI: TraceEnum_ELBO, r and s enumerated, ML mu, sigma", "numpyro", svi, g, m,
        t, t0, svi.converged, -svi.trace.objective, {"iterations": svi_steps}, notes)
    steps.update()

    steps.set_postfix_str("mean-field SVI")
    mf, t, t0, notes = timed(fit_mcvq_meanfield_svi, x, num_vqs, num_states, rng_key=key_fit,
                             num_steps=svi_steps, learning_rate=svi_learning_rate)
    add("svi_meanfield", "SVI: TraceEnum_ELBO, mean-field guide (g, m) enumerated", "numpyro",
        mf, mf.g, mf.m, t, t0, mf.converged, -mf.trace.objective, {"iterations": svi_steps}, notes)
    steps.update()

    partition = jax.nn.one_hot(data.r, num_vqs, dtype=x.dtype)
    g, m = fit_variational(x, data.mu, data.sigma, g=0.98 * partition + 0.02 / num_vqs)
    add("planted", "planted parameters (reference)", "truth", data, g, m, 0.0, 0.0, True,
        jnp.zeros(0), {})
    steps.update()
    steps.close()
    return ComparisonResult("mcvq", rows, settings, arrays, plot_mcvq)


def plot_mcvq(result: ComparisonResult, path) -> None:
    """Objective traces of every learner, and the g (D x K) each ends with."""
    from matplotlib.ticker import MaxNLocator

    keys = [k for k in _TITLES if k in result.arrays]
    fig, axes = new_figure(1, 1 + len(keys), figsize=(4.6 + 1.5 * len(keys), 3.8),
                           width_ratios=[3.0] + [1.0] * len(keys))
    labels = {"em": "EM: -F_T / N", "em_n": "EM (T = N): -F_N / N",
              "svi": "SVI enum: log-lik / N", "svi_meanfield": "SVI mean-field: -F_N / N"}
    for key in keys:
        trace = result.arrays[key]["trace"]
        if trace.size:
            axes[0].plot(np.arange(1, trace.size + 1), trace, label=labels[key])
    axes[0].set_xscale("log")
    axes[0].set_xlabel("iteration / step")
    axes[0].set_ylabel("objective (nats per example)")
    low = max(np.percentile(np.concatenate([result.arrays[k]["trace"] for k in keys]), 5),
              -1e4)
    axes[0].set_ylim(bottom=low)
    axes[0].legend(fontsize=7)
    axes[0].set_title("objective per iteration", fontsize=9)
    for ax, key in zip(axes[1:], keys, strict=True):
        image = ax.imshow(result.arrays[key]["g"], aspect="auto", vmin=0, vmax=1, cmap="Greys")
        ax.set_title(_TITLES[key], fontsize=8)
        ax.set_xlabel("VQ k")
        ax.xaxis.set_major_locator(MaxNLocator(nbins=4, integer=True))
        ax.set_yticks([])
    axes[1].set_ylabel("dimension d")
    fig.colorbar(image, ax=axes[1:].tolist(), shrink=0.8, label="g_dk = Q(r_d = k)")
    fig.suptitle("MCVQ: objective per iteration and the final ownership g of every learner")
    save_figure(fig, path)
