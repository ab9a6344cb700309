"""Where a study's data and user programs come from: generators, data files, functions.

A function is named ``module:function`` (an importable module, e.g.
``ppl_models.mixture:generate``) or ``path/to/file.py:function`` (a file, relative to
the study file's folder). A file is imported once per process under a name derived
from its path and contents. The SHA-256 of a function's file is part of every row key
that uses it, so an edited program or generator never reuses a stale row.
"""

from __future__ import annotations

import functools
import hashlib
import importlib
import importlib.util
import sys
from pathlib import Path

import numpy as np

__all__ = ["file_sha256", "is_file", "split_function", "load_function", "read_matrix", "resolve"]


def resolve(path, base_dir) -> Path:
    """``path`` itself when absolute, else relative to ``base_dir``."""
    path = Path(path).expanduser()
    return path if path.is_absolute() else Path(base_dir) / path


@functools.lru_cache(maxsize=256)
def _file_digest(path: str, mtime_ns: int, size: int) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def file_sha256(path) -> str:
    """The SHA-256 of a file's bytes (cached while its size and modification time stay)."""
    stat = Path(path).stat()
    return _file_digest(str(Path(path).resolve()), stat.st_mtime_ns, stat.st_size)


def split_function(spec: str, where: str):
    if not isinstance(spec, str) or spec.count(":") < 1:
        raise ValueError(f"{where}: {spec!r} must be module:function or "
                         "path/to/file.py:function")
    target, _, name = spec.rpartition(":")
    if not target or not name.isidentifier():
        raise ValueError(f"{where}: {spec!r} must be module:function or "
                         "path/to/file.py:function")
    return target, name


def is_file(target: str) -> bool:
    return target.endswith(".py") or "/" in target or "\\" in target


def _import_file(path: Path):
    digest = file_sha256(path)
    name = f"ppl_zoo_study_{digest[:16]}_{path.stem}"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[name]
        raise
    return module


def load_function(spec: str, base_dir, where: str = "function"):
    """(the function, a description for row keys) of ``module:function`` or
    ``path/file.py:function``; raises ValueError naming ``where``."""
    target, name = split_function(spec, where)
    if is_file(target):
        path = resolve(target, base_dir)
        if not path.is_file():
            raise ValueError(f"{where}: no such file {str(path)!r} (from {spec!r}; relative "
                             "paths start from the study file's folder)")
        try:
            module = _import_file(path)
        except Exception as error:
            raise ValueError(f"{where}: importing {str(path)!r} failed: "
                             f"{type(error).__name__}: {error}") from error
        identity = {"file": path.name, "function": name, "sha256": file_sha256(path)}
    else:
        try:
            module = importlib.import_module(target)
        except ImportError as error:
            raise ValueError(f"{where}: cannot import module {target!r} ({error})") from None
        origin = getattr(module, "__file__", None)
        identity = {"module": target, "function": name,
                    "sha256": file_sha256(origin) if origin else None}
    function = getattr(module, name, None)
    if not callable(function):
        raise ValueError(f"{where}: {target!r} has no function {name!r}")
    return function, identity


def read_matrix(path, where: str) -> np.ndarray:
    """A data file's matrix (:func:`inference.app.select_command.read_data`), with errors
    that name the study's entry."""
    from inference.app.select_command import read_data

    path = Path(path)
    if not path.is_file():
        raise ValueError(f"{where}: no such data file {str(path)!r} (relative paths start "
                         "from the study file's folder)")
    try:
        x, _ = read_data(path)
    except (ValueError, OSError) as error:
        text = str(error).replace("--data must be", "a data file must be")
        raise ValueError(f"{where}: cannot read {str(path)!r}: {text}") from None
    return x
