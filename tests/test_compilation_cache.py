"""The persistent compilation cache (:mod:`inference.engine.compilation_cache`) and the
``ppl-zoo`` command's flags for it.

What a process writes is seen by the next one, so most checks run small jitted
functions in child processes (``sys.executable -c``) with an environment of their own:
``HOME`` and ``XDG_CACHE_HOME`` under ``tmp_path`` (nothing reaches the user's cache
folder) and neither ``PPL_ZOO_CACHE_DIR`` nor ``JAX_COMPILATION_CACHE_DIR`` inherited
from this run (tests/conftest.py sets them for its own cache). A cache hit is read from
``jax.monitoring``'s events, not from timings. The checks made in this process restore
JAX's cache settings afterwards.
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import jax
import pytest
from jax.experimental.compilation_cache import compilation_cache as jax_compilation_cache

from inference.app.cli import build_parser
from inference.engine import compilation_cache
from inference.engine.compilation_cache import default_cache_dir, enable_compilation_cache
from ppl_models.diagnostics import CompilationCacheWarning

ROOT = Path(__file__).resolve().parent.parent

#: A child's common part: enable the cache (with ``sys.argv[1]`` as ``path`` where
#: given), count the cache's hits and writes, and print them as JSON after ``BODY``.
CHILD = textwrap.dedent("""
    import json, sys
    import jax
    from inference.engine.compilation_cache import enable_compilation_cache
    events = {"hits": 0, "writes": 0}
    def count(name, **kwargs):
        if name.endswith("/compilation_cache/cache_hits"):
            events["hits"] += 1
        elif name.endswith("/compilation_cache/cache_misses"):  # recorded on each write
            events["writes"] += 1
    jax.monitoring.register_event_listener(count)
    folder = enable_compilation_cache(*sys.argv[1:2])
    y = float(jax.jit(lambda x: 3.0 * x + 1.0)(2.0))
    {BODY}
    print(json.dumps({"folder": None if folder is None else str(folder), "y": y,
                      "jax_dir": jax.config.jax_compilation_cache_dir, **events}))
    """)


def _environment(tmp_path, **extra) -> dict:
    env = {key: value for key, value in os.environ.items()
           if key not in ("PPL_ZOO_CACHE_DIR", "JAX_COMPILATION_CACHE_DIR", "XDG_CACHE_HOME",
                          "LOCALAPPDATA")}
    env.update(HOME=str(tmp_path / "home"), XDG_CACHE_HOME=str(tmp_path / "xdg"),
               JAX_PLATFORMS="cpu")
    env.update(extra)
    return env


def _run(code, *args, env, flags=()):
    done = subprocess.run([sys.executable, *flags, "-c", code, *map(str, args)], env=env,
                          capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return done


def _child(tmp_path, *args, body="pass", env=None, flags=()):
    env = _environment(tmp_path) if env is None else env
    done = _run(CHILD.replace("{BODY}", body), *args, env=env, flags=flags)
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["y"] == 7.0
    return result, done.stderr


def _entries(folder) -> list[str]:
    return sorted(p.name for p in Path(folder).glob("*-cache")) if Path(folder).is_dir() \
        else []


@pytest.fixture
def restore_jax_cache():
    """Put JAX's cache settings of this process back after a test that changes them."""
    names = ("jax_compilation_cache_dir", "jax_persistent_cache_min_compile_time_secs",
             "jax_persistent_cache_min_entry_size_bytes")
    before = {name: getattr(jax.config, name) for name in names}
    yield
    moved = jax.config.jax_compilation_cache_dir != before["jax_compilation_cache_dir"]
    for name, value in before.items():
        jax.config.update(name, value)
    if moved:
        jax_compilation_cache.reset_cache()


def test_a_second_process_loads_what_the_first_wrote(tmp_path):
    folder = tmp_path / "cache"
    first, _ = _child(tmp_path, folder)
    assert first["folder"] == str(folder.resolve()) == first["jax_dir"]
    assert first["writes"] >= 1 and first["hits"] == 0
    written = _entries(folder)
    assert len(written) == first["writes"]
    second, _ = _child(tmp_path, folder)
    assert second["hits"] >= 1 and second["writes"] == 0  # loaded, not compiled
    assert _entries(folder) == written


@pytest.mark.skipif(sys.platform in ("darwin", "win32"), reason="the XDG convention")
@pytest.mark.parametrize("where", ["variable", "default"])
def test_the_environment_variable_and_the_default_folder(tmp_path, where):
    if where == "variable":
        expected = tmp_path / "chosen"
        env = _environment(tmp_path, PPL_ZOO_CACHE_DIR=str(expected))
    else:
        expected = tmp_path / "xdg" / "ppl-zoo" / "jax"
        env = _environment(tmp_path)
    result, _ = _child(tmp_path, env=env)
    assert result["folder"] == str(expected.resolve())
    assert len(_entries(expected)) == result["writes"] >= 1


def test_an_explicit_path_wins_over_the_variable(tmp_path):
    env = _environment(tmp_path, PPL_ZOO_CACHE_DIR="off")
    result, _ = _child(tmp_path, tmp_path / "explicit", env=env)
    assert result["folder"] == str((tmp_path / "explicit").resolve())
    assert _entries(tmp_path / "explicit")


def test_turned_off_it_writes_nothing(tmp_path):
    body = textwrap.dedent("""
        import os
        for value in ("OFF", "0", "none", " False "):
            os.environ["PPL_ZOO_CACHE_DIR"] = value
            assert enable_compilation_cache() is None, value
        y = float(jax.jit(lambda x: 3.0 * x + 1.0)(2.0) * jax.numpy.ones(()))
    """)
    env = _environment(tmp_path, PPL_ZOO_CACHE_DIR="off")
    result, _ = _child(tmp_path, body=body, env=env)
    assert result["folder"] is None and result["jax_dir"] is None
    assert result["writes"] == result["hits"] == 0
    assert not list(tmp_path.rglob("*")), "the cache wrote something"


def test_a_folder_that_cannot_be_made_is_a_warning(tmp_path, restore_jax_cache):
    (tmp_path / "file").write_text("a regular file, not a folder")
    before = jax.config.jax_compilation_cache_dir
    with pytest.warns(CompilationCacheWarning, match="cannot be created or written"):
        assert enable_compilation_cache(tmp_path / "file" / "cache") is None
    assert jax.config.jax_compilation_cache_dir == before  # JAX's settings untouched


def test_a_full_disk_is_a_warning(tmp_path, monkeypatch, restore_jax_cache):
    def full(folder):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(compilation_cache, "_write_probe", full)
    before = jax.config.jax_compilation_cache_dir
    with pytest.warns(CompilationCacheWarning, match="No space left"):
        assert enable_compilation_cache(tmp_path / "cache") is None
    assert jax.config.jax_compilation_cache_dir == before


def test_the_variable_naming_an_unusable_folder_is_a_warning(tmp_path, monkeypatch,
                                                             restore_jax_cache):
    (tmp_path / "file").write_text("")
    monkeypatch.setenv("PPL_ZOO_CACHE_DIR", str(tmp_path / "file" / "cache"))
    with pytest.warns(CompilationCacheWarning, match="PPL_ZOO_CACHE_DIR"):
        assert enable_compilation_cache() is None


def test_a_write_that_fails_later_never_raises(tmp_path):
    """The folder is replaced by a regular file after the cache is on (as root, chmod
    would not stop a write); the next new program cannot be written. With ``-W error``
    JAX's warning would be an exception raised from the jitted call."""
    body = textwrap.dedent("""
        import shutil
        shutil.rmtree(folder)
        folder.write_text("no longer a folder")
        z = float(jax.jit(lambda x: 5.0 * x - 1.0)(2.0))
        assert z == 9.0, z
    """)
    result, stderr = _child(tmp_path, tmp_path / "cache", body=body, flags=("-W", "error"))
    assert result["writes"] >= 1
    assert "Error writing persistent compilation cache entry" in stderr


@pytest.mark.parametrize("kwargs, error, match", [
    (dict(path=3), TypeError, "^path must be a str"),
    (dict(path=""), ValueError, "^path must name a folder"),
    (dict(min_compile_time_secs=-0.5), ValueError, "^min_compile_time_secs"),
    (dict(min_compile_time_secs=float("nan")), ValueError, "^min_compile_time_secs"),
    (dict(min_compile_time_secs="1"), TypeError, "^min_compile_time_secs"),
    (dict(min_entry_size_bytes=-2), ValueError, "^min_entry_size_bytes"),
    (dict(min_entry_size_bytes=1.5), TypeError, "^min_entry_size_bytes"),
    (dict(max_size_bytes=0), ValueError, "^max_size_bytes"),
    (dict(max_size_bytes=True), TypeError, "^max_size_bytes"),
])
def test_bad_arguments_name_themselves(kwargs, error, match, restore_jax_cache):
    before = jax.config.jax_compilation_cache_dir
    with pytest.raises(error, match=match):
        enable_compilation_cache(**kwargs)
    assert jax.config.jax_compilation_cache_dir == before


def test_the_oldest_entries_are_pruned_past_the_size_limit(tmp_path, restore_jax_cache):
    folder = tmp_path / "cache"
    folder.mkdir()
    for i in range(10):
        entry = folder / f"jit_f{i}-cache"
        entry.write_bytes(b"x" * 1000)
        os.utime(entry, (1_000_000 + i, 1_000_000 + i))  # f0 the least recently used
    (folder / "jit_f0-atime").write_bytes(b"12345678")
    (folder / "notes.txt").write_bytes(b"y" * 5000)  # not an entry: never counted, kept
    assert enable_compilation_cache(folder, max_size_bytes=20_000) == folder.resolve()
    assert len(_entries(folder)) == 10  # under the limit: nothing removed
    assert enable_compilation_cache(folder, max_size_bytes=6000) == folder.resolve()
    assert _entries(folder) == [f"jit_f{i}-cache" for i in range(6, 10)]  # <= 4500 bytes
    assert (folder / "notes.txt").exists() and not (folder / "jit_f0-atime").exists()


def test_default_folders_follow_each_platform(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    home = Path.home()
    assert default_cache_dir(environ={}, system="linux") == home / ".cache/ppl-zoo/jax"
    assert default_cache_dir(environ={"XDG_CACHE_HOME": "relative"}, system="linux") == \
        home / ".cache/ppl-zoo/jax"  # the XDG rule: a relative value is ignored
    assert default_cache_dir(environ={"XDG_CACHE_HOME": "/x"}, system="linux") == \
        Path("/x/ppl-zoo/jax")
    assert default_cache_dir(environ={}, system="darwin") == \
        home / "Library/Caches/ppl-zoo/jax"
    assert default_cache_dir(environ={"LOCALAPPDATA": "/appdata"}, system="win32") == \
        Path("/appdata") / "ppl-zoo" / "cache" / "jax"
    assert default_cache_dir(environ={"PPL_ZOO_CACHE_DIR": "~/zoo"}) == home / "zoo"
    for value in ("off", "OFF", "0", "None", "false"):
        assert default_cache_dir(environ={"PPL_ZOO_CACHE_DIR": value}) is None, value
    assert default_cache_dir(environ={"PPL_ZOO_CACHE_DIR": "  "}, system="linux") == \
        home / ".cache/ppl-zoo/jax"  # blank: as if unset


# -- the ppl-zoo command ----------------------------------------------------------------

def test_the_command_line_help_names_the_flags_and_the_variable():
    text = build_parser().format_help()
    for word in ("--compilation-cache DIR", "--no-compilation-cache", "PPL_ZOO_CACHE_DIR"):
        assert word in text, word
    with pytest.raises(SystemExit) as exit_info:
        build_parser().parse_args(["--compilation-cache", "x", "--no-compilation-cache",
                                   "list"])
    assert exit_info.value.code == 2


def test_the_flags_and_the_variable_choose_the_folder(tmp_path):
    """``main`` of ``ppl-zoo`` in one child: each call's folder gets the entries of a new
    program compiled after it; XLA's log is quieted once the cache is on."""
    code = textwrap.dedent("""
        import contextlib, io, json, sys
        import jax
        from inference.app.cli import main
        flag, variable = sys.argv[1:3]
        results = {}
        def step(name, argv, scale):
            with contextlib.redirect_stdout(io.StringIO()):
                assert main(argv + ["list"]) == 0
            jax.jit(lambda x: scale * x)(1.0)
            results[name] = [jax.config.jax_compilation_cache_dir,
                             jax.config.jax_logging_level]
        step("no_cache", ["--no-compilation-cache"], 2.0)
        step("variable", [], 3.0)
        step("flag", ["--compilation-cache", flag], 4.0)
        print(json.dumps(results))
        """)
    flag, variable = tmp_path / "flag", tmp_path / "variable"
    env = _environment(tmp_path, PPL_ZOO_CACHE_DIR=str(variable))
    done = _run(code, flag, variable, env=env)
    results = json.loads(done.stdout.strip().splitlines()[-1])
    # With the cache on, XLA's log is quieted (the user chose no level here).
    assert results == {"no_cache": [None, "NOTSET"],
                       "variable": [str(variable.resolve()), "CRITICAL"],
                       "flag": [str(flag.resolve()), "CRITICAL"]}
    assert len(_entries(variable)) == 1 and len(_entries(flag)) == 1


@pytest.mark.skipif(sys.platform in ("darwin", "win32"), reason="the XDG convention")
def test_the_command_turns_the_cache_on_by_default(tmp_path):
    default = tmp_path / "xdg" / "ppl-zoo" / "jax"
    command = [sys.executable, "-m", "inference.app.cli"]
    off = subprocess.run(command + ["--no-compilation-cache", "list"], cwd=ROOT, timeout=300,
                         env=_environment(tmp_path), capture_output=True, text=True)
    assert off.returncode == 0, off.stderr[-3000:]
    assert not default.exists()
    on = subprocess.run(command + ["list"], cwd=ROOT, timeout=300, capture_output=True,
                        env=_environment(tmp_path), text=True)
    assert on.returncode == 0 and "gvq" in on.stdout, on.stderr[-3000:]
    assert default.is_dir()
    shutil.rmtree(default)
    unusable = tmp_path / "file"
    unusable.write_text("")
    warned = subprocess.run(command + ["list"], cwd=ROOT, timeout=300, capture_output=True,
                            env=_environment(tmp_path, PPL_ZOO_CACHE_DIR=str(unusable / "c")),
                            text=True)
    assert warned.returncode == 0 and "CompilationCacheWarning" in warned.stderr
    assert not default.exists()
