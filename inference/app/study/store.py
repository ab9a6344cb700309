"""The row store of a study: one JSON file per row, named by its key, written atomically.

Layout under the study's output folder::

    rows/<key>.json         one finished row: status "ok" (with the row) or "failed"
                            (with the error and its traceback)
    rows/<key>.running      a row being computed (who, since when); removed when done
    run.json                the last run: its process, scheduler and the keys it submitted

A row file is written to a temporary file in the same folder, flushed to disk and
renamed over its final name (``os.replace``): a reader sees the whole row or none, and
only ``*.json`` files are ever read. A row file that cannot be parsed all the same (a
disk that filled up, a copy cut short) counts as missing and is computed again.
"""

from __future__ import annotations

import json
import os
import socket
import tempfile
import time
from pathlib import Path

__all__ = ["RowStore", "process_alive"]


def _dump_atomic(path: Path, data: dict) -> None:
    from inference.engine.reporting import jsonable

    path.parent.mkdir(parents=True, exist_ok=True)
    handle = tempfile.NamedTemporaryFile("w", dir=path.parent, prefix=f".{path.name}.",
                                         suffix=".tmp", delete=False, encoding="utf-8")
    try:
        with handle:
            json.dump(jsonable(data), handle, indent=1)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(handle.name, path)
    except BaseException:
        try:
            os.unlink(handle.name)
        except OSError:
            pass
        raise


def _load(path: Path):
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def process_alive(pid: int, host: str) -> bool | None:
    """Whether process ``pid`` of ``host`` still runs (None: another host, unknown)."""
    if host != socket.gethostname():
        return None
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class RowStore:
    """The rows of one study's output folder."""

    def __init__(self, folder):
        self.folder = Path(folder)
        self.rows = self.folder / "rows"

    def path(self, key: str) -> Path:
        return self.rows / f"{key}.json"

    def read(self, key: str) -> dict | None:
        """The finished row ``key`` (ok or failed), None when absent or unreadable."""
        record = _load(self.path(key))
        if not isinstance(record, dict) or record.get("key") != key:
            return None
        return record

    def write(self, record: dict) -> Path:
        """Write a finished row atomically (replacing an earlier one of the same key)."""
        path = self.path(record["key"])
        _dump_atomic(path, record)
        return path

    def finished(self, keys) -> dict:
        """key -> record of the finished rows among ``keys``."""
        out = {}
        for key in keys:
            record = self.read(key)
            if record is not None:
                out[key] = record
        return out

    def mark_running(self, key: str, **info) -> None:
        _dump_atomic(self.rows / f"{key}.running",
                     {"key": key, "host": socket.gethostname(), "pid": os.getpid(),
                      "since": time.time(), **info})

    def clear_running(self, key: str) -> None:
        try:
            os.unlink(self.rows / f"{key}.running")
        except OSError:
            pass

    def running(self) -> dict:
        """key -> the marker of every row that a worker started and has not finished
        (a marker whose process is known to have ended is left out)."""
        out = {}
        if not self.rows.is_dir():
            return out
        for path in self.rows.glob("*.running"):
            marker = _load(path)
            if not isinstance(marker, dict):
                continue
            if process_alive(marker.get("pid", -1), marker.get("host", "")) is False:
                continue
            out[path.stem] = marker
        return out

    def write_manifest(self, manifest: dict) -> None:
        _dump_atomic(self.folder / "run.json", manifest)

    def manifest(self) -> dict | None:
        data = _load(self.folder / "run.json")
        return data if isinstance(data, dict) else None
