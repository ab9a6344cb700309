"""One NUTS runner for the zoo's MCMC baselines: :func:`run_nuts`.

Every MCMC baseline (GVQ, clipped Gaussian, mixture, PPCA, MCVQ's PSIS-LOO)
samples its NumPyro program by NUTS (Hoffman & Gelman 2014; step size and mass
matrix adapted during warm-up) for a fixed number of warm-up and sampling
iterations. They all run through the one compiled chain of this module: a
``lax.scan`` of ``kernel.sample`` over ``num_warmup + num_samples`` iterations,
whose per-iteration arrays (the sites, the potential energy, the divergences, the
leapfrog steps, the Hamiltonian, the acceptance probability and the step size: NumPyro's
extra fields) are returned, warm-up included. A progress bar
(:mod:`inference.engine.progress`) is advanced from inside the scan. The kept draws
become ``arviz.InferenceData`` through :mod:`inference.engine.inference_data`.

The chain is one module-level ``jax.jit`` whose *static* arguments are the
program (a top-level function, a ``functools.partial`` of one, or any other
hashable callable kept at module level), its structural keyword arguments and
the sampler settings, and whose *traced* arguments are the chain's key, the
program's positional arguments, its array-valued keyword arguments and the
initial values. A second call with the same program, settings and shapes, and
new data or keys, therefore reuses the compiled chain (NumPyro's ``MCMC``
object would trace its loop again, the data held as constants).

References
----------
Hoffman, Gelman, "The No-U-Turn Sampler", JMLR 15 (2014).
"""

from __future__ import annotations

from functools import partial
from typing import NamedTuple

import jax
import jax.numpy as jnp
from numpyro.infer import NUTS, init_to_value

from inference.engine.progress import advance_bar, progress, tick

__all__ = ["Chains", "run_nuts"]


class Chains(NamedTuple):
    """Per-iteration arrays of :func:`run_nuts`, warm-up included.

    Attributes
    ----------
    z : dict of arrays (num_chains, num_warmup + num_samples, ...)
        The sampled sites: constrained (``constrained=True``, with the program's
        deterministic sites) or NUTS's unconstrained values.
    potential_energy : array (num_chains, num_warmup + num_samples)
        -log p of the program (enumerated discrete sites summed out).
    diverging : bool array (num_chains, num_warmup + num_samples)
    num_steps : int array (num_chains, num_warmup + num_samples)
        Leapfrog steps (gradient evaluations) of every iteration.
    energy : array (num_chains, num_warmup + num_samples)
        The Hamiltonian (potential plus kinetic energy) of every iteration.
    accept_prob : array (num_chains, num_warmup + num_samples)
        Mean acceptance probability of the trajectory.
    step_size : array (num_chains, num_warmup + num_samples)
        The (adapted) leapfrog step size.
    """

    z: dict
    potential_energy: jax.Array
    diverging: jax.Array
    num_steps: jax.Array
    energy: jax.Array | None = None
    accept_prob: jax.Array | None = None
    step_size: jax.Array | None = None


def _chain_impl(rng_key, model_args, model_kwargs, init_values, *, model, static_kwargs,
                num_warmup, num_samples, target_accept_prob, max_tree_depth, dense_mass,
                constrained, sites, zero_sites, progress_every, progress_chains=1):
    """One NUTS chain from ``init_values``: the per-iteration arrays of :class:`Chains`."""
    kwargs = {**model_kwargs, **dict(static_kwargs)}
    init_values = {**init_values, **{name: jnp.zeros(shape, dtype)
                                     for name, shape, dtype in zero_sites}}
    kernel = NUTS(model, init_strategy=init_to_value(values=init_values),
                  target_accept_prob=target_accept_prob, max_tree_depth=max_tree_depth,
                  dense_mass=dense_mass)
    state = kernel.init(rng_key, num_warmup, None, model_args, kwargs)
    constrain = kernel.postprocess_fn(model_args, kwargs) if constrained else None

    def body(state, i):
        state = kernel.sample(state, model_args, kwargs)
        if progress_chains == 1:
            tick(i, progress_every)
        elif progress_every:  # under vmap the unbatched callback runs once for all chains
            jax.lax.cond((i + 1) % progress_every == 0,
                         lambda: jax.debug.callback(advance_bar, progress_every * progress_chains),
                         lambda: None)
        z = constrain(state.z) if constrained else state.z
        if sites is not None:
            z = {name: z[name] for name in sites}
        return state, (z, state.potential_energy, state.diverging, state.num_steps,
                       state.energy, state.accept_prob, state.adapt_state.step_size)

    _, out = jax.lax.scan(body, state, jnp.arange(num_warmup + num_samples))
    return out


_STATIC = ("model", "static_kwargs", "num_warmup", "num_samples", "target_accept_prob",
           "max_tree_depth", "dense_mass", "constrained", "sites", "zero_sites",
           "progress_every", "progress_chains")
_chain = jax.jit(_chain_impl, static_argnames=_STATIC)


@partial(jax.jit, static_argnames=_STATIC)
def _chains_vectorized(rng_keys, model_args, model_kwargs, init_values, **static):
    return jax.vmap(lambda key, init: _chain_impl(key, model_args, model_kwargs, init,
                                                  **static))(rng_keys, init_values)


def run_nuts(model, rng_keys, model_args=(), model_kwargs=None, init_values=None, *,
             num_warmup: int, num_samples: int, static_kwargs=(),
             chain_method: str = "sequential", target_accept_prob: float = 0.8,
             max_tree_depth: int = 10, dense_mass: bool = False, constrained: bool = True,
             sites=None, zero_sites=(), progress_bar: bool = False, desc: str = "NUTS") -> Chains:
    """Run one NUTS chain per key; the per-iteration arrays of every chain, stacked.

    Parameters
    ----------
    model : callable
        The NumPyro program: a hashable callable that stays the same object from
        call to call (a top-level function or a ``functools.partial`` of one), since
        it is a static argument of the compiled chain. Discrete sites marked for
        enumeration are summed out by NumPyro.
    rng_keys : key array (num_chains,)
        One key per chain (it initialises the sampler and drives the chain).
    model_args : tuple of arrays
        The program's positional arguments (traced).
    model_kwargs : dict of arrays, optional
        Its array-valued keyword arguments (traced).
    init_values : dict of arrays (num_chains, ...), optional
        Initial value of every named site, one row per chain (``init_to_value``;
        sites not named start as NumPyro's ``init_to_uniform``).
    num_warmup, num_samples : int
        Warm-up (adaptation) iterations and kept iterations per chain.
    static_kwargs : dict or tuple of (name, value) pairs
        The program's structural keyword arguments (sizes, flags; hashable values,
        static: a new value compiles a new chain).
    chain_method : {"sequential", "vectorized"}
        One compiled chain run once per key, or all chains under ``vmap``.
    target_accept_prob, max_tree_depth, dense_mass
        NUTS settings (NumPyro's defaults 0.8, 10, False).
    constrained : bool
        Return the sites constrained (through the kernel's ``postprocess_fn``, as
        NumPyro's ``MCMC`` collects them) or NUTS's unconstrained values.
    sites : tuple of str, optional
        Keep only these sites of ``z`` (default all).
    zero_sites : tuple of (name, shape, dtype)
        Sites that every chain starts at zero, the zeros built inside the compiled
        chain: XLA folds them into the start as constants, which gives the same
        draws, bit for bit, as a chain written with its zero start inside (a traced
        start of zeros is not folded, and the first potential energy can differ in
        the last bit, after which the chains part).
    progress_bar : bool
        A tqdm bar over all iterations of all chains, advanced from inside the chain.
    desc : str
        The bar's label.

    Returns
    -------
    Chains
        Arrays (num_chains, num_warmup + num_samples, ...), warm-up included.
    """
    if chain_method not in ("sequential", "vectorized"):
        raise ValueError(f"chain_method must be 'sequential' or 'vectorized'; got "
                         f"{chain_method!r}")
    if isinstance(static_kwargs, dict):
        static_kwargs = tuple(sorted(static_kwargs.items()))
    num_chains = len(rng_keys)
    model_args, model_kwargs = tuple(model_args), dict(model_kwargs or {})
    init_values = {} if init_values is None else init_values
    total = num_warmup + num_samples
    settings = dict(model=model, static_kwargs=tuple(static_kwargs), num_warmup=num_warmup,
                    num_samples=num_samples, target_accept_prob=float(target_accept_prob),
                    max_tree_depth=max_tree_depth, dense_mass=bool(dense_mass),
                    constrained=bool(constrained),
                    sites=None if sites is None else tuple(sites),
                    zero_sites=tuple((name, tuple(shape), str(jnp.dtype(dtype)))
                                     for name, shape, dtype in zero_sites))
    if chain_method == "vectorized":
        with progress(total * num_chains, desc, progress_bar, loop_length=total) as every:
            out = _chains_vectorized(rng_keys, model_args, model_kwargs, init_values,
                                     progress_every=every, progress_chains=num_chains,
                                     **settings)
            out = jax.block_until_ready(out)
    else:
        with progress(total * num_chains, desc, progress_bar, loop_length=total) as every:
            chains = [_chain(rng_keys[c], model_args, model_kwargs,
                             jax.tree.map(lambda v, c=c: v[c], init_values),
                             progress_every=every, **settings) for c in range(num_chains)]
            out = jax.block_until_ready(jax.tree.map(lambda *a: jnp.stack(a), *chains))
    return Chains(*out)
