"""Saving and loading fit results and checkpoints, without pickle.

A fit that ran for an hour is worth keeping, and a file someone sends you must
never run code when it is opened. This module writes any result of the zoo
(the NamedTuples the ``fit_*`` functions return) and the fits' checkpoints as
one ``.npz`` file:

* every array is an ``.npy`` member written with ``allow_pickle=False``;
* one ``metadata.json`` member describes the nest (which NamedTuple class,
  which fields, which members are arrays, JAX or NumPy, typed PRNG keys), the
  kind of file (``"result:<class>"`` or a checkpoint's kind), the options the
  writer recorded, the package and format versions, and a SHA-256 per array
  plus one over the metadata itself.

Loading reads the arrays back with ``allow_pickle=False`` and rebuilds
NamedTuples only from the project's own modules (``inference``,
``ppl_models``), after checking that the saved field names are the class's
field names. A truncated file, a changed byte in an array or in the metadata,
a file written by a newer format version, or a file of another kind raises
:class:`PersistenceError` (a ``ValueError``) that names the path and the
problem. Nothing is unpickled, ever.

Results gain a ``save(path, *, options=None)`` method and are read back by
:func:`load` (``inference.load``) or their class's ``load``::

    result = fit_mixture(x, 3, rng_key=key)
    result.save("fit.npz", options={"num_components": 3})
    again = inference.load("fit.npz")  # or MixtureResult.load("fit.npz")

Checkpoints (``checkpoint_path=`` / ``resume_from=`` on the iterative fits)
use :func:`save_tree` / :func:`load_tree` with their own ``kind``.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.metadata
import io
import json
import os
import pathlib
import tempfile
import zipfile

import jax
import jax.numpy as jnp
import numpy as np

from inference.engine.legacy import (
    CONVERTERS,
    MOVED_MODULES,
    RENAMED_FIELDS,
    moved_kind,
    moved_module,
    register_renamed_fields,
    wrap_trace,
)

__all__ = ["FORMAT", "FORMAT_VERSION", "MOVED_MODULES", "PersistenceError", "RENAMED_FIELDS",
           "load", "load_tree", "register_renamed_fields", "save_result", "save_tree",
           "wrap_trace"]

FORMAT = "ppl-zoo"
#: Version of the file layout; files with a larger number are refused.
FORMAT_VERSION = 1
_METADATA = "metadata.json"
# NamedTuples are rebuilt only from these packages' modules.
_TRUSTED_PACKAGES = ("inference", "ppl_models")
class PersistenceError(ValueError):
    """A file that cannot be loaded: truncated, tampered, of another kind or version."""


def _package_version() -> str:
    try:
        return importlib.metadata.version("ppl-zoo")
    except importlib.metadata.PackageNotFoundError:  # pragma: no cover - not installed
        return "unknown"


def _digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _is_namedtuple(value) -> bool:
    return isinstance(value, tuple) and hasattr(type(value), "_fields")


def _is_array(value) -> bool:
    return isinstance(value, np.ndarray | np.generic | jax.Array)


def _encode(value, arrays: dict, where: str):
    """Return the JSON node for ``value``; arrays go to ``arrays`` under fresh names."""
    if value is None:
        return {"t": "none"}
    if isinstance(value, bool):
        return {"t": "bool", "v": value}
    if isinstance(value, int):
        return {"t": "int", "v": value}
    if isinstance(value, float):
        return {"t": "float", "v": float.hex(value)}  # exact, and NaN/inf survive
    if isinstance(value, str):
        return {"t": "str", "v": value}
    if _is_array(value):
        return _encode_array(value, arrays, where)
    if _is_namedtuple(value):
        cls = type(value)
        return {"t": "namedtuple", "module": cls.__module__, "class": cls.__qualname__,
                "fields": [[name, _encode(getattr(value, name), arrays, f"{where}.{name}")]
                           for name in cls._fields]}
    if isinstance(value, tuple | list):
        return {"t": type(value).__name__,
                "items": [_encode(item, arrays, f"{where}[{i}]") for i, item in enumerate(value)]}
    if isinstance(value, dict):
        bad = [key for key in value if not isinstance(key, str)]
        if bad:
            raise TypeError(f"cannot save {where}: dictionary keys must be strings; got {bad[0]!r}")
        return {"t": "dict",
                "items": [[key, _encode(item, arrays, f"{where}[{key!r}]")]
                          for key, item in value.items()]}
    if type(value).__name__ == "DataFrame" and type(value).__module__.startswith("pandas"):
        return _encode_frame(value, arrays, where)
    raise TypeError(f"cannot save {where}: values of type {type(value).__name__} are not "
                    "supported (arrays, numbers, strings, None, NamedTuples, lists, tuples, "
                    "dicts with string keys and pandas DataFrames are)")


def _encode_frame(frame, arrays: dict, where: str):
    """A pandas DataFrame (arviz.compare's table): numeric columns as arrays, others as lists."""
    columns = []
    for i, name in enumerate(frame.columns):
        column = frame.iloc[:, i]
        values = (column.to_numpy() if column.dtype.kind in "biuf"
                  else [_python_value(v) for v in column.tolist()])
        columns.append(_encode(values, arrays, f"{where}[{name!r}]"))
    return {"t": "dataframe",
            "columns": _encode([_python_value(c) for c in frame.columns], arrays, where),
            "index": _encode([_python_value(i) for i in frame.index], arrays, where),
            "data": columns}


def _python_value(value):
    """NumPy scalars inside object columns as Python numbers (saved exactly)."""
    return value.item() if isinstance(value, np.generic) else value


def _encode_array(value, arrays: dict, where: str):
    node = {"t": "array", "jax": isinstance(value, jax.Array),
            "scalar": isinstance(value, np.generic)}
    if isinstance(value, jax.Array) and jax.dtypes.issubdtype(value.dtype, jax.dtypes.prng_key):
        node["prng"] = str(jax.random.key_impl(value))
        value = jax.random.key_data(value)
    data = np.asarray(value)
    if data.dtype.hasobject:
        raise TypeError(f"cannot save {where}: arrays of Python objects need pickle; "
                        "convert them to numbers or strings")
    name = f"array{len(arrays)}"
    arrays[name] = data
    node.update(key=name, dtype=data.dtype.str, shape=list(data.shape),
                sha256=_digest(np.ascontiguousarray(data).tobytes()))
    return node


def save_tree(path, tree, *, kind: str, options: dict | None = None) -> pathlib.Path:
    """Write ``tree`` to ``path`` as a pickle-free ``.npz`` with JSON metadata.

    Parameters
    ----------
    path : str or os.PathLike
        File to write; ``.npz`` is appended when missing. The write is atomic
        (a temporary file in the same directory, then ``os.replace``), so an
        interrupted write leaves any earlier file intact.
    tree : nest
        NamedTuples, dicts with string keys, lists, tuples, NumPy/JAX arrays
        (typed PRNG key arrays included), Python numbers, strings and None.
    kind : str
        What the file holds (``"result:inference.mixture.em.MixtureResult"``, a
        checkpoint's kind); :func:`load_tree` can insist on it.
    options : dict, optional
        JSON-serialisable options to record (tuples become lists).

    Returns
    -------
    pathlib.Path
        The path written.
    """
    if not isinstance(kind, str) or not kind:
        raise TypeError(f"kind must be a non-empty string; got {kind!r}")
    if options is not None and not isinstance(options, dict):
        raise TypeError(f"options must be a dict or None; got {type(options).__name__}")
    path = _check_path(path, "path")
    if path.suffix != ".npz":
        path = path.with_name(path.name + ".npz")
    arrays: dict[str, np.ndarray] = {}
    structure = _encode(tree, arrays, "tree")
    metadata = {"format": FORMAT, "format_version": FORMAT_VERSION, "kind": kind,
                "package_version": _package_version(), "options": options or {},
                "structure": structure}
    try:
        body = json.dumps(metadata, sort_keys=True, allow_nan=False)
    except (TypeError, ValueError) as err:
        raise TypeError(f"options must be JSON-serialisable (numbers, strings, lists, dicts); "
                        f"{err}") from err
    metadata["metadata_sha256"] = _digest(body.encode())
    text = json.dumps(metadata, sort_keys=True, allow_nan=False)
    handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(handle, "wb") as stream, zipfile.ZipFile(stream, "w") as archive:
            archive.writestr(_METADATA, text)
            for name, data in arrays.items():
                buffer = io.BytesIO()
                np.lib.format.write_array(buffer, data, allow_pickle=False)
                archive.writestr(f"{name}.npy", buffer.getvalue())
        os.replace(temporary, path)
    except BaseException:
        if os.path.exists(temporary):
            os.unlink(temporary)
        raise
    return path


def _check_path(path, name: str) -> pathlib.Path:
    if not isinstance(path, str | os.PathLike):
        raise TypeError(f"{name} must be a file path (str or os.PathLike); got "
                        f"{type(path).__name__}")
    return pathlib.Path(path)


def load_tree(path, *, kind: str | None = None):
    """Read a file written by :func:`save_tree`; return ``(tree, metadata)``.

    Parameters
    ----------
    path : str or os.PathLike
        The ``.npz`` file.
    kind : str, optional
        When given, the file's kind must equal it.

    Returns
    -------
    tree : nest
        The saved nest; NamedTuples of the project's modules come back as their
        classes and JAX arrays as JAX arrays.
    metadata : dict
        ``kind``, ``options``, ``package_version``, ``format_version`` and the
        raw ``structure``.

    Raises
    ------
    FileNotFoundError
        No file at ``path``.
    PersistenceError
        The file is not one of ours, is truncated, was changed after writing,
        was written by a newer format version, or holds another kind.
    """
    path = _check_path(path, "path")
    if not path.is_file():
        raise FileNotFoundError(f"path {str(path)!r} does not exist or is not a file")
    try:
        with zipfile.ZipFile(path) as archive:
            metadata = _read_metadata(archive, path)
            if kind is not None and metadata["kind"] != kind:
                raise PersistenceError(f"{path} holds {metadata['kind']!r}, not {kind!r}")
            tree = _decode(metadata["structure"], archive, path, "tree")
    except PersistenceError:
        raise
    except (zipfile.BadZipFile, EOFError, OSError, KeyError, ValueError, TypeError,
            zipfile.LargeZipFile, NotImplementedError) as err:
        raise PersistenceError(f"{path} is not a readable {FORMAT} file (truncated or "
                               f"damaged?): {type(err).__name__}: {err}") from err
    return tree, metadata


def _read_metadata(archive: zipfile.ZipFile, path) -> dict:
    try:
        text = archive.read(_METADATA)
    except KeyError:
        raise PersistenceError(f"{path} has no {_METADATA}: it was not written by "
                               f"{FORMAT}") from None
    try:
        metadata = json.loads(text)
    except (ValueError, UnicodeDecodeError) as err:
        raise PersistenceError(f"{path}: {_METADATA} is not valid JSON ({err})") from err
    if not isinstance(metadata, dict) or metadata.get("format") != FORMAT:
        raise PersistenceError(f"{path} was not written by {FORMAT}")
    version = metadata.get("format_version")
    if not isinstance(version, int) or isinstance(version, bool):
        raise PersistenceError(f"{path} has no valid format_version; got {version!r}")
    if version > FORMAT_VERSION:
        raise PersistenceError(
            f"{path} was written with format version {version} (package "
            f"{metadata.get('package_version')!r}); this version reads format versions up "
            f"to {FORMAT_VERSION}: upgrade ppl-zoo")
    claimed = metadata.pop("metadata_sha256", None)
    body = json.dumps(metadata, sort_keys=True, allow_nan=False)
    if claimed != _digest(body.encode()):
        raise PersistenceError(f"{path}: the metadata does not match its checksum; the file "
                               "was changed after it was written")
    for field, kind in (("kind", str), ("options", dict), ("structure", dict)):
        if not isinstance(metadata.get(field), kind):
            raise PersistenceError(f"{path}: metadata field {field!r} is missing or malformed")
    return metadata


def _decode(node, archive, path, where: str):
    if not isinstance(node, dict) or "t" not in node:
        raise PersistenceError(f"{path}: malformed entry at {where}")
    tag = node["t"]
    if tag == "none":
        return None
    if tag in ("bool", "int", "str"):
        value = node["v"]
        expected = {"bool": bool, "int": int, "str": str}[tag]
        if type(value) is not expected:
            raise PersistenceError(f"{path}: malformed {tag} at {where}")
        return value
    if tag == "float":
        return float.fromhex(node["v"])
    if tag == "array":
        return _decode_array(node, archive, path, where)
    if tag in ("list", "tuple"):
        items = [_decode(item, archive, path, f"{where}[{i}]")
                 for i, item in enumerate(node["items"])]
        return items if tag == "list" else tuple(items)
    if tag == "dict":
        return {key: _decode(item, archive, path, f"{where}[{key!r}]")
                for key, item in _pairs(node["items"], path, where)}
    if tag == "dataframe":
        import pandas as pd
        columns = _decode(node["columns"], archive, path, where)
        data = [_decode(column, archive, path, f"{where}[{i}]")
                for i, column in enumerate(node["data"])]
        index = _decode(node["index"], archive, path, where)
        if not (isinstance(columns, list) and isinstance(index, list)
                and len(columns) == len(data)):
            raise PersistenceError(f"{path}: malformed table at {where}")
        return pd.DataFrame({name: pd.Series(values, index=index, name=name)
                             for name, values in zip(columns, data, strict=True)},
                            index=index, columns=columns)
    if tag == "namedtuple":
        cls = _trusted_class(node["module"], node["class"], path, where)
        fields = _pairs(node["fields"], path, where)
        saved = [name for name, _ in fields]
        renamed = RENAMED_FIELDS.get(cls.__qualname__)
        added = set(cls._fields) - set(saved)  # fields new since the file, with defaults
        if saved != list(cls._fields) and (renamed and set(saved) - set(cls._fields) or (
                added and added <= set(getattr(cls, "_field_defaults", {}))
                and set(saved) <= set(cls._fields))):
            values = {(renamed or {}).get(name, name): _decode(child, archive, path,
                                                               f"{where}.{name}")
                      for name, child in fields}
            convert = CONVERTERS.get(cls.__qualname__)
            values = convert(values) if convert is not None else values
            defaults = getattr(cls, "_field_defaults", {})
            missing = [f for f in cls._fields if f not in values and f not in defaults]
            unknown = [f for f in values if f not in cls._fields]
            if missing or unknown:
                raise PersistenceError(
                    f"{path}: {where} was saved as {node['class']} with fields {saved}, which "
                    f"this version cannot map onto {list(cls._fields)}")
            return cls(**values)
        if saved != list(cls._fields):
            raise PersistenceError(
                f"{path}: {where} was saved as {node['class']} with fields {saved}, but this "
                f"version's {node['class']} has fields {list(cls._fields)}")
        return cls(**{name: _decode(child, archive, path, f"{where}.{name}")
                      for name, child in fields})
    raise PersistenceError(f"{path}: unknown entry type {tag!r} at {where}")


def _pairs(items, path, where: str):
    """The ``[name, node]`` pairs of a dict or NamedTuple entry (kept in their order)."""
    if not (isinstance(items, list) and all(
            isinstance(pair, list) and len(pair) == 2 and isinstance(pair[0], str)
            for pair in items)):
        raise PersistenceError(f"{path}: malformed entry at {where}")
    return items


def _trusted_class(module_name, class_name, path, where: str):
    if not (isinstance(module_name, str) and isinstance(class_name, str)
            and module_name.split(".")[0] in _TRUSTED_PACKAGES
            and class_name.isidentifier()):
        raise PersistenceError(f"{path}: {where} names class {module_name}.{class_name}; only "
                               f"classes of {', '.join(_TRUSTED_PACKAGES)} are rebuilt")
    module_name = moved_module(module_name, class_name)
    try:
        cls = getattr(importlib.import_module(module_name), class_name)
    except (ImportError, AttributeError):
        raise PersistenceError(f"{path}: {where} needs {module_name}.{class_name}, which this "
                               "version does not have") from None
    if not (isinstance(cls, type) and issubclass(cls, tuple) and hasattr(cls, "_fields")):
        raise PersistenceError(f"{path}: {module_name}.{class_name} is not a NamedTuple")
    return cls


def _decode_array(node, archive, path, where: str):
    name = node["key"]
    if not (isinstance(name, str) and name.isidentifier()):
        raise PersistenceError(f"{path}: malformed array name at {where}")
    with archive.open(f"{name}.npy") as stream:
        data = np.lib.format.read_array(io.BytesIO(stream.read()), allow_pickle=False)
    if data.dtype.str != node["dtype"] or list(data.shape) != node["shape"]:
        raise PersistenceError(
            f"{path}: {where} should be {node['dtype']} of shape {tuple(node['shape'])}; the "
            f"file holds {data.dtype.str} of shape {data.shape}")
    if _digest(np.ascontiguousarray(data).tobytes()) != node["sha256"]:
        raise PersistenceError(f"{path}: {where} does not match its checksum; the file was "
                               "changed after it was written")
    if "prng" in node:
        return jax.random.wrap_key_data(jnp.asarray(data), impl=node["prng"])
    if node["jax"]:
        return jnp.asarray(data)
    return data[()] if node["scalar"] else data


def _kind_names(kind: str, cls) -> bool:
    """Whether a file's ``result:<module>.<class>`` kind (moved, :func:`moved_kind`) names
    ``cls``: its own module, or a module of the trusted packages that re-exports it (a
    class moved to a submodule of the module that still offers it)."""
    moved = moved_kind(kind)
    if moved == _result_kind(cls):
        return True
    module_name, _, class_name = moved[len("result:"):].rpartition(".")
    if module_name.split(".")[0] not in _TRUSTED_PACKAGES:
        return False
    try:
        return getattr(importlib.import_module(module_name), class_name, None) is cls
    except ImportError:
        return False


def _result_kind(cls) -> str:
    return f"result:{cls.__module__}.{cls.__qualname__}"


def save_result(result, path, *, options: dict | None = None) -> pathlib.Path:
    """Save a fit result (any NamedTuple of the zoo) to ``path``; see :func:`load`.

    ``options`` records how the result was made (JSON-serialisable values).
    Returns the path written (``.npz`` appended when missing).
    """
    if not _is_namedtuple(result):
        raise TypeError(f"result must be a fit result (a NamedTuple); got {type(result).__name__}")
    return save_tree(path, result, kind=_result_kind(type(result)), options=options)


def load(path):
    """Load a result written by ``result.save(path)``.

    Returns the result as its own class. Raises :class:`PersistenceError` for
    a file that is truncated, changed, of a newer format or not a result (a
    checkpoint, say), and ``FileNotFoundError`` when there is no file.
    """
    tree, metadata = load_tree(path)
    if not metadata["kind"].startswith("result:"):
        raise PersistenceError(f"{path} holds {metadata['kind']!r}, not a fit result; "
                               "checkpoints are read by the fit's resume_from=")
    if not _is_namedtuple(tree) or not _kind_names(metadata["kind"], type(tree)):
        raise PersistenceError(f"{path}: its content does not match its kind "
                               f"{metadata['kind']!r}")
    return tree


def _save_method(self, path, *, options: dict | None = None) -> pathlib.Path:
    """Save this result to ``path`` (pickle-free ``.npz``); read it back with ``inference.load``.

    ``options`` records how the result was made (JSON-serialisable values).
    Returns the path written.
    """
    return save_result(self, path, options=options)


def _load_method(cls, path):
    """Load a result of this class written by ``result.save(path)`` (see :func:`load`).

    Raises :class:`PersistenceError` when the file holds a result of another class.
    """
    result = load(path)
    if not isinstance(result, cls):
        raise PersistenceError(f"{path} holds a {type(result).__name__}, not a {cls.__name__}; "
                               "read it with inference.load")
    return result


def attach_save_methods(classes) -> None:
    """Give every result class in ``classes`` a ``save`` method and a ``load`` class method
    (the families' plug-ins declare their result classes; ``inference`` attaches them on
    import)."""
    for cls in classes:
        cls.save = _save_method
        cls.load = classmethod(_load_method)
