"""Sharding along the example axis (inference.engine.sharding; DESIGN.md "Scale", issue 9).

The sharded fits run in ONE subprocess with four simulated CPU devices
(``XLA_FLAGS=--xla_force_host_platform_device_count=4`` must be set before JAX
starts); this process, with its one device, computes the single-device references
on the same data and compares. N = 203 is not a multiple of 4 (nor of 2), so every
sharded run pads with masked rows. Tolerance: 1e-4 relative (float32 fits of
20-30 iterations whose sums over examples are added in a different order; measured
differences are at most ~1e-5 relative) and equal labels / states.
"""

import json
import os
import subprocess
import sys
import textwrap
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import Mesh

from inference import associate, fit_clipped_gaussian, fit_gvq, fit_mcvq, fit_mixture
from inference.association import core as association_module
from inference.clipped import fit as clipped_module
from inference.clipped.fit import empirical_moments
from inference.engine import loop as engine_loop
from inference.engine.sharding import pad_examples, resolve_mesh
from inference.mixture import em as mixture_module
from ppl_models.diagnostics import ConvergenceWarning

RTOL = 1e-4
NUM = 203

#: Every sharded call: (name, function, keyword arguments, how the devices are chosen).
WORKER = textwrap.dedent("""
    import json, sys
    import jax, numpy as np
    from jax.sharding import Mesh
    from inference import associate, fit_clipped_gaussian, fit_gvq, fit_mcvq, fit_mixture
    from inference.engine.sharding import resolve_mesh

    data = dict(np.load(sys.argv[1]))
    calls = json.loads(sys.argv[3])
    devices = jax.devices()
    choices = {
        "default": {},
        "two": {"devices": 2},
        "list": {"devices": [devices[3], devices[1], devices[0]]},
        "user_mesh": {"mesh": Mesh(np.array(devices), ("batch",))},
        "mesh_2d": {"mesh": Mesh(np.array(devices).reshape(2, 2), ("model", "data"))},
    }
    out = {"num_devices": len(devices),
           "default_mesh": list(resolve_mesh().devices.shape)}
    for name, kind, kwargs, choice in calls:
        kwargs = {**kwargs, **choices[choice]}
        if kind == "mixture":
            r = fit_mixture(data["mixture_" + kwargs.pop("data")], 3,
                            rng_key=jax.random.key(1), **kwargs)
            arrays = {"weights": r.weights, "means": r.means, "covariances": r.covariances,
                      "criteria": [r.L_stocha, r.L_map, r.L_NN, r.J], "labels": r.labels}
        elif kind == "mcvq":
            r = fit_mcvq(data["mcvq_x"], 3, 4, mask=data["mcvq_mask"],
                         rng_key=jax.random.key(10), **kwargs)
            arrays = {"g": r.g, "m": r.m, "mu": r.mu, "sigma": r.sigma,
                      "free_energy": r.trace.objective}
        elif kind == "gvq":
            r = fit_gvq(data["gvq_x"], 5, rng_key=jax.random.key(0), **kwargs)
            arrays = {"features": r.features, "states": r.states,
                      "restart_errors": r.restart_errors, "trace": r.trace.objective}
        elif kind == "associate":
            r = associate(data["gvq_features"], data["gvq_x"], **kwargs)
            arrays = {"states": r.states, "energy": r.energy}
        else:
            r = fit_clipped_gaussian(data["clipped_s"], 3, **kwargs)
            arrays = {"binary_corr": r.binary_corr, "means": r.means}
        for key, value in arrays.items():
            out[name + "/" + key] = np.asarray(value)
    np.savez(sys.argv[2], **{k: np.asarray(v) for k, v in out.items()})
    print(json.dumps({"ok": True, "num_devices": len(devices)}))
""")

#: (name, family, keyword arguments, device choice) of every sharded run in the subprocess.
CALLS = [
    ("mix_em", "mixture", {"data": "x", "max_iterations": 15, "tol": 0.0,
                           "init": "kmeans++"}, "default"),
    ("mix_map", "mixture", {"data": "x", "mode": "map", "covariance": "diag"}, "list"),
    # Far from the data's centre: the M-step's exact fallbacks (scatter about the new
    # means; k-means' squared error from the assignment), summed over the devices.
    ("mix_far", "mixture", {"data": "far", "max_iterations": 15, "tol": 0.0}, "user_mesh"),
    ("mix_far_kmeans", "mixture", {"data": "far", "mode": "nearest"}, "mesh_2d"),
    ("mcvq", "mcvq", {"max_iterations": 30, "tol": 0.0, "num_restarts": 2}, "default"),
    ("gvq", "gvq", {"num_restarts": 1}, "two"),
    ("associate", "associate", {}, "user_mesh"),
    ("clipped", "clipped", {}, "list"),
]


def _inputs():
    """The same data for both processes (float32 numpy arrays, drawn by numpy: fast)."""
    rng = np.random.default_rng(0)
    labels = np.arange(NUM) % 3
    centres = np.array([[0.0, 0.0, 0.0], [4.0, 1.0, -2.0], [-3.0, 4.0, 2.0]])
    x = centres[labels] + rng.normal(size=(NUM, 3)) * np.array([1.0, 0.7, 1.3])
    # Tight clusters far from the data's centre: E[z^2] / Var ~ 10^3 > 203 (the float32
    # cancellation limit), so the M-step recomputes the scatter about the new means.
    far = np.array([[-50.0] * 3, [10.0] * 3, [60.0] * 3])[labels] + rng.normal(size=(NUM, 3))
    # MCVQ: 3 VQs of 3 states, each owning 3 of the 9 dimensions; 10% missing.
    states = rng.integers(0, 3, size=(NUM, 3))
    means = rng.normal(scale=3.0, size=(3, 3, 3))  # (VQ, state, own dimension)
    mcvq_x = means[np.arange(3), states].reshape(NUM, 9) + 0.3 * rng.normal(size=(NUM, 9))
    mask = rng.random((NUM, 9)) > 0.1
    # GVQ: x = s F + noise 0.5, F ~ N(2, 1) (5, 8), s Bernoulli(1/2).
    features = rng.normal(2.0, 1.0, size=(5, 8))
    gvq_x = (rng.random((NUM, 5)) < 0.5) @ features + 0.5 * rng.normal(size=(NUM, 8))
    # Clipped Gaussian: s = sign(W y + xi), 8 units, 3 causes.
    weights = rng.normal(size=(8, 3)) / np.sqrt(3.0)
    spins = np.sign(rng.normal(size=(NUM, 3)) @ weights.T + 0.5 * rng.normal(size=8))
    arrays = {"mixture_x": x, "mixture_far": far, "mcvq_x": mcvq_x, "mcvq_mask": mask,
              "gvq_x": gvq_x, "gvq_features": features, "clipped_s": spins}
    return {k: v if v.dtype == bool else v.astype(np.float32) for k, v in arrays.items()}


def _single_device(data):
    """The single-device results of every call in CALLS (this process has one device)."""
    out = {}
    for name, kind, kwargs, _ in CALLS:
        kwargs = dict(kwargs)
        if kind == "mixture":
            r = fit_mixture(data["mixture_" + kwargs.pop("data")], 3,
                            rng_key=jax.random.key(1), **kwargs)
            arrays = {"weights": r.weights, "means": r.means, "covariances": r.covariances,
                      "criteria": [r.L_stocha, r.L_map, r.L_NN, r.J], "labels": r.labels}
        elif kind == "mcvq":
            r = fit_mcvq(data["mcvq_x"], 3, 4, mask=data["mcvq_mask"],
                         rng_key=jax.random.key(10), **kwargs)
            arrays = {"g": r.g, "m": r.m, "mu": r.mu, "sigma": r.sigma,
                      "free_energy": r.trace.objective}
        elif kind == "gvq":
            r = fit_gvq(data["gvq_x"], 5, rng_key=jax.random.key(0), **kwargs)
            arrays = {"features": r.features, "states": r.states,
                      "restart_errors": r.restart_errors, "trace": r.trace.objective}
        elif kind == "associate":
            r = associate(data["gvq_features"], data["gvq_x"], **kwargs)
            arrays = {"states": r.states, "energy": r.energy}
        else:  # the fit is a function of these moments (the sharded fit's, compared)
            means, second = empirical_moments(jnp.asarray(data["clipped_s"]))
            arrays = {"binary_corr": second, "means": means}
        out.update({f"{name}/{key}": np.asarray(value) for key, value in arrays.items()})
    return out


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    """(single-device results, four-device results) of every call in CALLS."""
    folder = tmp_path_factory.mktemp("sharding")
    data = _inputs()
    np.savez(folder / "inputs.npz", **data)
    env = {**os.environ, "XLA_FLAGS": "--xla_force_host_platform_device_count=4",
           "JAX_PLATFORMS": "cpu"}
    worker = subprocess.Popen(
        [sys.executable, "-W", "ignore", "-c", WORKER, str(folder / "inputs.npz"),
         str(folder / "outputs.npz"), json.dumps(CALLS)],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    with warnings.catch_warnings():  # fits stopped at max_iterations on purpose
        warnings.simplefilter("ignore", ConvergenceWarning)
        single = _single_device(data)
    stdout, stderr = worker.communicate(timeout=600)
    assert worker.returncode == 0, stderr[-3000:]
    assert json.loads(stdout.strip().splitlines()[-1]) == {"ok": True, "num_devices": 4}
    sharded = dict(np.load(folder / "outputs.npz"))
    return data, single, sharded


# The four-device subprocess (the ``results`` fixture: about 45 s on 2 busy cores) runs in
# the slow run. The default run checks the sharded code path on a one-device mesh in
# test_a_mesh_of_one_device_runs_the_sharded_path_to_float_tolerance, the plain path in
# test_one_device_default_is_the_unchanged_plain_path, the padding in
# test_pad_examples_masks_the_padding and the device and mesh arguments below.
@pytest.mark.slow
def test_default_mesh_spans_all_four_simulated_devices(results):
    _, _, sharded = results
    assert int(sharded["num_devices"]) == 4
    assert sharded["default_mesh"].tolist() == [4]


@pytest.mark.slow
@pytest.mark.parametrize("name", [c[0] for c in CALLS])
def test_sharded_equals_single_device(results, name):
    """Every family, every way of choosing devices, N = 203 (padded): equal to RTOL."""
    _, single, sharded = results
    keys = [k for k in single if k.startswith(name + "/")]
    assert keys and all(k in sharded for k in keys)
    for key in keys:
        expected, got = single[key], sharded[key]
        assert got.shape == expected.shape, key
        if expected.dtype.kind in "iub":  # labels, states: identical
            np.testing.assert_array_equal(got, expected, err_msg=key)
        else:
            scale = max(float(np.max(np.abs(expected))), 1.0)
            np.testing.assert_allclose(got, expected, rtol=RTOL, atol=RTOL * scale,
                                       err_msg=key)


@pytest.mark.slow
def test_far_data_exercise_the_exact_scatter_fallback(results):
    """The mix_far fit's components sit where the moment form cancels (ratio > 203)."""
    data, single, _ = results
    centre = data["mixture_far"].mean(axis=0)
    second = (single["mix_far/means"] - centre) ** 2
    variance = np.diagonal(single["mix_far/covariances"], axis1=1, axis2=2)
    assert np.max(second / variance) > 203


@pytest.mark.filterwarnings("ignore::ppl_models.diagnostics.ConvergenceWarning")
def test_one_device_default_is_the_unchanged_plain_path(monkeypatch):
    """With one device, devices=None never enters a sharded driver, and the results are
    bit-identical to calling the plain jitted cores directly."""
    assert len(jax.devices()) == 1 and resolve_mesh() is None

    def forbidden(*args, **kwargs):
        raise AssertionError("the sharded path ran with devices=None on one device")

    data = _inputs()
    x = data["mixture_x"]
    monkeypatch.setattr(engine_loop, "_run_sharded", forbidden)
    monkeypatch.setattr(association_module, "_associate_sharded", forbidden)
    monkeypatch.setattr(clipped_module, "sum_over_shards", forbidden)
    calls = []
    plain = mixture_module.run
    monkeypatch.setattr(mixture_module, "run", lambda *a, **k: calls.append(1) or plain(*a,
                                                                                      **k))
    fit = fit_mixture(x, 3, rng_key=jax.random.key(1), max_iterations=5, tol=0.0)
    assert calls == [1]
    again = fit_mixture(x, 3, rng_key=jax.random.key(1), max_iterations=5, tol=0.0,
                        devices=None, mesh=None)
    np.testing.assert_array_equal(np.asarray(fit.means), np.asarray(again.means))
    g = fit_gvq(data["gvq_x"], 5, rng_key=jax.random.key(0), num_restarts=1)
    assert g.states.shape == (NUM, 5)
    assert associate(data["gvq_features"], data["gvq_x"]).states.shape == (NUM, 5)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        assert fit_mcvq(data["mcvq_x"], 3, 4, rng_key=jax.random.key(1),
                        max_iterations=3).m.shape == (NUM, 3, 4)
    assert fit_clipped_gaussian(data["clipped_s"], 3).weights.shape == (8, 3)


@pytest.mark.filterwarnings("ignore::ppl_models.diagnostics.ConvergenceWarning")
def test_a_mesh_of_one_device_runs_the_sharded_path_to_float_tolerance():
    """devices=1 builds a one-device mesh (the sharded code on one device)."""
    x = _inputs()["mixture_x"]
    plain = fit_mixture(x, 3, rng_key=jax.random.key(1), max_iterations=10, tol=0.0)
    one = fit_mixture(x, 3, rng_key=jax.random.key(1), max_iterations=10, tol=0.0, devices=1)
    np.testing.assert_allclose(one.means, plain.means, rtol=RTOL, atol=RTOL)
    np.testing.assert_array_equal(one.labels, plain.labels)


def test_pad_examples_masks_the_padding():
    padded, valid = pad_examples(jnp.arange(10.0).reshape(5, 2), 4)
    assert padded.shape == (8, 2) and valid.tolist() == [True] * 5 + [False] * 3
    assert float(jnp.sum(padded[5:])) == 0.0
    same, all_valid = pad_examples(jnp.ones((8, 3)), 4)
    assert same.shape == (8, 3) and bool(all_valid.all())


@pytest.mark.parametrize("kwargs, error, words", [
    ({"devices": 2}, ValueError, "devices"),       # only one device here
    ({"devices": 0}, ValueError, "devices"),
    ({"devices": []}, ValueError, "devices"),
    ({"devices": "cpu"}, TypeError, "devices"),
    ({"devices": [0]}, TypeError, "devices"),
    ({"devices": 1.0}, TypeError, "devices"),
    ({"mesh": "mesh"}, TypeError, "mesh"),
    ({"devices": 1, "mesh": "two"}, ValueError, "devices or mesh"),
])
def test_bad_devices_and_mesh_name_the_argument(kwargs, error, words):
    with pytest.raises(error, match=words):
        resolve_mesh(**kwargs)


def test_a_mesh_without_a_data_axis_is_refused_by_every_family():
    mesh = Mesh(np.array(jax.devices()[:1]).reshape(1, 1), ("rows", "cols"))
    data = _inputs()
    calls = [
        lambda: fit_mixture(data["mixture_x"], 3, rng_key=jax.random.key(1), mesh=mesh),
        lambda: fit_mcvq(data["mcvq_x"], 3, 4, rng_key=jax.random.key(1), mesh=mesh),
        lambda: fit_gvq(data["gvq_x"], 5, rng_key=jax.random.key(1), mesh=mesh),
        lambda: associate(data["gvq_features"], data["gvq_x"], mesh=mesh),
        lambda: fit_clipped_gaussian(data["clipped_s"], 3, mesh=mesh),
    ]
    for call in calls:
        with pytest.raises(ValueError, match="mesh must have exactly one axis or an axis "
                                             "named 'data'"):
            call()
    with pytest.raises(ValueError, match="devices"):
        fit_mixture(data["mixture_x"], 3, rng_key=jax.random.key(1), devices=3)
    with pytest.raises(ValueError, match="binary=False"):
        fit_gvq(data["gvq_x"] > 1, 5, rng_key=jax.random.key(1), binary=True, devices=1)
