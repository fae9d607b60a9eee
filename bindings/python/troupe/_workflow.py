"""Workflows written in Python (docs/coordinator.md "Workflows"): the host
side of a run, shared by the blocking and the asyncio forms.

A run is a task of kind 5 whose body is [input, records]; the workflow
function is replayed from the top over the records exactly as the C
trampoline does (actors/coord/src/workflow.c): a step the records say is
done returns its stored result and runs nothing, a registered one runs
its fn now, a new one is registered and the run stops. Stopping is the
exception Suspend, a BaseException (as asyncio.CancelledError is), so an
`except Exception:` in the workflow never swallows it by accident; a
bare `except:` must rethrow it (`if troupe.is_suspend(e): raise`). The
driver turns the run's end and the updates it collected into the reply
[end, reason, updates(, awaited)]; whatever the function does after a
Suspend changes nothing: the first stop decides the end, as in C."""

import re

from . import _msgpack
from ._abi import TroupeError, CODE, parse_branch_header
from ._core import log

STEP, AWAKE, VERSION = 1, 2, 3  # record kinds
TODO, DONE, REFUSED = 1, 3, 4  # record states
SUCCEEDED, FAILED, CONTINUE, RETRY, DIVERGED, AWAIT = 1, 2, 3, 4, 5, 6
RECORDS_MAX = 64  # TROUPE_GTX_STEPS_MAX
NAME_MAX = 128  # TROUPE_WF_NAME_MAX
PAYLOAD_MAX = 65536  # TROUPE_GTX_PAYLOAD_MAX
REASON_MAX = 256  # TROUPE_GTX_ABORT_REASON_MAX
AWAKEABLE_ID_MAX = 133  # TROUPE_AWAKEABLE_ID_MAX
VERSION_DEFAULT = -1  # TROUPE_WF_VERSION_DEFAULT

_KIND_NAMES = {STEP: "step", AWAKE: "awakeable", VERSION: "version marker"}
_CONTROL = re.compile("[\x00-\x1f\x7f]")


class Suspend(BaseException):
    """Raised by a workflow call that must stop the run (a registration,
    an await not resolved, a divergence): let it through."""


def is_suspend(e):
    return isinstance(e, Suspend)


class WorkflowFailure(Exception):
    """A failure in a workflow. Raised by a step's fn, it records the step
    as failed with `result` (bytes; default the message's); step() and
    await_() raise one for a failed step or a rejected awakeable; one
    that leaves the workflow function fails the workflow (its message
    the rollback reason), which compensates every registered step."""

    def __init__(self, message, result=None):
        super().__init__(message)
        self.result = payload_bytes(result) if result is not None \
            else str(message).encode("utf-8")
        self.step = None
        self.awakeable = None


def payload_bytes(v):
    """bytes as they are, str as UTF-8, None empty, anything else as
    msgpack."""
    if v is None:
        return b""
    if isinstance(v, (bytes, bytearray, memoryview)):
        return bytes(v)
    if isinstance(v, str):
        return v.encode("utf-8")
    return _msgpack.packb(v)


def _wf_name(v, what):
    if not isinstance(v, str) or not v or "\0" in v or \
            len(v.encode("utf-8")) > NAME_MAX:
        raise TroupeError(CODE["EINVAL"], "%s: 1..%d bytes without NUL"
                          % (what, NAME_MAX))
    return v


def _clip(s, n):
    b = s.encode("utf-8")
    return s if len(b) <= n else b[:n].decode("utf-8", "ignore")


def reason_of(msg):
    """A rollback reason the coordinator takes (1..256 bytes of UTF-8
    without control characters), or None."""
    s = _CONTROL.sub(" ", str(msg)).strip()
    while len(s.encode("utf-8")) > REASON_MAX:
        s = s[:-1]
    return s or None


def _dec_u32(s, max):
    return re.fullmatch("0|[1-9][0-9]{0,9}", s) is not None and \
        int(s) <= max


def _actor_target_ok(t):
    """Whether a target naming an actor ("actor:NAME#KIND" or
    "actor:@NODE.SLOT.GEN#KIND", troupe/branch.h) is in that form; any
    other name is a dispatch target's. A malformed one would have the
    whole reply refused and the run retried for ever without a word."""
    if not t.startswith("actor:"):
        return True
    who = t[6:]
    h = who.rfind("#")
    if h <= 0 or not _dec_u32(who[h + 1:], 63):
        return False
    if who[0] != "@":
        return True
    v = who[1:h].split(".")
    return len(v) == 3 and all(_dec_u32(x, 0xFFFFFFFF) for x in v) and \
        v[1] != "0" and v[2] != "0"


def _compensation(c):
    if c is None:
        return None
    if not isinstance(c, (tuple, list)) or len(c) != 2 or \
            not isinstance(c[0], str) or not c[0] or "\0" in c[0] or \
            len(c[0].encode("utf-8")) > 255:
        raise TroupeError(CODE["EINVAL"], "step: compensate is (target of "
                          "1..255 bytes, payload)")
    if not _actor_target_ok(c[0]):
        raise TroupeError(CODE["EINVAL"], "step: compensate target %s is no "
                          "actor target (actor:NAME#KIND or "
                          "actor:@NODE.SLOT.GEN#KIND)" % c[0])
    p = payload_bytes(c[1])
    if len(p) > PAYLOAD_MAX:
        raise TroupeError(CODE["EINVAL"], "step: a compensation payload of "
                          "%d bytes; at most %d" % (len(p), PAYLOAD_MAX))
    return [c[0], p]


class Record:
    __slots__ = ("kind", "name", "state", "result", "version")

    def __init__(self, k):
        self.kind, self.name, self.state, self.result, self.version = k


def parse_run(rec):
    """(gid, input, records) of a run task, or None if it is not one."""
    try:
        mode, gid, bid, op = parse_branch_header(rec.header)
        body = _msgpack.unpackb(rec.body)
    except Exception:
        return None
    if (mode, bid, op) != ("workflow", "00", "run") or \
            not isinstance(body, list) or len(body) != 2 or \
            not isinstance(body[0], bytes) or \
            not isinstance(body[1], list) or len(body[1]) > RECORDS_MAX:
        return None
    recs = []
    for k in body[1]:
        if not isinstance(k, list) or len(k) != 5 or \
                not isinstance(k[0], int) or not isinstance(k[1], str) or \
                not isinstance(k[2], int) or not isinstance(k[3], bytes) or \
                not isinstance(k[4], int):
            return None
        recs.append(Record(k))
    return gid, body[0], recs


class StepContext:
    """What a step's fn gets: the barrier's branch (pass it to
    tx.barrier): mode "workflow", gid, branch_id ("01".., the step's
    position), op "action", and the run's attempt."""

    __slots__ = ("mode", "gid", "branch_id", "op", "attempt")

    def __init__(self, gid, branch_id, attempt):
        self.mode, self.gid, self.branch_id, self.op, self.attempt = \
            "workflow", gid, branch_id, "action", attempt


def _step_failure(name, result):
    f = WorkflowFailure('step "%s" failed: %s'
                        % (name, result.decode("utf-8", "replace")), result)
    f.step = name
    return f


class RunBase:
    """The replay; RunSync and RunAsync add step() and await_()."""

    def __init__(self, gid, recs, attempt):
        self.gid = gid
        self.attempt = attempt
        self._recs = recs
        self._pos = 0
        self._stop = 0
        self._awaited = 0
        self._reason = None  # DIVERGED: where
        self._updates = []
        self._in_step = False
        self._over = False

    def _live(self, what):
        if self._over:
            raise TroupeError(CODE["EINVAL"], "%s: this workflow run has "
                              "ended" % what)
        if self._stop:
            raise Suspend()
        if self._in_step:
            raise TroupeError(CODE["EINVAL"], "%s: inside a step's fn (steps "
                              "run one at a time)" % what)

    def _halt(self, end):
        if not self._stop:
            self._stop = end
        return Suspend()

    def _diverged(self, k, kind, name):
        self._reason = ('replay diverged: position %02d was recorded as %s '
                        '"%s" but is now %s "%s"'
                        % (self._pos + 1, _KIND_NAMES.get(k.kind,
                                                          "version marker"),
                           _clip(k.name, 40), _KIND_NAMES[kind],
                           _clip(name, 40)))
        return self._halt(DIVERGED)

    def _append(self, kind, name, state, comp, version):
        if self._pos >= RECORDS_MAX:
            raise TroupeError(CODE["EINVAL"], "a workflow has at most %d "
                              "records (steps, awakeables, version "
                              "markers)" % RECORDS_MAX)
        self._updates.append([self._pos, kind, name, state, b"", comp,
                              version])
        self._pos += 1

    def _step_begin(self, name, fn, compensate):
        """("run", ctx) to run fn now, or ("done", result); raises."""
        self._live("step")
        _wf_name(name, "step name")
        if not callable(fn):
            raise TroupeError(CODE["EINVAL"], "step: fn must be callable")
        comp = _compensation(compensate)
        if self._pos >= len(self._recs):
            self._append(STEP, name, TODO, comp, 0)
            raise self._halt(CONTINUE)
        k = self._recs[self._pos]
        if k.kind != STEP or k.name != name:
            raise self._diverged(k, STEP, name)
        if k.state == TODO:
            self._in_step = True
            return "run", StepContext(self.gid, "%02d" % (self._pos + 1),
                                      self.attempt)
        self._pos += 1
        if k.state == DONE:
            return "done", k.result
        raise _step_failure(name, k.result)

    def _step_end(self, name, outcome, value):
        """Records what fn gave: outcome "ok" (value its result), "fail"
        (a WorkflowFailure) or "again" (anything else raised)."""
        self._in_step = False
        pos = self._pos
        self._pos += 1
        if outcome == "ok":
            result, state = payload_bytes(value), DONE
            if len(result) > PAYLOAD_MAX:
                result = ("step result of %d bytes; at most %d"
                          % (len(result), PAYLOAD_MAX)).encode()
                state = REFUSED
        elif outcome == "fail":
            result, state = value.result[:PAYLOAD_MAX], REFUSED
        else:
            self._updates.append([pos, STEP, name, TODO, b"", None, 0])
            raise self._halt(RETRY)
        self._updates.append([pos, STEP, name, state, result, None, 0])
        if state == DONE:
            return result
        raise _step_failure(name, result)

    def awakeable(self, name):
        """Awakeable `name` at the run's next position: its id
        ("gid/branch-id"), to hand on from a step (so that it is sent
        once) to whoever resolves it (awakeable_resolve)."""
        self._live("awakeable")
        _wf_name(name, "awakeable name")
        if self._pos >= len(self._recs):
            self._append(AWAKE, name, TODO, None, 0)
            raise self._halt(CONTINUE)
        k = self._recs[self._pos]
        if k.kind != AWAKE or k.name != name:
            raise self._diverged(k, AWAKE, name)
        self._pos += 1
        return "%s/%02d" % (self.gid, self._pos)

    def _await(self, id):
        self._live("await")
        gid, _, bid = id.rpartition("/") if isinstance(id, str) else \
            ("", "", "")
        pos = int(bid) - 1 if re.fullmatch("[0-9]{2,4}", bid) else -1
        if gid != self.gid or pos < 0 or pos >= len(self._recs) or \
                self._recs[pos].kind != AWAKE:
            raise TroupeError(CODE["ENOENT"], "await: %r is not an awakeable "
                              "of workflow %s" % (id, self.gid))
        k = self._recs[pos]
        if k.state == TODO:
            self._awaited = pos
            raise self._halt(AWAIT)
        if k.state == DONE:
            return k.result
        f = WorkflowFailure("awakeable %s was rejected: %s"
                            % (id, k.result.decode("utf-8", "replace")),
                            k.result)
        f.awakeable = id
        raise f

    def version(self, change, min, max):
        """Version marker `change` at the run's next position: an instance
        that recorded it gets its recorded version, one reaching it first
        max (recorded), one that predates it VERSION_DEFAULT (-1), taking
        no position. A version outside [min, max] diverges."""
        self._live("version")
        _wf_name(change, "version marker name")
        if not isinstance(min, int) or not isinstance(max, int) or \
                min > max or min < -(1 << 31) or max >= 1 << 31:
            raise TroupeError(CODE["EINVAL"], "version: min and max are "
                              "int32s, min <= max")
        at = self._pos + 1
        v = VERSION_DEFAULT
        if self._pos >= len(self._recs):
            if self._pos >= RECORDS_MAX:
                raise TroupeError(CODE["EINVAL"], "a workflow has at most "
                                  "%d records" % RECORDS_MAX)
            self._updates.append([self._pos, VERSION, change, DONE, b"",
                                  None, max])
            self._pos += 1
            v = max
        else:
            k = self._recs[self._pos]
            if k.kind == VERSION and k.name == change:
                v = k.version
                self._pos += 1
        if v < min or v > max:
            self._reason = ('replay diverged: version marker "%s" at '
                            'position %02d is version %d, outside %d..%d'
                            % (_clip(change, 40), at, v, min, max))
            raise self._halt(DIVERGED)
        return v

    def _end_of(self, exc):
        """(end, reason) once the function returned (exc None) or raised
        exc."""
        if self._stop:
            return self._stop, None
        if exc is None:
            return SUCCEEDED, None
        if isinstance(exc, WorkflowFailure):
            return FAILED, reason_of(exc)
        log.error("workflow %s raised; it runs again after the backoff",
                  self.gid, exc_info=exc)
        return RETRY, None

    def _body(self, end, fail_reason):
        self._over = True
        reason = self._reason if end == DIVERGED else \
            fail_reason if end == FAILED else None
        a = [end, reason, self._updates]
        if end == AWAIT:
            a.append(self._awaited)
        return _msgpack.packb(a)


class RunSync(RunBase):
    """A run of the blocking form: step fns are plain functions."""

    def step(self, name, fn, compensate=None):
        """Step `name`: its result (bytes), running fn(ctx) once (what fn
        returns: bytes as they are, str UTF-8, None empty, anything else
        msgpack); raises WorkflowFailure when fn raised one (now or
        earlier). compensate (target, payload): the call that undoes it,
        stored before fn ever runs. Anything else fn raises runs the step
        again after the backoff."""
        what, v = self._step_begin(name, fn, compensate)
        if what == "done":
            return v
        try:
            r = fn(v)
        except WorkflowFailure as e:
            return self._step_end(name, "fail", e)
        except Exception:
            log.exception("workflow %s step %r raised; it runs again after "
                          "the backoff", self.gid, name)
            return self._step_end(name, "again", None)
        return self._step_end(name, "ok", r)

    def await_(self, id):
        """The resolution of awakeable id (bytes); raises WorkflowFailure
        when it was rejected, Suspend until it is resolved (the workflow
        is held meanwhile)."""
        return self._await(id)


class RunAsync(RunBase):
    """A run of the asyncio form: step fns may be coroutine functions."""

    async def step(self, name, fn, compensate=None):
        """As RunSync.step; fn may return an awaitable."""
        what, v = self._step_begin(name, fn, compensate)
        if what == "done":
            return v
        try:
            r = fn(v)
            if hasattr(r, "__await__"):
                r = await r
        except WorkflowFailure as e:
            return self._step_end(name, "fail", e)
        except Exception:
            log.exception("workflow %s step %r raised; it runs again after "
                          "the backoff", self.gid, name)
            return self._step_end(name, "again", None)
        return self._step_end(name, "ok", r)

    async def await_(self, id):
        """As RunSync.await_."""
        return self._await(id)
