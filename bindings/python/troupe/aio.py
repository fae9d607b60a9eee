"""troupe with asyncio: the node's wake fd is watched by the running loop
(loop.add_reader), which drains completions and events with batched,
non-blocking pulls until none is left. Every request is a coroutine that
awaits its completion; queue handlers are coroutines, at most `credit`
of them in flight per subscription. Nothing calls into Python from a
troupe thread, and nothing blocks the loop but open and close, which run
in a worker thread."""

import asyncio

from . import _msgpack
from ._abi import (CODE, OUTCOME_FAILURE, OUTCOME_SUCCESS, OUTCOME_UNKNOWN,
                   TroupeError)
from ._core import (ActorMessage, Branch, Core, Event, TxnBase, log,
                    outcome_of)
from . import _workflow

__all__ = ["Node", "open"]


async def open(path, schedulers=0, workers=0, sync=0, coord=None):
    """Opens and starts a node for the running loop. coord: the
    coordinator's options (a dict of any of shards, retry_min_ms,
    retry_max_ms, sync)."""
    loop = asyncio.get_running_loop()
    core = await asyncio.to_thread(Core, path, schedulers, workers, sync)
    try:
        if coord:
            core.coord_options(**coord)
        await asyncio.to_thread(core.start)
    except BaseException:
        await asyncio.to_thread(core.close, True)
        raise
    return Node(core, loop)


class Node:
    def __init__(self, core, loop):
        self._c = core
        self._loop = loop
        self._futs = {}
        self._handlers = {}  # target index -> handler
        self._workflows = set()  # the target indexes that are workflows
        self._running = set()
        self._closing = False
        self._replies = []  # answers of this loop turn: _flush
        self._flush_soon = False
        loop.add_reader(core.wake_fd(), self._drain)
        # Records may be ready already (the fd is edge-triggered).
        loop.call_soon(self._drain)

    async def __aenter__(self):
        return self

    async def __aexit__(self, *exc):
        if not self._closing:
            await self.close()

    # ---- the drain ----
    def _drain(self):
        if self._closing:
            return
        while True:
            try:
                recs = self._c.pull(0, 256)
            except TroupeError as e:
                if e.code == CODE["ECLOSED"]:
                    return
                raise
            if not recs:
                return
            for r in recs:
                if self._c.is_completion(r):
                    rid, v = self._c.completion(r)
                    f = self._futs.pop(rid, None)
                    if f is None or f.done():
                        continue
                    if isinstance(v, TroupeError):
                        f.set_exception(v)
                    else:
                        f.set_result(v)
                else:
                    self._start_handler(r)

    def _start_handler(self, rec):
        h = self._handlers.get(rec.target)
        if h is None:  # not ours: it settles UNKNOWN, comes again
            self._reply(rec.id, 4, b"")
            return
        run = self._run_workflow if rec.target in self._workflows \
            else self._run
        t = self._loop.create_task(run(h, rec))
        self._running.add(t)
        t.add_done_callback(self._running.discard)

    async def _run(self, handler, rec):
        outcome, body = OUTCOME_SUCCESS, b""
        actor = self._c.is_actor_message(rec)
        if self._c.is_branch(rec):
            try:
                outcome = outcome_of(await handler(Branch(rec)))
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("branch handler failed: answered UNKNOWN")
                outcome = OUTCOME_UNKNOWN
            if not self._closing:
                self._reply(rec.id, outcome, b"")
            return
        try:
            if actor:  # the handler's bytes are the reply
                res = await handler(ActorMessage(rec))
                body = bytes(res) if res is not None else b""
            else:
                res = await handler(Event(rec))
                if isinstance(res, dict) and "reschedule" in res:
                    body = _msgpack.packb(
                        {"reschedule": int(res["reschedule"])})
        except asyncio.CancelledError:
            raise
        except Exception as e:
            outcome = OUTCOME_FAILURE
            body = str(e).encode("utf-8") if actor else b""
        if self._closing:
            return
        self._reply(rec.id, outcome, body)

    async def _run_workflow(self, fn, rec):
        p = _workflow.parse_run(rec)
        if p is None:  # not a run: UNKNOWN, tried again later
            self._reply(rec.id, OUTCOME_UNKNOWN, b"")
            return
        gid, input, recs = p
        run = _workflow.RunAsync(gid, recs, rec.attempt)
        exc = None
        try:
            await fn(run, input)
        except (asyncio.CancelledError, KeyboardInterrupt, SystemExit):
            raise
        except BaseException as e:  # Suspend is one
            exc = e
        end, reason = run._end_of(exc)
        if not self._closing:
            self._reply(rec.id, OUTCOME_SUCCESS, run._body(end, reason))

    def _reply(self, task_id, outcome, body):
        """Queues an answer; the answers of one loop turn go back in one
        reply_batch call (after the drain, or at the turn's end)."""
        self._replies.append((task_id, outcome, body))
        if not self._flush_soon:
            self._flush_soon = True
            self._loop.call_soon(self._flush)

    def _flush(self):
        self._flush_soon = False
        r, self._replies = self._replies, []
        if r and not self._closing:
            # a refused answer (past its deadline: it settled UNKNOWN and
            # comes again) changes nothing
            self._c.reply_batch(r)

    def _request(self, start, *args):
        """A Future for the request start(*args) makes."""
        try:
            rid = start(*args)
        except TroupeError as e:
            if e.code != CODE["EBUSY"]:
                raise
            self._drain()  # completions waiting: take them, then retry
            rid = start(*args)
        f = self._loop.create_future()
        self._futs[rid] = f
        return f

    # ---- lifecycle ----
    async def close(self):
        """Closes the node: requests still waiting fail with ECLOSED,
        handlers still running are cancelled (their events stay
        pending)."""
        if self._closing:
            raise TroupeError(CODE["ESTATE"], "close: closed already")
        self._flush()  # answers given before close count
        self._closing = True
        self._loop.remove_reader(self._c.wake_fd())
        for t in list(self._running):
            t.cancel()
        await asyncio.to_thread(self._c.close)
        for f in self._futs.values():
            if not f.done():
                f.set_exception(TroupeError(CODE["ECLOSED"],
                                            "the node closed"))
        self._futs.clear()

    def set_limits(self, requests=0, bytes=0):
        self._c.set_limits(requests, bytes)

    # ---- tables ----
    async def create_table(self, name, indexes=()):
        return await self._request(self._c.table_create, name, indexes)

    async def get(self, table, key):
        return await self._request(self._c.get, table, key)

    async def put(self, table, key, doc):
        return await self._request(self._c.put, table, key, doc)

    async def delete(self, table, key):
        return await self._request(self._c.delete, table, key)

    async def scan(self, table, **kw):
        return await self._request(lambda: self._c.scan(table, **kw))

    async def query(self, table, index, **kw):
        return await self._request(lambda: self._c.query(table, index,
                                                         **kw))

    def begin(self):
        return Txn(self)

    # ---- queues ----
    async def create_queue(self, name, partitions=1, retention_ms=0,
                           max_attempts=0):
        await asyncio.to_thread(self._c.queue_create, name, partitions,
                                retention_ms, max_attempts)

    async def publish(self, queue, id, key, payload, time_ms=0):
        return await self._request(self._c.publish, queue, id, key, payload,
                                   time_ms)

    def subscribe(self, queue, handler, credit=16, timeout_ms=0, name=None):
        """Runs `await handler(event)` for each event of queue, at most
        credit at once: returning acknowledges the event (returning
        {"reschedule": time_ms} reschedules it), raising leaves it
        pending (delivered again, attempt + 1)."""
        name = name or "py.%s" % queue
        idx = self._c.register_pull(name, credit, timeout_ms)
        self._handlers[idx] = handler
        self._c.subscribe(queue, name)


    # ---- the coordinator (docs/coordinator.md) ----
    def branch_handler(self, target, handler, credit=16, timeout_ms=0):
        """Serves the branches whose calls name `target`: `await
        handler(branch)` (a Branch), at most credit at once, returns the
        outcome: None or True SUCCESS, False FAILURE, "ongoing",
        "unknown" (or OUTCOME_*); raising is UNKNOWN (logged; the call is
        retried after its backoff)."""
        idx = self._c.register_pull(target, credit, timeout_ms)
        self._handlers[idx] = handler

    def workflow(self, name, fn, credit=16, timeout_ms=0):
        """Registers workflow `name` (a pull target of that name): each
        run is `await fn(wf, input)` (a RunAsync, the input bytes),
        replayed from the top over the records so far (wf.step,
        wf.awakeable, wf.await_, wf.version). Returning: the workflow
        succeeds; raising WorkflowFailure (a failed step let through, or
        one of its own): it fails and every registered step's
        compensation runs, in reverse; raising anything else: the run is
        tried again after the backoff (logged)."""
        _workflow._wf_name(name, "workflow name")
        idx = self._c.register_pull(name, credit, timeout_ms)
        self._handlers[idx] = fn
        self._workflows.add(idx)

    async def workflow_submit(self, gid, name, input=None):
        """Submits instance gid of workflow `name` with input (bytes as
        they are, anything else msgpack); returns once it is committed
        (also when gid exists: nothing runs twice)."""
        return await self._request(self._c.workflow_submit, gid, name, input)

    async def awakeable_resolve(self, id, payload=None):
        """Resolves awakeable id: its workflow runs again and its await_
        gives payload. The same resolution again is OK; another, or one
        after the workflow ended, ECONFLICT."""
        return await self._request(self._c.awakeable_settle, id, payload,
                                   True)

    async def awakeable_reject(self, id, reason=None):
        """Rejects awakeable id: its await_ raises WorkflowFailure."""
        return await self._request(self._c.awakeable_settle, id, reason,
                                   False)

    async def saga_submit(self, gid, steps, **opts):
        """As troupe.Node.saga_submit."""
        return await self._request(
            lambda: self._c.saga_submit(gid, steps, **opts))

    async def tcc_prepare(self, gid):
        return await self._request(self._c.tcc_prepare, gid)

    async def xa_begin(self, gid):
        """As troupe.Node.xa_begin."""
        return await self._request(self._c.xa_begin, gid)

    async def tcc_register(self, gid, confirm, cancel):
        return await self._request(self._c.tcc_register, gid, confirm,
                                   cancel)

    async def msg_prepare(self, gid, steps, query_target, grace_ms=0):
        return await self._request(self._c.msg_prepare, gid, steps,
                                   query_target, grace_ms)

    async def gtx_submit(self, gid):
        return await self._request(self._c.gtx_op, "submit", gid)

    async def gtx_abort(self, gid, reason=None):
        return await self._request(self._c.gtx_op, "abort", gid, reason)

    async def gtx_retry(self, gid):
        return await self._request(self._c.gtx_op, "retry", gid)

    async def gtx_force_stop(self, gid):
        return await self._request(self._c.gtx_op, "force_stop", gid)

    async def gtx_query(self, gid):
        return await self._request(self._c.gtx_op, "query", gid)

    async def gtx_list(self, status=None, mode=None, after=None, limit=100):
        return await self._request(self._c.gtx_list, status, mode, after,
                                   limit)

    async def gtx_wait(self, gid, statuses=("succeed", "failed"),
                       timeout=30.0):
        """Polls gid's query until its status is one of statuses."""
        until = self._loop.time() + timeout
        while True:
            q = await self.gtx_query(gid)
            if q["status"] in statuses:
                return q
            if self._loop.time() > until:
                raise TimeoutError("gtx %s still %s" % (gid, q["status"]))
            await asyncio.sleep(0.02)

    # ---- actors ----
    def serve_actor(self, name, handler, credit=16, timeout_ms=0, tag=0):
        """Serves actor `name`: `await handler(msg)` for each message
        (an ActorMessage), at most credit at once; what it returns (bytes
        or None) is an ask's reply, what it raises answers EFAILED with
        the exception's text."""
        target = "py.actor.%s" % name
        idx = self._c.register_pull(target, credit, timeout_ms)
        self._handlers[idx] = handler
        self._c.actor_serve(name, target, tag)

    async def ask(self, name, kind, body=b"", timeout_ms=0):
        """Asks actor `name` on this node; its reply's body (bytes), or
        TroupeError (its .detail the reply's body, if any)."""
        return await self._request(self._c.actor_ask, name, kind, body,
                                   timeout_ms)


class Txn(TxnBase):
    """A transaction: await get() and commit(); put(), delete() and
    rollback() never wait."""

    def __init__(self, node):
        super().__init__(node._c)
        self._n = node

    async def get(self, table, key):
        return await self._n._request(self._core.txn_get, self._live(),
                                      table, key)

    async def commit(self):
        return await self._n._request(self._core.txn_commit, self._end())

    async def barrier(self, branch):
        """As troupe.Txn.barrier: "execute", "null_compensation" or
        "duplicated"."""
        return await self._n._request(self._core.txn_barrier, self._live(),
                                      branch)

    async def xa_branch(self, gid):
        """As troupe.Txn.xa_branch: the branch id once prepared."""
        return await self._n._request(self._core.txn_xa_branch, self._end(),
                                      gid)
