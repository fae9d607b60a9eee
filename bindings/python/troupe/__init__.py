"""troupe from Python, through its flat C ABI (ctypes, no compiled
extension). Two forms over one node:

- troupe.Node: plain blocking calls for scripts (each waits for its
  completion with blocking pulls);
- troupe.aio.Node: asyncio, woken by the node's fd (loop.add_reader),
  a Future per request and async queue handlers.

bindings/python/README.md has the tour."""

import collections
import time

from ._core import Branch, log, outcome_of
from ._abi import (OUTCOME_FAILURE, OUTCOME_ONGOING, OUTCOME_SUCCESS,
                   OUTCOME_UNKNOWN, TroupeError)
from ._core import Core, Event, Page, TxnBase
from . import _msgpack as msgpack
from . import _workflow
from ._workflow import (VERSION_DEFAULT, Suspend, WorkflowFailure,
                        is_suspend)

__all__ = ["Node", "Txn", "Event", "Page", "Branch", "TroupeError",
           "msgpack", "WorkflowFailure", "Suspend", "is_suspend",
           "VERSION_DEFAULT",
           "OUTCOME_SUCCESS", "OUTCOME_FAILURE", "OUTCOME_ONGOING",
           "OUTCOME_UNKNOWN"]


class Node:
    """A node, blocking form. Node(path) opens and starts it; use it from
    one thread; close() (or a with block, or interpreter exit) ends it.

    sync: 0 the database's default, 1 every write synced before it
    returns, 2 not synced (survives a crash of the process only)."""

    def __init__(self, path, schedulers=0, workers=0, sync=0,
                 timeout=30.0, coord=None):
        """coord: the coordinator's options, a dict of any of shards,
        retry_min_ms, retry_max_ms, sync (bindings/c's
        troupe_abi_coord_options)."""
        self._c = Core(path, schedulers, workers, sync)
        self._done = {}
        self._events = collections.deque()
        self._branches = {}  # target index -> branch handler
        self._workflows = {}  # target index -> workflow function
        self.timeout = timeout
        try:
            if coord:
                self._c.coord_options(**coord)
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
            elif self._c.is_branch(r) and r.target in self._branches:
                self._branch(self._branches[r.target], r)
            elif r.target in self._workflows:
                self._workflow(self._workflows[r.target], r)
            else:
                self._events.append(r)

    def _branch(self, handler, rec):
        # run inline, from whichever call is pulling: a handler may use
        # the node (its own transactions, the barrier)
        try:
            outcome = outcome_of(handler(Branch(rec)))
        except Exception:
            log.exception("branch handler failed: answered UNKNOWN")
            outcome = OUTCOME_UNKNOWN
        try:
            self._c.reply(rec.id, outcome)
        except TroupeError as e:  # past its deadline: it comes again
            log.warning("branch reply refused: %s", e)

    def _workflow(self, fn, rec):
        # a run, inline as a branch handler is
        p = _workflow.parse_run(rec)
        if p is None:  # not a run: UNKNOWN, tried again later
            outcome, body = OUTCOME_UNKNOWN, b""
        else:
            gid, input, recs = p
            run = _workflow.RunSync(gid, recs, rec.attempt)
            exc = None
            try:
                fn(run, input)
            except BaseException as e:  # Suspend is one
                if isinstance(e, (KeyboardInterrupt, SystemExit)):
                    raise
                exc = e
            outcome, body = OUTCOME_SUCCESS, run._body(*run._end_of(exc))
        try:
            self._c.reply(rec.id, outcome, body)
        except TroupeError as e:  # past its deadline: it comes again
            log.warning("workflow run reply refused: %s", e)

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

    # the coordinator (docs/coordinator.md)
    def branch_handler(self, target, handler, credit=16, timeout_ms=0):
        """Serves the branches whose calls name `target`: handler(branch)
        (a Branch) runs whenever this node pulls (any blocking call, or
        serve()) and returns the outcome: None or True SUCCESS, False
        FAILURE, "ongoing", "unknown" (or OUTCOME_*); an exception is
        UNKNOWN (logged; the call is retried after its backoff)."""
        idx = self._c.register_pull(target, credit, timeout_ms)
        self._branches[idx] = handler

    def workflow(self, name, fn, credit=16, timeout_ms=0):
        """Registers workflow `name` (a pull target of that name): each
        run is fn(wf, input) (a RunSync, the input bytes), run whenever
        this node pulls, replayed from the top over the records (as
        troupe.aio.Node.workflow, with plain step functions)."""
        _workflow._wf_name(name, "workflow name")
        idx = self._c.register_pull(name, credit, timeout_ms)
        self._workflows[idx] = fn

    def workflow_submit(self, gid, name, input=None):
        """Submits instance gid of workflow `name` with input; returns
        once it is committed (also when gid exists)."""
        self._wait(self._c.workflow_submit(gid, name, input))

    def awakeable_resolve(self, id, payload=None):
        self._wait(self._c.awakeable_settle(id, payload, True))

    def awakeable_reject(self, id, reason=None):
        self._wait(self._c.awakeable_settle(id, reason, False))

    def serve(self, seconds):
        """Pulls for that long, running branch handlers (queue events
        wait for events())."""
        until = time.monotonic() + seconds
        while time.monotonic() < until:
            self._sort(self._c.pull(100))

    def saga_submit(self, gid, steps, **opts):
        """Submits saga gid: steps are {"action": (target, payload),
        "compensate": (target, payload) or None} (or (action, compensate)
        pairs); payload bytes as they are, anything else packed as
        msgpack. Options timeout_to_fail_ms, retry_limit, concurrent,
        after. Returns once it is committed (also when gid exists)."""
        self._wait(self._c.saga_submit(gid, steps, **opts))

    def tcc_prepare(self, gid):
        self._wait(self._c.tcc_prepare(gid))

    def xa_begin(self, gid):
        """Begins xa gid (docs/coordinator.md "XA over troupe's tables"):
        its branches are transactions prepared by Txn.xa_branch(gid),
        committed by gtx_submit, rolled back by gtx_abort."""
        self._wait(self._c.xa_begin(gid))

    def tcc_register(self, gid, confirm, cancel):
        """Registers a branch (confirm and cancel calls); its branch id,
        after which the try may run (barrier op "try")."""
        return self._wait(self._c.tcc_register(gid, confirm, cancel))

    def msg_prepare(self, gid, steps, query_target, grace_ms=0):
        self._wait(self._c.msg_prepare(gid, steps, query_target, grace_ms))

    def gtx_submit(self, gid):
        self._wait(self._c.gtx_op("submit", gid))

    def gtx_abort(self, gid, reason=None):
        self._wait(self._c.gtx_op("abort", gid, reason))

    def gtx_retry(self, gid):
        self._wait(self._c.gtx_op("retry", gid))

    def gtx_force_stop(self, gid):
        self._wait(self._c.gtx_op("force_stop", gid))

    def gtx_query(self, gid):
        """The stored state: a dict with mode, status, reason, steps,
        attempts, the times and branches (each with its ops)."""
        return self._wait(self._c.gtx_op("query", gid))

    def gtx_list(self, status=None, mode=None, after=None, limit=100):
        """A Page of stored transactions (items: dicts with gid, mode,
        status, reason, ...) in gid order after `after`, filtered by
        status and mode; page.cursor continues."""
        return self._wait(self._c.gtx_list(status, mode, after, limit))

    def gtx_wait(self, gid, statuses=("succeed", "failed"), timeout=30.0):
        """Serves branches until gid's status is one of statuses; its
        query."""
        until = time.monotonic() + timeout
        while True:
            q = self.gtx_query(gid)
            if q["status"] in statuses:
                return q
            if time.monotonic() > until:
                raise TimeoutError("gtx %s still %s" % (gid, q["status"]))
            self._sort(self._c.pull(50))

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

    def barrier(self, branch):
        """The barrier for branch (a Branch, or (mode, gid, branch id,
        op)) in this transaction: "execute" (do the business writes
        here), "null_compensation" or "duplicated" (write nothing);
        commit in every case."""
        return self._n._wait(self._core.txn_barrier(self._live(), branch))

    def xa_branch(self, gid):
        """Prepares this transaction as a branch of xa gid: its branch
        id ("01"...) once its writes are prepared and held, to be
        committed on gtx_submit or rolled back on gtx_abort. It ends the
        transaction, as commit does; a prepare that loses a conflict
        raises ECONFLICT with .detail its conflicts (abort the xa)."""
        return self._n._wait(self._core.txn_xa_branch(self._end(), gid))
