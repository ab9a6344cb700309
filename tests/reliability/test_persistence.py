"""Saving and loading results (inference.engine.persistence): round trips, refusals, no pickle.

Every result class that a family's plug-in declares gets a ``save``
method; the round trip is checked on real results of tiny fits, field by field
and bit for bit. Damaged files (truncated, an array byte flipped, the metadata
edited, a newer format version, a checkpoint passed to ``load``, a file whose
arrays need pickle) each raise ``PersistenceError`` naming the path.
"""

from __future__ import annotations

import importlib
import json
import warnings
import zipfile

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import inference
from inference.app.families import load_families
from inference.engine import persistence
from inference.engine.persistence import PersistenceError
from ppl_models import gvq as gvq_model
from ppl_models import mcvq as mcvq_model
from ppl_models import mixture as mixture_model
from ppl_models.clipped_gaussian import generate as generate_clipped
from ppl_models.diagnostics import ConvergenceWarning


def _same(a, b, where="result"):
    """Assert two nests are equal bit for bit, with the same container and array types."""
    assert type(a) is type(b), f"{where}: {type(a).__name__} != {type(b).__name__}"
    if isinstance(a, tuple) and hasattr(type(a), "_fields"):
        for name in a._fields:
            _same(getattr(a, name), getattr(b, name), f"{where}.{name}")
    elif isinstance(a, list | tuple):
        assert len(a) == len(b), where
        for i, (u, v) in enumerate(zip(a, b, strict=True)):
            _same(u, v, f"{where}[{i}]")
    elif isinstance(a, dict):
        assert list(a) == list(b), where
        for key in a:
            _same(a[key], b[key], f"{where}[{key!r}]")
    elif isinstance(a, jax.Array | np.ndarray):
        assert a.dtype == b.dtype and a.shape == b.shape, where
        if isinstance(a, jax.Array) and jax.dtypes.issubdtype(a.dtype, jax.dtypes.prng_key):
            a, b = jax.random.key_data(a), jax.random.key_data(b)
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b), err_msg=where)
    elif isinstance(a, float) and np.isnan(a):
        assert np.isnan(b), where
    else:
        assert a == b, where


@pytest.fixture(scope="module")
def results():
    """One real result of each kind, from tiny fits (converged or not: both must save)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        return _tiny_results()


def _tiny_results():
    key = jax.random.key(0)
    keys = jax.random.split(key, 8)
    out = {}
    planted = gvq_model.generate_planted(keys[0], num_examples=40, dim=6, num_features=3)
    out["associate"] = inference.associate(planted.features, planted.x)
    out["fit_gvq"] = inference.fit_gvq(planted.x, 3, rng_key=keys[1], max_iterations=5)
    mixture = mixture_model.generate(keys[2], num_examples=120, num_components=3, dim=2)
    out["fit_mixture"] = inference.fit_mixture(mixture.x, 3, rng_key=keys[3])
    from inference.mixture.online import fit_online
    out["fit_online"] = fit_online(mixture.x, 3, rng_key=keys[3])
    out["select_num_components"] = inference.select_num_components(
        mixture.x, [2, 3], rng_key=keys[3])
    data = mcvq_model.generate(keys[4], num_examples=30, dim=6, num_vqs=2, num_states=2)
    out["fit_mcvq"] = inference.fit_mcvq(data.x, 2, 2, rng_key=keys[5], max_iterations=10)
    out["fit_vb_mcvq"] = inference.fit_vb_mcvq(data.x, 2, 2, rng_key=keys[5],
                                               max_iterations=10)
    clipped = generate_clipped(keys[6], num_examples=60, num_visible=5, num_hidden=2)
    out["fit_clipped_gaussian"] = inference.fit_clipped_gaussian(clipped.s, 2)
    return out


def test_every_result_class_has_save():
    classes = [cls for family in load_families().values() for cls in family.results]
    assert len(classes) >= 19
    for cls in [*classes, inference.ModelSelectionResult]:
        assert callable(getattr(cls, "save", None)), f"{cls.__name__} has no save method"


@pytest.mark.slow  # ~30 s of compilations; tests/reliability/test_determinism.py round-trips
# associate, fit_gvq, fit_mixture and fit_online in the default run
@pytest.mark.parametrize("name", ["associate", "fit_gvq", "fit_mixture", "fit_online",
                                  "select_num_components", "fit_mcvq", "fit_vb_mcvq",
                                  "fit_clipped_gaussian"])
def test_round_trip_is_bit_identical(results, name, tmp_path):
    result = results[name]
    path = result.save(tmp_path / name, options={"made_by": name, "sizes": (1, 2)})
    assert path.suffix == ".npz"
    again = inference.load(path)
    _same(result, again)
    _, metadata = persistence.load_tree(path)
    assert metadata["options"] == {"made_by": name, "sizes": [1, 2]}
    assert metadata["package_version"] == importlib.metadata.version("ppl-zoo")
    assert metadata["kind"] == f"result:{type(result).__module__}.{type(result).__qualname__}"


@pytest.fixture(scope="module")
def mixture_result():
    """One small mixture fit (the damaged-file tests' subject)."""
    data = mixture_model.generate(jax.random.key(2), num_examples=120, num_components=3,
                                  dim=2)
    return inference.fit_mixture(data.x, 3, rng_key=jax.random.key(3))


def test_file_is_plain_npz_without_pickle(mixture_result, tmp_path):
    path = mixture_result.save(tmp_path / "fit.npz")
    with np.load(path, allow_pickle=False) as archive:  # NumPy reads it, pickle refused
        arrays = [archive[name] for name in archive.files if name != "metadata.json"]
    assert arrays and all(a.dtype != object for a in arrays)
    with zipfile.ZipFile(path) as archive:
        metadata = json.loads(archive.read("metadata.json"))
    assert metadata["format"] == "ppl-zoo" and metadata["format_version"] == 1


def test_tree_with_keys_scalars_and_containers_round_trips(tmp_path):
    tree = {"key": jax.random.key(3), "raw_key": jax.random.PRNGKey(1), "nan": float("nan"),
            "inf": -np.inf, "tiny": 5e-324, "numbers": [1, True, None, "text", (2.5, -0.0)],
            "numpy": np.arange(6, dtype=np.int16).reshape(2, 3), "scalar": np.float32(1.5),
            "jax": jnp.ones((2, 0)), "bits": np.array([True, False])}
    path = persistence.save_tree(tmp_path / "tree.npz", tree, kind="test")
    again, metadata = persistence.load_tree(path, kind="test")
    _same(tree, again, "tree")
    assert again["key"].dtype == tree["key"].dtype  # typed key comes back typed


def test_comparison_table_round_trips(tmp_path):
    """model_selection's arviz.compare table (a DataFrame with mixed columns) saves too."""
    import pandas as pd
    table = pd.DataFrame({"rank": [0, 1], "elpd_loo": [-775.15, -883.43],
                          "warning": [False, True], "scale": ["log", "log"]}, index=[3, 2])
    path = persistence.save_tree(tmp_path / "t.npz", {"table": table}, kind="test")
    again, _ = persistence.load_tree(path)
    pd.testing.assert_frame_equal(again["table"], table)


def _rewrite(path, edit):
    """Rewrite the zip at ``path`` with ``edit(name, data) -> data`` applied to each member."""
    with zipfile.ZipFile(path) as archive:
        members = [(name, archive.read(name)) for name in archive.namelist()]
    with zipfile.ZipFile(path, "w") as archive:
        for name, data in members:
            archive.writestr(name, edit(name, data))


@pytest.fixture
def saved(mixture_result, tmp_path):
    return mixture_result.save(tmp_path / "fit.npz")


def test_truncated_file_is_refused(saved):
    data = saved.read_bytes()
    for cut in (0, 10, len(data) // 2, len(data) - 1):
        saved.write_bytes(data[:cut])
        with pytest.raises(PersistenceError, match="truncated or damaged|not a readable"):
            inference.load(saved)


def test_changed_array_byte_is_refused(saved):
    def flip(name, data):
        if name == "array0.npy":
            data = bytearray(data)
            data[-1] ^= 0x01
            return bytes(data)
        return data
    _rewrite(saved, flip)
    with pytest.raises(PersistenceError, match="checksum"):
        inference.load(saved)


def test_edited_metadata_is_refused(saved):
    def edit(name, data):
        if name != "metadata.json":
            return data
        metadata = json.loads(data)
        fields = dict(metadata["structure"]["fields"])
        assert fields["mode"]["v"] == "stochastic"
        fields["mode"]["v"] = "nearest"  # edited in place; the checksum is left as it was
        return json.dumps(metadata).encode()
    _rewrite(saved, edit)
    with pytest.raises(PersistenceError, match="metadata does not match its checksum"):
        inference.load(saved)


def test_newer_format_version_is_refused(saved):
    def bump(name, data):
        if name != "metadata.json":
            return data
        metadata = json.loads(data)
        metadata["format_version"] = 99
        return json.dumps(metadata).encode()
    _rewrite(saved, bump)
    with pytest.raises(PersistenceError, match="format version 99.*upgrade"):
        inference.load(saved)


def test_class_fields_changed_is_refused(saved, monkeypatch):
    from inference.mixture import result as mixture

    class Renamed(tuple):
        _fields = ("weights",)
    monkeypatch.setattr(mixture, "MixtureResult", Renamed)
    with pytest.raises(PersistenceError, match="fields"):
        inference.load(saved)


def test_untrusted_class_is_never_imported(tmp_path):
    path = persistence.save_tree(tmp_path / "t.npz", {"a": 1}, kind="test")

    def hostile(name, data):
        if name != "metadata.json":
            return data
        metadata = json.loads(data)
        metadata.pop("metadata_sha256")
        metadata["structure"] = {"t": "namedtuple", "module": "os", "class": "system",
                                 "fields": []}
        body = json.dumps(metadata, sort_keys=True)
        metadata["metadata_sha256"] = persistence._digest(body.encode())
        return json.dumps(metadata).encode()
    _rewrite(path, hostile)
    with pytest.raises(PersistenceError, match="only classes of inference, ppl_models"):
        persistence.load_tree(path)


def test_pickled_array_member_is_refused(tmp_path):
    path = persistence.save_tree(tmp_path / "t.npz", {"a": np.zeros(3)}, kind="test")

    def pickled(name, data):
        if name != "array0.npy":
            return data
        import io
        buffer = io.BytesIO()
        np.save(buffer, np.array([{"x": 1}], dtype=object), allow_pickle=True)
        return buffer.getvalue()
    _rewrite(path, pickled)
    with pytest.raises(PersistenceError, match="pickle|Object arrays"):
        persistence.load_tree(path)


def test_wrong_kind_and_not_a_result(tmp_path, saved):
    with pytest.raises(PersistenceError, match="not 'checkpoint:gvq'"):
        persistence.load_tree(saved, kind="checkpoint:gvq")
    other = persistence.save_tree(tmp_path / "ck.npz", {"a": 1}, kind="checkpoint:gvq")
    with pytest.raises(PersistenceError, match="not a fit result"):
        inference.load(other)


def test_not_our_file_and_missing_file(tmp_path):
    plain = tmp_path / "plain.npz"
    np.savez(plain, a=np.zeros(2))
    with pytest.raises(PersistenceError, match="has no metadata.json"):
        inference.load(plain)
    with pytest.raises(FileNotFoundError, match="does not exist"):
        inference.load(tmp_path / "absent.npz")
    with pytest.raises(TypeError, match="path must be a file path"):
        inference.load(3)


def test_unsavable_values_name_the_field(tmp_path):
    with pytest.raises(TypeError, match=r"tree\['f'\].*function"):
        persistence.save_tree(tmp_path / "x.npz", {"f": len}, kind="test")
    with pytest.raises(TypeError, match="dictionary keys must be strings"):
        persistence.save_tree(tmp_path / "x.npz", {1: 2}, kind="test")
    with pytest.raises(TypeError, match="need pickle"):
        persistence.save_tree(tmp_path / "x.npz", np.array([None]), kind="test")
    with pytest.raises(TypeError, match="JSON-serialisable"):
        persistence.save_tree(tmp_path / "x.npz", 1, kind="test", options={"f": len})
    with pytest.raises(TypeError, match="fit result"):
        persistence.save_result([1, 2], tmp_path / "x.npz")


def test_interrupted_write_leaves_earlier_file(tmp_path, monkeypatch):
    path = persistence.save_tree(tmp_path / "x.npz", {"a": np.arange(3)}, kind="test")

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt
    monkeypatch.setattr(np.lib.format, "write_array", interrupted)
    with pytest.raises(KeyboardInterrupt):
        persistence.save_tree(path, {"a": np.arange(5)}, kind="test")
    monkeypatch.undo()
    again, _ = persistence.load_tree(path)
    np.testing.assert_array_equal(again["a"], np.arange(3))
    assert [p.name for p in tmp_path.iterdir()] == ["x.npz"]  # no temporary left behind


def test_fuzzed_files_end_in_persistence_error(mixture_result, saved, tmp_path):
    """Random bytes, and a valid file with random bytes changed, cut or appended: every
    load ends in PersistenceError, never in another exception from deep inside."""
    rng = np.random.default_rng(0)
    original = saved.read_bytes()
    target = tmp_path / "fuzzed.npz"
    for trial in range(300):
        kind = trial % 4
        if kind == 0:
            data = rng.bytes(int(rng.integers(0, 2000)))
        elif kind == 1:
            data = bytearray(original)
            for position in rng.integers(0, len(data), size=int(rng.integers(1, 8))):
                data[position] = int(rng.integers(0, 256))
            data = bytes(data)
        elif kind == 2:
            data = original[:int(rng.integers(0, len(original)))]
        else:
            data = original + rng.bytes(int(rng.integers(1, 50)))
        target.write_bytes(data)
        try:
            again = inference.load(target)
        except PersistenceError:
            continue
        # Bytes appended after the zip's end, or changed in unused zip fields, may leave
        # every member intact; then the result must load exactly.
        assert kind in (1, 3), f"trial {trial} loaded a damaged file"
        _same(mixture_result, again)


def _trees():
    """Hypothesis strategy: nests of arrays, numbers, strings, None, lists, tuples, dicts."""
    from hypothesis import strategies as st
    from hypothesis.extra import numpy as hnp
    dtypes = st.sampled_from([np.float32, np.float64, np.int8, np.int64, np.uint16, np.bool_,
                              np.complex64])
    arrays = dtypes.flatmap(lambda dtype: hnp.arrays(
        dtype, hnp.array_shapes(min_dims=0, max_dims=3, min_side=0, max_side=4)))
    leaves = (arrays | arrays.map(jnp.asarray).filter(lambda a: a.dtype != np.complex64)
              | st.integers(-2**70, 2**70) | st.floats(allow_nan=True) | st.booleans()
              | st.text(max_size=8) | st.none())
    return st.recursive(leaves, lambda children: (
        st.lists(children, max_size=3) | st.lists(children, max_size=3).map(tuple)
        | st.dictionaries(st.text(max_size=5), children, max_size=3)), max_leaves=8)


def test_property_any_tree_round_trips(tmp_path_factory):
    from hypothesis import HealthCheck, given, settings

    directory = tmp_path_factory.mktemp("trees")

    @settings(max_examples=60, deadline=None, derandomize=True, database=None,
              suppress_health_check=[HealthCheck.too_slow])
    @given(tree=_trees())
    def round_trip(tree):
        path = persistence.save_tree(directory / "tree.npz", tree, kind="property")
        again, _ = persistence.load_tree(path, kind="property")
        _same(tree, again, "tree")

    round_trip()
