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
"""

from __future__ import annotations

import abc
import json
import sqlite3
import threading
from dataclasses import dataclass
from typing import Any

import numpy as np

from .errors import DecisionExpired, DecisionNotFound, FeedbackConflict

__all__ = ["Decision", "LogEntry", "Store", "SQLiteStore", "RedisStore", "open_store"]


@dataclass
class Decision:
    """One routing decision: the arm chosen for a context, waiting for feedback."""

    id: str
    arm: int
    context: np.ndarray  # (n_features,) float64, exactly what the policy saw
    created: float
    forced: bool = False
    reward: float | None = None


@dataclass
class LogEntry:
    """One acknowledged feedback, as the policy learns it."""

    cursor: Any
    decision_id: str
    arm: int
    reward: float  # as given
    value: float  # what the policy learns: reward - cost_weight * cost
    context: np.ndarray


def _pack(context: np.ndarray) -> bytes:
    return np.ascontiguousarray(context, dtype="<f8").tobytes()


def _unpack(blob: bytes) -> np.ndarray:
    return np.frombuffer(blob, dtype="<f8").copy()


class Store(abc.ABC):
    """The router's persistence; every method is safe to call from several threads."""

    kind: str = ""

    @abc.abstractmethod
    def init_snapshot(self, state: dict) -> tuple[dict, Any]:
        """Store ``state`` as the initial snapshot unless one exists; return the stored (state, cursor)."""

    @abc.abstractmethod
    def save_snapshot(self, state: dict, cursor: Any) -> bool:
        """Replace the snapshot if ``cursor`` is newer than the stored one; return whether it did."""

    @abc.abstractmethod
    def put_decision(self, decision: Decision, keep_s: float) -> None:
        """Persist a decision (it may be forgotten ``keep_s`` seconds after it was made)."""

    @abc.abstractmethod
    def get_decision(self, decision_id: str) -> Decision | None: ...

    @abc.abstractmethod
    def append_feedback(self, decision_id: str, reward: float, values: list[float], now: float, ttl_s: float) -> tuple[str, int]:
        """Atomically check the decision and append its feedback to the log.

        ``values[arm]`` is what the policy learns if the decision chose ``arm``. Returns
        ``("accepted", arm)`` once the entry is durable, or ``("duplicate", arm)`` when the same
        reward was already recorded. Raises :class:`DecisionNotFound`, :class:`DecisionExpired`
        or :class:`FeedbackConflict` (a different reward was recorded) and appends nothing.
        """

    @abc.abstractmethod
    def read_log(self, after: Any, limit: int = 1000) -> list[LogEntry]:
        """Log entries after cursor ``after``, oldest first."""

    @abc.abstractmethod
    def counters(self, n_arms: int) -> dict[str, list]:
        """``pulls``, ``feedback`` and ``reward_sum`` per arm, over all replicas."""

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
    forced INTEGER NOT NULL DEFAULT 0, reward REAL);
CREATE INDEX IF NOT EXISTS decisions_created ON decisions(created);
CREATE TABLE IF NOT EXISTS feedback (
    seq INTEGER PRIMARY KEY AUTOINCREMENT, decision_id TEXT NOT NULL UNIQUE, arm INTEGER NOT NULL,
    reward REAL NOT NULL, value REAL NOT NULL, context BLOB NOT NULL, created REAL NOT NULL);
CREATE TABLE IF NOT EXISTS snapshot (
    id INTEGER PRIMARY KEY CHECK (id = 1), cursor INTEGER NOT NULL, state TEXT NOT NULL, updated REAL NOT NULL);
CREATE TABLE IF NOT EXISTS counters (
    arm INTEGER PRIMARY KEY, pulls INTEGER NOT NULL DEFAULT 0, feedback INTEGER NOT NULL DEFAULT 0,
    reward_sum REAL NOT NULL DEFAULT 0);
"""


class _Pending:
    __slots__ = ("fn", "args", "durable", "done", "result", "error")

    def __init__(self, fn, args, durable: bool) -> None:
        self.fn, self.args, self.durable = fn, args, durable
        self.done, self.result, self.error = False, None, None


class SQLiteStore(Store):
    """State in one SQLite file (WAL), written through one connection with group commit.

    Concurrent writers queue their operations; whichever thread holds the write lock runs every
    queued operation in one transaction (each in its own savepoint, so one refusal undoes only
    itself) and commits once, so N concurrent feedbacks cost one fsync, not N. A writer returns
    only after the commit that holds its operation. Feedback commits are ``synchronous``
    (``FULL`` by default: fsynced); decision-only commits are ``NORMAL`` (they survive a crash of
    the process, and the next feedback commit makes them durable on disk too).
    """

    kind = "sqlite"

    def __init__(self, path: str, synchronous: str = "full", purge_every: int = 1000) -> None:
        self.path = path
        self.synchronous = synchronous
        self._purge_every = purge_every
        self._puts = 0
        self._lock = threading.Lock()  # held by the thread committing a batch
        self._queue: list[_Pending] = []
        self._queue_lock = threading.Lock()
        self._local = threading.local()
        self._conn = self._connect()
        self._conn.executescript(_SCHEMA)
        self._sync_mode = self.synchronous.upper()

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

    def _write(self, fn, *args, durable: bool = True):
        item = _Pending(fn, args, durable)
        with self._queue_lock:
            self._queue.append(item)
        with self._lock:
            if not item.done:
                with self._queue_lock:
                    batch, self._queue = self._queue, []
                self._commit(batch)
        if item.error is not None:
            raise item.error
        return item.result

    def _commit(self, batch: list[_Pending]) -> None:
        cur = self._conn.cursor()
        mode = self.synchronous.upper() if any(it.durable for it in batch) else "NORMAL"
        if mode != self._sync_mode:
            cur.execute(f"PRAGMA synchronous={mode}")
            self._sync_mode = mode
        try:
            cur.execute("BEGIN IMMEDIATE")
            for it in batch:
                cur.execute("SAVEPOINT op")
                try:
                    it.result = it.fn(cur, *it.args)
                except BaseException as exc:  # noqa: BLE001 - handed to the caller
                    cur.execute("ROLLBACK TO op")
                    it.error = exc
                cur.execute("RELEASE op")
            cur.execute("COMMIT")
        except BaseException as exc:  # noqa: BLE001 - the whole batch failed; every caller hears of it
            if self._conn.in_transaction:
                cur.execute("ROLLBACK")
            for it in batch:
                it.error = it.error or exc
        finally:
            for it in batch:
                it.done = True

    def init_snapshot(self, state: dict) -> tuple[dict, Any]:
        def op(cur):
            cur.execute("INSERT OR IGNORE INTO snapshot (id, cursor, state, updated) VALUES (1, 0, ?, strftime('%s','now'))", (json.dumps(state),))
            return cur.execute("SELECT state, cursor FROM snapshot WHERE id = 1").fetchone()

        text, cursor = self._write(op)
        return json.loads(text), int(cursor)

    def save_snapshot(self, state: dict, cursor: Any) -> bool:
        text = json.dumps(state)

        def op(cur):
            cur.execute("UPDATE snapshot SET cursor = ?, state = ?, updated = strftime('%s','now') WHERE id = 1 AND cursor < ?", (cursor, text, cursor))
            return cur.rowcount == 1

        return self._write(op)

    def put_decision(self, decision: Decision, keep_s: float) -> None:
        def op(cur):
            cur.execute(
                "INSERT INTO decisions (id, arm, context, created, forced) VALUES (?, ?, ?, ?, ?)",
                (decision.id, decision.arm, _pack(decision.context), decision.created, int(decision.forced)),
            )
            cur.execute("INSERT INTO counters (arm, pulls) VALUES (?, 1) ON CONFLICT(arm) DO UPDATE SET pulls = pulls + 1", (decision.arm,))
            self._puts += 1
            if self._puts % self._purge_every == 0:
                cur.execute("DELETE FROM decisions WHERE created < ?", (decision.created - keep_s,))

        self._write(op, durable=False)

    def get_decision(self, decision_id: str) -> Decision | None:
        row = self._reader().execute("SELECT id, arm, context, created, forced, reward FROM decisions WHERE id = ?", (decision_id,)).fetchone()
        if row is None:
            return None
        return Decision(id=row[0], arm=int(row[1]), context=_unpack(row[2]), created=float(row[3]), forced=bool(row[4]), reward=row[5])

    def append_feedback(self, decision_id: str, reward: float, values: list[float], now: float, ttl_s: float) -> tuple[str, int]:
        def op(cur):
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
            return "accepted", arm

        return self._write(op)

    def read_log(self, after: Any, limit: int = 1000) -> list[LogEntry]:
        rows = self._reader().execute(
            "SELECT seq, decision_id, arm, reward, value, context FROM feedback WHERE seq > ? ORDER BY seq LIMIT ?", (int(after), limit)
        ).fetchall()
        return [LogEntry(int(r[0]), r[1], int(r[2]), float(r[3]), float(r[4]), _unpack(r[5])) for r in rows]

    def counters(self, n_arms: int) -> dict[str, list]:
        out = {"pulls": [0] * n_arms, "feedback": [0] * n_arms, "reward_sum": [0.0] * n_arms}
        for arm, pulls, feedback, reward_sum in self._reader().execute("SELECT arm, pulls, feedback, reward_sum FROM counters"):
            if 0 <= arm < n_arms:
                out["pulls"][arm], out["feedback"][arm], out["reward_sum"][arm] = int(pulls), int(feedback), float(reward_sum)
        return out

    def recent(self, n: int) -> list[dict]:
        rows = self._reader().execute("SELECT id, arm, created, forced, reward FROM decisions ORDER BY created DESC LIMIT ?", (n,)).fetchall()
        return [{"decision_id": r[0], "arm": int(r[1]), "created": float(r[2]), "forced": bool(r[3]), "reward": r[4]} for r in rows]

    def log_length(self) -> int:
        return int(self._reader().execute("SELECT COUNT(*) FROM feedback").fetchone()[0])

    def ping(self) -> bool:
        try:
            self._reader().execute("SELECT 1").fetchone()
            return True
        except sqlite3.Error:
            return False

    def close(self) -> None:
        with self._lock:
            self._conn.close()


# ------------------------------------------------------------------------------------------ Redis
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
  if nms < oms or (nms == oms and nseq <= oseq) then return 0 end
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


class RedisStore(Store):
    """State in Redis under one key prefix; several router replicas share it (and its policy)."""

    kind = "redis"

    def __init__(self, url: str, prefix: str = "genbandit", recent_size: int = 200) -> None:
        import redis

        self.url = url
        self.prefix = prefix
        self._recent_size = recent_size
        self._r = redis.Redis.from_url(url, decode_responses=False)
        self._r.ping()
        self._feedback = self._r.register_script(_FEEDBACK_LUA)
        self._save = self._r.register_script(_SAVE_SNAPSHOT_LUA)
        self._init = self._r.register_script(_INIT_SNAPSHOT_LUA)

    def _k(self, *parts: str) -> str:
        return ":".join((self.prefix, *parts))

    def init_snapshot(self, state: dict) -> tuple[dict, Any]:
        cursor, text = self._init(keys=[self._k("snapshot", "cursor"), self._k("snapshot", "state")], args=[json.dumps(state)])
        return json.loads(text), cursor.decode()

    def save_snapshot(self, state: dict, cursor: Any) -> bool:
        return bool(self._save(keys=[self._k("snapshot", "cursor"), self._k("snapshot", "state")], args=[cursor, json.dumps(state)]))

    def put_decision(self, decision: Decision, keep_s: float) -> None:
        key = self._k("d", decision.id)
        summary = json.dumps({"decision_id": decision.id, "arm": decision.arm, "created": decision.created, "forced": decision.forced})
        pipe = self._r.pipeline(transaction=True)
        pipe.hset(key, mapping={"arm": decision.arm, "ctx": _pack(decision.context), "created": repr(decision.created), "forced": int(decision.forced)})
        pipe.expire(key, max(1, int(keep_s + 0.999)))
        pipe.hincrby(self._k("pulls"), str(decision.arm), 1)
        pipe.lpush(self._k("recent"), summary)
        pipe.ltrim(self._k("recent"), 0, self._recent_size - 1)
        pipe.execute()

    def get_decision(self, decision_id: str) -> Decision | None:
        d = self._r.hgetall(self._k("d", decision_id))
        if not d:
            return None
        reward = d.get(b"reward")
        return Decision(
            id=decision_id,
            arm=int(d[b"arm"]),
            context=_unpack(d[b"ctx"]),
            created=float(d[b"created"]),
            forced=bool(int(d[b"forced"])),
            reward=None if reward is None else float(reward),
        )

    def append_feedback(self, decision_id: str, reward: float, values: list[float], now: float, ttl_s: float) -> tuple[str, int]:
        keys = [self._k("d", decision_id), self._k("log"), self._k("feedback"), self._k("reward_sum")]
        out = self._feedback(keys=keys, args=[repr(float(reward)), repr(now), repr(ttl_s), decision_id, *map(repr, values)])
        status = out[0].decode()
        if status == "unknown":
            raise DecisionNotFound(f"Unknown decision id {decision_id!r} (never made here, or forgotten).")
        if status == "expired":
            raise DecisionExpired(f"Decision {decision_id!r} is {float(out[2]):.0f} s old; feedback is taken for {ttl_s:g} s.")
        if status == "conflict":
            raise FeedbackConflict(f"Decision {decision_id!r} already has reward {out[2].decode()}; got {reward!r}.")
        return status, int(out[1])

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

    def counters(self, n_arms: int) -> dict[str, list]:
        pipe = self._r.pipeline(transaction=False)
        for name in ("pulls", "feedback", "reward_sum"):
            pipe.hgetall(self._k(name))
        pulls, feedback, reward_sum = pipe.execute()
        return {
            "pulls": [int(pulls.get(str(a).encode(), 0)) for a in range(n_arms)],
            "feedback": [int(feedback.get(str(a).encode(), 0)) for a in range(n_arms)],
            "reward_sum": [float(reward_sum.get(str(a).encode(), 0.0)) for a in range(n_arms)],
        }

    def recent(self, n: int) -> list[dict]:
        items = [json.loads(raw) for raw in self._r.lrange(self._k("recent"), 0, n - 1)]
        pipe = self._r.pipeline(transaction=False)
        for item in items:
            pipe.hget(self._k("d", item["decision_id"]), "reward")
        for item, reward in zip(items, pipe.execute()):
            item["reward"] = None if reward is None else float(reward)
        return items

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
