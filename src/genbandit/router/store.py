"""Where the router keeps its state: decisions, the feedback log, policy snapshots, counters.

The policy state is always *a snapshot plus the feedback log after it*: feedback is appended to
the log (and committed) before it is acknowledged, and every router process folds the log into its
in-memory policy in log order. A restart loads the newest snapshot and replays the log after it;
replicas sharing one store tail the same log, so feedback given to one reaches every other.

Two stores keep the same interface:

- :class:`SQLiteStore` (default): one embedded file in WAL mode. ``synchronous = "full"`` fsyncs
  every commit (acknowledged feedback survives power loss); ``"normal"`` survives process crashes.
- :class:`RedisStore`: a Redis stream is the log, so several replicas share one policy. The
  check-and-append of feedback is one Lua script, atomic across replicas. Durability is Redis's
  (run it with ``appendonly yes``).

Cursors are the log's positions: an int sequence number (SQLite) or a stream id (Redis).

Models have store ids, given once per name and never reused: decisions, log entries and counters
carry the id, so what was learned stays with the model's name whatever the order of ``[[models]]``.
A store also caps the decisions awaiting feedback (:class:`TooManyPending` when full), and answers
:class:`StoreUnavailable` when it cannot be reached.
"""

from __future__ import annotations

import abc
import asyncio
import contextlib
import functools
import json
import queue
import sqlite3
import threading
from collections import OrderedDict
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any

import numpy as np

from .errors import DecisionExpired, DecisionNotFound, FeedbackConflict, StoreUnavailable, TooManyPending

__all__ = ["Decision", "LogEntry", "Store", "SQLiteStore", "RedisStore", "open_store"]


@dataclass
class Decision:
    """One routing decision: the model (its store id) chosen for a context, waiting for feedback."""

    id: str
    arm: int  # the model's store id
    context: np.ndarray  # (n_features,) float64, exactly what the policy saw
    created: float
    forced: bool = False
    reward: float | None = None
    propensity: float | None = None  # the probability the policy chose this model; None when forced or not recorded


@dataclass
class LogEntry:
    """One acknowledged feedback, as the policy learns it."""

    cursor: Any
    decision_id: str
    arm: int  # the model's store id
    reward: float  # as given
    value: float  # what the policy learned when the feedback was accepted: reward - cost_weight * cost
    context: np.ndarray


def _pack(context: np.ndarray) -> bytes:
    return np.ascontiguousarray(context, dtype="<f8").tobytes()


def _unpack(blob: bytes) -> np.ndarray:
    return np.frombuffer(blob, dtype="<f8").copy()


class Store(abc.ABC):
    """The router's persistence; every method is safe to call from several threads."""

    kind: str = ""
    log_start: Any = 0  # the cursor before the first log entry

    @abc.abstractmethod
    def model_ids(self) -> dict[str, int]:
        """Every model name the store has given an id to."""

    @abc.abstractmethod
    def register_models(self, names: list[str], renames: dict[str, str]) -> dict[str, int]:
        """Rename ``{new: old}`` (the id stays), give ids to unknown ``names``; return every name's id."""

    @abc.abstractmethod
    def read_snapshot(self) -> dict | None:
        """The stored snapshot, or None before the first."""

    @abc.abstractmethod
    def init_snapshot(self, state: dict) -> tuple[dict, Any]:
        """Store ``state`` as the initial snapshot unless one exists; return the stored (state, cursor)."""

    @abc.abstractmethod
    def save_snapshot(self, state: dict, cursor: Any, replace: bool = False) -> bool:
        """Replace the snapshot if ``cursor`` is newer than the stored one (or as new, with ``replace``); return whether it did."""

    @abc.abstractmethod
    def put_decision(self, decision: Decision, keep_s: float, ttl_s: float, max_pending: int) -> None:
        """Persist a decision (it may be forgotten ``keep_s`` seconds after it was made).

        Raises :class:`TooManyPending` when ``max_pending`` decisions younger than ``ttl_s`` wait for feedback.
        """

    @abc.abstractmethod
    def get_decision(self, decision_id: str) -> Decision | None: ...

    @abc.abstractmethod
    def append_feedback(self, decision_id: str, reward: float, values: list[float], now: float, ttl_s: float) -> tuple[str, int]:
        """Atomically check the decision and append its feedback to the log.

        ``values[arm]`` is what the policy learns if the decision chose store id ``arm``. Returns
        ``("accepted", arm)`` once the entry is durable, or ``("duplicate", arm)`` when the same
        reward was already recorded. Raises :class:`DecisionNotFound`, :class:`DecisionExpired`
        or :class:`FeedbackConflict` (a different reward was recorded) and appends nothing.
        """

    @abc.abstractmethod
    def read_log(self, after: Any, limit: int = 1000) -> list[LogEntry]:
        """Log entries after cursor ``after``, oldest first."""

    @abc.abstractmethod
    def counters(self) -> dict[int, dict]:
        """``pulls``, ``feedback`` and ``reward_sum`` per store id, over all replicas."""

    @abc.abstractmethod
    def recent(self, n: int) -> list[dict]:
        """The ``n`` newest decisions: id, arm, created, forced, reward."""

    @abc.abstractmethod
    def log_length(self) -> int: ...

    @abc.abstractmethod
    def ping(self) -> bool: ...

    def close(self) -> None:
        """Release connections."""


# ------------------------------------------------------------------------------------------ SQLite
_SCHEMA = """
CREATE TABLE IF NOT EXISTS decisions (
    id TEXT PRIMARY KEY, arm INTEGER NOT NULL, context BLOB NOT NULL, created REAL NOT NULL,
    forced INTEGER NOT NULL DEFAULT 0, reward REAL, propensity REAL);
CREATE INDEX IF NOT EXISTS decisions_created ON decisions(created);
CREATE TABLE IF NOT EXISTS feedback (
    seq INTEGER PRIMARY KEY AUTOINCREMENT, decision_id TEXT NOT NULL UNIQUE, arm INTEGER NOT NULL,
    reward REAL NOT NULL, value REAL NOT NULL, context BLOB NOT NULL, created REAL NOT NULL);
CREATE TABLE IF NOT EXISTS snapshot (
    id INTEGER PRIMARY KEY CHECK (id = 1), cursor INTEGER NOT NULL, state TEXT NOT NULL, updated REAL NOT NULL);
CREATE TABLE IF NOT EXISTS counters (
    arm INTEGER PRIMARY KEY, pulls INTEGER NOT NULL DEFAULT 0, feedback INTEGER NOT NULL DEFAULT 0,
    reward_sum REAL NOT NULL DEFAULT 0);
CREATE TABLE IF NOT EXISTS models (id INTEGER PRIMARY KEY, name TEXT NOT NULL UNIQUE);
"""


class SQLiteStore(Store):
    """State in one SQLite file (WAL), written by one writer thread with group commit.

    Writes are queued; the writer thread takes everything queued, runs it in one transaction (each
    operation in its own savepoint, so one refusal undoes only itself) and commits once, so N
    concurrent feedbacks cost one fsync, not N. Each write returns only after the commit holding it
    (the ``*_async`` forms await it on an event loop, which is woken once per batch). Feedback commits are ``synchronous`` (``FULL`` by default: fsynced);
    decision-only commits are ``NORMAL`` (they survive a crash of the process, and the next
    feedback commit makes them durable on disk too). Reads use one connection per thread.
    """

    kind = "sqlite"
    in_process = True  # reads are local and cheap enough for an event loop; writes have *_async forms

    def __init__(self, path: str, synchronous: str = "full", purge_every: int = 1000, max_batch: int = 512) -> None:
        self.path = path
        self.synchronous = synchronous
        self._purge_every = purge_every
        self._max_batch = max_batch
        self._puts = 0
        self._pending: OrderedDict[str, float] | None = None  # decision id -> created; the writer thread's
        self._queue: queue.SimpleQueue = queue.SimpleQueue()  # lists of writes (None: stop)
        self._held: dict[asyncio.AbstractEventLoop, list] = {}  # writes an event loop submitted in its current turn
        self._local = threading.local()
        self._conn = self._connect()
        self._conn.executescript(_SCHEMA)
        if "propensity" not in {row[1] for row in self._conn.execute("PRAGMA table_info(decisions)")}:  # a store made before propensities
            self._conn.execute("ALTER TABLE decisions ADD COLUMN propensity REAL")
        self._sync_mode = self.synchronous.upper()
        self._closed = False
        self._writer = threading.Thread(target=self._run, name="genbandit-sqlite-writer", daemon=True)
        self._writer.start()

    def _connect(self) -> sqlite3.Connection:
        conn = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False, timeout=30.0)
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute(f"PRAGMA synchronous={self.synchronous.upper()}")
        conn.execute("PRAGMA busy_timeout=30000")
        return conn

    def _reader(self) -> sqlite3.Connection:
        conn = getattr(self._local, "conn", None)
        if conn is None:
            conn = self._local.conn = self._connect()
        return conn

    def _read(self, sql: str, args: tuple = ()) -> list:
        try:
            return self._reader().execute(sql, args).fetchall()
        except sqlite3.OperationalError as exc:
            raise StoreUnavailable(f"The SQLite store {self.path!r} cannot be read: {exc}") from None

    # -------------------------------------------------------------- the writer thread
    def _submit(self, fn, *args, durable: bool = True, loop: asyncio.AbstractEventLoop | None = None):
        """Queue a write; its future (an asyncio one on ``loop``, else a thread one) completes after its commit.

        The writes an event loop submits in one turn are handed to the writer thread together, at
        the end of the turn: one wake-up of the writer (and one hand-over of the interpreter) for
        all of them, not one each.
        """
        if self._closed:
            raise StoreUnavailable("The SQLite store is closed.")
        if loop is None:
            future: Any = Future()
            self._queue.put([(fn, args, durable, future)])
            return future
        future = loop.create_future()
        held = self._held.get(loop)
        if held is None:
            held = self._held[loop] = []
            loop.call_soon(self._hand_over, loop)
        held.append((fn, args, durable, future))
        return future

    def _hand_over(self, loop: asyncio.AbstractEventLoop) -> None:
        """Give the writer thread what ``loop`` submitted in this turn (on that loop's thread)."""
        held = self._held.pop(loop)
        if self._closed:
            _settle_all([(future, None, StoreUnavailable("The SQLite store is closed.")) for *_, future in held])
        else:
            self._queue.put(held)

    def _write(self, fn, *args, durable: bool = True):
        return self._submit(fn, *args, durable=durable).result()

    def _run(self) -> None:
        stop = False
        while not stop:
            parts = [self._queue.get()]
            size = len(parts[0] or ())
            while size < self._max_batch:
                try:
                    parts.append(self._queue.get_nowait())
                except queue.Empty:
                    break
                size += len(parts[-1] or ())
            stop = None in parts
            self._commit([op for part in parts if part is not None for op in part])

    def _commit(self, batch: list[tuple]) -> None:
        if not batch:
            return
        cur = self._conn.cursor()
        results: list[tuple[Future, Any, BaseException | None]] = []
        try:
            mode = self.synchronous.upper() if any(durable for _, _, durable, _ in batch) else "NORMAL"
            if mode != self._sync_mode:
                cur.execute(f"PRAGMA synchronous={mode}")
                self._sync_mode = mode
            cur.execute("BEGIN IMMEDIATE")
            for fn, args, _, future in batch:
                cur.execute("SAVEPOINT op")
                try:
                    results.append((future, fn(cur, *args), None))
                except (sqlite3.OperationalError, MemoryError):
                    raise
                except Exception as exc:  # noqa: BLE001 - a refusal (or a bug) of this operation only: handed to its caller
                    cur.execute("ROLLBACK TO op")
                    results.append((future, None, exc))
                cur.execute("RELEASE op")
            cur.execute("COMMIT")
        except Exception as exc:  # noqa: BLE001 - the whole batch failed; every caller hears of it
            if self._conn.in_transaction:
                cur.execute("ROLLBACK")
            self._pending = None  # reloaded from the file on the next decision
            error = StoreUnavailable(f"The SQLite store {self.path!r} cannot be written: {exc}")
            results = [(future, None, error) for _, _, _, future in batch]
        # Thread futures are settled here; an event loop's are settled by one call on that loop per batch.
        on_loops: dict[asyncio.AbstractEventLoop, list] = {}
        for future, result, error in results:
            if isinstance(future, asyncio.Future):
                on_loops.setdefault(future.get_loop(), []).append((future, result, error))
            else:
                _settle(future, result, error)
        for loop, items in on_loops.items():
            with contextlib.suppress(RuntimeError):  # that loop is closed: nobody waits any more
                loop.call_soon_threadsafe(_settle_all, items)

    # -------------------------------------------------------------- models and snapshots
    def model_ids(self) -> dict[str, int]:
        return {name: int(i) for i, name in self._read("SELECT id, name FROM models")}

    def register_models(self, names: list[str], renames: dict[str, str]) -> dict[str, int]:
        def op(cur):
            for new, old in renames.items():
                cur.execute("UPDATE models SET name = ? WHERE name = ?", (new, old))
            for name in names:
                cur.execute("INSERT OR IGNORE INTO models (id, name) SELECT COALESCE(MAX(id) + 1, 0), ? FROM models", (name,))
            return {name: int(i) for i, name in cur.execute("SELECT id, name FROM models")}

        return self._write(op)

    def read_snapshot(self) -> dict | None:
        rows = self._read("SELECT state FROM snapshot WHERE id = 1")
        return json.loads(rows[0][0]) if rows else None

    def init_snapshot(self, state: dict) -> tuple[dict, Any]:
        def op(cur):
            cur.execute("INSERT OR IGNORE INTO snapshot (id, cursor, state, updated) VALUES (1, 0, ?, strftime('%s','now'))", (json.dumps(state),))
            return cur.execute("SELECT state, cursor FROM snapshot WHERE id = 1").fetchone()

        text, cursor = self._write(op)
        return json.loads(text), int(cursor)

    def save_snapshot(self, state: dict, cursor: Any, replace: bool = False) -> bool:
        text = json.dumps(state)
        newer = "cursor <= ?" if replace else "cursor < ?"

        def op(cur):
            cur.execute(f"UPDATE snapshot SET cursor = ?, state = ?, updated = strftime('%s','now') WHERE id = 1 AND {newer}", (cursor, text, cursor))
            return cur.rowcount == 1

        return self._write(op)

    # -------------------------------------------------------------- decisions and feedback
    def _pending_decisions(self, cur, now: float, ttl_s: float) -> OrderedDict[str, float]:
        """The decisions waiting for feedback (writer thread only), oldest first, expired ones dropped."""
        if self._pending is None:
            rows = cur.execute("SELECT id, created FROM decisions WHERE reward IS NULL AND created >= ? ORDER BY created", (now - ttl_s,))
            self._pending = OrderedDict((r[0], float(r[1])) for r in rows)
        pending = self._pending
        while pending and next(iter(pending.values())) < now - ttl_s:
            pending.popitem(last=False)
        return pending

    def _put(self, cur, decision: Decision, keep_s: float, ttl_s: float, max_pending: int) -> None:
        pending = self._pending_decisions(cur, decision.created, ttl_s)
        if len(pending) >= max_pending:
            raise TooManyPending(
                f"{len(pending)} decisions are waiting for feedback (the limit is {max_pending}): send feedback for them, "
                f"or wait until they expire ({ttl_s:g} s after they were made)."
            )
        cur.execute(
            "INSERT INTO decisions (id, arm, context, created, forced, propensity) VALUES (?, ?, ?, ?, ?, ?)",
            (decision.id, decision.arm, _pack(decision.context), decision.created, int(decision.forced), decision.propensity),
        )
        cur.execute("INSERT INTO counters (arm, pulls) VALUES (?, 1) ON CONFLICT(arm) DO UPDATE SET pulls = pulls + 1", (decision.arm,))
        pending[decision.id] = decision.created
        self._puts += 1
        if self._puts % self._purge_every == 0:
            cur.execute("DELETE FROM decisions WHERE created < ?", (decision.created - keep_s,))

    async def put_decision_async(self, decision: Decision, keep_s: float, ttl_s: float, max_pending: int) -> None:
        """:meth:`put_decision` for an event loop (call it from the loop's thread)."""
        await self._submit(self._put, decision, keep_s, ttl_s, max_pending, durable=False, loop=asyncio.get_running_loop())

    def put_decision(self, decision: Decision, keep_s: float, ttl_s: float, max_pending: int) -> None:
        self._write(self._put, decision, keep_s, ttl_s, max_pending, durable=False)

    def get_decision(self, decision_id: str) -> Decision | None:
        rows = self._read("SELECT id, arm, context, created, forced, reward, propensity FROM decisions WHERE id = ?", (decision_id,))
        if not rows:
            return None
        row = rows[0]
        return Decision(id=row[0], arm=int(row[1]), context=_unpack(row[2]), created=float(row[3]), forced=bool(row[4]), reward=row[5],
                        propensity=row[6])

    def _feedback(self, cur, decision_id: str, reward: float, values: list[float], now: float, ttl_s: float) -> tuple[str, int]:
        row = cur.execute("SELECT arm, context, created, reward FROM decisions WHERE id = ?", (decision_id,)).fetchone()
        if row is None:
            raise DecisionNotFound(f"Unknown decision id {decision_id!r} (never made here, or forgotten).")
        arm, context, created, given = int(row[0]), row[1], float(row[2]), row[3]
        if given is not None:
            if given == reward:
                return "duplicate", arm
            raise FeedbackConflict(f"Decision {decision_id!r} already has reward {given!r}; got {reward!r}.")
        if now - created > ttl_s:
            raise DecisionExpired(f"Decision {decision_id!r} is {now - created:.0f} s old; feedback is taken for {ttl_s:g} s.")
        cur.execute(
            "INSERT INTO feedback (decision_id, arm, reward, value, context, created) VALUES (?, ?, ?, ?, ?, ?)",
            (decision_id, arm, reward, values[arm], context, now),
        )
        cur.execute("UPDATE decisions SET reward = ? WHERE id = ?", (reward, decision_id))
        cur.execute(
            "INSERT INTO counters (arm, feedback, reward_sum) VALUES (?, 1, ?) "
            "ON CONFLICT(arm) DO UPDATE SET feedback = feedback + 1, reward_sum = reward_sum + excluded.reward_sum",
            (arm, reward),
        )
        if self._pending is not None:
            self._pending.pop(decision_id, None)
        return "accepted", arm

    async def append_feedback_async(self, decision_id: str, reward: float, values: list[float], now: float, ttl_s: float) -> tuple[str, int]:
        """:meth:`append_feedback` for an event loop (call it from the loop's thread)."""
        return await self._submit(self._feedback, decision_id, reward, values, now, ttl_s, loop=asyncio.get_running_loop())

    def append_feedback(self, decision_id: str, reward: float, values: list[float], now: float, ttl_s: float) -> tuple[str, int]:
        return self._write(self._feedback, decision_id, reward, values, now, ttl_s)

    def read_log(self, after: Any, limit: int = 1000) -> list[LogEntry]:
        rows = self._read("SELECT seq, decision_id, arm, reward, value, context FROM feedback WHERE seq > ? ORDER BY seq LIMIT ?", (int(after), limit))
        return [LogEntry(int(r[0]), r[1], int(r[2]), float(r[3]), float(r[4]), _unpack(r[5])) for r in rows]

    def counters(self) -> dict[int, dict]:
        rows = self._read("SELECT arm, pulls, feedback, reward_sum FROM counters")
        return {int(arm): {"pulls": int(p), "feedback": int(f), "reward_sum": float(r)} for arm, p, f, r in rows}

    def recent(self, n: int) -> list[dict]:
        rows = self._read("SELECT id, arm, created, forced, reward FROM decisions ORDER BY created DESC LIMIT ?", (n,))
        return [{"decision_id": r[0], "arm": int(r[1]), "created": float(r[2]), "forced": bool(r[3]), "reward": r[4]} for r in rows]

    def log_length(self) -> int:
        return int(self._read("SELECT COUNT(*) FROM feedback")[0][0])

    def ping(self) -> bool:
        try:
            self._read("SELECT 1")
            return self._writer.is_alive()
        except StoreUnavailable:
            return False

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self._queue.put(None)
            self._writer.join()
            self._conn.close()


def _settle(future, result, error) -> None:
    if future.cancelled():  # an event loop's caller went away
        return
    if error is None:
        future.set_result(result)
    else:
        future.set_exception(error)


def _settle_all(items: list) -> None:
    for item in items:
        _settle(*item)


# ------------------------------------------------------------------------------------------ Redis
_PUT_DECISION_LUA = """
local created = tonumber(ARGV[3])
redis.call('ZREMRANGEBYSCORE', KEYS[4], '-inf', '(' .. tostring(created - tonumber(ARGV[8])))
local waiting = redis.call('ZCARD', KEYS[4])
if waiting >= tonumber(ARGV[9]) then return waiting end
redis.call('HSET', KEYS[1], 'arm', ARGV[1], 'ctx', ARGV[2], 'created', ARGV[3], 'forced', ARGV[4])
if ARGV[11] ~= '' then redis.call('HSET', KEYS[1], 'p', ARGV[11]) end
redis.call('EXPIRE', KEYS[1], ARGV[5])
redis.call('HINCRBY', KEYS[2], ARGV[1], 1)
redis.call('LPUSH', KEYS[3], ARGV[6])
redis.call('LTRIM', KEYS[3], 0, tonumber(ARGV[7]) - 1)
redis.call('ZADD', KEYS[4], created, ARGV[10])
return -1
"""

_FEEDBACK_LUA = """
local d = redis.call('HMGET', KEYS[1], 'arm', 'ctx', 'created', 'reward')
if not d[1] then return {'unknown'} end
if d[4] then
  if d[4] == ARGV[1] then return {'duplicate', d[1]} end
  return {'conflict', d[1], d[4]}
end
local age = tonumber(ARGV[2]) - tonumber(d[3])
if age > tonumber(ARGV[3]) then return {'expired', d[1], tostring(age)} end
local arm = tonumber(d[1])
redis.call('HSET', KEYS[1], 'reward', ARGV[1])
redis.call('XADD', KEYS[2], '*', 'decision', ARGV[4], 'arm', d[1], 'reward', ARGV[1], 'value', ARGV[5 + arm], 'ctx', d[2], 'created', ARGV[2])
redis.call('HINCRBY', KEYS[3], d[1], 1)
redis.call('HINCRBYFLOAT', KEYS[4], d[1], ARGV[1])
redis.call('ZREM', KEYS[5], ARGV[4])
return {'accepted', d[1]}
"""

_SAVE_SNAPSHOT_LUA = """
local function parse(id)
  local ms, seq = string.match(id, '^(%d+)-(%d+)$')
  return tonumber(ms), tonumber(seq)
end
local old = redis.call('GET', KEYS[1])
if old then
  local oms, oseq = parse(old)
  local nms, nseq = parse(ARGV[1])
  if nms < oms or (nms == oms and nseq < oseq) then return 0 end
  if nms == oms and nseq == oseq and ARGV[3] ~= '1' then return 0 end
end
redis.call('SET', KEYS[1], ARGV[1])
redis.call('SET', KEYS[2], ARGV[2])
return 1
"""

_INIT_SNAPSHOT_LUA = """
if redis.call('EXISTS', KEYS[1]) == 0 then
  redis.call('SET', KEYS[1], '0-0')
  redis.call('SET', KEYS[2], ARGV[1])
end
return {redis.call('GET', KEYS[1]), redis.call('GET', KEYS[2])}
"""

_REGISTER_MODELS_LUA = """
local n_renames = tonumber(ARGV[1])
for i = 0, n_renames - 1 do
  local new, old = ARGV[2 + 2 * i], ARGV[3 + 2 * i]
  local id = redis.call('HGET', KEYS[1], old)
  if id then
    redis.call('HDEL', KEYS[1], old)
    redis.call('HSET', KEYS[1], new, id)
  end
end
for i = 2 + 2 * n_renames, #ARGV do
  if redis.call('HEXISTS', KEYS[1], ARGV[i]) == 0 then
    redis.call('HSET', KEYS[1], ARGV[i], redis.call('INCR', KEYS[2]) - 1)
  end
end
return redis.call('HGETALL', KEYS[1])
"""


def _reachable(method):
    """Redis connection failures become :class:`StoreUnavailable` (503)."""

    @functools.wraps(method)
    def wrapper(self, *args, **kwargs):
        try:
            return method(self, *args, **kwargs)
        except self._outages as exc:
            raise StoreUnavailable(f"The Redis store does not answer: {type(exc).__name__}: {exc}") from None

    return wrapper


class RedisStore(Store):
    """State in Redis under one key prefix; several router replicas share it (and its policy)."""

    kind = "redis"
    in_process = False
    log_start = "0-0"

    def __init__(self, url: str, prefix: str = "genbandit", recent_size: int = 200, timeout_s: float = 5.0) -> None:
        import redis

        self.url = url
        self.prefix = prefix
        self._recent_size = recent_size
        self._outages = (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError)
        self._r = redis.Redis.from_url(url, decode_responses=False, socket_timeout=timeout_s, socket_connect_timeout=timeout_s)
        self._r.ping()
        self._put = self._r.register_script(_PUT_DECISION_LUA)
        self._feedback = self._r.register_script(_FEEDBACK_LUA)
        self._save = self._r.register_script(_SAVE_SNAPSHOT_LUA)
        self._init = self._r.register_script(_INIT_SNAPSHOT_LUA)
        self._register = self._r.register_script(_REGISTER_MODELS_LUA)

    def _k(self, *parts: str) -> str:
        return ":".join((self.prefix, *parts))

    @_reachable
    def model_ids(self) -> dict[str, int]:
        return {k.decode(): int(v) for k, v in self._r.hgetall(self._k("models")).items()}

    @_reachable
    def register_models(self, names: list[str], renames: dict[str, str]) -> dict[str, int]:
        flat = [x for pair in renames.items() for x in pair]
        out = self._register(keys=[self._k("models"), self._k("model_seq")], args=[len(renames), *flat, *names])
        return {out[i].decode(): int(out[i + 1]) for i in range(0, len(out), 2)}

    @_reachable
    def read_snapshot(self) -> dict | None:
        text = self._r.get(self._k("snapshot", "state"))
        return None if text is None else json.loads(text)

    @_reachable
    def init_snapshot(self, state: dict) -> tuple[dict, Any]:
        cursor, text = self._init(keys=[self._k("snapshot", "cursor"), self._k("snapshot", "state")], args=[json.dumps(state)])
        return json.loads(text), cursor.decode()

    @_reachable
    def save_snapshot(self, state: dict, cursor: Any, replace: bool = False) -> bool:
        keys = [self._k("snapshot", "cursor"), self._k("snapshot", "state")]
        return bool(self._save(keys=keys, args=[cursor, json.dumps(state), "1" if replace else "0"]))

    @_reachable
    def put_decision(self, decision: Decision, keep_s: float, ttl_s: float, max_pending: int) -> None:
        summary = json.dumps({"decision_id": decision.id, "arm": decision.arm, "created": decision.created, "forced": decision.forced})
        keys = [self._k("d", decision.id), self._k("pulls"), self._k("recent"), self._k("pending")]
        args = [decision.arm, _pack(decision.context), repr(decision.created), int(decision.forced), max(1, int(keep_s + 0.999)),
                summary, self._recent_size, repr(ttl_s), max_pending, decision.id, "" if decision.propensity is None else repr(decision.propensity)]
        waiting = int(self._put(keys=keys, args=args))
        if waiting >= 0:
            raise TooManyPending(
                f"{waiting} decisions are waiting for feedback (the limit is {max_pending}): send feedback for them, "
                f"or wait until they expire ({ttl_s:g} s after they were made)."
            )

    @_reachable
    def get_decision(self, decision_id: str) -> Decision | None:
        d = self._r.hgetall(self._k("d", decision_id))
        if not d:
            return None
        reward, propensity = d.get(b"reward"), d.get(b"p")
        return Decision(
            id=decision_id,
            arm=int(d[b"arm"]),
            context=_unpack(d[b"ctx"]),
            created=float(d[b"created"]),
            forced=bool(int(d[b"forced"])),
            reward=None if reward is None else float(reward),
            propensity=None if propensity is None else float(propensity),
        )

    @_reachable
    def append_feedback(self, decision_id: str, reward: float, values: list[float], now: float, ttl_s: float) -> tuple[str, int]:
        keys = [self._k("d", decision_id), self._k("log"), self._k("feedback"), self._k("reward_sum"), self._k("pending")]
        out = self._feedback(keys=keys, args=[repr(float(reward)), repr(now), repr(ttl_s), decision_id, *map(repr, values)])
        status = out[0].decode()
        if status == "unknown":
            raise DecisionNotFound(f"Unknown decision id {decision_id!r} (never made here, or forgotten).")
        if status == "expired":
            raise DecisionExpired(f"Decision {decision_id!r} is {float(out[2]):.0f} s old; feedback is taken for {ttl_s:g} s.")
        if status == "conflict":
            raise FeedbackConflict(f"Decision {decision_id!r} already has reward {out[2].decode()}; got {reward!r}.")
        return status, int(out[1])

    @_reachable
    def read_log(self, after: Any, limit: int = 1000) -> list[LogEntry]:
        rows = self._r.xrange(self._k("log"), min="(" + str(after), max="+", count=limit)
        return [
            LogEntry(
                cursor=rid.decode(),
                decision_id=f[b"decision"].decode(),
                arm=int(f[b"arm"]),
                reward=float(f[b"reward"]),
                value=float(f[b"value"]),
                context=_unpack(f[b"ctx"]),
            )
            for rid, f in rows
        ]

    @_reachable
    def counters(self) -> dict[int, dict]:
        pipe = self._r.pipeline(transaction=False)
        for name in ("pulls", "feedback", "reward_sum"):
            pipe.hgetall(self._k(name))
        pulls, feedback, reward_sum = pipe.execute()
        arms = {int(a) for a in (*pulls, *feedback)}
        return {a: {"pulls": int(pulls.get(str(a).encode(), 0)), "feedback": int(feedback.get(str(a).encode(), 0)),
                    "reward_sum": float(reward_sum.get(str(a).encode(), 0.0))} for a in arms}

    @_reachable
    def recent(self, n: int) -> list[dict]:
        items = [json.loads(raw) for raw in self._r.lrange(self._k("recent"), 0, n - 1)]
        pipe = self._r.pipeline(transaction=False)
        for item in items:
            pipe.hget(self._k("d", item["decision_id"]), "reward")
        for item, reward in zip(items, pipe.execute()):
            item["reward"] = None if reward is None else float(reward)
        return items

    @_reachable
    def log_length(self) -> int:
        return int(self._r.xlen(self._k("log")))

    def ping(self) -> bool:
        try:
            return bool(self._r.ping())
        except Exception:  # noqa: BLE001 - any connection failure means unhealthy
            return False

    def close(self) -> None:
        self._r.close()


def open_store(spec, recent_size: int = 200) -> Store:
    """The store a :class:`~genbandit.router.config.StoreSpec` names."""
    if spec.kind == "redis":
        return RedisStore(spec.url, spec.prefix, recent_size=recent_size)
    return SQLiteStore(spec.path, spec.synchronous)
