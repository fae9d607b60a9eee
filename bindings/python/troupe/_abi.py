"""The ctypes declarations of troupe's flat C ABI (bindings/c/include/
troupe/abi.h), the error type, and the packed records it writes.

The library is found through the TROUPE_LIB environment variable (a path
to libtroupe.so), else next to a build tree of this checkout
(build/lib/libtroupe.so), else by the system's loader (find_library)."""

import ctypes
import ctypes.util
import os
import struct

__all__ = ["lib", "TroupeError", "check", "Record", "parse_records",
           "ERR", "OUTCOME_SUCCESS", "OUTCOME_FAILURE", "OUTCOME_ONGOING",
           "OUTCOME_UNKNOWN", "KIND_QUEUE", "KIND_COMPLETION", "KIND_BRANCH",
           "KIND_WORKFLOW",
           "parse_branch_header"]

ABI_VERSION = 1

OUTCOME_SUCCESS = 1
OUTCOME_FAILURE = 2
OUTCOME_ONGOING = 3
OUTCOME_UNKNOWN = 4
KIND_QUEUE = 1
KIND_ACTOR = 2
KIND_COMPLETION = 3
KIND_BRANCH = 4
KIND_WORKFLOW = 5  # TROUPE_TASK_WORKFLOW: a workflow's run

# troupe/err.h, by number.
ERR = {0: "OK", 1: "EINVAL", 2: "ENOMEM", 3: "ENOENT", 4: "EEXIST",
       5: "ECLOSED", 6: "ETIMEDOUT", 7: "EFULL", 8: "EDEAD", 9: "EPROTO",
       10: "ETOOBIG", 11: "EIO", 12: "ECORRUPT", 13: "EUNKNOWN",
       14: "EFAILSTOP", 15: "EUNREACHABLE", 16: "ECONFLICT", 17: "EBUSY",
       18: "ESTATE", 19: "ERANGE", 20: "ESYS", 21: "ECONSTRAINT",
       22: "ENOTSUP", 23: "ECANCELED", 24: "EFAILED", 25: "EAGAIN",
       26: "ENOSPC", 27: "EAUTH", 28: "EREADONLY", 29: "EDEADLK",
       30: "ENOTABLE", 31: "ENOINDEX", 32: "ENOQUEUE"}
CODE = {v: k for k, v in ERR.items()}


class TroupeError(Exception):
    """A troupe_err: .code (the number), .name ("ENOTABLE") and the
    message troupe gave (troupe_abi_errmsg), with .detail (e.g. the
    conflicts of an ECONFLICT commit) where there is one."""

    def __init__(self, code, message="", detail=None):
        self.code = code
        self.name = ERR.get(code, "E%d" % code)
        self.message = message
        self.detail = detail
        super().__init__("%s: %s" % (self.name, message or self.name))


def _find():
    p = os.environ.get("TROUPE_LIB")
    if p:
        return p
    here = os.path.dirname(os.path.abspath(__file__))
    root = os.path.normpath(os.path.join(here, "..", "..", ".."))
    for d in ("build", "build-release", "build-asan"):
        c = os.path.join(root, d, "lib", "libtroupe.so")
        if os.path.exists(c):
            return c
    p = ctypes.util.find_library("troupe")
    if p:
        return p
    raise OSError("libtroupe.so not found: set TROUPE_LIB to its path")


lib = ctypes.CDLL(_find())

_vp = ctypes.c_void_p
_cp = ctypes.c_char_p
_sz = ctypes.c_size_t
_u32 = ctypes.c_uint32
_u64 = ctypes.c_uint64
_i32 = ctypes.c_int32
_i64 = ctypes.c_int64
_int = ctypes.c_int
_psz = ctypes.POINTER(ctypes.c_size_t)

WAKE_FN = ctypes.CFUNCTYPE(None, ctypes.c_void_p)

_DECL = {
    "troupe_abi_version": [],
    "troupe_abi_open": [_cp, _u32, _u32, _i32, ctypes.POINTER(_vp)],
    "troupe_abi_start": [_vp],
    "troupe_abi_close": [ctypes.POINTER(_vp)],
    "troupe_abi_set_limits": [_vp, _u32, _u64],
    "troupe_abi_wake_fd": [_vp, ctypes.POINTER(_int)],
    "troupe_abi_set_wake": [_vp, WAKE_FN, _vp],
    "troupe_abi_register_pull": [_vp, _cp, _u32, _u32,
                                 ctypes.POINTER(_u32)],
    "troupe_abi_next_task": [_vp, _int, _vp, _sz, _psz],
    "troupe_abi_next_batch": [_vp, _int, _vp, _sz, _sz, _psz, _psz],
    "troupe_abi_reply": [_vp, _u64, _u32, _cp, _sz],
    "troupe_abi_reply_batch": [_vp, _cp, _sz, _psz, _psz],
    "troupe_abi_table_create": [_vp, _u64, _cp, _cp, _sz],
    "troupe_abi_table_get": [_vp, _u64, _cp, _cp, _sz],
    "troupe_abi_table_put": [_vp, _u64, _cp, _cp, _sz, _cp, _sz],
    "troupe_abi_table_delete": [_vp, _u64, _cp, _cp, _sz],
    "troupe_abi_table_scan": [_vp, _u64, _cp, _cp, _sz, _cp, _sz, _cp, _sz,
                              _u32, _i32],
    "troupe_abi_index_query": [_vp, _u64, _cp, _cp, _cp, _sz, _cp, _sz, _cp,
                               _sz, _cp, _sz, _u32, _i32, _i32],
    "troupe_abi_txn_begin": [_vp, ctypes.POINTER(_u64)],
    "troupe_abi_txn_get": [_vp, _u64, _u64, _cp, _cp, _sz],
    "troupe_abi_txn_put": [_vp, _u64, _cp, _cp, _sz, _cp, _sz],
    "troupe_abi_txn_delete": [_vp, _u64, _cp, _cp, _sz],
    "troupe_abi_txn_commit": [_vp, _u64, _u64],
    "troupe_abi_txn_rollback": [_vp, _u64],
    "troupe_abi_queue_create": [_vp, _cp, _u32, _i64, _u32],
    "troupe_abi_queue_publish": [_vp, _u64, _cp, _cp, _sz, _cp, _sz, _cp,
                                 _sz, _i64],
    "troupe_abi_queue_subscribe": [_vp, _cp, _cp],
    "troupe_abi_actor_serve": [_vp, _cp, _cp, _u32],
    "troupe_abi_actor_ask": [_vp, _u64, _cp, _u32, _cp, _sz, _u32],
    "troupe_abi_coord_options": [_vp, _u32, _u32, _u32, _i32],
    "troupe_abi_saga_submit": [_vp, _u64, _cp, _sz, _cp, _sz, _cp, _sz],
    "troupe_abi_tcc_prepare": [_vp, _u64, _cp, _sz],
    "troupe_abi_tcc_register": [_vp, _u64, _cp, _sz, _cp, _sz],
    "troupe_abi_msg_prepare": [_vp, _u64, _cp, _sz, _cp, _sz, _cp, _i64],
    "troupe_abi_gtx_submit": [_vp, _u64, _cp, _sz],
    "troupe_abi_gtx_abort": [_vp, _u64, _cp, _sz, _cp],
    "troupe_abi_gtx_retry": [_vp, _u64, _cp, _sz],
    "troupe_abi_gtx_force_stop": [_vp, _u64, _cp, _sz],
    "troupe_abi_gtx_query": [_vp, _u64, _cp, _sz],
    "troupe_abi_gtx_list": [_vp, _u64, _cp, _cp, _cp, _u32],
    "troupe_abi_txn_barrier": [_vp, _u64, _u64, _cp, _cp, _sz, _cp, _cp],
    "troupe_abi_xa_begin": [_vp, _u64, _cp, _sz],
    "troupe_abi_xa_branch": [_vp, _u64, _cp, _sz, _u64],
    "troupe_abi_workflow_submit": [_vp, _u64, _cp, _sz, _cp, _cp, _sz],
    "troupe_abi_awakeable_resolve": [_vp, _u64, _cp, _sz, _cp, _sz],
    "troupe_abi_awakeable_reject": [_vp, _u64, _cp, _sz, _cp, _sz],
}
for _name, _args in _DECL.items():
    _f = getattr(lib, _name)
    _f.argtypes = _args
    _f.restype = ctypes.c_int
lib.troupe_abi_errmsg.argtypes = []
lib.troupe_abi_errmsg.restype = ctypes.c_char_p

if lib.troupe_abi_version() != ABI_VERSION:
    raise OSError("libtroupe.so has ABI %d, this binding needs %d"
                  % (lib.troupe_abi_version(), ABI_VERSION))


def check(rc):
    """Raises TroupeError for a non-zero status, with the thread's
    message (read at once, on the calling thread)."""
    if rc != 0:
        raise TroupeError(rc, lib.troupe_abi_errmsg().decode("utf-8",
                                                             "replace"))
    return rc


_FIXED = struct.Struct("<QIHHIIq")
FIXED = _FIXED.size  # 32


class Record:
    """One packed record (troupe/dispatch.h, TROUPE_HOST_RECORD_*): its
    header and body are sliced on first use from its batch's one copy."""

    __slots__ = ("id", "target", "kind", "attempt", "deadline_ms",
                 "_data", "_h0", "_hl", "_bl")

    def __init__(self, id, target, kind, attempt, deadline_ms, data, h0, hl,
                 bl):
        self.id = id
        self.target = target
        self.kind = kind
        self.attempt = attempt
        self.deadline_ms = deadline_ms
        self._data = data
        self._h0 = h0
        self._hl = hl
        self._bl = bl

    @property
    def header(self):
        return self._data[self._h0:self._h0 + self._hl]

    @property
    def body(self):
        b = self._h0 + self._hl
        return self._data[b:b + self._bl]

    @property
    def status(self):
        """A completion's troupe_err."""
        return struct.unpack_from("<i", self._data, self._h0)[0]


def parse_records(buf, length):
    """The records in buf[0:length] (one copy of those bytes, shared)."""
    out = []
    data = bytes(memoryview(buf)[:length])
    unpack = _FIXED.unpack_from
    off = 0
    while off < length:
        rid, target, kind, hl, attempt, bl, dl = unpack(data, off)
        out.append(Record(rid, target, kind, attempt, dl, data, off + FIXED,
                          hl, bl))
        off += (FIXED + hl + bl + 7) & ~7
    return out


_QHDR = struct.Struct("<qQIHHHHHH")


def parse_queue_header(h):
    """A queue task's header (docs/queue.md "Pull workers"): (time_ms,
    order, partition, queue, id, key, owner_kind, owner_id)."""
    t, order, part, ql, il, kl, okl, oil, _ = _QHDR.unpack_from(h, 0)
    o = _QHDR.size
    q = h[o:o + ql].decode("utf-8")
    o += ql
    eid = h[o:o + il]
    o += il
    key = h[o:o + kl]
    o += kl
    ok = h[o:o + okl] if okl else None
    o += okl
    oi = h[o:o + oil] if oil else None
    return t, order, part, q, eid, key, ok, oi


def parse_branch_header(h):
    """A branch task's header (bindings/c/README.md "Branches"): four
    NUL-terminated strings, (mode, gid, branch id, op)."""
    parts = bytes(h).split(b"\0")
    if len(parts) != 5 or parts[4] != b"":
        raise TroupeError(CODE["EPROTO"], "a branch header that is not one")
    return tuple(p.decode("utf-8") for p in parts[:4])
