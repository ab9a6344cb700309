"""Probabilistic PCA: EM against scikit-learn, Tipping & Bishop's closed form and the program.

Data: the planted program of :func:`ppl_models.ppca.generate` (W with orthogonal rows of
norms 3 ... 1.5, sigma = 0.5), d = 10, q = 3, 400 examples. The closed forms are those
of Tipping & Bishop (1999, sec. 3.2): the ML W spans the leading eigenvectors of the
sample covariance S (1/N) with W^T W = U_q (Lambda_q - sigma^2 I) U_q^T and sigma^2 the
mean of the d - q discarded eigenvalues; the sigma -> 0 limit (Roweis 1998) spans the
same subspace as PCA, and its reconstruction error is the sum of the discarded
eigenvalues.
"""

import csv
import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from numpyro.infer.util import log_density
from scipy.linalg import subspace_angles

import inference
from inference import fit_ppca
from inference.ppca.baselines import fit_ppca_mcmc, fit_ppca_svi
from ppl_models import ppca
from ppl_models.diagnostics import ConvergenceWarning

NUM_COMPONENTS = 3
NOISE = 0.5


def angle(a, b):
    """Largest principal angle (radians) between the row spaces of a and b (q, d)."""
    return float(np.max(subspace_angles(np.asarray(a, np.float64).T, np.asarray(b, np.float64).T)))


@pytest.fixture(scope="module")
def data():
    return ppca.generate(jax.random.key(0), 400, 10, NUM_COMPONENTS, noise=NOISE)


@pytest.fixture(scope="module")
def spectrum(data):
    """Eigenvalues (descending) and eigenvectors (columns) of S = cov(x) with 1/N, float64."""
    x = np.asarray(data.x, np.float64)
    values, vectors = np.linalg.eigh(np.cov(x.T, bias=True))
    return values[::-1], vectors[:, ::-1]


def test_limit_spans_the_subspace_of_sklearn_pca(data, spectrum):
    from sklearn.decomposition import PCA

    x = np.asarray(data.x)
    result = fit_ppca(x, NUM_COMPONENTS, rng_key=jax.random.key(1))
    assert result.converged and result.noise == 0.0
    pca = PCA(n_components=NUM_COMPONENTS).fit(np.asarray(x, np.float64))
    assert angle(result.weights, pca.components_) < 1e-3
    # The limit's objective is the mean squared reconstruction error: at PCA's optimum
    # the sum of the discarded eigenvalues of S (float32 sums: rtol 1e-4).
    np.testing.assert_allclose(float(result.trace.objective[-1]), spectrum[0][3:].sum(),
                               rtol=1e-4)
    np.testing.assert_allclose(result.mean, x.mean(axis=0), rtol=1e-5, atol=1e-6)


def test_ml_matches_tipping_bishop_closed_form(data, spectrum):
    values, vectors = spectrum
    with jax.enable_x64(True):
        x = np.asarray(data.x, np.float64)
        result = fit_ppca(x, NUM_COMPONENTS, noise="ml", rng_key=jax.random.key(2),
                          max_iterations=5000, tol=1e-13)
        assert result.weights.dtype == jnp.float64
    assert result.converged
    sigma2 = values[NUM_COMPONENTS:].mean()
    np.testing.assert_allclose(result.noise ** 2, sigma2, rtol=1e-3)
    u = vectors[:, :NUM_COMPONENTS]
    closed = u @ np.diag(values[:NUM_COMPONENTS] - sigma2) @ u.T
    w = np.asarray(result.weights)
    np.testing.assert_allclose(w.T @ w, closed, atol=1e-3 * values[0])
    # The trace of sigma ends at the fitted value; the objective never increases.
    assert float(result.trace.noise[-1]) == pytest.approx(result.noise)
    assert np.all(np.diff(np.asarray(result.trace.objective)) <= 1e-9)


@pytest.mark.slow  # several compiled fits: the slow run
def test_fixed_noise_objective_is_the_programs_log_density(data):
    """The EM's objective is -log p(x | W, mu, sigma) / N of the collapsed program, read
    by NumPyro: at a random W (the first iteration's) and at the fitted W."""
    x = np.asarray(data.x)
    fitted = fit_ppca(x, NUM_COMPONENTS, noise=NOISE, rng_key=jax.random.key(3),
                      max_iterations=1000)
    assert fitted.converged and fitted.noise == pytest.approx(NOISE)
    start = jax.random.normal(jax.random.key(4), (NUM_COMPONENTS, x.shape[1]))
    for weights in (start, fitted.weights):  # objective[0]: that of the initial W
        one = fit_ppca(x, NUM_COMPONENTS, noise=NOISE, rng_key=jax.random.key(5),
                       init_weights=weights, max_iterations=1000)
        logp, _ = log_density(ppca.model, (x,), {"weights": weights, "mean": one.mean,
                                                 "sigma": NOISE, "collapsed": True}, {})
        np.testing.assert_allclose(float(one.trace.objective[0]), -float(logp) / x.shape[0],
                                   rtol=1e-5)
    # The collapsed program is the z-program with z integrated out: x ~ N(mu, W^T W + s^2 I).
    np.testing.assert_allclose(ppca.marginal_covariance(fitted.weights, NOISE),
                               fitted.weights.T @ fitted.weights + NOISE ** 2 * jnp.eye(10),
                               rtol=1e-6)


def test_sufficient_statistics_give_the_rows_density(data):
    """``sufficient_statistics=True`` observes the rows through their mean and scatter
    (``GaussianRows``): NumPyro's log-density of that program equals the default
    collapsed program's (one MultivariateNormal per row) at prior draws of W, mu, sigma,
    in float32 to a relative 1e-5, and its prior draws have the shapes of the default's."""
    from numpyro import handlers

    x = np.asarray(data.x)
    kwargs = {"num_components": NUM_COMPONENTS, "collapsed": True, "sigma": None}
    for seed in range(5):
        params = {name: site["value"] for name, site in handlers.trace(handlers.seed(
            ppca.model, seed)).get_trace(x, **kwargs).items() if name != "x"}
        rows, _ = log_density(ppca.model, (x,), kwargs, params)
        stats, _ = log_density(ppca.model, (x,), {**kwargs, "sufficient_statistics": True},
                               params)
        assert np.isfinite(float(rows))
        np.testing.assert_allclose(float(stats), float(rows), rtol=1e-5)
    drawn = handlers.trace(handlers.seed(ppca.model, 0)).get_trace(
        None, num_examples=7, dim=10, **kwargs, sufficient_statistics=True)
    assert drawn["x"]["value"].shape == (7, 10) and drawn["x"]["fn"].event_shape == (7, 10)
    with pytest.raises(ValueError, match="sufficient_statistics=True needs collapsed=True"):
        handlers.trace(ppca.model).get_trace(x, num_components=2, sufficient_statistics=True)


def test_gaussian_rows_rejects_bad_arguments():
    from ppl_models.distributions import GaussianRows

    with pytest.raises(ValueError, match="loc must have shape"):
        GaussianRows(jnp.zeros(3), jnp.eye(2), 4)
    with pytest.raises(ValueError, match="num_rows must be a positive int"):
        GaussianRows(jnp.zeros(2), jnp.eye(2), 0)


@pytest.mark.slow  # several compiled fits: the slow run
def test_restarts_trace_convergence_and_save_load(data, tmp_path):
    x = np.asarray(data.x)
    result = fit_ppca(x, NUM_COMPONENTS, noise="ml", rng_key=jax.random.key(6),
                      num_restarts=3, max_iterations=1000, tol=1e-6)
    assert result.converged
    count = result.num_iterations
    assert 1 < count <= 1000
    for field in result.trace:
        assert field.shape == (count,)
    assert np.all(np.isfinite(np.asarray(result.trace.objective)))
    # The kept start has the lowest objective of the three (each run alone).
    keys = jax.random.split(jax.random.key(6), 3)
    singles = []
    for k in keys:
        weights = jax.random.normal(k, (NUM_COMPONENTS, x.shape[1]))
        scale = float(jnp.sqrt(jnp.mean(jnp.var(x, axis=0))))
        single = fit_ppca(x, NUM_COMPONENTS, noise="ml", rng_key=k, max_iterations=1000,
                          tol=1e-6, init_weights=weights * scale)
        singles.append(float(single.trace.objective[-1]))
    assert float(result.trace.objective[-1]) <= min(singles) + 1e-5
    # Not converged: a warning, the flag, and a trace of max_iterations entries.
    with pytest.warns(ConvergenceWarning, match="fit_ppca: not converged after 3"):
        short = fit_ppca(x, NUM_COMPONENTS, noise="ml", rng_key=jax.random.key(6),
                         max_iterations=3)
    assert not short.converged and short.num_iterations == 3
    assert short.trace.objective.shape == (3,)
    path = result.save(tmp_path / "ppca")
    again = inference.load(path)
    assert type(again) is type(result) and type(again.trace) is type(result.trace)
    for name in ("weights", "mean"):
        np.testing.assert_array_equal(getattr(again, name), getattr(result, name))
    assert (again.noise, again.converged, again.num_iterations) == (
        result.noise, result.converged, result.num_iterations)
    np.testing.assert_array_equal(again.trace.objective, result.trace.objective)


@pytest.mark.slow  # several compiled fits: the slow run
def test_checkpoint_resume_and_one_device_mesh_give_the_same_fit(data, tmp_path):
    x = np.asarray(data.x)
    settings = dict(noise="ml", rng_key=jax.random.key(7), max_iterations=1000, tol=1e-6)
    plain = fit_ppca(x, NUM_COMPONENTS, **settings)
    chunked = fit_ppca(x, NUM_COMPONENTS, checkpoint_path=tmp_path / "ck",
                       checkpoint_every=7, **settings)
    np.testing.assert_array_equal(chunked.weights, plain.weights)
    resumed = fit_ppca(x, NUM_COMPONENTS, resume_from=tmp_path / "ck.npz", **settings)
    np.testing.assert_array_equal(resumed.weights, plain.weights)
    sharded = fit_ppca(x, NUM_COMPONENTS, devices=1, **settings)
    # Sums in another order: EM stops at a nearby iteration of its slow approach, so the
    # objective agrees closely (rtol 1e-5) and sigma to 1e-3; the fast limit's subspace too.
    assert float(sharded.trace.objective[-1]) == pytest.approx(
        float(plain.trace.objective[-1]), rel=1e-5)
    assert sharded.noise == pytest.approx(plain.noise, rel=1e-3)
    limit = fit_ppca(x, NUM_COMPONENTS, rng_key=jax.random.key(7))
    limit_sharded = fit_ppca(x, NUM_COMPONENTS, rng_key=jax.random.key(7), devices=1)
    assert angle(limit_sharded.weights, limit.weights) < 1e-4


@pytest.mark.slow  # several compiled fits: the slow run
def test_a_stream_of_batches_gives_the_in_memory_fit(data):
    """One pass for the mean, then one pass per EM iteration (the engine's run_passes):
    the same fit up to the order of float additions."""
    x = np.asarray(data.x)
    batches = [x[:150], x[150:300], x[300:]]
    limit = fit_ppca(x, NUM_COMPONENTS, rng_key=jax.random.key(16))
    streamed = fit_ppca(batches, NUM_COMPONENTS, rng_key=jax.random.key(16))
    assert streamed.converged and angle(streamed.weights, limit.weights) < 1e-4
    np.testing.assert_allclose(streamed.mean, limit.mean, atol=1e-5)
    np.testing.assert_allclose(float(streamed.trace.objective[-1]),
                               float(limit.trace.objective[-1]), rtol=1e-5)


@pytest.mark.slow  # several compiled fits: the slow run
def test_a_second_fit_of_the_same_shapes_compiles_nothing():
    compiles = []

    def listen(event, duration, **kwargs):
        if "backend_compile" in event:
            compiles.append(event)

    first, second = (ppca.generate(jax.random.key(k), 37, 6, 2, noise=1.0).x for k in (8, 9))
    settings = dict(num_restarts=2, max_iterations=2000)
    jax.monitoring.register_event_duration_secs_listener(listen)
    try:
        fit_ppca(first, 2, noise="ml", rng_key=jax.random.key(10), **settings)
        assert compiles, "the listener saw no compilation at all: it cannot fail"
        compiles.clear()
        fit_ppca(second, 2, noise="ml", rng_key=jax.random.key(11), **settings)
    finally:
        jax.monitoring.unregister_event_duration_listener(listen)
    assert compiles == []


@pytest.mark.slow  # several compiled fits: the slow run
def test_svi_lands_on_the_em_answer(data):
    """AutoDelta SVI maximises likelihood plus priors: with 400 examples the priors move
    the answer little (angle < 0.01 rad, sigma within 1%)."""
    x = np.asarray(data.x)
    em = fit_ppca(x, NUM_COMPONENTS, noise="ml", rng_key=jax.random.key(12),
                  max_iterations=1000)
    svi = fit_ppca_svi(x, NUM_COMPONENTS, rng_key=jax.random.key(13), num_steps=1500)
    assert svi.converged and svi.trace.objective.shape == (1500,)
    assert angle(svi.weights, em.weights) < 1e-2
    assert svi.noise == pytest.approx(em.noise, rel=1e-2)
    np.testing.assert_allclose(svi.mean, em.mean, atol=0.05)


def test_an_svi_result_saved_with_loss_trace_and_num_steps_loads(tmp_path):
    """A file written when PPCASVIResult had ``loss_trace`` (an array) and ``num_steps``
    loads as the current class, its losses as ``trace.objective``."""
    import collections

    from inference.engine.persistence import save_tree
    from inference.ppca.baselines import PPCASVIResult, PPCASVITrace

    old = collections.namedtuple("PPCASVIResult", ["weights", "mean", "noise", "loss_trace",
                                                   "num_steps", "converged"])
    old.__module__ = "inference.ppca.baselines"
    saved = old(np.ones((2, 4), np.float32), np.zeros(4, np.float32), 0.3,
                np.arange(5, dtype=np.float32), 5, False)
    save_tree(tmp_path / "old.npz", saved, kind="result:inference.ppca.baselines.PPCASVIResult")
    loaded = inference.load(tmp_path / "old.npz")
    assert type(loaded) is PPCASVIResult and isinstance(loaded.trace, PPCASVITrace)
    np.testing.assert_array_equal(loaded.trace.objective, np.arange(5))
    assert loaded.num_iterations == 5 and loaded.noise == 0.3 and not loaded.converged


@pytest.mark.slow
def test_nuts_lands_near_the_em_answer(data):
    """The posterior of 150 examples: its mean W^T W spans the EM subspace to 0.1 rad
    and its mean sigma is within 10% of the ML sigma of the same examples."""
    x = np.asarray(data.x)[:150]
    em = fit_ppca(x, NUM_COMPONENTS, noise="ml", rng_key=jax.random.key(14),
                  max_iterations=2000)
    mcmc = fit_ppca_mcmc(x, NUM_COMPONENTS, rng_key=jax.random.key(15), num_warmup=150,
                         num_samples=150)
    assert mcmc.converged
    assert angle(mcmc.subspace, em.weights) < 0.1
    assert mcmc.noise == pytest.approx(em.noise, rel=0.1)


@pytest.mark.slow
def test_compare_cli_writes_table_json_and_figure(tmp_path):
    from inference.app.cli import main

    assert main(["compare", "ppca", "--quick", "--output-dir", str(tmp_path),
                 "--no-progress"]) == 0
    rows = list(csv.DictReader(open(tmp_path / "ppca_comparison.csv")))
    assert [r["implementation"] for r in rows] == ["ours", "ours", "numpyro", "numpyro",
                                                   "scikit-learn"]
    report = json.load(open(tmp_path / "ppca_comparison.json"))
    assert report["settings"]["quick"] is True
    angles = [r["angle_max_deg"] for r in report["rows"]]
    assert max(angles[:3] + angles[4:]) < 5.0  # EM, SVI and PCA: all on the planted subspace
    assert (tmp_path / "ppca_comparison.png").stat().st_size > 1000
