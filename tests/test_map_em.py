"""fit_map_em: EM in the sigma -> 0 limit on a user's own program.

The offset-plus-Ising variant of GVQ is learned to the planted parameters' energy, its
M-step is the least-squares solution of the program for the final states, fit_gvq
refuses the same variant instead of ignoring its offset, and a program whose energy is
not quadratic in its parameters is learned by L-BFGS.
"""

import warnings

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist
import pytest
from numpyro import handlers
from numpyro.distributions import constraints

from inference import fit_gvq, fit_gvq_stream, fit_map_em, map_states
from ppl_models import gvq
from ppl_models.diagnostics import NumericalWarning

N, NUM_UNITS, DIM = 200, 5, 8
OFFSET = jnp.linspace(-1.0, 1.0, DIM)
COUPLINGS = jnp.array([[0.0, 1.0, 0.0, 0.0, -1.0], [1.0, 0.0, 0.5, 0.0, 0.0],
                       [0.0, 0.5, 0.0, -0.5, 0.0], [0.0, 0.0, -0.5, 0.0, 1.0],
                       [-1.0, 0.0, 0.0, 1.0, 0.0]])


def offset_ising(x, couplings):
    """GVQ with a learned offset on x and an Ising prior on s."""
    features = numpyro.param(
        "features", lambda key: 2.0 + jax.random.normal(key, (NUM_UNITS, x.shape[1])))
    offset = numpyro.param("offset", jnp.zeros(x.shape[1]))
    with numpyro.plate("data", x.shape[0]):
        s = numpyro.sample("s", dist.Bernoulli(0.5).expand([NUM_UNITS]).to_event(1))
        numpyro.factor("ising", 0.5 * jnp.einsum("ni,ij,nj->n", s, couplings, s))
        numpyro.sample("x", dist.Normal(offset + s @ features, 0.1).to_event(1), obs=x)


@pytest.fixture(scope="module")
def planted():
    data = gvq.generate_planted(jax.random.key(11), N, NUM_UNITS, DIM, noise_scale=0.1)
    return data._replace(x=data.x + OFFSET)


@pytest.fixture(scope="module")
def learned(planted):
    return fit_map_em(offset_ising, planted.x, COUPLINGS, rng_key=jax.random.key(0),
                      num_restarts=4, max_iterations=50)


def as_gvq(x=None, *, features, offset, couplings):
    """The offset-plus-Ising variant written for fit_gvq: features and offset arguments."""
    with numpyro.plate("data", x.shape[0]):
        s = numpyro.sample("s", dist.Bernoulli(0.5).expand([NUM_UNITS]).to_event(1))
        numpyro.factor("ising", 0.5 * jnp.einsum("ni,ij,nj->n", s, couplings, s))
        numpyro.sample("x", dist.Normal(offset + s @ features, 0.1).to_event(1), obs=x)


@pytest.mark.slow  # statistical: best of 4 and of 8 random starts (about 60 s with `learned`)
def test_recovers_the_planted_energy_and_so_does_fit_gvq_on_the_variant(planted, learned):
    """The default run checks fit_map_em's closed-form path against fit_gvq in
    test_fit_gvq_is_the_gvq_case_of_fit_map_em, L-BFGS in
    test_a_program_not_quadratic_in_its_parameters_is_learned_by_lbfgs, and the
    refusals at the end in test_fit_gvq_refuses_what_fit_map_em_does_not_offer."""
    truth = handlers.substitute(offset_ising, data={"features": planted.features,
                                                    "offset": OFFSET})
    reference = float(map_states(truth, planted.x, COUPLINGS).energy.mean())
    assert learned.closed_form and learned.converged
    assert learned.objective <= 1.05 * reference, (learned.objective, reference)
    # The variant written for fit_gvq (features and offset as arguments, the offset
    # given): its least-squares M-step would ignore the offset, so fit_gvq learns the
    # features through fit_map_em, to the planted energy as well (from fit_gvq's random
    # starts, about one in three of which reaches it here: best of 8).
    kwargs = {"offset": OFFSET, "couplings": COUPLINGS}
    fitted = fit_gvq(planted.x, NUM_UNITS, model=as_gvq, rng_key=jax.random.key(1),
                     model_kwargs=kwargs, num_restarts=8)
    assert bool(fitted.converged)
    assert float(fitted.error) <= 1.05 * reference, (float(fitted.error), reference)
    energy = map_states(as_gvq, planted.x, features=fitted.features, **kwargs).energy
    assert float(fitted.error) == pytest.approx(float(energy.mean()), rel=1e-5)
    assert int(fitted.trace.num_changed[-1]) == 0
    # What fit_map_em does not offer is refused: test_fit_gvq_refuses_what_fit_map_em_...


@pytest.mark.slow  # ~8 s; the default run has fit_map_em's Examples and test_compile_once
def test_fit_gvq_is_the_gvq_case_of_fit_map_em(planted):
    """From the same start, fit_gvq (least squares) and fit_map_em on GVQ with its
    features a numpyro.param (the closed form found by tracing) take the same path."""
    x = planted.x - OFFSET

    def gvq_params(x):
        features = numpyro.param("features", jnp.zeros((NUM_UNITS, DIM)))
        with numpyro.plate("data", x.shape[0]):
            s = numpyro.sample("s", dist.Bernoulli(0.5).expand([NUM_UNITS]).to_event(1))
            numpyro.sample("x", dist.Normal(s @ features, 0.1).to_event(1), obs=x)

    start = jax.random.normal(jax.random.key(3), (NUM_UNITS, DIM)) + 2.0
    ours = fit_map_em(gvq_params, x, rng_key=jax.random.key(1), init_params={"features": start},
                      tol=0.0)
    theirs = fit_gvq(x, NUM_UNITS, rng_key=jax.random.key(1), num_restarts=1,
                     init_features=start)
    assert ours.num_iterations == int(theirs.num_iterations)
    np.testing.assert_array_equal(ours.states["s"], theirs.states)
    np.testing.assert_allclose(ours.params["features"], theirs.features, atol=1e-4)
    np.testing.assert_allclose(ours.trace.objective, theirs.trace.objective, rtol=1e-5)
    np.testing.assert_array_equal(ours.num_changed[1:], theirs.trace.num_changed[1:])


def test_fit_gvq_refuses_what_fit_map_em_does_not_offer(planted):
    """The variant written for fit_gvq (offset given) is refused where fit_map_em has no
    counterpart, naming the option."""
    kwargs = {"offset": OFFSET, "couplings": COUPLINGS}
    with pytest.raises(ValueError, match="devices.*not least squares"):
        fit_gvq(planted.x, NUM_UNITS, model=as_gvq, rng_key=jax.random.key(0),
                model_kwargs=kwargs, devices=1)
    with pytest.raises(ValueError, match="least-squares M-step.*offset"):
        fit_gvq_stream(planted.x, NUM_UNITS, model=as_gvq, rng_key=jax.random.key(0),
                       model_kwargs=kwargs, batch_size=50, num_restarts=1)


# The default run checks the closed-form M-step against least squares (with an offset) in
# test_sparse_hessian_is_the_dense_one_and_a_wrong_pattern_is_caught and against fit_gvq
# in test_fit_gvq_is_the_gvq_case_of_fit_map_em.
@pytest.mark.slow
def test_m_step_is_the_least_squares_fit_of_the_final_states(planted, learned):
    states = np.asarray(learned.states["s"], float)
    design = np.hstack([np.ones((N, 1)), states])
    solution = np.linalg.lstsq(design, np.asarray(planted.x, float), rcond=None)[0]
    np.testing.assert_allclose(learned.params["offset"], solution[0], atol=1e-3)
    np.testing.assert_allclose(learned.params["features"], solution[1:], atol=1e-3)
    trace = np.asarray(learned.trace.objective)
    assert np.all(np.diff(trace) <= 1e-5 * np.abs(trace[:-1]) + 1e-7), trace


def scaled_units(x):
    """Positive gains per unit times features: not quadratic in (gains, features)."""
    features = numpyro.param(
        "features", lambda key: 2.0 + jax.random.normal(key, (3, x.shape[1])))
    gains = numpyro.param("gains", jnp.ones(3), constraint=constraints.positive)
    with numpyro.plate("data", x.shape[0]):
        s = numpyro.sample("s", dist.Bernoulli(0.5).expand([3]).to_event(1))
        numpyro.sample("x", dist.Normal((s * gains) @ features, 0.1).to_event(1), obs=x)


@pytest.mark.slow  # ~8 s; the default run checks the refusal in test_bad_input_names_the_argument
def test_a_program_not_quadratic_in_its_parameters_is_learned_by_lbfgs():
    data = gvq.generate_planted(jax.random.key(3), 80, 3, 6, noise_scale=0.05)
    result = fit_map_em(scaled_units, data.x, rng_key=jax.random.key(1), num_restarts=2,
                        max_iterations=30)
    assert not result.closed_form
    assert np.all(np.asarray(result.params["gains"]) > 0)
    # The reconstruction error reaches the planted noise level (0.05^2 per entry).
    assert result.objective < 6 * 0.05 ** 2 * 3, result.objective


def _no_params(x):
    with numpyro.plate("data", x.shape[0]):
        s = numpyro.sample("s", dist.Bernoulli(0.5).expand([2]).to_event(1))
        numpyro.sample("x", dist.Normal(s @ jnp.ones((2, x.shape[1])), 0.1).to_event(1), obs=x)


def test_bad_input_names_the_argument(planted):
    with pytest.raises(ValueError, match="no numpyro.param site"):
        fit_map_em(_no_params, planted.x, rng_key=jax.random.key(0))
    with pytest.raises(ValueError, match=r"init_params.*\['scale'\]"):
        fit_map_em(offset_ising, planted.x, COUPLINGS, rng_key=jax.random.key(0),
                   init_params={"scale": 1.0})
    with pytest.raises(ValueError, match="rng_key"):
        fit_map_em(offset_ising, planted.x, COUPLINGS)
    with pytest.raises(ValueError, match="num_restarts"):
        fit_map_em(offset_ising, planted.x, COUPLINGS, rng_key=jax.random.key(0),
                   num_restarts=0)
    # Numerical trouble is a warning and a flag, never a silent NaN.
    with pytest.warns(NumericalWarning, match="non-finite mean energy"):
        result = fit_map_em(offset_ising, planted.x, COUPLINGS, rng_key=jax.random.key(0),
                            init_params={"offset": jnp.full(DIM, 1e30)}, max_iterations=2)
    assert not np.isfinite(result.objective)


def test_sparse_hessian_is_the_dense_one_and_a_wrong_pattern_is_caught():
    """The closed-form M-step builds the Hessian from one Hessian-vector product per colour
    of its sparsity pattern (GVQ: features of one output dimension couple only among
    themselves, so the units' count of colours suffices); it equals the dense solve, and a
    pattern that misses entries is reported (the fit then solves densely)."""
    from inference.association.m_step import Pattern, colouring, normal_equations

    key_s, key_x, key_f = jax.random.split(jax.random.key(9), 3)
    states = jax.random.bernoulli(key_s, 0.5, (40, 4)).astype(jnp.float32)
    x = jax.random.normal(key_x, (40, 3))

    def objective(params):
        residual = x - params["offset"] - states @ params["features"]
        return jnp.mean(jnp.sum(residual ** 2, axis=1))

    params = {"features": jax.random.normal(key_f, (4, 3)), "offset": jnp.zeros(3)}
    flat, unravel = jax.flatten_util.ravel_pytree(params)
    support = np.asarray(jax.hessian(lambda v: objective(unravel(v)))(flat)) != 0
    pattern = colouring(support)
    assert pattern.count == 5  # the four units and the offset, against 15 parameters
    def solve(pattern):
        return jax.jit(lambda p: normal_equations(objective, p, pattern))(params)

    dense, solved, _ = solve(None)
    sparse, solved_sparse, missed = solve(pattern)
    assert bool(solved) and bool(solved_sparse) and not bool(missed)
    for name in params:
        np.testing.assert_allclose(sparse[name], dense[name], rtol=1e-4, atol=1e-4)
    design = np.hstack([np.ones((40, 1)), np.asarray(states)])
    solution = np.linalg.lstsq(design, np.asarray(x), rcond=None)[0]
    np.testing.assert_allclose(sparse["offset"], solution[0], atol=1e-4)
    np.testing.assert_allclose(sparse["features"], solution[1:], atol=1e-4)
    diagonal = np.arange(flat.shape[0])
    wrong = Pattern(diagonal, diagonal, np.zeros(flat.shape[0], int), 1)
    assert bool(solve(wrong)[2])


@pytest.mark.slow
def test_m_step_choice_and_a_second_call_from_the_kept_structure(planted, learned):
    again = fit_map_em(offset_ising, planted.x, COUPLINGS, rng_key=jax.random.key(0),
                       num_restarts=4, max_iterations=50)
    for name in learned.params:  # the kept structure gives the same fit
        np.testing.assert_array_equal(again.params[name], learned.params[name])
    # A kept sparsity pattern that misses the Hessian's entries is caught in the M-step,
    # and the fit runs again with the dense Hessian.
    from inference.association import map_em
    from inference.association.m_step import Pattern

    for key, prepared in map_em._FITS.items():
        if prepared.pattern is not None:
            size = len(prepared.pattern.colours)
            diagonal = np.arange(size)
            map_em._FITS.put(key, prepared._replace(
                pattern=Pattern(diagonal, diagonal, np.zeros(size, int), 1)))
    dense = fit_map_em(offset_ising, planted.x, COUPLINGS, rng_key=jax.random.key(0),
                       num_restarts=4, max_iterations=50)
    assert dense.objective == pytest.approx(learned.objective, rel=1e-5)
    forced = fit_map_em(offset_ising, planted.x, COUPLINGS, rng_key=jax.random.key(0),
                        num_restarts=4, max_iterations=50, m_step="lbfgs")
    assert not forced.closed_form  # L-BFGS reaches the closed form's optimum
    assert forced.objective == pytest.approx(learned.objective, rel=1e-3)
    with pytest.raises(ValueError, match="m_step='closed'.*not quadratic"):
        fit_map_em(scaled_units, planted.x[:, :6], rng_key=jax.random.key(0),
                   m_step="closed")
    with pytest.raises(ValueError, match="m_step must be"):
        fit_map_em(offset_ising, planted.x, COUPLINGS, rng_key=jax.random.key(0),
                   m_step="newton")


@pytest.mark.slow
def test_a_second_call_reuses_the_kept_structure(monkeypatch):
    """Same program and shapes: the second call checks the kept structure at its own
    values instead of working it out again (closed form and L-BFGS alike)."""
    from inference.association import map_em

    calls = []
    prepare = map_em._prepare
    monkeypatch.setattr(map_em, "_prepare", lambda *a, **k: calls.append(1) or prepare(*a, **k))
    for program, dim in ((scaled_units, 6), (offset_ising, DIM)):
        extra = (COUPLINGS,) if program is offset_ising else ()
        for seed in (21, 22):
            data = gvq.generate_planted(jax.random.key(seed), 40, NUM_UNITS if extra else 3,
                                        dim, noise_scale=0.1)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                fit_map_em(program, data.x, *extra, rng_key=jax.random.key(seed),
                           max_iterations=2, m_step_iterations=3)
    assert len(calls) == 2, calls  # once per program
