#!/usr/bin/env python3
"""The DTM HTTP API of `troupe node --dtm` (tools/dtm_api.c) end to end.

A real `troupe node --dtm 127.0.0.1:0` process, and a branch service on
Python's http.server in this process, spoken to with requests shaped as
DTM's Go SDK (dtmcli) sends them: TransBase's JSON fields for prepare,
submit and abort, TransRegisterBranch's map of strings for
registerBranch, GET newGid / query / all. Checks the results DTM's server
gives (200 {"dtm_result":"SUCCESS"}, 409 with FAILURE, 4xx with a
message), the branch calls the node makes (order, method, DTM's query
parameters, bodies), the final states, and that a refused request stores
nothing. Every wait polls a condition with a deadline.

usage: dtm_api.py PATH/TO/troupe
"""
import http.client as httpclient
import http.server
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.parse
import urllib.request

TROUPE = sys.argv[1]
fails = 0
passes = 0


def ok(cond, what, detail=""):
    global fails, passes
    if cond:
        passes += 1
        print("ok:", what)
    else:
        fails += 1
        print("FAIL:", what, detail)
    return cond


def poll(pred, deadline_s=30.0, step=0.05):
    """pred() until truthy or the deadline: its last value."""
    end = time.monotonic() + deadline_s
    while True:
        v = pred()
        if v or time.monotonic() >= end:
            return v
        time.sleep(step)


# ---- the branch service ----

calls = []  # (method, path, query dict, body str), in arrival order
calls_mu = threading.Lock()
# path -> (status, body) of the answer; default 200 SUCCESS
answers = {}
# paths whose answer takes 0.3 s (a slow branch), and when each arrived
# and was answered (time.monotonic())
slow = set()
arrived = {}
answered = {}


class Branch(http.server.BaseHTTPRequestHandler):
    def log_message(self, *a):
        pass

    def _serve(self):
        u = urllib.parse.urlsplit(self.path)
        q = dict(urllib.parse.parse_qsl(u.query, keep_blank_values=True))
        n = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(n).decode() if n else ""
        with calls_mu:
            calls.append((self.command, u.path, q, body))
            arrived[u.path] = time.monotonic()
            status, text = answers.get(u.path, (200, '{"dtm_result":"SUCCESS"}'))
        if u.path in slow:
            time.sleep(0.3)
        with calls_mu:
            answered[u.path] = time.monotonic()
        b = text.encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(b)))
        self.end_headers()
        self.wfile.write(b)

    do_GET = _serve
    do_POST = _serve


svc = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Branch)
threading.Thread(target=svc.serve_forever, daemon=True).start()
BUSI = "http://127.0.0.1:%d" % svc.server_address[1]


def calls_of(gid):
    with calls_mu:
        return [c for c in calls if c[2].get("gid") == gid]


# ---- the node ----

tmp = tempfile.mkdtemp()
node = None


def cleanup():
    if node is not None and node.poll() is None:
        node.kill()
        node.wait()
    svc.shutdown()
    shutil.rmtree(tmp, ignore_errors=True)


def start_node():
    out = open(os.path.join(tmp, "node.out"), "w")
    # TROUPE_WRAP: a command to run the node under (valgrind, by hand)
    wrap = os.environ.get("TROUPE_WRAP", "").split()
    p = subprocess.Popen(
        wrap + [TROUPE, "node", "--data", os.path.join(tmp, "data"), "--listen",
         "tcp://127.0.0.1:0", "--dtm", "127.0.0.1:0"],
        stdout=out, stderr=subprocess.STDOUT)

    def port():
        with open(os.path.join(tmp, "node.out")) as f:
            m = re.search(r"DTM API on http://127\.0\.0\.1:(\d+)/api/dtmsvr",
                          f.read())
        return m and int(m.group(1))

    return p, poll(lambda: port() or p.poll() is not None, 20) and port()


def dtm(method, path, body=None, raw=None):
    """(status, parsed JSON or the text) of a request to the node."""
    data = raw if raw is not None else (
        json.dumps(body).encode() if body is not None else None)
    req = urllib.request.Request(DTM + path, data=data, method=method)
    if data is not None:
        req.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            status, text = r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        status, text = e.code, e.read().decode()
    try:
        return status, json.loads(text)
    except ValueError:
        return status, text


def trans_base(gid, trans_type, **kw):
    """The JSON dtmcli's TransBase marshals to (fields as its tags say)."""
    b = {"gid": gid, "trans_type": trans_type, "concurrent": False,
         "protocol": ""}
    b.update(kw)
    return b


def query(gid):
    return dtm("GET", "/query?gid=" + urllib.parse.quote(gid))


def status_of(gid):
    s, j = query(gid)
    t = j.get("transaction") if s == 200 and isinstance(j, dict) else None
    return t and t.get("status")


def wait_final(gid, deadline_s=30.0):
    return poll(lambda: status_of(gid) in ("succeed", "failed") and
                status_of(gid), deadline_s)


def new_gid():
    return dtm("GET", "/newGid")[1]["gid"]


def is_success(s, j):
    return s == 200 and isinstance(j, dict) and j.get("dtm_result") == "SUCCESS"


def is_failure(s, j):
    return s == 409 and "FAILURE" in json.dumps(j)


def n_stored():
    s, j = dtm("GET", "/all?limit=1000")
    return len(j["transactions"]) if s == 200 else -1


try:
    # ---- the flags ----
    r = subprocess.run([TROUPE, "node", "--data", os.path.join(tmp, "pub"),
                        "--listen", "tcp://127.0.0.1:0", "--dtm",
                        "0.0.0.0:0"], capture_output=True, text=True,
                       timeout=30)
    ok(r.returncode == 2 and "--dtm-public" in r.stderr and
       "no authentication" in r.stderr,
       "--dtm on a public address is refused without --dtm-public",
       (r.returncode, r.stderr))
    ok(not os.path.exists(os.path.join(tmp, "pub")),
       "the refused node opened nothing")
    r = subprocess.run([TROUPE, "node", "--data", os.path.join(tmp, "pub"),
                        "--listen", "tcp://127.0.0.1:0", "--dtm-public"],
                       capture_output=True, text=True, timeout=30)
    ok(r.returncode == 2 and "--dtm-public goes with --dtm" in r.stderr,
       "--dtm-public alone is a usage error", (r.returncode, r.stderr))
    r = subprocess.run([TROUPE, "node", "--data", os.path.join(tmp, "pub"),
                        "--listen", "tcp://127.0.0.1:0", "--dtm", "nohost"],
                       capture_output=True, text=True, timeout=30)
    ok(r.returncode == 2 and "--dtm wants HOST:PORT" in r.stderr,
       "a malformed --dtm is a usage error", (r.returncode, r.stderr))

    r = subprocess.run([TROUPE, "node", "--data", os.path.join(tmp, "pub"),
                        "--listen", "tcp://127.0.0.1:0", "--dtm",
                        "127.0.0.1:0", "--admin", "127.0.0.1:0"],
                       capture_output=True, text=True, timeout=30)
    ok(r.returncode == 2 and "two addresses" in r.stderr and
       not os.path.exists(os.path.join(tmp, "pub")),
       "--dtm on the --admin address is a usage error",
       (r.returncode, r.stderr))
    r = subprocess.run([TROUPE, "node", "--help"], capture_output=True,
                       text=True, timeout=30)
    ok("--dtm HOST:PORT" in r.stdout and "--dtm-public" in r.stdout,
       "node --help names --dtm and --dtm-public", r.stdout[-300:])

    node, port = start_node()
    if not ok(bool(port), "the node serves the DTM API"):
        print(open(os.path.join(tmp, "node.out")).read())
        sys.exit(1)
    DTM = "http://127.0.0.1:%d/api/dtmsvr" % port

    # ---- newGid (dtmcli's MustGenGid: GET) ----
    gids = set()
    for m in ("GET", "POST", "GET"):
        s, j = dtm(m, "/newGid")
        ok(is_success(s, j) and re.fullmatch(r"[A-Za-z0-9_.:-]{1,128}",
                                             j.get("gid", "")),
           "newGid by %s: a gid under troupe's rule" % m, (s, j))
        gids.add(j.get("gid"))
    ok(len(gids) == 3, "three newGid calls give three gids", gids)
    s, j = dtm("DELETE", "/newGid")
    ok(s == 405, "newGid by DELETE is 405", (s, j))

    # ---- a saga that succeeds ----
    gid = dtm("GET", "/newGid")[1]["gid"]
    body = trans_base(gid, "saga",
                      steps=[{"action": BUSI + "/TransOut",
                              "compensate": BUSI + "/TransOutRevert"},
                             {"action": BUSI + "/TransIn?x=1",
                              "compensate": BUSI + "/TransInRevert"}],
                      payloads=['{"amount":30}', '{"amount":30,"to":2}'])
    s, j = dtm("POST", "/submit", body)
    ok(is_success(s, j), "saga submit: 200 SUCCESS", (s, j))
    ok(wait_final(gid) == "succeed", "the saga succeeds", query(gid))
    c = calls_of(gid)
    ok([(m, p, q["branch_id"], q["op"]) for m, p, q, _ in c] ==
       [("POST", "/TransOut", "01", "action"),
        ("POST", "/TransIn", "02", "action")],
       "its actions were called in order, POST, with branch_id and op", c)
    ok(all(q.get("trans_type") == "saga" and q.get("gid") == gid
           for _, _, q, _ in c), "each call carries gid and trans_type", c)
    ok(len(c) == 2 and c[1][2].get("x") == "1",
       "the url's own query is kept", c)
    ok([b for *_, b in c] == ['{"amount":30}', '{"amount":30,"to":2}'],
       "each action got its payload byte for byte", c)
    s, j = query(gid)
    t = j["transaction"]
    ok(t["gid"] == gid and t["trans_type"] == "saga" and
       t["status"] == "succeed" and t.get("finish_time"),
       "query of a succeeded saga: DTM's transaction fields", j)
    ok(sorted((b["branch_id"], b["op"], b["status"]) for b in j["branches"])
       == [("01", "action", "succeed"), ("01", "compensate", "prepared"),
           ("02", "action", "succeed"), ("02", "compensate", "prepared")],
       "its branches with their ops and states", j)
    s, j = dtm("POST", "/submit", body)
    ok(is_success(s, j), "a resubmit of the same gid is OK", (s, j))
    resubmitted = gid  # its calls are counted again at the end
    s, j = dtm("POST", "/abort", trans_base(gid, "saga"))
    ok(is_failure(s, j) and "cannot abort" in j.get("message", ""),
       "abort of a saga is refused (409 FAILURE), as DTM does", (s, j))

    # a payload near the 64 KiB of a branch's payload is taken whole
    gid = "saga-big-" + new_gid()
    s, j = dtm("POST", "/submit", trans_base(
        gid, "saga", steps=[{"action": BUSI + "/Big"}],
        payloads=["y" * 65000]))
    ok(is_success(s, j) and wait_final(gid) == "succeed" and
       [len(b) for *_, b in calls_of(gid)] == [65000],
       "a 65000-byte payload reaches its branch whole", (s, j))

    # ---- a saga whose action answers 409: compensated in reverse ----
    gid = "saga-fail-" + new_gid()
    answers["/Fail"] = (409, '{"dtm_result":"FAILURE"}')
    body = trans_base(gid, "saga",
                      steps=[{"action": BUSI + "/A1", "compensate": BUSI + "/C1"},
                             {"action": BUSI + "/Fail",
                              "compensate": BUSI + "/C2"},
                             {"action": BUSI + "/A3", "compensate": BUSI + "/C3"}],
                      payloads=["1", "2", "3"])
    s, j = dtm("POST", "/submit", body)
    ok(is_success(s, j), "failing saga submit: 200 SUCCESS", (s, j))
    ok(wait_final(gid) == "failed", "the saga fails", query(gid))
    c = calls_of(gid)
    ok([(p, q["op"]) for _, p, q, _ in c] ==
       [("/A1", "action"), ("/Fail", "action"), ("/C3", "compensate"),
        ("/C2", "compensate"), ("/C1", "compensate")],
       "its compensations ran in reverse, never its third action", c)
    ok([b for *_, b in c][2:] == ["3", "2", "1"],
       "each compensation got its step's payload", c)
    s, j = query(gid)
    ok("FAILURE" in j["transaction"].get("rollback_reason", ""),
       "query of the failed saga names why", j)

    # ---- a concurrent saga with branch orders (custom_data) ----
    gid = "saga-conc-" + new_gid()
    body = trans_base(gid, "saga", concurrent=True,
                      custom_data=json.dumps({"orders": {"1": [0], "2": [1]},
                                              "concurrent": True}),
                      steps=[{"action": BUSI + "/O%d" % i,
                              "compensate": BUSI + "/R%d" % i}
                             for i in range(3)],
                      payloads=["{}"] * 3)
    slow.update(["/O0", "/O1"])
    s, j = dtm("POST", "/submit", body)
    ok(is_success(s, j), "concurrent saga submit", (s, j))
    ok(wait_final(gid) == "succeed", "the concurrent saga succeeds")
    ok([p for _, p, _, _ in calls_of(gid)] == ["/O0", "/O1", "/O2"] and
       arrived["/O1"] >= answered["/O0"] and
       arrived["/O2"] >= answered["/O1"],
       "its orders held: each step called once the one before answered",
       (calls_of(gid), arrived, answered))
    gid_free = "saga-conc2-" + new_gid()
    slow.update(["/F0"])
    s, j = dtm("POST", "/submit", trans_base(
        gid_free, "saga", concurrent=True,
        custom_data=json.dumps({"orders": {}, "concurrent": True}),
        steps=[{"action": BUSI + "/F%d" % i} for i in range(2)],
        payloads=["{}"] * 2))
    ok(is_success(s, j) and wait_final(gid_free) == "succeed" and
       arrived["/F1"] < answered["/F0"],
       "without orders the concurrent steps run at once",
       (arrived, answered))
    bad = dict(body, gid=gid + "-cyc",
               custom_data=json.dumps({"orders": {"0": [1], "1": [0]},
                                       "concurrent": True}))
    s, j = dtm("POST", "/submit", bad)
    ok(s == 400 and "submit refused" in j.get("message", ""),
       "orders with a cycle are refused", (s, j))

    # ---- a msg left prepared: its query_prepared is asked back ----
    gid = "msg-qb-" + new_gid()
    body = trans_base(gid, "msg",
                      steps=[{"action": BUSI + "/MsgIn"}],
                      payloads=['{"amount":5}'],
                      query_prepared=BUSI + "/QueryPrepared")
    s, j = dtm("POST", "/prepare", body)
    ok(is_success(s, j), "msg prepare: 200 SUCCESS", (s, j))
    ok(status_of(gid) == "prepared", "query: the msg is prepared")
    ok(wait_final(gid, 60) == "succeed",
       "left prepared, it is asked back and goes on", query(gid))
    c = calls_of(gid)
    ok(len(c) >= 2 and c[0][:2] == ("GET", "/QueryPrepared") and
       c[0][2].get("op") == "msg" and c[0][2].get("branch_id") == "00" and
       c[0][2].get("trans_type") == "msg",
       "the query-back is DTM's: GET with op msg, branch 00", c)
    ok(c[-1][:2] == ("POST", "/MsgIn") and c[-1][3] == '{"amount":5}' and
       c[-1][2].get("branch_id") == "01",
       "then its step was called with its payload", c)

    # ---- a msg prepared then submitted (DoAndSubmit's path) ----
    gid = "msg-ok-" + new_gid()
    body["gid"] = gid
    ok(is_success(*dtm("POST", "/prepare", body)), "msg prepare")
    ok(is_success(*dtm("POST", "/submit", body)), "msg submit")
    ok(wait_final(gid) == "succeed", "the submitted msg succeeds")
    ok([p for _, p, _, _ in calls_of(gid)] == ["/MsgIn"],
       "its step ran, with no query-back", calls_of(gid))
    # a prepared msg aborted fails at once; a submitted one cannot abort
    gid2 = gid + "-ab"
    ok(is_success(*dtm("POST", "/prepare", dict(body, gid=gid2))),
       "msg prepare (to abort)")
    s, j = dtm("POST", "/abort", trans_base(gid2, "msg"))
    ok(is_success(s, j) and status_of(gid2) == "failed",
       "abort of a prepared msg: it failed", (s, j))
    s, j = dtm("POST", "/abort", trans_base(gid, "msg"))
    ok(is_failure(s, j), "abort of a succeeded msg: 409 FAILURE", (s, j))
    s, j = dtm("POST", "/prepare", dict(body, gid=gid + "-q",
                                          query_prepared=""))
    ok(s == 400 and "query_prepared" in j.get("message", ""),
       "a msg prepare without query_prepared is refused", (s, j))

    # ---- tcc: registered and submitted ----
    gid = "tcc-ok-" + new_gid()
    s, j = dtm("POST", "/prepare", trans_base(gid, "tcc"))
    ok(is_success(s, j), "tcc prepare", (s, j))

    def reg(g, bid, data="{\"amount\":7}"):
        return dtm("POST", "/registerBranch",
                    {"gid": g, "trans_type": "tcc", "data": data,
                     "branch_id": bid, "confirm": BUSI + "/Confirm" + bid,
                     "cancel": BUSI + "/Cancel" + bid})

    ok(is_success(*reg(gid, "01")), "registerBranch 01")
    ok(is_success(*reg(gid, "02", '{"amount":8}')), "registerBranch 02")
    ok(is_success(*reg(gid, "01")), "a repeat of 01 is OK (a retry)")
    s, j = reg(gid, "04")
    ok(is_failure(s, j) and "out of order" in j.get("message", ""),
       "an out-of-order 04 is refused: 409, saying why", (s, j))
    s, j = reg(gid, "1")
    ok(s == 400 and "two digits" in j.get("message", ""),
       "a branch_id that is not two digits is refused", (s, j))
    s, j = query(gid)
    ok(j["transaction"]["status"] == "prepared" and
       len({b["branch_id"] for b in j["branches"]}) == 2,
       "query: prepared with two branches", j)
    s, j = dtm("POST", "/submit", trans_base(gid, "tcc"))
    ok(is_success(s, j), "tcc submit", (s, j))
    ok(wait_final(gid) == "succeed", "the tcc succeeds")
    c = calls_of(gid)
    ok([(p, q["op"], q["branch_id"], b) for _, p, q, b in c] ==
       [("/Confirm01", "confirm", "01", '{"amount":7}'),
        ("/Confirm02", "confirm", "02", '{"amount":8}')],
       "its confirms ran in order with each branch's data", c)
    s, j = reg(gid, "03")
    ok(is_failure(s, j), "registerBranch after the submit: 409 FAILURE",
       (s, j))

    # ---- tcc: aborted ----
    gid = "tcc-ab-" + new_gid()
    ok(is_success(*dtm("POST", "/prepare", trans_base(gid, "tcc"))),
       "tcc prepare (to abort)")
    ok(is_success(*reg(gid, "01")) and is_success(*reg(gid, "02")),
       "two branches registered")
    s, j = dtm("POST", "/abort",
                trans_base(gid, "tcc", rollback_reason="try of 02 failed"))
    ok(is_success(s, j), "tcc abort", (s, j))
    ok(wait_final(gid) == "failed", "the tcc fails")
    c = calls_of(gid)
    ok([(p, q["op"]) for _, p, q, _ in c] ==
       [("/Cancel02", "cancel"), ("/Cancel01", "cancel")],
       "its cancels ran in reverse", c)
    ok("try of 02 failed" in query(gid)[1]["transaction"]
       .get("rollback_reason", ""), "query names the rollback reason")
    s, j = dtm("POST", "/submit", trans_base(gid, "tcc"))
    ok(is_failure(s, j), "submit of an aborted tcc: 409 FAILURE", (s, j))
    s, j = reg("no-such-gid", "01")
    ok(is_failure(s, j) and "no trans with gid" in j.get("message", ""),
       "registerBranch of an unknown gid: 409 FAILURE", (s, j))
    s, j = dtm("POST", "/abort", trans_base("no-such-gid", "tcc"))
    ok(is_failure(s, j), "abort of an unknown gid: 409 FAILURE", (s, j))

    # ---- query ----
    s, j = query("no-such-gid")
    ok(s == 200 and j == {"transaction": None, "branches": []},
       "query of an unknown gid: DTM's empty answer", (s, j))
    s, j = dtm("GET", "/query")
    ok(s == 400 and "no gid" in j.get("message", ""),
       "query without a gid is refused", (s, j))
    s, j = dtm("GET", "/query?gid=bad%20gid")
    ok(s == 400, "query of a gid breaking the rule is refused", (s, j))
    s, j = dtm("GET", "/all?limit=2")
    ok(s == 200 and len(j["transactions"]) == 2 and j["next_position"],
       "all pages with limit and next_position", j)
    s2, j2 = dtm("GET", "/all?limit=2&position=" + j["next_position"])
    ok(s2 == 200 and not {t["gid"] for t in j["transactions"]} &
       {t["gid"] for t in j2["transactions"]},
       "the next page starts past the position", j2)
    s, j = dtm("GET", "/all?status=failed&transType=tcc")
    ok(s == 200 and j["transactions"] and
       all(t["status"] == "failed" and t["trans_type"] == "tcc"
           for t in j["transactions"]), "all filters by status and transType",
       j)
    s, j = dtm("GET", "/all?limit=0")
    ok(s == 400, "all with a bad limit is refused", (s, j))

    # ---- bad bodies: refused with a reason, nothing stored ----
    before = n_stored()
    steps = [{"action": BUSI + "/X", "compensate": BUSI + "/Y"}]
    cases = [
        ("not JSON", "/submit", None, b"{not json"),
        ("a JSON array", "/submit", None, b"[1,2]"),
        ("no body", "/prepare", None, b""),
        ("no gid", "/submit", {"trans_type": "saga", "steps": steps,
                               "payloads": ["{}"]}, None),
        ("a gid breaking the rule", "/submit",
         trans_base("bad gid!", "saga", steps=steps, payloads=["{}"]), None),
        ("a gid with non-ASCII bytes (the message quotes it)", "/submit",
         trans_base("gid-\u00fc\u6f22", "saga", steps=steps,
                    payloads=["{}"]), None),
        ("no trans_type", "/submit", {"gid": "bad-1", "steps": steps}, None),
        ("trans_type xa", "/prepare", trans_base("bad-2", "xa"), None),
        ("trans_type workflow", "/prepare",
         trans_base("bad-3", "workflow"), None),
        ("no steps", "/submit", trans_base("bad-4", "saga"), None),
        ("payloads of another count", "/submit",
         trans_base("bad-5", "saga", steps=steps, payloads=["{}", "{}"]),
         None),
        ("a step without its action", "/submit",
         trans_base("bad-6", "saga", steps=[{"compensate": BUSI + "/Y"}],
                    payloads=["{}"]), None),
        ("a url that is not http", "/submit",
         trans_base("bad-7", "saga", steps=[{"action": "ftp://x/y"}],
                    payloads=["{}"]), None),
        ("a steps value of the wrong type", "/submit",
         trans_base("bad-8", "saga", steps="nope"), None),
        ("grpc protocol", "/submit",
         trans_base("bad-9", "saga", steps=steps, payloads=["{}"],
                    protocol="grpc"), None),
        ("branch_headers", "/submit",
         trans_base("bad-10", "saga", steps=steps, payloads=["{}"],
                    branch_headers={"Authorization": "x"}), None),
        ("a negative timeout_to_fail", "/submit",
         trans_base("bad-11", "saga", steps=steps, payloads=["{}"],
                    timeout_to_fail=-1), None),
        ("65 steps", "/submit",
         trans_base("bad-12", "saga", steps=steps * 65,
                    payloads=["{}"] * 65), None),
        ("a payload over 64 KiB", "/submit",
         trans_base("bad-13", "saga", steps=steps,
                    payloads=["x" * 70000]), None),
        ("a tcc registerBranch without confirm", "/registerBranch",
         {"gid": "bad-14", "trans_type": "tcc", "branch_id": "01",
          "cancel": BUSI + "/c"}, None),
        ("a saga prepare", "/prepare",
         trans_base("bad-15", "saga", steps=steps, payloads=["{}"]), None),
    ]
    for what, path, b, raw in cases:
        s, j = dtm("POST", path, b, raw)
        ok(400 <= s < 500 and isinstance(j, dict) and j.get("message") and
           j.get("dtm_result") != "SUCCESS",
           "refused: %s (%d)" % (what, s), (s, j))
    # a Content-Length over the cap: answered before the body is sent
    conn = httpclient.HTTPConnection("127.0.0.1", port, timeout=30)
    conn.putrequest("POST", "/api/dtmsvr/submit")
    conn.putheader("Content-Type", "application/json")
    conn.putheader("Content-Length", str((1 << 20) + 1))
    conn.endheaders()
    r = conn.getresponse()
    text = r.read().decode()
    conn.close()
    ok(r.status == 400 and "1048576" in text,
       "a body over 1 MiB is refused before it is read", (r.status, text))
    # one just under the cap is read, and refused for its payload
    big = json.dumps(trans_base("bad-16", "saga", steps=steps,
                                payloads=["x" * 1000000])).encode()
    s, j = dtm("POST", "/submit", raw=big)
    ok(s == 400 and "payloads[0]" in j.get("message", ""),
       "a body under 1 MiB is read, its long payload refused", (s, j))
    ok(n_stored() == before, "no refused request stored anything",
       (before, n_stored()))
    ok(all(status_of("bad-%d" % i) is None for i in range(1, 17)),
       "none of their gids is known")
    ok(len(calls_of(resubmitted)) == 2,
       "the resubmitted saga was never called again",
       calls_of(resubmitted))
    s, j = dtm("POST", "/nope", {})
    ok(s == 404, "an unknown path is 404", (s, j))
    s, j = dtm("GET", "/submit")
    ok(s == 405, "submit by GET is 405", (s, j))

    # ---- the node stops cleanly on SIGTERM, with submits in flight ----
    burst = []  # (status, dtm_result) of each answered submit
    burst_mu = threading.Lock()
    started = threading.Event()

    def submitter(k):
        for i in range(1000):
            try:
                s, j = dtm("POST", "/submit", trans_base(
                    "burst-%d-%d" % (k, i), "saga",
                    steps=[{"action": BUSI + "/Burst"}], payloads=["{}"]))
            except (OSError, httpclient.HTTPException):
                return  # the listener closed: the node is stopping
            with burst_mu:
                burst.append((s, j.get("dtm_result") if isinstance(j, dict)
                              else j))
            started.set()
            if s == 503:
                return

    threads = [threading.Thread(target=submitter, args=(k,), daemon=True)
               for k in range(8)]
    for t in threads:
        t.start()
    ok(started.wait(30), "submits are running")
    node.send_signal(signal.SIGTERM)
    try:
        rc = node.wait(timeout=30)
    except subprocess.TimeoutExpired:
        rc = None
    out = open(os.path.join(tmp, "node.out")).read()
    ok(rc == 0 and "stopped cleanly" in out,
       "SIGTERM stops the node cleanly, submits in flight",
       (rc, out[-500:]))
    for t in threads:
        t.join(30)
    ok(burst and all(b in ((200, "SUCCESS"), (503, None)) for b in burst),
       "every submit answered before the stop got SUCCESS or 503",
       [b for b in burst if b not in ((200, "SUCCESS"), (503, None))][:5])
finally:
    cleanup()

print("%d passed, %d failed" % (passes, fails))
sys.exit(1 if fails else 0)
