"""``fit_map_em`` for programs with categorical latents too: the hard limit of :func:`fit_em`.

:func:`inference.association.map_em.fit_map_em` learns a program's parameters with its
binary sites at their most probable states, by any binary association method. This
wrapper, exported as :func:`inference.fit_map_em`, keeps that function for binary
programs and sends a program with categorical (or one-hot) latent sites to
``fit_em(e_step="hard")`` (hard-cut EM; with ``noise=None``, k-means-type EM in the
sigma -> 0 limit), with the same arguments and the same result type.
"""

from __future__ import annotations

from inference.association.discrete_map import has_categorical_sites
from inference.association.map_em import MapEMResult
from inference.association.map_em import fit_map_em as fit_binary_map_em
from inference.association.program_sites import run_program
from inference.em.fit import fit_em

__all__ = ["fit_map_em"]


def fit_map_em(model, *args, method: str = "exact", rng_key=None, max_iterations: int = 100,
               tol: float = 1e-6, num_restarts: int = 1, init_params=None, noise=None,
               sites=None, method_options=None, m_step: str = "auto",
               m_step_iterations: int = 50, progress_bar: bool = False,
               **kwargs) -> MapEMResult:
    """EM with the most probable states of the program's discrete latent sites.

    Binary programs: :func:`inference.association.map_em.fit_map_em` (every association
    method). A program with categorical sites: ``fit_em(model, *args, e_step="hard",
    search=..., init="program", ...)`` with ``method`` ``"exact"`` (enumeration of the
    joint states, search ``"exact"``) or ``"icm"`` (iterated conditional modes), the
    restarts starting at the program's own initial values as for binary programs.
    Arguments as for the binary function; returns a
    :class:`inference.association.map_em.MapEMResult`.

    Examples
    --------
    k-means on a program with a categorical site, in the sigma -> 0 limit:

    >>> import jax, jax.numpy as jnp, numpy as np, numpyro, numpyro.distributions as dist
    >>> def kmeans(x):
    ...     means = numpyro.param("means", jnp.array([[0.0, 0.0], [1.0, 1.0]]))
    ...     with numpyro.plate("data", x.shape[0]):
    ...         c = numpyro.sample("c", dist.Categorical(jnp.ones(2) / 2))
    ...         numpyro.sample("x", dist.Normal(means[c], 1.0).to_event(1), obs=x)
    >>> x = jnp.array([[0.0, 0.1], [0.2, 0.0], [3.0, 3.1], [3.2, 2.9]])
    >>> fit = fit_map_em(kmeans, x, rng_key=jax.random.key(0))
    >>> np.asarray(fit.params["means"], float).round(2).tolist(), fit.states["c"].tolist()
    ([[0.1, 0.05], [3.1, 3.0]], [0, 0, 1, 1])
    """
    if not has_categorical_sites(run_program(model, args, dict(kwargs)), sites):
        return fit_binary_map_em(model, *args, method=method, rng_key=rng_key,
                                 max_iterations=max_iterations, tol=tol,
                                 num_restarts=num_restarts, init_params=init_params,
                                 noise=noise, sites=sites, method_options=method_options,
                                 m_step=m_step, m_step_iterations=m_step_iterations,
                                 progress_bar=progress_bar, **kwargs)
    if method not in ("exact", "icm"):
        raise ValueError(f"method {method!r} works on binary sites; for a program with "
                         "categorical sites use method 'exact' (enumeration) or 'icm' "
                         "(iterated conditional modes)")
    if method_options:
        raise ValueError("method_options: fit_map_em takes none for categorical sites; "
                         "pass max_joint_states to fit_em(e_step='hard') instead")
    fit = fit_em(model, *args, e_step="hard", rng_key=rng_key, max_iterations=max_iterations,
                 tol=tol, num_restarts=num_restarts, init="program", init_params=init_params,
                 noise=noise, sites=sites, search=method, m_step=m_step,
                 m_step_iterations=m_step_iterations, progress_bar=progress_bar, **kwargs)
    return MapEMResult(fit.params, fit.states, fit.objective, fit.converged,
                       fit.num_iterations, fit.trace, fit.restart_objectives,
                       fit.closed_form, None)
