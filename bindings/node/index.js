// troupe for Node: a Promise API over the flat C ABI (troupe/abi.h,
// bindings/c) through koffi. README.md says how to use it; this header
// says how it works.
//
// - Nothing calls JS from a troupe thread. The results of requests
//   (completions) and the tasks of pull targets (queue events) are records
//   that this module pulls with troupe_abi_next_batch(0, ...) (never
//   blocking) into one reused Buffer, on the JS main thread.
// - When to pull: the node's wake fd, an eventfd, watched by Node's own
//   loop. net.Socket({fd}) refuses an eventfd (ERR_INVALID_FD_TYPE: libuv
//   guesses its type as UNKNOWN), so the fd is dup()ed and opened as a
//   libuv pipe handle (process.binding('pipe_wrap'), which opens any
//   pollable fd) under a net.Socket; each 'data' event (8 bytes: the
//   eventfd's counter) schedules one drain in setImmediate, which pulls
//   until nothing is left (that last empty pull re-arms the fd).
// - Requests get ids from a counter; a pending Map resolves each Promise
//   from its completion. A request refused with EBUSY (the node's bound of
//   requests in flight) waits in a JS queue (at most MAX_WAITING) and is
//   tried again after the next drain.
// - Handlers: each pull target (a subscription) has a credit, the most
//   tasks the node hands over at once: that is the in-flight limit. Replies
//   are packed into one Buffer and sent with troupe_abi_reply_batch once
//   per turn of the loop.
// - Blocking calls (open, start, close, queue create) run through koffi's
//   .async on libuv's threadpool; close from process.on('exit') is the one
//   synchronous call, at exit.
// - Workflows (node.workflow) are pull targets whose tasks are runs: the
//   driver replays the JS function over the run's records (WorkflowRun,
//   the C trampoline's rules) and answers with what it recorded anew.
// - The wake socket is ref'd only while something waits for the node (a
//   request in flight or a subscription); close unrefs and destroys it.
'use strict';

const fs = require('fs');
const net = require('net');
const path = require('path');
const koffi = require('koffi');
const { encode, decode } = require('@msgpack/msgpack');

const ABI_VERSION = 1;
const RECORD_FIXED = 32;
const KIND_QUEUE = 1;
const KIND_ACTOR = 2; // TROUPE_TASK_ACTOR (troupe/dispatch.h)
const KIND_COMPLETION = 3; // TROUPE_TASK_COMPLETION (troupe/dispatch.h)
const KIND_BRANCH = 4; // TROUPE_TASK_BRANCH: a global transaction's call
const KIND_WORKFLOW = 5; // TROUPE_TASK_WORKFLOW: a workflow's run
const OUTCOME = { SUCCESS: 1, FAILURE: 2, ONGOING: 3, UNKNOWN: 4 };
const BATCH_MAX = 256;
const MAX_WAITING = 1 << 20; // requests waiting in JS after an EBUSY
const BUF_INITIAL = 1 << 20;
const BUF_MAX = (1 << 30) + 4096 + 64; // the largest completion record

// troupe_err numbers (troupe/err.h) the binding acts on.
const E = { OK: 0, EINVAL: 1, ENOENT: 3, ECLOSED: 5, ETOOBIG: 10, ECONFLICT: 16, EBUSY: 17 };

let LIB = null;
// The nodes open in this process: closed at exit if their program did
// not (one listener for all of them).
const OPEN = new Set();
let exitHooked = false;

function closeAllAtExit() {
    for (const n of OPEN)
        n._closeSync();
}

function libraryPath() {
    if (process.env.TROUPE_LIB)
        return process.env.TROUPE_LIB;
    const built = path.join(__dirname, '..', '..', 'build', 'lib', 'libtroupe.so');
    if (fs.existsSync(built))
        return built;
    return 'libtroupe.so.0';
}

// Declares the ABI once per process (koffi keeps the library loaded; it
// is linked -z nodelete as well).
function lib() {
    if (LIB)
        return LIB;
    const file = libraryPath();
    const so = koffi.load(file);
    const version = so.func('int troupe_abi_version(void)')();
    if (version !== ABI_VERSION)
        throw new Error(`troupe: ${file} has ABI version ${version}, this binding needs ${ABI_VERSION}`);
    const libc = koffi.load('libc.so.6');
    koffi.opaque('troupe_abi');
    const f = (s) => so.func(s);
    LIB = {
        file,
        dup: libc.func('int dup(int fd)'),
        errmsg: f('const char *troupe_abi_errmsg(void)'),
        errName: f('const char *troupe_err_name(int e)'),
        strerror: f('const char *troupe_strerror(int e)'),
        open: f('int troupe_abi_open(const char *dir, uint32_t schedulers, uint32_t workers, int32_t sync, _Out_ troupe_abi **out)'),
        start: f('int troupe_abi_start(troupe_abi *n)'),
        close: f('int troupe_abi_close(_Inout_ troupe_abi **np)'),
        setLimits: f('int troupe_abi_set_limits(troupe_abi *n, uint32_t requests, uint64_t bytes)'),
        wakeFd: f('int troupe_abi_wake_fd(troupe_abi *n, void *fd)'),
        registerPull: f('int troupe_abi_register_pull(troupe_abi *n, const char *name, uint32_t credit, uint32_t timeout_ms, void *index)'),
        actorServe: f('int troupe_abi_actor_serve(troupe_abi *n, const char *name, const char *target, uint32_t tag)'),
        actorAsk: f('int troupe_abi_actor_ask(troupe_abi *n, uint64_t req, const char *name, uint32_t kind, const void *body, size_t len, uint32_t timeout_ms)'),
        nextBatch: f('int troupe_abi_next_batch(troupe_abi *n, int timeout_ms, void *buf, size_t cap, size_t max, void *count, void *len)'),
        replyBatch: f('int troupe_abi_reply_batch(troupe_abi *n, const void *buf, size_t len, void *done, void *refused)'),
        tableCreate: f('int troupe_abi_table_create(troupe_abi *n, uint64_t req, const char *name, const void *indexes, size_t len)'),
        tableGet: f('int troupe_abi_table_get(troupe_abi *n, uint64_t req, const char *table, const void *key, size_t klen)'),
        tablePut: f('int troupe_abi_table_put(troupe_abi *n, uint64_t req, const char *table, const void *key, size_t klen, const void *doc, size_t dlen)'),
        tableDelete: f('int troupe_abi_table_delete(troupe_abi *n, uint64_t req, const char *table, const void *key, size_t klen)'),
        tableScan: f('int troupe_abi_table_scan(troupe_abi *n, uint64_t req, const char *table, const void *start, size_t slen, const void *end, size_t elen, const void *after, size_t alen, uint32_t limit, int32_t reverse)'),
        indexQuery: f('int troupe_abi_index_query(troupe_abi *n, uint64_t req, const char *table, const char *index, const void *values, size_t vlen, const void *from, size_t flen, const void *to, size_t tlen, const void *after, size_t alen, uint32_t limit, int32_t reverse, int32_t rows)'),
        txnBegin: f('int troupe_abi_txn_begin(troupe_abi *n, void *txn)'),
        txnGet: f('int troupe_abi_txn_get(troupe_abi *n, uint64_t req, uint64_t txn, const char *table, const void *key, size_t klen)'),
        txnPut: f('int troupe_abi_txn_put(troupe_abi *n, uint64_t txn, const char *table, const void *key, size_t klen, const void *doc, size_t dlen)'),
        txnDelete: f('int troupe_abi_txn_delete(troupe_abi *n, uint64_t txn, const char *table, const void *key, size_t klen)'),
        txnCommit: f('int troupe_abi_txn_commit(troupe_abi *n, uint64_t req, uint64_t txn)'),
        txnRollback: f('int troupe_abi_txn_rollback(troupe_abi *n, uint64_t txn)'),
        queueCreate: f('int troupe_abi_queue_create(troupe_abi *n, const char *name, uint32_t partitions, int64_t retention_ms, uint32_t max_attempts)'),
        queuePublish: f('int troupe_abi_queue_publish(troupe_abi *n, uint64_t req, const char *queue, const void *id, size_t id_len, const void *key, size_t key_len, const void *payload, size_t plen, int64_t time_ms)'),
        queueSubscribe: f('int troupe_abi_queue_subscribe(troupe_abi *n, const char *queue, const char *target)'),
        coordOptions: f('int troupe_abi_coord_options(troupe_abi *n, uint32_t shards, uint32_t retry_min_ms, uint32_t retry_max_ms, int32_t sync)'),
        sagaSubmit: f('int troupe_abi_saga_submit(troupe_abi *n, uint64_t req, const char *gid, size_t gid_len, const void *steps, size_t slen, const void *opts, size_t olen)'),
        tccPrepare: f('int troupe_abi_tcc_prepare(troupe_abi *n, uint64_t req, const char *gid, size_t gid_len)'),
        tccRegister: f('int troupe_abi_tcc_register(troupe_abi *n, uint64_t req, const char *gid, size_t gid_len, const void *calls, size_t len)'),
        msgPrepare: f('int troupe_abi_msg_prepare(troupe_abi *n, uint64_t req, const char *gid, size_t gid_len, const void *steps, size_t slen, const char *query_target, int64_t grace_ms)'),
        gtxSubmit: f('int troupe_abi_gtx_submit(troupe_abi *n, uint64_t req, const char *gid, size_t gid_len)'),
        gtxAbort: f('int troupe_abi_gtx_abort(troupe_abi *n, uint64_t req, const char *gid, size_t gid_len, const char *reason)'),
        gtxRetry: f('int troupe_abi_gtx_retry(troupe_abi *n, uint64_t req, const char *gid, size_t gid_len)'),
        gtxForceStop: f('int troupe_abi_gtx_force_stop(troupe_abi *n, uint64_t req, const char *gid, size_t gid_len)'),
        gtxQuery: f('int troupe_abi_gtx_query(troupe_abi *n, uint64_t req, const char *gid, size_t gid_len)'),
        gtxList: f('int troupe_abi_gtx_list(troupe_abi *n, uint64_t req, const char *status, const char *mode, const char *after, uint32_t limit)'),
        workflowSubmit: f('int troupe_abi_workflow_submit(troupe_abi *n, uint64_t req, const char *gid, size_t gid_len, const char *name, const void *input, size_t len)'),
        awakeableResolve: f('int troupe_abi_awakeable_resolve(troupe_abi *n, uint64_t req, const char *id, size_t id_len, const void *payload, size_t len)'),
        awakeableReject: f('int troupe_abi_awakeable_reject(troupe_abi *n, uint64_t req, const char *id, size_t id_len, const void *reason, size_t len)'),
        txnBarrier: f('int troupe_abi_txn_barrier(troupe_abi *n, uint64_t req, uint64_t txn, const char *mode, const char *gid, size_t gid_len, const char *branch_id, const char *op)'),
        xaBegin: f('int troupe_abi_xa_begin(troupe_abi *n, uint64_t req, const char *gid, size_t gid_len)'),
        xaBranch: f('int troupe_abi_xa_branch(troupe_abi *n, uint64_t req, const char *gid, size_t gid_len, uint64_t txn)'),
    };
    return LIB;
}

// ---- errors -----------------------------------------------------------

class TroupeError extends Error {
    constructor(errno, message) {
        const L = lib();
        const code = L.errName(errno);
        super(message ? `${code}: ${message}` : `${code}: ${L.strerror(errno)}`);
        this.name = 'TroupeError';
        this.code = code;
        this.errno = errno;
    }
}

// The error of a call that returned rc, with the thread's message (read
// at once: the next call replaces it).
function callError(rc) {
    return new TroupeError(rc, lib().errmsg());
}

function usage(message) {
    const e = new TroupeError(E.EINVAL, message);
    return e;
}

// ---- argument encoding ------------------------------------------------

function bytes(v, what) {
    if (Buffer.isBuffer(v))
        return v;
    if (typeof v === 'string')
        return Buffer.from(v, 'utf8');
    if (v instanceof Uint8Array)
        return Buffer.from(v.buffer, v.byteOffset, v.byteLength);
    throw usage(`${what} must be a string, Buffer or Uint8Array (got ${v === null ? 'null' : typeof v})`);
}

function optBytes(v, what) {
    return v === undefined || v === null ? null : bytes(v, what);
}

function name(v, what) {
    if (typeof v !== 'string' || v.length === 0)
        throw usage(`${what} must be a non-empty string`);
    if (v.includes('\0'))
        throw usage(`${what} must not contain NUL`);
    return v;
}

function pack(v, what) {
    try {
        return Buffer.from(encode(v));
    } catch (err) {
        throw usage(`${what} cannot be encoded as msgpack: ${err.message}`);
    }
}

function doc(v, what) {
    if (v === null || typeof v !== 'object' || Array.isArray(v) || Buffer.isBuffer(v))
        throw usage(`${what} must be a plain object (a msgpack map)`);
    return pack(v, what);
}

function uint(v, what, dflt, max) {
    if (v === undefined)
        return dflt;
    if (!Number.isInteger(v) || v < 0 || v > max)
        throw usage(`${what} must be an integer in 0..${max} (got ${v})`);
    return v;
}

function dataView(b) {
    return new DataView(b.buffer, b.byteOffset, b.byteLength);
}

function len(b) {
    return b === null ? 0 : b.length;
}

function toBuffer(u8) {
    return u8 === null || u8 === undefined ? u8 : Buffer.from(u8.buffer, u8.byteOffset, u8.byteLength);
}

const SYNC = { default: 0, on: 1, off: 2 };

// ---- the node -----------------------------------------------------------

async function open(dir, opts = {}) {
    if (typeof dir !== 'string' || dir.length === 0)
        throw usage('open: dir must be a non-empty string');
    const L = lib();
    const schedulers = uint(opts.schedulers, 'schedulers', 0, 256);
    const workers = uint(opts.workers, 'workers', 0, 256);
    let sync = opts.sync === undefined ? 'default' : opts.sync;
    if (sync === true) sync = 'on';
    if (sync === false) sync = 'off';
    if (!(sync in SYNC))
        throw usage(`open: sync must be 'default', 'on' or 'off' (got ${sync})`);
    const co = opts.coordinator || {};
    const coord = [uint(co.shards, 'coordinator.shards', 0, 1024),
        uint(co.retryMinMs, 'coordinator.retryMinMs', 0, 0xffffffff),
        uint(co.retryMaxMs, 'coordinator.retryMaxMs', 0, 0xffffffff)];
    let csync = co.sync === undefined ? 'default' : co.sync;
    if (csync === true) csync = 'on';
    if (csync === false) csync = 'off';
    if (!(csync in SYNC))
        throw usage(`open: coordinator.sync must be 'default', 'on' or 'off' (got ${csync})`);
    const requests = uint(opts.maxRequests, 'maxRequests', 0, 0xffffffff);
    const limitBytes = uint(opts.maxBytes, 'maxBytes', 0, Number.MAX_SAFE_INTEGER);
    const out = [null];
    const r = await callAsync(L.open, dir, schedulers, workers, SYNC[sync], out);
    if (r.rc !== E.OK)
        throw new TroupeError(r.rc, r.msg);
    const h = out[0];
    const node = new Node(h, L);
    try {
        if (requests || limitBytes) {
            const rc = L.setLimits(h, requests, limitBytes);
            if (rc !== E.OK)
                throw callError(rc);
        }
        if (opts.coordinator) {
            const rc = L.coordOptions(h, ...coord, SYNC[csync]);
            if (rc !== E.OK)
                throw callError(rc);
        }
        const s = await callAsync(L.start, h);
        if (s.rc !== E.OK)
            throw new TroupeError(s.rc, s.msg);
        node._watch();
    } catch (err) {
        await node.close().catch(() => {});
        throw err;
    }
    return node;
}

// A blocking ABI call on libuv's threadpool (koffi .async): its status.
// The thread's message stays on that pool thread, so the detail of a
// failed blocking call is its code's text.
function callAsync(fn, ...args) {
    return new Promise((resolve, reject) => {
        fn.async(...args, (err, rc) => {
            if (err)
                return reject(err);
            resolve({ rc, msg: rc === E.OK ? '' : lib().strerror(rc) });
        });
    });
}

class Node {
    constructor(h, L) {
        this._L = L;
        this._h = h;
        this._closing = null;
        this._seq = 0;
        this._pending = new Map(); // request id -> {resolve, reject, decode}
        this._waiting = []; // requests refused with EBUSY, to retry
        this._buf = Buffer.alloc(BUF_INITIAL);
        this._dv = dataView(this._buf);
        this._used = 0; // bytes of the batch in _buf
        this._copy = null; // its copy, made at most once per batch (_batchCopy)
        this._outs = Buffer.alloc(16);
        this._out0 = this._outs.subarray(0, 8);
        this._out1 = this._outs.subarray(8, 16);
        this._rbuf = Buffer.alloc(BATCH_MAX * 64);
        this._rdv = dataView(this._rbuf);
        this._roff = 0;
        this._rcount = 0;
        this._flushScheduled = false;
        this._drainScheduled = false;
        this._targets = new Map(); // target index -> Target
        this._subs = 0;
        this._sock = null;
        this._refd = true;
        OPEN.add(this);
        if (!exitHooked) {
            exitHooked = true;
            process.on('exit', closeAllAtExit);
        }
        this._drainFn = () => this._drain();
        this._flushFn = () => { this._flushScheduled = false; this._flush(); };
    }

    get closed() {
        return this._h === null;
    }

    _watch() {
        const L = this._L;
        let rc = L.wakeFd(this._h, this._out0);
        if (rc !== E.OK)
            throw callError(rc);
        const efd = this._out0.readInt32LE(0);
        // dup: the socket closes its own fd; the eventfd is the node's.
        const fd = L.dup(efd);
        if (fd < 0)
            throw new TroupeError(20, `dup of the wake fd ${efd} failed`);
        const { Pipe, constants } = process.binding('pipe_wrap');
        const handle = new Pipe(constants.SOCKET);
        rc = handle.open(fd);
        if (rc !== 0) {
            fs.closeSync(fd);
            throw new TroupeError(20, `cannot watch the wake fd (uv error ${rc})`);
        }
        this._sock = new net.Socket({ handle, readable: true, writable: false });
        this._sock.on('data', () => this._schedule());
        this._sock.on('error', () => {});
        this._updateRef();
    }

    // The socket holds the process while something waits for the node.
    _updateRef() {
        if (!this._sock)
            return;
        const want = this._h !== null && (this._pending.size > 0 || this._waiting.length > 0 || this._subs > 0);
        if (want !== this._refd) {
            this._refd = want;
            if (want) this._sock.ref(); else this._sock.unref();
        }
    }

    _schedule() {
        if (!this._drainScheduled) {
            this._drainScheduled = true;
            setImmediate(this._drainFn);
        }
    }

    _check() {
        if (this._h === null)
            throw new TroupeError(E.ECLOSED, 'the node is closed');
    }

    // ---- requests ----

    // Starts request `call(id)` (returns a status); resolves with
    // decode(status, body).
    _request(call, decodeFn, ctx) {
        this._check();
        return new Promise((resolve, reject) => {
            const r = { call, resolve, reject, decode: decodeFn, ctx };
            if (this._waiting.length > 0) {
                if (this._waiting.length >= MAX_WAITING)
                    return reject(new TroupeError(E.EBUSY, `more than ${MAX_WAITING} requests wait for the node`));
                this._waiting.push(r);
                this._updateRef();
                return;
            }
            this._start(r);
        });
    }

    // Calls r under a fresh id: true when it started or settled (its
    // Promise is then the pending Map's, or done), false on EBUSY.
    _attempt(r) {
        const id = ++this._seq;
        let rc;
        try {
            rc = r.call(id);
        } catch (err) {
            r.reject(err);
            return true;
        }
        if (rc === E.OK)
            this._pending.set(id, r);
        else if (rc !== E.EBUSY)
            r.reject(callError(rc));
        return rc !== E.EBUSY;
    }

    _start(r) {
        if (!this._attempt(r)) {
            this._waiting.push(r);
            // a drain retries it; make sure one comes even when the
            // completions that fill the bound are ready already
            this._schedule();
        }
        this._updateRef();
    }

    // Starts the waiting requests in order, up to the first EBUSY.
    _retry() {
        const w = this._waiting;
        if (w.length === 0)
            return;
        let i = 0;
        while (i < w.length && this._attempt(w[i]))
            i++;
        this._waiting = i === 0 ? w : w.slice(i);
        this._updateRef();
    }

    // ---- the drain ----

    _drain() {
        this._drainScheduled = false;
        const L = this._L;
        while (this._h !== null) {
            const rc = L.nextBatch(this._h, 0, this._buf, this._buf.length, BATCH_MAX, this._out0, this._out1);
            if (rc === E.ETOOBIG) {
                const need = Number(this._out1.readBigUInt64LE(0));
                if (need > BUF_MAX)
                    break;
                this._buf = Buffer.alloc(Math.max(need, this._buf.length * 2));
                this._dv = dataView(this._buf);
                continue;
            }
            if (rc !== E.OK)
                break;
            const count = Number(this._out0.readBigUInt64LE(0));
            if (count === 0)
                break;
            this._used = Number(this._out1.readBigUInt64LE(0));
            this._copy = null;
            this._records(count);
            // hand the answers back per batch: their credit lets the
            // producers refill while this drain goes on
            this._flush();
        }
        this._flush();
        this._retry();
        this._updateRef();
    }

    // The batch's bytes, copied once for the tasks that keep theirs past
    // the drain (the pull buffer is reused): each is a view of the copy.
    _batchCopy() {
        if (this._copy === null)
            this._copy = Buffer.from(this._buf.subarray(0, this._used));
        return this._copy;
    }

    _records(count) {
        const buf = this._buf;
        const dv = this._dv;
        let off = 0;
        let last = null, lastIndex = -1;
        for (let i = 0; i < count; i++) {
            const target = dv.getUint32(off + 8, true);
            const kind = dv.getUint16(off + 12, true);
            const hlen = dv.getUint16(off + 14, true);
            const blen = dv.getUint32(off + 20, true);
            if (kind === KIND_COMPLETION) {
                const id = Number(buf.readBigUInt64LE(off));
                const status = buf.readInt32LE(off + RECORD_FIXED);
                const body = buf.subarray(off + RECORD_FIXED + hlen, off + RECORD_FIXED + hlen + blen);
                this._complete(id, status, body);
            } else {
                if (target !== lastIndex) {
                    last = this._targets.get(target);
                    lastIndex = target;
                }
                if (last)
                    last._onTask(buf, off, kind, hlen, blen, dv.getUint32(off, true), dv.getUint32(off + 4, true));
            }
            off += (RECORD_FIXED + hlen + blen + 7) & ~7;
        }
    }

    _complete(id, status, body) {
        const r = this._pending.get(id);
        if (!r)
            return;
        this._pending.delete(id);
        try {
            r.resolve(r.decode(status, body));
        } catch (err) {
            // a completion carries a status, not the thread's message:
            // name what the request was about
            if (err instanceof TroupeError && r.ctx && !err.conflicts && !err._detailed)
                err.message = `${err.code}: ${r.ctx}: ${this._L.strerror(err.errno)}`;
            r.reject(err);
        }
    }

    // ---- replies ----

    _reply(lo, hi, outcome, body) {
        const need = 16 + ((len(body) + 7) & ~7);
        if (this._roff + need > this._rbuf.length) {
            this._flush();
            if (need > this._rbuf.length)
                this._rbuf = Buffer.alloc(need * 2);
                this._rdv = dataView(this._rbuf);
        }
        const b = this._rbuf;
        const dv = this._rdv;
        let o = this._roff;
        dv.setUint32(o, lo, true);
        dv.setUint32(o + 4, hi, true);
        dv.setUint32(o + 8, outcome, true);
        dv.setUint32(o + 12, len(body), true);
        if (body !== null) {
            body.copy(b, o + 16);
            b.fill(0, o + 16 + body.length, o + need);
        }
        this._roff = o + need;
        if (!this._flushScheduled && !this._drainScheduled) {
            this._flushScheduled = true;
            setImmediate(this._flushFn);
        }
    }

    _flush() {
        if (this._roff === 0 || this._h === null) {
            this._roff = 0;
            return;
        }
        // a refused reply (its deadline passed: the task settled UNKNOWN)
        // changes nothing; nothing to tell the handler
        this._L.replyBatch(this._h, this._rbuf, this._roff, this._out0, this._out1);
        this._roff = 0;
    }

    // ---- tables ----

    async createTable(table, indexes) {
        name(table, 'table');
        let spec = null;
        if (indexes !== undefined && indexes !== null) {
            if (!Array.isArray(indexes))
                throw usage('createTable: indexes must be an array of {name, fields, unique}');
            spec = pack(indexes, 'indexes');
        }
        return this._request((id) => this._L.tableCreate(this._h, id, table, spec, len(spec)), statusOnly, `create table "${table}"`);
    }

    async get(table, key) {
        name(table, 'table');
        const k = bytes(key, 'key');
        return this._request((id) => this._L.tableGet(this._h, id, table, k, k.length), docOrUndefined, `get from table "${table}"`);
    }

    async put(table, key, value) {
        name(table, 'table');
        const k = bytes(key, 'key');
        const d = doc(value, 'document');
        return this._request((id) => this._L.tablePut(this._h, id, table, k, k.length, d, d.length), statusOnly, `put to table "${table}"`);
    }

    async delete(table, key) {
        name(table, 'table');
        const k = bytes(key, 'key');
        return this._request((id) => this._L.tableDelete(this._h, id, table, k, k.length), deleted, `delete from table "${table}"`);
    }

    async scan(table, opts = {}) {
        name(table, 'table');
        const s = optBytes(opts.start, 'start');
        const e = optBytes(opts.end, 'end');
        const a = optBytes(opts.after, 'after');
        const limit = uint(opts.limit, 'limit', 100, 0xffffffff);
        const rev = opts.reverse ? 1 : 0;
        return this._request((id) => this._L.tableScan(this._h, id, table, s, len(s), e, len(e), a, len(a), limit, rev), rowsPage, `scan of table "${table}"`);
    }

    async query(table, index, opts = {}) {
        name(table, 'table');
        name(index, 'index');
        const arr = (v, what) => {
            if (v === undefined || v === null)
                return null;
            if (!Array.isArray(v))
                throw usage(`query: ${what} must be an array of leading values`);
            return pack(v, what);
        };
        const values = arr(opts.values, 'values');
        const from = arr(opts.from, 'from');
        const to = arr(opts.to, 'to');
        const a = optBytes(opts.after, 'after');
        const limit = uint(opts.limit, 'limit', 100, 0xffffffff);
        const rev = opts.reverse ? 1 : 0;
        const rows = opts.rows ? 1 : 0;
        return this._request((id) => this._L.indexQuery(this._h, id, table, index, values, len(values), from, len(from), to, len(to), a, len(a), limit, rev, rows), hitsPage, `query of index "${index}" on table "${table}"`);
    }

    // ---- transactions ----

    begin() {
        this._check();
        const out = Buffer.alloc(8);
        const rc = this._L.txnBegin(this._h, out);
        if (rc !== E.OK)
            throw callError(rc);
        return new Transaction(this, out.readBigUInt64LE(0));
    }

    // ---- queues ----

    async createQueue(queue, opts = {}) {
        name(queue, 'queue');
        this._check();
        const partitions = uint(opts.partitions, 'partitions', 1, 65536);
        const retention = opts.retentionMs === undefined ? 0 : opts.retentionMs;
        if (!Number.isInteger(retention) || retention < 0)
            throw usage('createQueue: retentionMs must be an integer >= 0');
        const attempts = uint(opts.maxAttempts, 'createQueue: maxAttempts', 0, 1000000);
        const r = await callAsync(this._L.queueCreate, this._h, queue, partitions, retention,
                                  attempts);
        if (r.rc !== E.OK)
            throw new TroupeError(r.rc, `queue "${queue}": ${r.msg}`);
    }

    async publish(queue, event) {
        name(queue, 'queue');
        if (event === null || typeof event !== 'object')
            throw usage('publish: event must be an object {id, key, payload, time}');
        const i = bytes(event.id, 'event id');
        const k = bytes(event.key === undefined ? event.id : event.key, 'event key');
        const p = pack(event.payload === undefined ? null : event.payload, 'payload');
        const time = event.time === undefined ? Date.now() : event.time instanceof Date ? event.time.getTime() : event.time;
        if (!Number.isInteger(time) || time < 0)
            throw usage('publish: time must be Unix ms >= 0 or a Date');
        return this._request((id) => this._L.queuePublish(this._h, id, queue, i, i.length, k, k.length, p, p.length, time), statusOnly, `publish to queue "${queue}"`);
    }

    subscribe(queue, handler, opts = {}) {
        name(queue, 'queue');
        if (typeof handler !== 'function')
            throw usage('subscribe: handler must be a function');
        const t = this._target(`${queue}/${++this._seq}`, opts);
        t._queue(handler);
        const rc = this._L.queueSubscribe(this._h, queue, t.name);
        if (rc !== E.OK)
            throw callError(rc);
        this._subs++;
        this._updateRef();
        return t;
    }

    // A pull target served by handler(task): a raw form of subscribe (a
    // host-implemented actor, a bench feed).
    serve(target, handler, opts = {}) {
        name(target, 'target');
        if (typeof handler !== 'function')
            throw usage('serve: handler must be a function');
        const t = this._target(target, opts);
        t._raw(handler);
        this._subs++;
        this._updateRef();
        return t;
    }

    /**
     * Serves actor `name` on this node: every message sent or asked to it
     * (from this node or another) calls handler(msg), msg = {kind, ask,
     * tag, deadline, body (Buffer)}, at most `concurrency` at once. What
     * the handler returns (a Buffer, a string or nothing) answers an ask;
     * a throw answers it EFAILED with the error's message as its detail.
     */
    serveActor(actorName, handler, opts = {}) {
        name(actorName, 'actor');
        if (typeof handler !== 'function')
            throw usage('serveActor: handler must be a function');
        const tag = uint(opts.tag, 'tag', 0, 0xffffffff);
        const t = this._target(opts.target || `node.actor.${actorName}`, opts);
        t._actor(handler);
        const rc = this._L.actorServe(this._h, actorName, t.name, tag);
        if (rc !== E.OK)
            throw callError(rc);
        this._subs++;
        this._updateRef();
        return t;
    }

    /** Asks actor `name` on this node (kind, a body of bytes); resolves
     * with the reply's body (a Buffer); rejects with a TroupeError
     * (EFAILED carries the server's detail in err.detail, EUNKNOWN when
     * no outcome came, ETIMEDOUT past timeoutMs). */
    async ask(actorName, kind, body, opts = {}) {
        name(actorName, 'actor');
        const k = uint(kind, 'kind', 0, 0xffffffff);
        const b = body === undefined || body === null ? Buffer.alloc(0) : bytes(body, 'body');
        const timeout = uint(opts.timeoutMs, 'timeoutMs', 0, 0xffffffff);
        return this._request((id) => this._L.actorAsk(this._h, id, actorName, k, b, b.length, timeout), askReply, `ask actor "${actorName}"`);
    }

    _target(targetName, opts) {
        this._check();
        const credit = uint(opts.concurrency, 'concurrency', 64, 65536);
        const timeout = uint(opts.timeoutMs, 'timeoutMs', 0, 0xffffffff);
        const rc = this._L.registerPull(this._h, targetName, credit, timeout, this._out0);
        if (rc !== E.OK)
            throw callError(rc);
        const index = this._out0.readUInt32LE(0);
        const t = new Target(this, targetName, index, credit);
        this._targets.set(index, t);
        return t;
    }

    // ---- the coordinator (docs/coordinator.md) ----

    /**
     * Submits saga gid: steps are [{action: [target, payload],
     * compensate: [target, payload] or null}, ...] (payload a Buffer or
     * string as its bytes, anything else packed as msgpack); opts
     * {timeoutToFailMs, retryLimit, concurrent, after}. Resolves once it
     * is committed (also when gid exists).
     */
    async sagaSubmit(gid, steps, opts = {}) {
        const g = gidBytes(gid);
        if (!Array.isArray(steps))
            throw usage('sagaSubmit: steps must be an array of {action, compensate}');
        const b = pack(steps.map((st, i) => {
            if (st === null || typeof st !== 'object' || Array.isArray(st))
                throw usage(`sagaSubmit: step ${i} must be {action, compensate}`);
            return { action: call(st.action, `step ${i}'s action`),
                compensate: st.compensate === undefined || st.compensate === null ? null : call(st.compensate, `step ${i}'s compensate`) };
        }), 'steps');
        const o = {};
        if (opts.timeoutToFailMs !== undefined) o.timeout_to_fail_ms = uint(opts.timeoutToFailMs, 'timeoutToFailMs', 0, Number.MAX_SAFE_INTEGER);
        if (opts.retryLimit !== undefined) o.retry_limit = uint(opts.retryLimit, 'retryLimit', 0, 0xffffffff);
        if (opts.concurrent) o.concurrent = true;
        if (opts.after !== undefined && opts.after !== null) {
            if (!Array.isArray(opts.after))
                throw usage('sagaSubmit: after must be an array of one mask per step');
            o.after = opts.after.map((m) => (typeof m === 'bigint' ? m : BigInt(uint(m, 'after mask', 0, Number.MAX_SAFE_INTEGER))));
        }
        const ob = Object.keys(o).length ? Buffer.from(encode(o, { useBigInt64: true })) : null;
        return this._request((id) => this._L.sagaSubmit(this._h, id, gid, g.length, b, b.length, ob, len(ob)), gtxDone, `saga ${gid}`);
    }

    async tccPrepare(gid) {
        const g = gidBytes(gid);
        return this._request((id) => this._L.tccPrepare(this._h, id, gid, g.length), gtxDone, `tcc ${gid}`);
    }

    /** Begins xa gid (docs/coordinator.md "XA over troupe's tables"): its
     * branches are transactions prepared with tx.xaBranch(gid), committed
     * by gtxSubmit, rolled back by gtxAbort. */
    async xaBegin(gid) {
        const g = gidBytes(gid);
        return this._request((id) => this._L.xaBegin(this._h, id, gid, g.length), gtxDone, `xa ${gid}`);
    }

    /** Registers a tcc branch ([target, payload] calls); resolves with its
     * branch id ("01"...), after which its try may run (barrier op "try"). */
    async tccRegister(gid, confirm, cancel) {
        const g = gidBytes(gid);
        const b = pack([call(confirm, 'confirm'), call(cancel, 'cancel')], 'calls');
        return this._request((id) => this._L.tccRegister(this._h, id, gid, g.length, b, b.length), gtxValue, `tcc ${gid}`);
    }

    async msgPrepare(gid, steps, queryTarget, opts = {}) {
        const g = gidBytes(gid);
        if (!Array.isArray(steps))
            throw usage('msgPrepare: steps must be an array of [target, payload]');
        const b = pack(steps.map((c, i) => call(c, `step ${i}`)), 'steps');
        name(queryTarget, 'queryTarget');
        const grace = uint(opts.graceMs, 'graceMs', 0, Number.MAX_SAFE_INTEGER);
        return this._request((id) => this._L.msgPrepare(this._h, id, gid, g.length, b, b.length, queryTarget, grace), gtxDone, `msg ${gid}`);
    }

    async gtxSubmit(gid) {
        const g = gidBytes(gid);
        return this._request((id) => this._L.gtxSubmit(this._h, id, gid, g.length), gtxDone, `submit ${gid}`);
    }

    async gtxAbort(gid, reason) {
        const g = gidBytes(gid);
        const r = reason === undefined || reason === null ? null : String(reason);
        return this._request((id) => this._L.gtxAbort(this._h, id, gid, g.length, r), gtxDone, `abort ${gid}`);
    }

    async gtxRetry(gid) {
        const g = gidBytes(gid);
        return this._request((id) => this._L.gtxRetry(this._h, id, gid, g.length), gtxDone, `retry ${gid}`);
    }

    async gtxForceStop(gid) {
        const g = gidBytes(gid);
        return this._request((id) => this._L.gtxForceStop(this._h, id, gid, g.length), gtxDone, `force-stop ${gid}`);
    }

    /** gid's stored state: {mode, status, reason, steps, attempts,
     * created_ms, updated_ms, finished_ms, next_due_ms, branches: [{id,
     * ops: [{op, target, state, attempts, last}]}]}. */
    async gtxQuery(gid) {
        const g = gidBytes(gid);
        return this._request((id) => this._L.gtxQuery(this._h, id, gid, g.length), gtxValue, `query ${gid}`);
    }

    /** A page of stored transactions: {items: [{gid, mode, status,
     * reason, steps, attempts, created_ms, updated_ms, finished_ms}],
     * cursor (the next page's after, or null), more}; opts {status, mode,
     * after, limit (1..1000, 100)}. */
    async gtxList(opts = {}) {
        const opt = (v, what) => (v === undefined || v === null ? null : name(v, what));
        const status = opt(opts.status, 'status');
        const mode = opt(opts.mode, 'mode');
        const after = opt(opts.after, 'after');
        const limit = uint(opts.limit, 'limit', 100, 1000);
        return this._request((id) => this._L.gtxList(this._h, id, status, mode, after, limit), gtxValue, 'gtx list');
    }

    /** Polls gid's query until its status is one of statuses (default
     * succeed or failed); resolves with that query. */
    async gtxWait(gid, opts = {}) {
        const statuses = opts.statuses || ['succeed', 'failed'];
        const end = Date.now() + (opts.timeoutMs || 30000);
        for (;;) {
            const q = await this.gtxQuery(gid);
            if (statuses.includes(q.status))
                return q;
            if (Date.now() > end)
                throw new TroupeError(E.ETIMEDOUT, `gtx ${gid} still ${q.status}`);
            await new Promise((r) => setTimeout(r, 10));
        }
    }

    /**
     * Serves the branches whose calls name `target`: handler(branch),
     * branch = {mode, gid, branchId, op, payload (Buffer), attempt,
     * deadline}, at most `concurrency` at once, resolves with the outcome:
     * undefined or true SUCCESS, false FAILURE, 'success', 'failure',
     * 'ongoing', 'unknown' (or OUTCOME.*). A throw is UNKNOWN (logged):
     * the call is retried after its backoff.
     */
    branchHandler(target, handler, opts = {}) {
        name(target, 'target');
        if (typeof handler !== 'function')
            throw usage('branchHandler: handler must be a function');
        const t = this._target(target, opts);
        t._branch(handler);
        this._subs++;
        this._updateRef();
        return t;
    }

    // ---- workflows ----

    /**
     * Registers workflow `name` (a pull target of that name): each run
     * calls fn(wf, input) (input a Buffer), an async function replayed
     * from the top on every run over the records so far (wf.step,
     * wf.awakeable, wf.await, wf.version). It resolves: the workflow
     * succeeds; it throws a WorkflowFailure (an uncaught failed step, or
     * one of its own): the workflow fails and every registered step's
     * compensation runs, in reverse; it throws anything else: the run is
     * tried again after the backoff (logged). opts {concurrency (runs at
     * once, 64), timeoutMs (of a run, 30 s)}.
     */
    workflow(workflowName, fn, opts = {}) {
        wfName(workflowName, 'workflow name');
        if (typeof fn !== 'function')
            throw usage('workflow: fn must be a function (wf, input) => ...');
        const t = this._target(workflowName, opts);
        t._workflow(fn);
        this._subs++;
        this._updateRef();
        return t;
    }

    /** Submits instance gid of workflow `name` with input (bytes as they
     * are, undefined none, anything else msgpack). Resolves once it is
     * committed (also when gid exists already: nothing runs twice). */
    async workflowSubmit(gid, workflowName, input) {
        const g = gidBytes(gid);
        wfName(workflowName, 'workflow name');
        const b = payloadBytes(input, 'workflow input');
        return this._request((id) => this._L.workflowSubmit(this._h, id, gid, g.length, workflowName, b, b.length), gtxDone, `workflow ${gid}`);
    }

    /** Resolves awakeable id (what wf.awakeable gave) with payload (bytes
     * as they are, anything else msgpack): its workflow runs again and
     * its await gives the payload. The same resolution again is OK;
     * another, or one after the workflow ended, ECONFLICT. */
    async awakeableResolve(id, payload) {
        return this._settleAwakeable(id, payload, this._L.awakeableResolve, 'resolve');
    }

    /** Rejects awakeable id: its await throws a WorkflowFailure with
     * reason as its result. */
    async awakeableReject(id, reason) {
        return this._settleAwakeable(id, reason, this._L.awakeableReject, 'reject');
    }

    _settleAwakeable(id, payload, fn, what) {
        if (typeof id !== 'string' || id.length === 0 || Buffer.byteLength(id, 'utf8') > AWAKEABLE_ID_MAX || id.includes('\0'))
            throw usage(`awakeable ${what}: an id is "gid/branch-id" of 1..${AWAKEABLE_ID_MAX} bytes`);
        const i = Buffer.from(id, 'utf8');
        const b = payloadBytes(payload, `awakeable ${what}'s payload`);
        return this._request((rq) => fn(this._h, rq, i, i.length, b, b.length), gtxDone, `awakeable ${what} ${id}`);
    }

    // ---- close ----

    _failAll() {
        const closed = () => new TroupeError(E.ECLOSED, 'the node closed before this request completed');
        for (const r of this._pending.values())
            r.reject(closed());
        for (const r of this._waiting)
            r.reject(closed());
        this._pending.clear();
        this._waiting = [];
        if (this._sock) {
            this._sock.unref();
            this._sock.destroy();
            this._sock = null;
        }
        OPEN.delete(this);
    }

    close() {
        if (this._closing)
            return this._closing;
        const h = this._h;
        this._h = null;
        this._failAll();
        this._closing = callAsync(this._L.close, [h]).then((r) => {
            if (r.rc !== E.OK)
                throw new TroupeError(r.rc, r.msg);
        });
        return this._closing;
    }

    _closeSync() {
        if (this._h === null)
            return;
        const h = this._h;
        this._h = null;
        this._failAll();
        this._L.close([h]);
    }
}

// ---- completion decoders -------------------------------------------------

function fail(status, body) {
    return new TroupeError(status, null);
}

function statusOnly(status) {
    if (status !== E.OK)
        throw fail(status);
    return undefined;
}

function askReply(status, body) {
    if (status !== E.OK) {
        const err = fail(status);
        if (body && body.length > 0)
            err.detail = Buffer.from(body);
        throw err;
    }
    return Buffer.from(body);
}

function docOrUndefined(status, body) {
    if (status === E.ENOENT)
        return undefined;
    if (status !== E.OK)
        throw fail(status);
    return decode(body);
}

function deleted(status) {
    if (status === E.ENOENT)
        return false;
    if (status !== E.OK)
        throw fail(status);
    return true;
}

function rowsPage(status, body) {
    if (status !== E.OK)
        throw fail(status);
    const m = decode(body);
    return {
        rows: m.rows.map(([key, value]) => ({ key: toBuffer(key), value })),
        cursor: m.cursor === null ? null : toBuffer(m.cursor),
        more: m.more,
    };
}

function hitsPage(status, body) {
    if (status !== E.OK)
        throw fail(status);
    const m = decode(body);
    return {
        hits: m.hits.map(([key, pk, value]) => ({ key: toBuffer(key), pk: toBuffer(pk), value })),
        cursor: m.cursor === null ? null : toBuffer(m.cursor),
        more: m.more,
    };
}

function committed(status, body) {
    if (status === E.OK)
        return undefined;
    const err = fail(status);
    if (status === E.ECONFLICT && body.length > 0) {
        err.conflicts = decode(body).map(([table, key, kinds]) => ({ table, key: toBuffer(key), kinds }));
        err.message = `ECONFLICT: transaction conflict on ${err.conflicts.map((c) => `${c.table}/${c.key.toString()}`).join(', ')}`;
    }
    throw err;
}

// An xa branch's end: its branch id, or a commit's conflicts, or the error.
function xaPrepared(status, body) {
    if (status === E.OK)
        return decode(body);
    if (status === E.ECONFLICT)
        return committed(status, body);
    throw gtxError(status, body);
}

// A coordinator request's error: its body is the coordinator's message.
function gtxError(status, body) {
    let why = null;
    try {
        why = body && body.length > 0 ? decode(body) : null;
    } catch (err) {
        why = null;
    }
    const err = new TroupeError(status, typeof why === 'string' ? why : null);
    if (typeof why === 'string')
        Object.defineProperty(err, '_detailed', { value: true });
    return err;
}

function gtxDone(status, body) {
    if (status !== E.OK)
        throw gtxError(status, body);
    return undefined;
}

function gtxValue(status, body) {
    if (status !== E.OK)
        throw gtxError(status, body);
    return decode(body);
}

const GID = /^[A-Za-z0-9_.:-]{1,128}$/;

function gidBytes(gid) {
    if (typeof gid !== 'string' || !GID.test(gid))
        throw usage('a gid must be 1..128 characters of [A-Za-z0-9_.:-]');
    return Buffer.from(gid, 'latin1');
}

// A call [target, payload] as the ABI's: payload bytes, or msgpack.
function call(c, what) {
    if (!Array.isArray(c) || c.length !== 2 || typeof c[0] !== 'string')
        throw usage(`${what} must be [target, payload]`);
    name(c[0], `${what}'s target`);
    const p = c[1];
    let b;
    if (p === undefined || p === null)
        b = null;
    else if (Buffer.isBuffer(p) || p instanceof Uint8Array || typeof p === 'string')
        b = bytes(p, `${what}'s payload`);
    else
        b = pack(p, `${what}'s payload`);
    return [c[0], b];
}

const OUTCOME_NAMES = { success: 1, failure: 2, ongoing: 3, unknown: 4 };

function outcomeOf(v) {
    if (v === undefined || v === null || v === true)
        return OUTCOME.SUCCESS;
    if (v === false)
        return OUTCOME.FAILURE;
    if (typeof v === 'string' && OUTCOME_NAMES[v.toLowerCase()])
        return OUTCOME_NAMES[v.toLowerCase()];
    if (Number.isInteger(v) && v >= 1 && v <= 4)
        return v;
    console.error(`troupe: a branch handler gave ${String(v)}: answered UNKNOWN`);
    return OUTCOME.UNKNOWN;
}

const VERDICT = new Set(['execute', 'null_compensation', 'duplicated']);

function verdict(status, body) {
    if (status !== E.OK)
        throw fail(status);
    const v = decode(body);
    if (!VERDICT.has(v))
        throw new TroupeError(E.EINVAL, `barrier: an unknown verdict ${v}`);
    return v;
}

// ---- transactions ---------------------------------------------------------

class Transaction {
    constructor(node, id) {
        this._node = node;
        this._id = id;
        this._ended = false;
    }

    _live(what) {
        if (this._ended)
            throw new TroupeError(E.ENOENT, `${what}: the transaction ended`);
        this._node._check();
    }

    async get(table, key) {
        this._live('get');
        name(table, 'table');
        const k = bytes(key, 'key');
        const n = this._node;
        return n._request((id) => n._L.txnGet(n._h, id, this._id, table, k, k.length), docOrUndefined, `transaction get from table "${table}"`);
    }

    put(table, key, value) {
        this._live('put');
        name(table, 'table');
        const k = bytes(key, 'key');
        const d = doc(value, 'document');
        const rc = this._node._L.txnPut(this._node._h, this._id, table, k, k.length, d, d.length);
        if (rc !== E.OK)
            throw callError(rc);
    }

    delete(table, key) {
        this._live('delete');
        name(table, 'table');
        const k = bytes(key, 'key');
        const rc = this._node._L.txnDelete(this._node._h, this._id, table, k, k.length);
        if (rc !== E.OK)
            throw callError(rc);
    }

    async commit() {
        this._live('commit');
        const n = this._node;
        const p = n._request((id) => {
            const rc = n._L.txnCommit(n._h, id, this._id);
            if (rc === E.OK)
                this._ended = true;
            return rc;
        }, committed, 'commit');
        return p;
    }

    /**
     * The barrier for branch ({mode, gid, branchId, op}, as a branch
     * handler gets it) in this transaction: resolves with 'execute' (do
     * the business writes here), 'null_compensation' or 'duplicated'
     * (write nothing). Commit in every case; nothing else may use the
     * transaction until it resolves.
     */
    async barrier(branch) {
        this._live('barrier');
        if (branch === null || typeof branch !== 'object')
            throw usage('barrier: branch must be {mode, gid, branchId, op}');
        const g = gidBytes(branch.gid);
        name(branch.mode, 'barrier: mode');
        name(branch.branchId, 'barrier: branchId');
        name(branch.op, 'barrier: op');
        const n = this._node;
        return n._request((id) => n._L.txnBarrier(n._h, id, this._id, branch.mode, branch.gid, g.length, branch.branchId, branch.op), verdict, `barrier of ${branch.gid}`);
    }

    /**
     * Prepares this transaction as a branch of xa gid (node.xaBegin):
     * resolves with its branch id ("01"...) once its writes are prepared
     * and held, to be committed by the coordinator on gtxSubmit or rolled
     * back on gtxAbort. It ends the transaction, as commit does. A
     * prepare that loses a conflict rejects with ECONFLICT and its
     * conflicts (the branch stays registered: abort the xa).
     */
    async xaBranch(gid) {
        this._live('xaBranch');
        const g = gidBytes(gid);
        const n = this._node;
        return n._request((id) => {
            const rc = n._L.xaBranch(n._h, id, gid, g.length, this._id);
            if (rc === E.OK)
                this._ended = true;
            return rc;
        }, xaPrepared, `xa branch of ${gid}`);
    }

    rollback() {
        this._live('rollback');
        const rc = this._node._L.txnRollback(this._node._h, this._id);
        if (rc !== E.OK)
            throw callError(rc);
        this._ended = true;
    }
}

// ---- workflows (docs/coordinator.md "Workflows") ------------------------------
//
// A workflow is a pull target named after it; each run is a task of kind
// 5 whose body is [input, records]. The run's driver calls the function
// with a WorkflowRun (`wf`) that replays it over the records exactly as
// the C trampoline does (actors/coord/src/workflow.c): a step done
// returns its stored result, a registered one runs its fn now, a new one
// is registered and the run stops. Stopping is a Suspend thrown from the
// call; the driver turns the run's end and the updates it collected into
// the reply [end, reason, updates(, awaited)]. Whatever the function does
// after a Suspend (catches it, returns, throws something else) changes
// nothing: the end is the one the first stop decided, as in C.

const WF_KIND = { STEP: 1, AWAKE: 2, VERSION: 3 };
const WF_STATE = { TODO: 1, DONE: 3, REFUSED: 4 };
const WF_END = { SUCCEEDED: 1, FAILED: 2, CONTINUE: 3, RETRY: 4, DIVERGED: 5, AWAIT: 6 };
const WF_RECORDS_MAX = 64; // TROUPE_GTX_STEPS_MAX
const WF_NAME_MAX = 128; // TROUPE_WF_NAME_MAX
const WF_PAYLOAD_MAX = 65536; // TROUPE_GTX_PAYLOAD_MAX
const WF_REASON_MAX = 256; // TROUPE_GTX_ABORT_REASON_MAX
const AWAKEABLE_ID_MAX = 133; // TROUPE_AWAKEABLE_ID_MAX
const VERSION_DEFAULT = -1; // TROUPE_WF_VERSION_DEFAULT
const EMPTY = Buffer.alloc(0);

/** Thrown by a workflow call that must stop the run (a registration, an
 * await not resolved, a divergence). A catch in a workflow must rethrow
 * it: `catch (e) { if (troupe.isSuspend(e)) throw e; ... }`. */
class Suspend extends Error {
    constructor() {
        super('troupe: this workflow run stops here; rethrow it (troupe.isSuspend)');
        this.name = 'Suspend';
    }
}

function isSuspend(e) {
    return e instanceof Suspend;
}

/** A failure in a workflow: thrown by a step's fn, it records the step
 * as failed with `result` (default: the message's bytes); wf.step and
 * wf.await reject with one for a failed step or a rejected awakeable;
 * one that leaves the workflow function fails the workflow (its message
 * the rollback reason), which compensates every registered step. */
class WorkflowFailure extends Error {
    constructor(message, result) {
        super(message);
        this.name = 'WorkflowFailure';
        this.result = result === undefined ? Buffer.from(String(message), 'utf8') : payloadBytes(result, 'a failure\'s result');
    }
}

// bytes as given, undefined/null empty, anything else msgpack.
function payloadBytes(v, what) {
    if (v === undefined || v === null)
        return EMPTY;
    if (Buffer.isBuffer(v) || v instanceof Uint8Array || typeof v === 'string')
        return bytes(v, what);
    return pack(v, what);
}

function wfName(v, what) {
    name(v, what);
    const n = Buffer.byteLength(v, 'utf8');
    if (n > WF_NAME_MAX)
        throw usage(`${what} must be 1..${WF_NAME_MAX} bytes (got ${n})`);
    return v;
}

function pad2(n) {
    return n < 10 ? `0${n}` : String(n);
}

// At most n bytes of s's UTF-8 (as the C side's %.40s).
function clip(s, n) {
    const b = Buffer.from(s, 'utf8');
    return b.length <= n ? s : b.subarray(0, n).toString('utf8');
}

const KIND_NAMES = { 1: 'step', 2: 'awakeable', 3: 'version marker' };

// A rollback reason the coordinator accepts: 1..256 bytes of UTF-8
// without control characters (troupe_gtx_abort_reason_valid), or null.
function reasonOf(msg) {
    let s = String(msg === undefined || msg === null ? '' : msg).replace(/[\u0000-\u001f\u007f]/g, ' ').trim();
    while (Buffer.byteLength(s, 'utf8') > WF_REASON_MAX)
        s = s.slice(0, -1);
    return s.length > 0 ? s : null;
}

// A u32 in decimal as troupe's (no sign, no leading zero) up to max.
function decU32(s, max) {
    return /^(0|[1-9][0-9]{0,9})$/.test(s) && Number(s) <= max;
}

// Whether a target that names an actor ("actor:NAME#KIND" or
// "actor:@NODE.SLOT.GEN#KIND", troupe/branch.h) is in that form; any other
// name is a dispatch target's. A malformed one would make the whole reply
// refused, and the run retried for ever with no word of why.
function actorTargetOk(t) {
    if (!t.startsWith('actor:'))
        return true;
    const who = t.slice(6);
    const hash = who.lastIndexOf('#');
    if (hash <= 0 || !decU32(who.slice(hash + 1), 63))
        return false;
    if (who[0] !== '@')
        return true;
    const v = who.slice(1, hash).split('.');
    return v.length === 3 && v.every((x) => decU32(x, 0xffffffff)) && v[1] !== '0' && v[2] !== '0';
}

function compensation(c) {
    if (c === undefined || c === null)
        return null;
    if (typeof c !== 'object' || Array.isArray(c))
        throw usage('step: compensate must be {target, payload}');
    name(c.target, 'step: compensate.target');
    if (Buffer.byteLength(c.target, 'utf8') > 255)
        throw usage('step: compensate.target must be 1..255 bytes');
    if (!actorTargetOk(c.target))
        throw usage(`step: compensate.target ${c.target} is no actor target ("actor:NAME#KIND" or "actor:@NODE.SLOT.GEN#KIND")`);
    const p = payloadBytes(c.payload, 'step: compensate.payload');
    if (p.length > WF_PAYLOAD_MAX)
        throw usage(`step: a compensation payload of ${p.length} bytes; at most ${WF_PAYLOAD_MAX}`);
    return [c.target, p];
}

// A run's records from its body [input bin, records]; null if it breaks
// the format.
function runBody(u8) {
    let b;
    try {
        b = decode(u8);
    } catch (err) {
        return null;
    }
    if (!Array.isArray(b) || b.length !== 2 || !(b[0] instanceof Uint8Array) || !Array.isArray(b[1]) || b[1].length > WF_RECORDS_MAX)
        return null;
    const recs = [];
    for (const k of b[1]) {
        if (!Array.isArray(k) || k.length !== 5 || !Number.isInteger(k[0]) || typeof k[1] !== 'string' || !Number.isInteger(k[2]) || !(k[3] instanceof Uint8Array) || !Number.isInteger(k[4]))
            return null;
        recs.push({ kind: k[0], name: k[1], state: k[2], result: toBuffer(k[3]), version: k[4] });
    }
    return { input: toBuffer(b[0]), recs };
}

/** What a workflow function gets: its gid, the replay's calls. */
class WorkflowRun {
    constructor(gid, recs, attempt, deadline) {
        this.gid = gid;
        this.attempt = attempt;
        this.deadline = deadline;
        this._recs = recs;
        this._pos = 0;
        this._stop = 0;
        this._awaited = 0;
        this._reason = null; // DIVERGED: where
        this._updates = [];
        this._action = null; // the Promise of a step's fn running now
        this._over = false; // answered: no call may come any more
    }

    _live(what) {
        if (this._over)
            throw usage(`${what}: this workflow run has ended (a call not awaited?)`);
        if (this._stop !== 0)
            throw new Suspend();
        if (this._action !== null)
            throw usage(`${what}: inside a step's fn (steps run one at a time)`);
    }

    _halt(end) {
        if (this._stop === 0)
            this._stop = end;
        return new Suspend();
    }

    _diverged(k, kind, nm) {
        this._reason = `replay diverged: position ${pad2(this._pos + 1)} was recorded as ${KIND_NAMES[k.kind] || 'version marker'} "${clip(k.name, 40)}" but is now ${KIND_NAMES[kind]} "${clip(nm, 40)}"`;
        return this._halt(WF_END.DIVERGED);
    }

    _append(kind, nm, state, comp, version) {
        if (this._pos >= WF_RECORDS_MAX)
            throw usage(`a workflow has at most ${WF_RECORDS_MAX} records (steps, awakeables, version markers)`);
        this._updates.push([this._pos++, kind, nm, state, EMPTY, comp, version]);
    }

    /**
     * Step `name` at the run's next position: resolves with its result (a
     * Buffer), run by fn({mode, gid, branchId, op}) once (what fn returns:
     * bytes as they are, other values as msgpack); rejects with a
     * WorkflowFailure when fn threw one (now or in an earlier run).
     * opts.compensate {target, payload}: the branch call that undoes it,
     * stored before fn ever runs. Any other throw of fn runs the step
     * again after the backoff.
     */
    async step(stepName, fn, opts = {}) {
        this._live('step');
        wfName(stepName, 'step name');
        if (typeof fn !== 'function')
            throw usage('step: fn must be a function');
        const comp = compensation(opts && opts.compensate);
        if (this._pos >= this._recs.length) {
            this._append(WF_KIND.STEP, stepName, WF_STATE.TODO, comp, 0);
            throw this._halt(WF_END.CONTINUE);
        }
        const k = this._recs[this._pos];
        if (k.kind !== WF_KIND.STEP || k.name !== stepName)
            throw this._diverged(k, WF_KIND.STEP, stepName);
        if (k.state === WF_STATE.TODO)
            return this._run(stepName, fn);
        this._pos++;
        if (k.state === WF_STATE.DONE)
            return k.result;
        throw stepFailure(stepName, k.result);
    }

    async _run(stepName, fn) {
        const pos = this._pos;
        const ctx = { mode: 'workflow', gid: this.gid, branchId: pad2(pos + 1), op: 'action', attempt: this.attempt };
        let state, result = EMPTY;
        const act = (async () => fn(ctx))();
        this._action = act;
        try {
            result = payloadBytes(await act, 'a step\'s result');
            state = WF_STATE.DONE;
            if (result.length > WF_PAYLOAD_MAX) {
                result = Buffer.from(`step result of ${result.length} bytes; at most ${WF_PAYLOAD_MAX}`);
                state = WF_STATE.REFUSED;
            }
        } catch (err) {
            if (err instanceof WorkflowFailure) {
                state = WF_STATE.REFUSED;
                result = err.result.length <= WF_PAYLOAD_MAX ? err.result : err.result.subarray(0, WF_PAYLOAD_MAX);
            } else {
                if (!isSuspend(err))
                    console.error(`troupe: workflow ${this.gid} step "${stepName}" threw; it runs again after the backoff:`, err);
                state = WF_STATE.TODO;
            }
        } finally {
            this._action = null;
        }
        this._pos++;
        if (state === WF_STATE.TODO) {
            this._updates.push([pos, WF_KIND.STEP, stepName, WF_STATE.TODO, EMPTY, null, 0]);
            throw this._halt(WF_END.RETRY);
        }
        this._updates.push([pos, WF_KIND.STEP, stepName, state, result, null, 0]);
        if (state === WF_STATE.DONE)
            return result;
        throw stepFailure(stepName, result);
    }

    /** Awakeable `name` at the run's next position: its id
     * ("gid/branch-id"), to hand on from a step (so that it is sent once)
     * to whoever resolves it (node.awakeableResolve). */
    awakeable(awName) {
        this._live('awakeable');
        wfName(awName, 'awakeable name');
        if (this._pos >= this._recs.length) {
            this._append(WF_KIND.AWAKE, awName, WF_STATE.TODO, null, 0);
            throw this._halt(WF_END.CONTINUE);
        }
        const k = this._recs[this._pos];
        if (k.kind !== WF_KIND.AWAKE || k.name !== awName)
            throw this._diverged(k, WF_KIND.AWAKE, awName);
        return `${this.gid}/${pad2(++this._pos)}`;
    }

    /** The resolution of awakeable id (a Buffer); rejects with a
     * WorkflowFailure when it was rejected. Until it is resolved the
     * workflow is held (no run, no backoff). Takes no position. */
    async await(id) {
        this._live('await');
        const slash = typeof id === 'string' ? id.lastIndexOf('/') : -1;
        const bid = slash >= 0 ? id.slice(slash + 1) : '';
        const pos = Number(bid) - 1;
        if (slash < 0 || id.slice(0, slash) !== this.gid || !/^[0-9]{2,4}$/.test(bid) || pos < 0 ||
            pos >= this._recs.length || this._recs[pos].kind !== WF_KIND.AWAKE)
            throw new TroupeError(E.ENOENT, `await: ${String(id)} is not an awakeable of workflow ${this.gid}`);
        const k = this._recs[pos];
        if (k.state === WF_STATE.TODO) {
            this._awaited = pos;
            throw this._halt(WF_END.AWAIT);
        }
        if (k.state === WF_STATE.DONE)
            return k.result;
        const f = new WorkflowFailure(`awakeable ${id} was rejected: ${k.result.toString('utf8')}`, k.result);
        f.awakeable = id;
        throw f;
    }

    /**
     * Version marker `change` at the run's next position: an instance
     * that recorded it gets its recorded version, one reaching it first
     * max (recorded), one that predates it troupe.VERSION_DEFAULT (-1),
     * taking no position. A version outside [min, max] diverges.
     */
    version(change, min, max) {
        this._live('version');
        wfName(change, 'version marker name');
        if (!Number.isInteger(min) || !Number.isInteger(max) || min > max || min < -2147483648 || max > 2147483647)
            throw usage('version: min and max are int32s, min <= max');
        const at = this._pos + 1;
        let v = VERSION_DEFAULT;
        if (this._pos >= this._recs.length) {
            if (this._pos >= WF_RECORDS_MAX)
                throw usage(`a workflow has at most ${WF_RECORDS_MAX} records`);
            this._updates.push([this._pos++, WF_KIND.VERSION, change, WF_STATE.DONE, EMPTY, null, max]);
            v = max;
        } else {
            const k = this._recs[this._pos];
            if (k.kind === WF_KIND.VERSION && k.name === change) {
                v = k.version;
                this._pos++;
            }
        }
        if (v < min || v > max) {
            this._reason = `replay diverged: version marker "${clip(change, 40)}" at position ${pad2(at)} is version ${v}, outside ${min}..${max}`;
            throw this._halt(WF_END.DIVERGED);
        }
        return v;
    }

    _body(end, failReason) {
        const reason = end === WF_END.DIVERGED ? this._reason : end === WF_END.FAILED ? failReason : null;
        const a = [end, reason === undefined ? null : reason, this._updates];
        if (end === WF_END.AWAIT)
            a.push(this._awaited);
        return Buffer.from(encode(a));
    }
}

function stepFailure(stepName, result) {
    const f = new WorkflowFailure(`step "${stepName}" failed: ${result.toString('utf8')}`, result);
    f.step = stepName;
    return f;
}

// ---- pull targets and subscriptions ------------------------------------------

// An i64 that fits a double (a Unix ms time) without a BigInt.
function i64(buf, off) {
    return buf.readInt32LE(off + 4) * 4294967296 + buf.readUInt32LE(off);
}

// A task of a served target: header and body are views of its batch's
// copy (Node._batchCopy), made on first use.
class Task {
    constructor(kind, attempt, deadline, bytes, base, hlen, blen) {
        this.kind = kind;
        this.attempt = attempt;
        this.deadline = deadline;
        this._bytes = bytes;
        this._base = base;
        this._hlen = hlen;
        this._blen = blen;
    }

    get header() {
        return this._bytes.subarray(this._base, this._base + this._hlen);
    }

    get body() {
        const b = this._base + this._hlen;
        return this._bytes.subarray(b, b + this._blen);
    }
}

class Target {
    constructor(node, targetName, index, credit) {
        this._node = node;
        this.name = targetName;
        this.index = index;
        this.concurrency = credit;
        this.inFlight = 0;
        this._onTask = null;
    }

    // Replies by what the handler gave: undefined SUCCESS, {reschedule}
    // SUCCESS with that body, {outcome, body} as given; a throw FAILURE.
    _settle(lo, hi, v) {
        this.inFlight--;
        const n = this._node;
        if (v === undefined || v === null || v === true)
            return n._reply(lo, hi, OUTCOME.SUCCESS, null);
        if (typeof v === 'object' && v.reschedule !== undefined) {
            const t = v.reschedule instanceof Date ? v.reschedule.getTime() : v.reschedule;
            return n._reply(lo, hi, OUTCOME.SUCCESS, Buffer.from(encode({ reschedule: t })));
        }
        if (typeof v === 'object' && v.outcome !== undefined) {
            const o = OUTCOME[v.outcome] || v.outcome;
            return n._reply(lo, hi, o, v.body === undefined ? null : bytes(v.body, 'reply body'));
        }
        return n._reply(lo, hi, OUTCOME.SUCCESS, null);
    }

    _run(lo, hi, handler, arg) {
        this.inFlight++;
        let r;
        try {
            r = handler(arg);
        } catch (err) {
            this.inFlight--;
            this._node._reply(lo, hi, OUTCOME.FAILURE, null);
            return;
        }
        if (r !== null && typeof r === 'object' && typeof r.then === 'function') {
            r.then((v) => this._settle(lo, hi, v), () => {
                this.inFlight--;
                this._node._reply(lo, hi, OUTCOME.FAILURE, null);
            });
        } else {
            this._settle(lo, hi, r);
        }
    }

    _raw(handler) {
        this._onTask = (buf, off, kind, hlen, blen, lo, hi) => {
            const n = this._node;
            const task = new Task(kind, n._dv.getUint32(off + 16, true), i64(buf, off + 24), n._batchCopy(), off + RECORD_FIXED, hlen, blen);
            this._run(lo, hi, handler, task);
        };
    }

    // A host actor's messages (troupe/hostactor.h's 32-byte header:
    // u32 kind, u32 flags (bit 0: an ask), u32 node, u32 slot, u32 gen,
    // u32 tag, i64 deadline_ms).
    _actor(handler) {
        this._onTask = (buf, off, kind, hlen, blen, lo, hi) => {
            if (kind !== KIND_ACTOR || hlen < 32) {
                this._node._reply(lo, hi, OUTCOME.UNKNOWN, null);
                return;
            }
            const h = off + RECORD_FIXED;
            const msg = {
                kind: buf.readUInt32LE(h),
                ask: (buf.readUInt32LE(h + 4) & 1) !== 0,
                tag: buf.readUInt32LE(h + 20),
                deadline: i64(buf, h + 24),
                body: Buffer.from(buf.subarray(h + hlen, h + hlen + blen)),
            };
            this.inFlight++;
            const answer = (v) => {
                this.inFlight--;
                if (v === undefined || v === null)
                    return this._node._reply(lo, hi, OUTCOME.SUCCESS, null);
                let b;
                try {
                    b = bytes(v, 'actor reply');
                } catch (err) {
                    return this._node._reply(lo, hi, OUTCOME.FAILURE, Buffer.from(String(err.message)));
                }
                return this._node._reply(lo, hi, OUTCOME.SUCCESS, b);
            };
            const failed = (err) => {
                this.inFlight--;
                const text = err && err.message !== undefined ? err.message : String(err);
                this._node._reply(lo, hi, OUTCOME.FAILURE, Buffer.from(text));
            };
            let r;
            try {
                r = handler(msg);
            } catch (err) {
                failed(err);
                return;
            }
            if (r !== null && typeof r === 'object' && typeof r.then === 'function')
                r.then(answer, failed);
            else
                answer(r);
        };
    }

    // A global transaction's calls: the header is four NUL-terminated
    // strings, mode, gid, branch id, op (bindings/c/README.md "Branches").
    _branch(handler) {
        this._onTask = (buf, off, kind, hlen, blen, lo, hi) => {
            const h = off + RECORD_FIXED;
            const parts = kind === KIND_BRANCH ? buf.toString('utf8', h, h + hlen).split('\0') : [];
            if (parts.length !== 5 || parts[4] !== '') {
                this._node._reply(lo, hi, OUTCOME.UNKNOWN, null);
                return;
            }
            const branch = {
                mode: parts[0], gid: parts[1], branchId: parts[2], op: parts[3],
                payload: Buffer.from(buf.subarray(h + hlen, h + hlen + blen)),
                attempt: buf.readUInt32LE(off + 16),
                deadline: i64(buf, off + 24),
                // the payload as msgpack (what a non-bytes payload was
                // packed as at submit)
                value() { return decode(this.payload); },
            };
            this.inFlight++;
            const answer = (o) => {
                this.inFlight--;
                this._node._reply(lo, hi, o, null);
            };
            const failed = (err) => {
                console.error(`troupe: branch ${branch.gid} ${branch.branchId} ${branch.op} failed: answered UNKNOWN:`, err);
                answer(OUTCOME.UNKNOWN);
            };
            let r;
            try {
                r = handler(branch);
            } catch (err) {
                failed(err);
                return;
            }
            if (r !== null && typeof r === 'object' && typeof r.then === 'function')
                r.then((v) => answer(outcomeOf(v)), failed);
            else
                answer(outcomeOf(r));
        };
    }

    // A workflow's runs: header "workflow\0gid\0" "00\0run\0", body
    // [input, records]; answered SUCCESS with [end, reason, updates(,
    // awaited)] (WorkflowRun), or UNKNOWN for a task that is no run.
    _workflow(fn) {
        this._onTask = (buf, off, kind, hlen, blen, lo, hi) => {
            const n = this._node;
            const h = off + RECORD_FIXED;
            const parts = kind === KIND_WORKFLOW ? buf.toString('utf8', h, h + hlen).split('\0') : [];
            const body = parts.length === 5 && parts[0] === 'workflow' && parts[2] === '00' && parts[3] === 'run' && parts[4] === ''
                ? runBody(n._batchCopy().subarray(h + hlen, h + hlen + blen)) : null;
            if (body === null) {
                n._reply(lo, hi, OUTCOME.UNKNOWN, null);
                return;
            }
            const run = new WorkflowRun(parts[1], body.recs, buf.readUInt32LE(off + 16), i64(buf, off + 24));
            this.inFlight++;
            const finish = (end, reason) => {
                this.inFlight--;
                run._over = true;
                n._reply(lo, hi, OUTCOME.SUCCESS, run._body(end, reason));
            };
            const settle = async () => {
                let end = WF_END.SUCCEEDED, reason = null;
                try {
                    await fn(run, body.input);
                } catch (err) {
                    if (err instanceof WorkflowFailure) {
                        end = WF_END.FAILED;
                        reason = reasonOf(err.message);
                    } else {
                        end = WF_END.RETRY;
                        if (!isSuspend(err) && run._stop === 0)
                            console.error(`troupe: workflow ${run.gid} threw; it runs again after the backoff:`, err);
                    }
                }
                if (run._action !== null) // a step not awaited: its end first
                    await run._action.catch(() => {});
                finish(run._stop !== 0 ? run._stop : end, reason);
            };
            settle().catch((err) => { // a bug of the binding's: the run times out
                console.error(`troupe: workflow ${run.gid}: the run could not answer:`, err);
            });
        };
    }

    _queue(handler) {
        this._onTask = (buf, off, kind, hlen, blen, lo, hi) => {
            if (kind !== KIND_QUEUE) {
                this._node._reply(lo, hi, OUTCOME.UNKNOWN, null);
                return;
            }
            const h = off + RECORD_FIXED;
            const ql = buf.readUInt16LE(h + 20);
            const il = buf.readUInt16LE(h + 22);
            const kl = buf.readUInt16LE(h + 24);
            const okl = buf.readUInt16LE(h + 26);
            const oil = buf.readUInt16LE(h + 28);
            let s = h + 32;
            const str = (l) => { const v = buf.toString('utf8', s, s + l); s += l; return v; };
            const queue = str(ql);
            const id = str(il);
            const key = str(kl);
            const ownerKind = okl ? str(okl) : null;
            const ownerId = oil ? str(oil) : null;
            let payload;
            try {
                payload = decode(buf.subarray(h + hlen, h + hlen + blen));
            } catch (err) {
                this._node._reply(lo, hi, OUTCOME.FAILURE, null);
                return;
            }
            const event = {
                queue, id, key, payload,
                attempt: buf.readUInt32LE(off + 16),
                time: i64(buf, h),
                partition: buf.readUInt32LE(h + 16),
                owner: ownerKind === null ? null : { kind: ownerKind, id: ownerId },
                deadline: i64(buf, off + 24),
            };
            this._run(lo, hi, handler, event);
        };
    }
}

module.exports = { open, TroupeError, OUTCOME, libraryPath, WorkflowFailure, isSuspend, VERSION_DEFAULT };
