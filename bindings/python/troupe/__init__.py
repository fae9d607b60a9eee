"""troupe from Python, through its flat C ABI (ctypes, no compiled
extension). Two forms over one node:

- troupe.Node: plain blocking calls for scripts (each waits for its
  completion with blocking pulls);
- troupe.aio.Node: asyncio, woken by the node's fd (loop.add_reader),
  a Future per request and async queue handlers.

bindings/python/README.md has the tour."""

import collections
import time

from ._abi import (OUTCOME_FAILURE, OUTCOME_ONGOING, OUTCOME_SUCCESS,
                   OUTCOME_UNKNOWN, TroupeError)
from ._core import Core, Event, Page, TxnBase
from . import _msgpack as msgpack

__all__ = ["Node", "Txn", "Event", "Page", "TroupeError", "msgpack",
           "OUTCOME_SUCCESS", "OUTCOME_FAILURE", "OUTCOME_ONGOING",
           "OUTCOME_UNKNOWN"]


class Node:
    """A node, blocking form. Node(path) opens and starts it; use it from
    one thread; close() (or a with block, or interpreter exit) ends it.

    sync: 0 the database's default, 1 every write synced before it
    returns, 2 not synced (survives a crash of the process only)."""

    def __init__(self, path, schedulers=0, workers=0, sync=0,
                 timeout=30.0):
        self._c = Core(path, schedulers, workers, sync)
        self._done = {}
        self._events = collections.deque()
        self.timeout = timeout
        try:
            self._c.start()
        except BaseException:
            self._c.close(quiet=True)
            raise

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        if not self._c.closed:
            self.close()

    def close(self):
        """Closes the node (joins its threads). Closing twice raises
        TroupeError ESTATE."""
        self._c.close()

    def _sort(self, recs):
        for r in recs:
            if self._c.is_completion(r):
                rid, v = self._c.completion(r)
                self._done[rid] = v
            else:
                self._events.append(r)

    def _wait(self, rid):
        deadline = time.monotonic() + self.timeout
        while rid not in self._done:
            if time.monotonic() > deadline:
                raise TimeoutError("request %d: no completion" % rid)
            self._sort(self._c.pull(200))
        v = self._done.pop(rid)
        if isinstance(v, TroupeError):
            raise v
        return v

    # tables
    def create_table(self, name, indexes=()):
        """indexes: [{"name": .., "fields": [(path, type), ..],
        "unique": bool}]; types "string", "int", "float", "bool",
        "timestamp", "bytes", "string_casefold"."""
        return self._wait(self._c.table_create(name, indexes))

    def get(self, table, key):
        """The document at key, or None."""
        return self._wait(self._c.get(table, key))

    def put(self, table, key, doc):
        self._wait(self._c.put(table, key, doc))

    def delete(self, table, key):
        """True if a row was deleted, False if there was none."""
        return self._wait(self._c.delete(table, key))

    def scan(self, table, **kw):
        """A Page of (key, doc); keywords start, end, after (a cursor),
        limit, reverse."""
        return self._wait(self._c.scan(table, **kw))

    def query(self, table, index, **kw):
        """A Page of (index key, primary key, doc or value); keywords
        values, start, end, after, limit, reverse, rows."""
        return self._wait(self._c.query(table, index, **kw))

    def begin(self):
        return Txn(self)

    # queues
    def create_queue(self, name, partitions=1, retention_ms=0,
                     max_attempts=0):
        """max_attempts: an event delivered that many times without an
        outcome is parked instead of delivered again (0: no limit)."""
        self._c.queue_create(name, partitions, retention_ms, max_attempts)

    def publish(self, queue, id, key, payload, time_ms=0):
        self._wait(self._c.publish(queue, id, key, payload, time_ms))

    def subscribe(self, queue, name=None, credit=16, timeout_ms=0):
        """Makes this node a pull worker of queue; its events come from
        events()."""
        name = name or "py.%s" % queue
        self._c.register_pull(name, credit, timeout_ms)
        self._c.subscribe(queue, name)

    def events(self, timeout=1.0, max=256):
        """The events ready, waiting up to timeout seconds for one;
        answer each with ack(), fail() or reschedule()."""
        if not self._events:
            self._sort(self._c.pull(int(timeout * 1000), max))
        out = []
        while self._events and len(out) < max:
            out.append(_Delivery(self._c, self._events.popleft()))
        return out


class _Delivery(Event):
    __slots__ = ("_c",)

    def __init__(self, core, rec):
        super().__init__(rec)
        self._c = core

    def ack(self):
        self._c.reply(self.task_id, OUTCOME_SUCCESS)

    def fail(self):
        self._c.reply(self.task_id, OUTCOME_FAILURE)

    def reschedule(self, time_ms):
        self._c.reply(self.task_id, OUTCOME_SUCCESS,
                      msgpack.packb({"reschedule": time_ms}))


class Txn(TxnBase):
    """A transaction (blocking form): reads see a snapshot plus its own
    writes; commit() raises TroupeError ECONFLICT (its .detail lists
    (table, key, kinds)) when a key changed since. put() and delete()
    buffer; rollback() ends it without writing. As a with block it
    commits at the end, or rolls back on an exception."""

    def __init__(self, node):
        super().__init__(node._c)
        self._n = node

    def __enter__(self):
        return self

    def __exit__(self, et, ev, tb):
        if self._id is not None:
            if et is None:
                self.commit()
            else:
                self.rollback()

    def get(self, table, key):
        return self._n._wait(self._core.txn_get(self._live(), table, key))

    def commit(self):
        self._n._wait(self._core.txn_commit(self._end()))
