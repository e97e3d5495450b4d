"""The journal's SQLite store: one file, WAL mode, safe under concurrent calls and several processes.

Where: set_default_path() (tests, scripts) > the journal setting (`serve --journal PATH`, EVOKERNEL_JOURNAL) >
the home setting's journal.sqlite3. Every operation opens its own connection (no connection is shared
between threads or processes), sets busy_timeout, and keeps its transaction short; writes take the
write lock up front (BEGIN IMMEDIATE), so a writer waits instead of failing half-way. With WAL and
synchronous=FULL a committed row survives a kill -9 (and a power cut); an interrupted write leaves the
previous state (SQLite's atomic commit).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import secrets
import sqlite3
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

BUSY_TIMEOUT_MS = 30_000
SCHEMA_VERSION = 1
_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta(key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS sources(
  sha256 TEXT PRIMARY KEY, text TEXT NOT NULL, bytes INTEGER NOT NULL, created_at REAL NOT NULL);
CREATE TABLE IF NOT EXISTS results(
  seq INTEGER PRIMARY KEY AUTOINCREMENT,
  id TEXT NOT NULL UNIQUE,
  created_at REAL NOT NULL,
  task TEXT NOT NULL,
  experiment TEXT NOT NULL,
  tool TEXT NOT NULL,
  source_sha256 TEXT REFERENCES sources(sha256),
  arguments TEXT NOT NULL,
  summary TEXT NOT NULL,
  verdict TEXT NOT NULL,
  failure_class TEXT,
  device TEXT);
CREATE INDEX IF NOT EXISTS results_task ON results(task, experiment, seq);
CREATE TABLE IF NOT EXISTS notes(
  seq INTEGER PRIMARY KEY AUTOINCREMENT,
  id TEXT NOT NULL UNIQUE,
  created_at REAL NOT NULL,
  task TEXT NOT NULL,
  experiment TEXT,
  kind TEXT NOT NULL,
  text TEXT NOT NULL,
  evidence TEXT NOT NULL,
  evidence_kind TEXT NOT NULL,
  result_id TEXT);
CREATE INDEX IF NOT EXISTS notes_task ON notes(task, seq);
"""

_default_path: Path | None = None
_ready: set[str] = set()
_ready_lock = threading.Lock()


def set_default_path(path: str | os.PathLike | None) -> None:
    """Use this file instead of what the settings say (tests, scripts); None: the settings again."""
    global _default_path
    _default_path = Path(path).expanduser() if path else None


def journal_path() -> Path:
    if _default_path is not None:
        return _default_path
    from evokernel_mcp import settings

    s = settings.get()
    if s.journal is not None:
        return s.journal.expanduser()
    from evokernel_mcp.paths import state_dir

    return state_dir() / "journal.sqlite3"


def sha256_text(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def new_id(prefix: str) -> str:
    return f"{prefix}-{secrets.token_hex(6)}"


def _wal(con: sqlite3.Connection) -> str:
    """Switch the file to WAL. SQLite answers 'database is locked' at once, without its busy handler, when
    another process holds a lock on a fresh file meanwhile (two servers starting on one journal): retry for
    as long as busy_timeout would wait."""
    deadline = time.monotonic() + BUSY_TIMEOUT_MS / 1000
    while True:
        try:
            return con.execute("PRAGMA journal_mode=WAL").fetchone()[0]
        except sqlite3.OperationalError as e:
            if "locked" not in str(e) or time.monotonic() > deadline:
                raise
            time.sleep(0.02)


class Store:
    """Plain methods over one journal file. Cheap to create; holds no open connection."""

    def __init__(self, path: str | os.PathLike | None = None):
        self.path = Path(path) if path is not None else journal_path()

    # ------------------------------------------------------------ connections
    def _connect(self) -> sqlite3.Connection:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        con = sqlite3.connect(self.path, timeout=BUSY_TIMEOUT_MS / 1000, isolation_level=None)
        con.row_factory = sqlite3.Row
        con.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")
        con.execute("PRAGMA synchronous=FULL")
        con.execute("PRAGMA foreign_keys=ON")
        self._ensure_schema(con)
        return con

    def _ensure_schema(self, con: sqlite3.Connection) -> None:
        key = str(self.path.resolve())
        if key in _ready:
            return
        with _ready_lock:
            mode = _wal(con)
            if str(mode).lower() != "wal":
                log.warning("journal %s: journal_mode is %s, not WAL (a network file system?)", self.path, mode)
            con.execute("BEGIN IMMEDIATE")
            try:
                for stmt in filter(str.strip, _SCHEMA.split(";")):
                    con.execute(stmt)
                con.execute("INSERT OR IGNORE INTO meta(key, value) VALUES ('schema_version', ?)",
                            (str(SCHEMA_VERSION),))
                con.execute("COMMIT")
            except BaseException:
                con.execute("ROLLBACK")
                raise
            _ready.add(key)

    @contextlib.contextmanager
    def read(self) -> Iterator[sqlite3.Connection]:
        """A consistent snapshot for several SELECTs (a deferred read transaction)."""
        con = self._connect()
        try:
            con.execute("BEGIN")
            yield con
            con.execute("COMMIT")
        finally:
            con.close()

    @contextlib.contextmanager
    def write(self) -> Iterator[sqlite3.Connection]:
        """One short write transaction holding the write lock from its start (BEGIN IMMEDIATE)."""
        con = self._connect()
        try:
            con.execute("BEGIN IMMEDIATE")
            try:
                yield con
            except BaseException:
                con.execute("ROLLBACK")
                raise
            con.execute("COMMIT")
        finally:
            con.close()

    # ------------------------------------------------------------ writes
    @staticmethod
    def put_source(con: sqlite3.Connection, text: str) -> str:
        sha = sha256_text(text)
        con.execute("INSERT OR IGNORE INTO sources(sha256, text, bytes, created_at) VALUES (?, ?, ?, ?)",
                    (sha, text, len(text.encode("utf-8", "surrogatepass")), time.time()))
        return sha

    def add_result(self, *, task: str, experiment: str, tool: str, source: str | None, arguments: dict[str, Any],
                   blobs: dict[str, str], summary: dict[str, Any], verdict: str, failure_class: str | None,
                   device: str | None) -> str:
        """Store one tool call. `blobs` are long argument texts already replaced by their sha256 in
        `arguments`; they go to `sources` (deduplicated) in the same transaction."""
        rid = new_id("r")
        with self.write() as con:
            sha = self.put_source(con, source) if source is not None else None
            for text in blobs.values():
                self.put_source(con, text)
            con.execute(
                "INSERT INTO results(id, created_at, task, experiment, tool, source_sha256, arguments, summary, "
                "verdict, failure_class, device) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (rid, time.time(), task, experiment, tool, sha, json.dumps(arguments, default=str),
                 json.dumps(summary, default=str), verdict, failure_class, device))
        return rid

    def add_note(self, *, task: str, experiment: str | None, kind: str, text: str, evidence: dict[str, Any],
                 result_id: str | None) -> tuple[str, float, bool]:
        """(note id, created at, new): a note identical to one already recorded (task, variant, kind, text and
        evidence) is that note, not a second copy (a search that records its lessons again each run)."""
        nid, now = new_id("n"), time.time()
        ev = json.dumps(evidence)
        with self.write() as con:
            same = con.execute("SELECT id, created_at FROM notes WHERE task = ? AND experiment IS ? AND kind = ? "
                               "AND text = ? AND evidence = ?", (task, experiment, kind, text, ev)).fetchone()
            if same is not None:
                return same[0], same[1], False
            con.execute(
                "INSERT INTO notes(id, created_at, task, experiment, kind, text, evidence, evidence_kind, result_id) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (nid, now, task, experiment, kind, text, ev, evidence["kind"], result_id))
        return nid, now, True

    # ------------------------------------------------------------ reads
    def result(self, result_id: str) -> sqlite3.Row | None:
        with self.read() as con:
            return con.execute("SELECT * FROM results WHERE id = ?", (result_id,)).fetchone()

    def results(self, task: str | None = None, experiment: str | None = None) -> list[sqlite3.Row]:
        sql, args = "SELECT * FROM results", []
        where = []
        if task is not None:
            where.append("task = ?")
            args.append(task)
        if experiment is not None:
            where.append("experiment = ?")
            args.append(experiment)
        if where:
            sql += " WHERE " + " AND ".join(where)
        with self.read() as con:
            return con.execute(sql + " ORDER BY seq", args).fetchall()

    def notes(self, task: str | None = None) -> list[sqlite3.Row]:
        with self.read() as con:
            if task is None:
                return con.execute("SELECT * FROM notes ORDER BY seq").fetchall()
            return con.execute("SELECT * FROM notes WHERE task = ? ORDER BY seq", (task,)).fetchall()

    def source(self, sha256: str | None) -> str | None:
        if not sha256:
            return None
        with self.read() as con:
            row = con.execute("SELECT text FROM sources WHERE sha256 = ?", (sha256,)).fetchone()
            return row["text"] if row else None

    def labels(self, task: str | None = None) -> list[tuple[str, str]]:
        """(task, label) pairs in order of first appearance."""
        with self.read() as con:
            if task is None:
                rows = con.execute("SELECT task, experiment, MIN(seq) AS s FROM results GROUP BY task, experiment "
                                   "ORDER BY s").fetchall()
            else:
                rows = con.execute("SELECT task, experiment, MIN(seq) AS s FROM results WHERE task = ? "
                                   "GROUP BY experiment ORDER BY s", (task,)).fetchall()
        return [(r["task"], r["experiment"]) for r in rows]

    def tasks(self) -> list[str]:
        with self.read() as con:
            rows = con.execute("SELECT task FROM results UNION SELECT task FROM notes ORDER BY task").fetchall()
        return [r[0] for r in rows]

    def integrity_check(self) -> str:
        con = self._connect()
        try:
            return con.execute("PRAGMA integrity_check").fetchone()[0]
        finally:
            con.close()


def get_store() -> Store:
    """The store of the current configuration (path re-read on every call: tests and options may change it)."""
    return Store(journal_path())
