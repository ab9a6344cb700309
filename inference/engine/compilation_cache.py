"""A persistent compilation cache: compile each program once per machine, not once per process.

Most of the time of a first fit is XLA compiling its programs, not running them: the
first call of :func:`~inference.fit_mixture` on 200 points took 6.6 s on two cores, of
which 5.4 s were 134 compilations, and the process forgets them all when it ends.
JAX can keep compiled programs on disk and load them in the next process instead
(its *persistent compilation cache*); :func:`enable_compilation_cache` turns it on
with settings that suit this project's programs, in a folder by the platform's
convention:

=========  ===============================================================
Linux      ``$XDG_CACHE_HOME/ppl-zoo/jax``, else ``~/.cache/ppl-zoo/jax``
macOS      ``~/Library/Caches/ppl-zoo/jax``
Windows    ``%LOCALAPPDATA%\\ppl-zoo\\cache\\jax``
=========  ===============================================================

The environment variable ``PPL_ZOO_CACHE_DIR`` moves the folder, and
``PPL_ZOO_CACHE_DIR=off`` (also ``0``, ``none`` or ``false``, in any case) keeps the
cache off. The ``ppl-zoo`` command turns the cache on at start-up
(``--compilation-cache DIR`` and ``--no-compilation-cache`` choose otherwise).

A folder that cannot be created or written is a
:class:`~ppl_models.diagnostics.CompilationCacheWarning`, never an error: the cache
stays off and programs compile as usual. A write that fails later (a full disk, a
folder removed meanwhile) is caught by JAX, which warns ("Error writing persistent
compilation cache entry") and carries on; :func:`enable_compilation_cache` makes sure
that warning is printed and never raised, even where warnings are turned into errors
before it is called (``python -W error``).

Entries hold machine code for the CPU that compiled them, and JAX's key for a CPU
program does not name the CPU's instruction set: do not share one folder between
machines with different processors (a home folder mounted on the nodes of a cluster);
give each kind of machine its own with ``PPL_ZOO_CACHE_DIR``.
"""

from __future__ import annotations

import math
import os
import sys
import tempfile
import warnings
from numbers import Real
from pathlib import Path

import jax
from jax.experimental.compilation_cache import compilation_cache as jax_compilation_cache

from ppl_models.diagnostics import CompilationCacheWarning

__all__ = ["ENV_VAR", "OFF_VALUES", "default_cache_dir", "disable_compilation_cache",
           "enable_compilation_cache"]

#: The environment variable that moves the cache's folder, or turns the cache off.
ENV_VAR = "PPL_ZOO_CACHE_DIR"

#: Values of :data:`ENV_VAR` (compared in lower case) that turn the cache off.
OFF_VALUES = frozenset({"off", "0", "none", "false"})

#: JAX's warnings when reading or writing an entry fails (``jax._src.compiler``).
_JAX_CACHE_ERRORS = r"Error (reading|writing) persistent compilation cache entry"

#: The file-name ending of JAX's entries (the only files that pruning removes).
_ENTRY_SUFFIX = "-cache"


def default_cache_dir(*, environ=None, system: str | None = None) -> Path | None:
    """The folder :func:`enable_compilation_cache` uses when given none.

    Parameters
    ----------
    environ : mapping, optional
        The environment to read (default ``os.environ``): :data:`ENV_VAR`, then
        ``XDG_CACHE_HOME`` (Linux and other Unix systems) or ``LOCALAPPDATA``
        (Windows).
    system : str, optional
        ``sys.platform``'s spelling of the operating system (default: this one's):
        ``"darwin"``, ``"win32"``, anything else follows the XDG convention.

    Returns
    -------
    pathlib.Path or None
        ``PPL_ZOO_CACHE_DIR`` where set (``~`` expanded), None where it is one of
        :data:`OFF_VALUES`, else the user's cache folder by the platform's convention
        followed by ``ppl-zoo/jax`` (``ppl-zoo\\cache\\jax`` on Windows).

    Examples
    --------
    >>> default_cache_dir(environ={"XDG_CACHE_HOME": "/var/cache/me"}, system="linux")
    PosixPath('/var/cache/me/ppl-zoo/jax')
    >>> default_cache_dir(environ={"PPL_ZOO_CACHE_DIR": "Off"}) is None
    True
    """
    environ = os.environ if environ is None else environ
    system = sys.platform if system is None else system
    chosen = environ.get(ENV_VAR, "").strip()
    if chosen:
        return None if chosen.lower() in OFF_VALUES else Path(chosen).expanduser()
    if system == "win32":
        root = environ.get("LOCALAPPDATA") or str(Path.home() / "AppData" / "Local")
        return Path(root) / "ppl-zoo" / "cache" / "jax"
    if system == "darwin":
        return Path.home() / "Library" / "Caches" / "ppl-zoo" / "jax"
    root = environ.get("XDG_CACHE_HOME", "")
    if not os.path.isabs(root):  # the XDG rule: a relative value is ignored
        root = str(Path.home() / ".cache")
    return Path(root) / "ppl-zoo" / "jax"


def _check_arguments(path, min_compile_time_secs, min_entry_size_bytes, max_size_bytes):
    if path is not None and not isinstance(path, str | os.PathLike):
        raise TypeError(f"path must be a str, an os.PathLike or None; got "
                        f"{type(path).__name__}")
    if path is not None and not os.fspath(path).strip():
        raise ValueError("path must name a folder; got an empty string")
    if isinstance(min_compile_time_secs, bool) or not isinstance(min_compile_time_secs, Real):
        raise TypeError(f"min_compile_time_secs must be a number of seconds; got "
                        f"{type(min_compile_time_secs).__name__}")
    if not (math.isfinite(min_compile_time_secs) and min_compile_time_secs >= 0):
        raise ValueError(f"min_compile_time_secs must be finite and >= 0; got "
                         f"{min_compile_time_secs}")
    for name, value, low in (("min_entry_size_bytes", min_entry_size_bytes, -1),
                             ("max_size_bytes", max_size_bytes, 1)):
        if value is None and name == "max_size_bytes":
            continue
        if isinstance(value, bool) or not isinstance(value, int):
            raise TypeError(f"{name} must be an int; got {type(value).__name__}")
        if value < low:
            raise ValueError(f"{name} must be at least {low}; got {value}")


def _write_probe(folder: Path) -> None:
    """Write a small file in ``folder`` and remove it (OSError where that fails)."""
    handle, probe = tempfile.mkstemp(prefix=".ppl-zoo-probe-", dir=folder)
    try:
        os.write(handle, b"0" * 4096)
        os.fsync(handle)
    finally:
        os.close(handle)
        os.unlink(probe)


def _writable_folder(folder: Path) -> OSError | None:
    """Create ``folder`` and write a file in it; the error where either fails."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
        _write_probe(folder)
    except OSError as error:
        return error
    return None


def _prune(folder: Path, max_size_bytes: int) -> int:
    """Remove the least recently used entries until the folder's entries take at most
    three quarters of ``max_size_bytes``, where they take more than ``max_size_bytes``;
    returns how many were removed. Only JAX's entry files (``*-cache``) are counted or
    removed; one that vanishes meanwhile (another process pruning) is skipped."""
    entries = []
    try:
        with os.scandir(folder) as listing:
            for entry in listing:
                if entry.name.endswith(_ENTRY_SUFFIX) and entry.is_file():
                    stat = entry.stat()
                    entries.append((max(stat.st_atime, stat.st_mtime), stat.st_size,
                                    entry.path))
    except OSError:
        return 0
    total = sum(size for _, size, _ in entries)
    if total <= max_size_bytes:
        return 0
    removed = 0
    for _, size, name in sorted(entries):
        if total <= 0.75 * max_size_bytes:
            break
        try:
            os.unlink(name)
        except OSError:
            continue
        total -= size
        removed += 1
        atime = name[:-len(_ENTRY_SUFFIX)] + "-atime"  # JAX's own LRU bookkeeping
        if os.path.exists(atime):
            try:
                os.unlink(atime)
            except OSError:
                pass
    return removed


def enable_compilation_cache(path=None, *, min_compile_time_secs: float = 0.0,
                             min_entry_size_bytes: int = 0,
                             max_size_bytes: int | None = 2**30) -> Path | None:
    """Turn on JAX's persistent compilation cache in ``path`` for this process.

    Every program that XLA compiles from then on is written to the folder, and a later
    process that compiles the same program (same function, shapes, dtypes, jaxlib
    version and XLA flags) loads it from there instead of compiling it again. The settings are
    JAX's own (``jax_compilation_cache_dir``,
    ``jax_persistent_cache_min_compile_time_secs``,
    ``jax_persistent_cache_min_entry_size_bytes``) and hold for the whole process.

    Parameters
    ----------
    path : str or os.PathLike, optional
        The folder, created where missing. Default: ``PPL_ZOO_CACHE_DIR`` where set
        (``off``, ``0``, ``none`` or ``false`` keep the cache off), else the folder
        JAX already uses (``JAX_COMPILATION_CACHE_DIR``), else the user's cache folder
        (:func:`default_cache_dir`). An explicit ``path`` wins over the environment.
    min_compile_time_secs : float, default 0.0
        Programs that compiled faster than this are not written. JAX's default, 1 s,
        suits large accelerator programs but skips nearly all of this project's: the
        first call of ``fit_mixture`` on 200 points compiled 134 programs in 5.4 s,
        none of them over 1 s and 118 under 50 ms (2.3 s together). Its first call in a
        second process took 6.5 s with 1 s (nothing written), 3.9 s with 0.05 s (15
        entries), 1.9 s with 0.01 s (106 entries) and 1.7 s with 0 (all 127 entries,
        0.8 MB), against 6.6 s cold: loading an entry took about 2 ms, less than
        compiling even the small ones, and writing them cost the first process nothing
        measurable (two cores, jaxlib 0.9.2).
    min_entry_size_bytes : int, default 0
        Entries smaller than this are not written; 0 writes every size (JAX may raise
        it for a remote filesystem), -1 every size whatever the filesystem.
    max_size_bytes : int or None, default 2**30 (1 GiB)
        Where the folder's entries take more than this, the least recently used are
        removed now (down to three quarters of it), so that the folder does not grow
        for ever as new data shapes make new programs; None never removes any. Only
        JAX's entry files (``*-cache``) are counted and removed.

    Returns
    -------
    pathlib.Path or None
        The folder (absolute), or None where the cache is off: turned off by
        ``PPL_ZOO_CACHE_DIR``, or the folder could not be created or written (a
        :class:`~ppl_models.diagnostics.CompilationCacheWarning` says why). When None
        is returned nothing is written and JAX's settings are left as they were.

    Raises
    ------
    TypeError
        ``path`` is not a str, an os.PathLike or None, or a threshold not a number.
    ValueError
        ``path`` is empty, or a threshold is out of range.

    See Also
    --------
    disable_compilation_cache : turn the cache off again.

    Notes
    -----
    The cache is JAX's: the entries' names are hashes of the program, its compile
    options, the XLA flags and jaxlib's version, so an upgrade of jaxlib starts
    afresh (delete the folder to reclaim the space). Entries hold code for the
    compiling machine's CPU: do not share a folder between different processors. A
    write that fails later (a full disk) is a JAX warning, printed once per program
    and never raised: this function puts a ``warnings`` filter with the action
    ``"default"`` for JAX's read and write errors in front of the filters set before
    it (a test runner's per-test filters still come first).

    Examples
    --------
    >>> import tempfile
    >>> from pathlib import Path
    >>> import jax
    >>> before = jax.config.jax_compilation_cache_dir     # put back at the end
    >>> with tempfile.TemporaryDirectory() as tmp:
    ...     folder = enable_compilation_cache(tmp)
    ...     y = jax.jit(lambda x: 2.0 * x + 1.0)(1.0)     # compiled, and kept in the folder
    ...     print(folder == Path(tmp).resolve(), any(folder.iterdir()))
    ...     _ = enable_compilation_cache(before) if before else disable_compilation_cache()
    True True
    """
    _check_arguments(path, min_compile_time_secs, min_entry_size_bytes, max_size_bytes)
    if path is None:
        chosen = os.environ.get(ENV_VAR, "").strip()
        if chosen and chosen.lower() in OFF_VALUES:
            return None
        current = jax.config.jax_compilation_cache_dir
        folder = default_cache_dir() if chosen or not current else Path(current)
    else:
        folder = Path(os.fspath(path)).expanduser()
    folder = folder.resolve()
    error = _writable_folder(folder)
    if error is not None:
        warnings.warn(f"no compilation cache in {folder}: the folder cannot be created or "
                      f"written ({type(error).__name__}: {error}); programs compile as "
                      f"usual and JAX's cache settings are unchanged. Choose another "
                      f"folder with {ENV_VAR}=DIR, or set {ENV_VAR}=off",
                      CompilationCacheWarning, stacklevel=2)
        return None
    if max_size_bytes is not None:
        _prune(folder, max_size_bytes)
    warnings.filterwarnings("default", message=_JAX_CACHE_ERRORS, category=UserWarning)
    jax.config.update("jax_persistent_cache_min_compile_time_secs",
                      float(min_compile_time_secs))
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", int(min_entry_size_bytes))
    if jax.config.jax_compilation_cache_dir != str(folder):
        jax.config.update("jax_compilation_cache_dir", str(folder))
        jax_compilation_cache.reset_cache()  # JAX opens its cache once: open the new one
    return folder


def disable_compilation_cache() -> None:
    """Turn JAX's persistent compilation cache off for the rest of this process.

    Programs compile as usual and nothing is read from or written to disk; the folder
    and its entries are left in place. :func:`enable_compilation_cache` turns it on
    again.

    Examples
    --------
    >>> import jax
    >>> before = jax.config.jax_compilation_cache_dir
    >>> disable_compilation_cache()
    >>> jax.config.jax_compilation_cache_dir is None
    True
    >>> _ = enable_compilation_cache(before) if before else None   # put back
    """
    if jax.config.jax_compilation_cache_dir is not None:
        jax.config.update("jax_compilation_cache_dir", None)
        jax_compilation_cache.reset_cache()
