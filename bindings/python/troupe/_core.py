"""What the blocking and the asyncio forms share: the node's handle,
request ids, the pull buffer, and turning completions into Python
values. Not thread-safe: one thread (or one event loop) per node."""

import atexit
import ctypes
import struct
import weakref

from . import _msgpack
import logging

from ._abi import (CODE, ERR, KIND_ACTOR, KIND_BRANCH, KIND_COMPLETION,
                   KIND_QUEUE, OUTCOME_FAILURE, OUTCOME_ONGOING,
                   OUTCOME_SUCCESS, OUTCOME_UNKNOWN,
                   TroupeError, check, lib, parse_branch_header,
                   parse_queue_header, parse_records)

log = logging.getLogger("troupe")

_live = weakref.WeakSet()
_reply = lib.troupe_abi_reply


@atexit.register
def _close_all():
    # An interpreter exiting with nodes open: join their threads first.
    for c in list(_live):
        c.close(quiet=True)


def _b(x, what):
    if x is None:
        return None
    if isinstance(x, str):
        return x.encode("utf-8")
    if isinstance(x, (bytes, bytearray, memoryview)):
        return bytes(x)
    raise TypeError("%s: bytes or str, not %s" % (what, type(x).__name__))


def _len(x):
    return 0 if x is None else len(x)


def _name(x, what):
    if not isinstance(x, str):
        raise TypeError("%s: a str, not %s" % (what, type(x).__name__))
    return x.encode("utf-8")


class Page:
    """A page of a scan (rows: [(key, doc)]) or index query (hits:
    [(index_key, primary_key, value)]), with the cursor to continue
    after and whether more follow."""

    def __init__(self, items, cursor, more):
        self.items = items
        self.cursor = cursor
        self.more = more

    @property
    def rows(self):
        return self.items

    @property
    def hits(self):
        return self.items

    def __repr__(self):
        return "Page(%d items, more=%s)" % (len(self.items), self.more)


class Event:
    """A queue event delivered to a handler."""

    __slots__ = ("queue", "id", "key", "payload", "attempt", "time_ms",
                 "partition", "task_id", "owner_kind", "owner_id")

    def __init__(self, rec):
        (self.time_ms, _order, self.partition, self.queue, self.id,
         self.key, self.owner_kind, self.owner_id) = \
            parse_queue_header(rec.header)
        self.payload = _msgpack.unpackb(rec.body)
        self.attempt = rec.attempt
        self.task_id = rec.id

    def __repr__(self):
        return "Event(%s, id=%r, attempt=%d)" % (self.queue, self.id,
                                                 self.attempt)


class ActorMessage:
    """A message to an actor the host serves (troupe/hostactor.h's
    header): its kind, whether the sender waits for a reply (an ask), the
    serving tag and the body bytes."""

    __slots__ = ("kind", "ask", "tag", "deadline_ms", "body", "task_id")

    def __init__(self, rec):
        k, flags, _n, _s, _g, tag, dl = struct.unpack_from("<IIIIIIq",
                                                           rec.header, 0)
        self.kind, self.ask, self.tag, self.deadline_ms = \
            k, bool(flags & 1), tag, dl
        self.body = rec.body
        self.task_id = rec.id


class Branch:
    """A call of a global transaction's branch (a task of kind branch):
    mode ("saga", "tcc", "msg"), gid, branch_id ("01".., "00" for a
    message's query-back), op ("action", "compensate", "confirm",
    "cancel", "msg"), payload (the bytes given at submit) and attempt
    (the number of this dispatch: 1 the first)."""

    __slots__ = ("mode", "gid", "branch_id", "op", "payload", "attempt",
                 "task_id")

    def __init__(self, rec):
        self.mode, self.gid, self.branch_id, self.op = \
            parse_branch_header(rec.header)
        self.payload = rec.body
        self.attempt = rec.attempt
        self.task_id = rec.id

    def value(self):
        """The payload as msgpack (what a non-bytes payload was packed
        as at submit)."""
        return _msgpack.unpackb(self.payload)

    def __repr__(self):
        return "Branch(%s %s %s %s, attempt=%d)" % (
            self.mode, self.gid, self.branch_id, self.op, self.attempt)


_OUTCOMES = {"success": OUTCOME_SUCCESS, "failure": OUTCOME_FAILURE,
             "ongoing": OUTCOME_ONGOING, "unknown": OUTCOME_UNKNOWN}


def outcome_of(res):
    """A branch handler's result as an outcome: None or True SUCCESS,
    False FAILURE, an OUTCOME_* number or its name as itself."""
    if res is None or res is True:
        return OUTCOME_SUCCESS
    if res is False:
        return OUTCOME_FAILURE
    if isinstance(res, str) and res.lower() in _OUTCOMES:
        return _OUTCOMES[res.lower()]
    if isinstance(res, int) and 1 <= res <= 4:
        return res
    log.error("a branch handler returned %r: answered UNKNOWN", res)
    return OUTCOME_UNKNOWN


def _payload(p):
    if p is None or isinstance(p, (bytes, bytearray, memoryview)):
        return bytes(p) if p is not None else None
    return _msgpack.packb(p)


def _call(c, what):
    """A call (target, payload) as the ABI's [target str, payload]."""
    if not isinstance(c, (tuple, list)) or len(c) != 2 or \
            not isinstance(c[0], str):
        raise TypeError("%s: a call is (target str, payload)" % what)
    return [c[0], _payload(c[1])]


def _step(s):
    if isinstance(s, dict):
        a, c = s.get("action"), s.get("compensate")
        if set(s) - {"action", "compensate"}:
            raise TypeError("a step is {'action': call, 'compensate': call}")
    else:
        a, c = s
    return {"action": _call(a, "action"),
            "compensate": _call(c, "compensate") if c is not None else None}


def _decode(kind, status, body):
    """A completion's value, or the TroupeError it stands for."""
    if kind == "xabranch" and status == 0:  # its branch id
        return _msgpack.unpackb(body)
    if kind in ("gtx", "register", "gquery", "glist", "barrier",
                "xabranch") and status != 0 and \
            not (kind == "xabranch" and status == CODE["ECONFLICT"]):
        try:
            why = _msgpack.unpackb(body) if body else ""
        except Exception:
            why = ""
        return TroupeError(status, "%s: %s" % (kind, why or
                                               ERR.get(status, status)))
    if kind in ("register", "gquery", "barrier"):
        return _msgpack.unpackb(body)
    if kind == "glist":
        m = _msgpack.unpackb(body)
        return Page(m["items"], m["cursor"], m["more"])
    if kind == "ask" and status == 0:
        return body
    if kind == "ask" and body:
        return TroupeError(status, "ask: %s" % ERR.get(status, status),
                           body)
    if kind == "get":
        if status == 0:
            return _msgpack.unpackb(body)
        if status == CODE["ENOENT"]:
            return None
    elif kind == "delete":
        if status == 0:
            return True
        if status == CODE["ENOENT"]:
            return False
    elif kind == "scan" and status == 0:
        m = _msgpack.unpackb(body)
        return Page([tuple(r) for r in m["rows"]], m["cursor"], m["more"])
    elif kind == "query" and status == 0:
        m = _msgpack.unpackb(body)
        return Page([tuple(h) for h in m["hits"]], m["cursor"], m["more"])
    elif kind in ("commit", "xabranch") and status == CODE["ECONFLICT"]:
        conf = [tuple(c) for c in _msgpack.unpackb(body)]
        return TroupeError(status, "transaction conflict on %d key(s)"
                           % len(conf), conf)
    elif status == 0:
        return None
    # found after the call returned, on a troupe thread: no detail but
    # the code
    return TroupeError(status, "%s: %s (the request's completion)"
                       % (kind, ERR.get(status, status)))


class Core:
    def __init__(self, path, schedulers=0, workers=0, sync=0):
        h = ctypes.c_void_p()
        check(lib.troupe_abi_open(_name(path, "path"), schedulers, workers,
                                  sync, ctypes.byref(h)))
        self._h = h
        self._seq = 0
        self._cap = 1 << 16
        self._buf = ctypes.create_string_buffer(self._cap)
        self._kinds = {}  # request id -> what its completion decodes to
        self._pulls = {}  # target index -> name
        _live.add(self)

    # ---- lifecycle ----
    @property
    def handle(self):
        if not self._h:
            raise TroupeError(CODE["ECLOSED"], "the node is closed")
        return self._h

    def start(self):
        check(lib.troupe_abi_start(self.handle))

    def close(self, quiet=False):
        if not self._h:
            if quiet:
                return
            raise TroupeError(CODE["ESTATE"], "close: closed already")
        rc = lib.troupe_abi_close(ctypes.byref(self._h))
        self._h = ctypes.c_void_p()
        _live.discard(self)
        if not quiet:
            check(rc)

    @property
    def closed(self):
        return not self._h

    def wake_fd(self):
        fd = ctypes.c_int()
        check(lib.troupe_abi_wake_fd(self.handle, ctypes.byref(fd)))
        return fd.value

    def set_limits(self, requests=0, bytes=0):
        check(lib.troupe_abi_set_limits(self.handle, requests, bytes))

    # ---- pull ----
    def register_pull(self, name, credit=0, timeout_ms=0):
        idx = ctypes.c_uint32()
        check(lib.troupe_abi_register_pull(self.handle, _name(name, "name"),
                                           credit, timeout_ms,
                                           ctypes.byref(idx)))
        self._pulls[idx.value] = name
        return idx.value

    def pull(self, timeout_ms=0, max=256):
        """The records ready (waiting up to timeout_ms for the first)."""
        n = ctypes.c_size_t()
        ln = ctypes.c_size_t()
        while True:
            rc = lib.troupe_abi_next_batch(
                self.handle, timeout_ms, ctypes.addressof(self._buf),
                self._cap, max, ctypes.byref(n), ctypes.byref(ln))
            if rc == CODE["ETOOBIG"] and n.value == 0:
                # A completion waits first in line; a task too big came
                # back UNKNOWN and will come again: grow either way.
                need = ln.value
                self._cap = need if need > self._cap else 2 * self._cap
                self._buf = ctypes.create_string_buffer(self._cap)
                continue
            check(rc)
            return parse_records(self._buf, ln.value)

    def reply(self, task_id, outcome=OUTCOME_SUCCESS, body=b""):
        # once per task: bytes go as they are, and the handle is checked
        # only when the call fails (a closed node's is NULL)
        if body.__class__ is not bytes:
            body = _b(body, "body") or b""
        rc = _reply(self._h, task_id, outcome, body, len(body))
        if rc:
            self.handle
            check(rc)

    def reply_batch(self, replies):
        """Answers many tasks in one call: replies is a list of (task id,
        outcome, body bytes); returns (settled, refused). A refused one
        (past its deadline, or not this host's) changed nothing."""
        parts = []
        for task_id, outcome, body in replies:
            body = _b(body, "body")
            parts.append(struct.pack("<QII", task_id, outcome, len(body)))
            if body:
                parts.append(body)
                parts.append(b"\0" * (-len(body) % 8))
        buf = b"".join(parts)
        done = ctypes.c_size_t()
        refused = ctypes.c_size_t()
        check(lib.troupe_abi_reply_batch(self.handle, buf, len(buf),
                                         ctypes.byref(done),
                                         ctypes.byref(refused)))
        return done.value, refused.value

    def completion(self, rec):
        """(request id, value or TroupeError) of a completion record."""
        kind = self._kinds.pop(rec.id, None)
        return rec.id, _decode(kind, rec.status, rec.body)

    def is_completion(self, rec):
        return rec.kind == KIND_COMPLETION

    def is_event(self, rec):
        return rec.kind == KIND_QUEUE

    def is_actor_message(self, rec):
        return rec.kind == KIND_ACTOR

    def is_branch(self, rec):
        return rec.kind == KIND_BRANCH

    # ---- requests: each returns its request id ----
    def _req(self, kind, fn, *args):
        self._seq += 1
        rid = self._seq
        check(fn(self.handle, rid, *args))
        self._kinds[rid] = kind
        return rid

    def table_create(self, name, indexes=()):
        # checked by the ABI, as any host's bytes are
        specs = list(indexes)
        b = _msgpack.packb(specs) if specs else None
        return self._req("create", lib.troupe_abi_table_create,
                         _name(name, "table"), b, _len(b))

    def get(self, table, key):
        k = _b(key, "key")
        return self._req("get", lib.troupe_abi_table_get,
                         _name(table, "table"), k, _len(k))

    def put(self, table, key, doc):
        k = _b(key, "key")
        d = _msgpack.packb(doc)
        return self._req("put", lib.troupe_abi_table_put,
                         _name(table, "table"), k, _len(k), d, len(d))

    def delete(self, table, key):
        k = _b(key, "key")
        return self._req("delete", lib.troupe_abi_table_delete,
                         _name(table, "table"), k, _len(k))

    def scan(self, table, start=None, end=None, after=None, limit=100,
             reverse=False):
        s, e, a = _b(start, "start"), _b(end, "end"), _b(after, "after")
        return self._req("scan", lib.troupe_abi_table_scan,
                         _name(table, "table"), s, _len(s), e, _len(e), a,
                         _len(a), limit, 1 if reverse else 0)

    def query(self, table, index, values=None, start=None, end=None,
              after=None, limit=100, reverse=False, rows=True):
        v = _msgpack.packb(list(values)) if values is not None else None
        f = _msgpack.packb(list(start)) if start is not None else None
        t = _msgpack.packb(list(end)) if end is not None else None
        a = _b(after, "after")
        return self._req("query", lib.troupe_abi_index_query,
                         _name(table, "table"), _name(index, "index"), v,
                         _len(v), f, _len(f), t, _len(t), a, _len(a), limit,
                         1 if reverse else 0, 1 if rows else 0)

    def txn_begin(self):
        t = ctypes.c_uint64()
        check(lib.troupe_abi_txn_begin(self.handle, ctypes.byref(t)))
        return t.value

    def txn_get(self, txn, table, key):
        k = _b(key, "key")
        return self._req("get", lib.troupe_abi_txn_get, txn,
                         _name(table, "table"), k, _len(k))

    def txn_put(self, txn, table, key, doc):
        k = _b(key, "key")
        d = _msgpack.packb(doc)
        check(lib.troupe_abi_txn_put(self.handle, txn, _name(table, "table"),
                                     k, _len(k), d, len(d)))

    def txn_delete(self, txn, table, key):
        k = _b(key, "key")
        check(lib.troupe_abi_txn_delete(self.handle, txn,
                                        _name(table, "table"), k, _len(k)))

    def txn_commit(self, txn):
        return self._req("commit", lib.troupe_abi_txn_commit, txn)

    def txn_rollback(self, txn):
        check(lib.troupe_abi_txn_rollback(self.handle, txn))

    def queue_create(self, name, partitions=1, retention_ms=0, max_attempts=0):
        if not isinstance(max_attempts, int) or not 0 <= max_attempts < 2**32:
            raise ValueError("max_attempts must be an integer >= 0")
        check(lib.troupe_abi_queue_create(self.handle, _name(name, "queue"),
                                          partitions, retention_ms,
                                          max_attempts))

    def publish(self, queue, id, key, payload, time_ms=0):
        i, k = _b(id, "id"), _b(key, "key")
        p = _msgpack.packb(payload)
        return self._req("publish", lib.troupe_abi_queue_publish,
                         _name(queue, "queue"), i, _len(i), k, _len(k), p,
                         len(p), time_ms)

    def actor_serve(self, name, target, tag=0):
        check(lib.troupe_abi_actor_serve(self.handle, _name(name, "actor"),
                                         _name(target, "target"), tag))

    def actor_ask(self, name, kind, body=b"", timeout_ms=0):
        b = _b(body, "body")
        return self._req("ask", lib.troupe_abi_actor_ask,
                         _name(name, "actor"), kind, b, len(b), timeout_ms)

    # ---- the coordinator ----
    def coord_options(self, shards=0, retry_min_ms=0, retry_max_ms=0,
                      sync=0):
        check(lib.troupe_abi_coord_options(self.handle, shards, retry_min_ms,
                                           retry_max_ms, sync))

    def saga_submit(self, gid, steps, timeout_to_fail_ms=0, retry_limit=0,
                    concurrent=False, after=None):
        g = _name(gid, "gid")
        b = _msgpack.packb([_step(s) for s in steps])
        o = {}
        if timeout_to_fail_ms:
            o["timeout_to_fail_ms"] = timeout_to_fail_ms
        if retry_limit:
            o["retry_limit"] = retry_limit
        if concurrent:
            o["concurrent"] = True
        if after is not None:
            o["after"] = list(after)
        ob = _msgpack.packb(o) if o else None
        return self._req("gtx", lib.troupe_abi_saga_submit, g, len(g), b,
                         len(b), ob, _len(ob))

    def tcc_prepare(self, gid):
        g = _name(gid, "gid")
        return self._req("gtx", lib.troupe_abi_tcc_prepare, g, len(g))

    def tcc_register(self, gid, confirm, cancel):
        g = _name(gid, "gid")
        b = _msgpack.packb([_call(confirm, "confirm"),
                            _call(cancel, "cancel")])
        return self._req("register", lib.troupe_abi_tcc_register, g, len(g),
                         b, len(b))

    def msg_prepare(self, gid, steps, query_target, grace_ms=0):
        g = _name(gid, "gid")
        b = _msgpack.packb([_call(s, "step") for s in steps])
        return self._req("gtx", lib.troupe_abi_msg_prepare, g, len(g), b,
                         len(b), _name(query_target, "query target"),
                         grace_ms)

    def gtx_op(self, op, gid, reason=None):
        g = _name(gid, "gid")
        if op == "abort":
            r = _name(reason, "reason") if reason is not None else None
            return self._req("gtx", lib.troupe_abi_gtx_abort, g, len(g), r)
        fn = {"submit": lib.troupe_abi_gtx_submit,
              "retry": lib.troupe_abi_gtx_retry,
              "force_stop": lib.troupe_abi_gtx_force_stop,
              "query": lib.troupe_abi_gtx_query}[op]
        return self._req("gquery" if op == "query" else "gtx", fn, g, len(g))

    def gtx_list(self, status=None, mode=None, after=None, limit=100):
        return self._req("glist", lib.troupe_abi_gtx_list,
                         _name(status, "status") if status else None,
                         _name(mode, "mode") if mode else None,
                         _name(after, "after") if after else None, limit)

    def txn_barrier(self, txn, branch):
        if isinstance(branch, (tuple, list)):
            mode, gid, bid, op = branch
        else:
            mode, gid, bid, op = (branch.mode, branch.gid, branch.branch_id,
                                  branch.op)
        g = _name(gid, "gid")
        return self._req("barrier", lib.troupe_abi_txn_barrier, txn,
                         _name(mode, "mode"), g, len(g),
                         _name(bid, "branch id"), _name(op, "op"))

    def xa_begin(self, gid):
        g = _name(gid, "gid")
        return self._req("gtx", lib.troupe_abi_xa_begin, g, len(g))

    def txn_xa_branch(self, txn, gid):
        g = _name(gid, "gid")
        return self._req("xabranch", lib.troupe_abi_xa_branch, g, len(g), txn)

    def workflow_submit(self, gid, name, input=None):
        from ._workflow import payload_bytes
        g = _name(gid, "gid")
        b = payload_bytes(input)
        return self._req("gtx", lib.troupe_abi_workflow_submit, g, len(g),
                         _name(name, "workflow name"), b, len(b))

    def awakeable_settle(self, id, payload, resolve=True):
        from ._workflow import payload_bytes
        i = _name(id, "awakeable id")
        if not i or len(i) > 133 or b"\0" in i:
            raise TroupeError(CODE["EINVAL"], "awakeable: an id is "
                              "gid/branch-id, 1..133 bytes")
        b = payload_bytes(payload)
        fn = lib.troupe_abi_awakeable_resolve if resolve else \
            lib.troupe_abi_awakeable_reject
        return self._req("gtx", fn, i, len(i), b, len(b))

    def subscribe(self, queue, target):
        check(lib.troupe_abi_queue_subscribe(self.handle,
                                             _name(queue, "queue"),
                                             _name(target, "target")))


class TxnBase:
    """What both forms' transactions share: the id, its end, the
    buffering calls (which never wait)."""

    def __init__(self, core):
        self._core = core
        self._id = core.txn_begin()

    def _live(self):
        if self._id is None:
            raise TroupeError(CODE["ESTATE"], "the transaction has ended")
        return self._id

    def _end(self):
        t = self._live()
        self._id = None
        return t

    def put(self, table, key, doc):
        self._core.txn_put(self._live(), table, key, doc)

    def delete(self, table, key):
        self._core.txn_delete(self._live(), table, key)

    def rollback(self):
        self._core.txn_rollback(self._end())
