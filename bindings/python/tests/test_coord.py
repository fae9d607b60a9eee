import asyncio

import troupe
import troupe.aio
from tests.util import NodeCase

FAST = {"retry_min_ms": 50, "retry_max_ms": 200}


async def balance(n, acct):
    return (await n.get("accounts", acct))["balance"]


class Coordinator(NodeCase):
    def test_saga_compensates_and_barrier_runs_business_once(self):
        async def main():
            n = await troupe.aio.open(self.dir, sync=2, coord=FAST)
            await n.create_table("accounts")
            await n.put("accounts", "a", {"balance": 100})
            await n.put("accounts", "b", {"balance": 0})
            calls = []
            first_debit = [True]

            async def bank(br):
                calls.append((br.branch_id, br.op, br.attempt))
                p = br.value()
                if p.get("fail"):
                    return False  # FAILURE: the saga compensates
                tx = n.begin()
                v = await tx.barrier(br)
                if v == "execute":
                    doc = await tx.get("accounts", p["acct"])
                    tx.put("accounts", p["acct"],
                           {"balance": doc["balance"] + p["delta"]})
                await tx.commit()
                if br.op == "action" and first_debit[0]:
                    # committed, but the answer is lost: delivered again
                    first_debit[0] = False
                    return "unknown"
                return True

            n.branch_handler("bank", bank)
            await n.saga_submit("tr-1", [
                {"action": ("bank", {"acct": "a", "delta": -30}),
                 "compensate": ("bank", {"acct": "a", "delta": 30})},
                {"action": ("bank", {"acct": "b", "fail": True}),
                 "compensate": None},
            ])
            q = await n.gtx_wait("tr-1")
            self.assertEqual(q["status"], "failed")
            self.assertEqual(q["mode"], "saga")
            ops = [(b["id"], [o["op"] for o in b["ops"]])
                   for b in q["branches"]]
            self.assertEqual(ops, [("01", ["action", "compensate"]),
                                   ("02", ["action"])])
            # the debit delivered twice, run once; compensated once
            self.assertEqual([c[:2] for c in calls],
                             [("01", "action"), ("01", "action"),
                              ("02", "action"), ("01", "compensate")])
            self.assertEqual((calls[0][2], calls[1][2]), (1, 2))  # attempts
            self.assertEqual(await balance(n, "a"), 100)
            self.assertEqual(await balance(n, "b"), 0)

            # a second delivery of the same op by hand: duplicated
            tx = n.begin()
            self.assertEqual(await tx.barrier(("saga", "tr-1", "01",
                                               "action")), "duplicated")
            tx.rollback()
            # a compensation before its action: null; the action after
            tx = n.begin()
            self.assertEqual(await tx.barrier(("saga", "x-1", "01",
                                               "compensate")),
                             "null_compensation")
            await tx.commit()
            tx = n.begin()
            self.assertEqual(await tx.barrier(("saga", "x-1", "01",
                                               "action")), "duplicated")
            tx.rollback()

            # the operator calls on a final one, and an unknown gid
            with self.assertRaises(troupe.TroupeError) as cm:
                await n.gtx_abort("tr-1", "late")
            self.assertEqual(cm.exception.name, "ECONFLICT")
            with self.assertRaises(troupe.TroupeError) as cm:
                await n.gtx_query("nope")
            self.assertEqual(cm.exception.name, "ENOENT")
            await n.close()
        asyncio.run(main())

    def test_tcc_and_handler_exception(self):
        async def main():
            n = await troupe.aio.open(self.dir, sync=2, coord=FAST)
            seen = []
            boom = [True]

            async def tcc(br):
                seen.append((br.mode, br.branch_id, br.op))
                if boom[0]:
                    boom[0] = False
                    raise RuntimeError("a handler that fails: UNKNOWN")
                return "success"

            n.branch_handler("tcc.res", tcc)
            await n.tcc_prepare("t-1")
            bid = await n.tcc_register("t-1", ("tcc.res", b"c"),
                                       ("tcc.res", b"x"))
            self.assertEqual(bid, "01")
            with self.assertLogs("troupe", "ERROR") as logs:
                await n.gtx_submit("t-1")
                q = await n.gtx_wait("t-1")
            self.assertIn("answered UNKNOWN", logs.output[0])
            self.assertEqual(q["status"], "succeed")
            self.assertEqual(seen, [("tcc", "01", "confirm")] * 2)
            await n.close()
        asyncio.run(main())

    def test_blocking_form_and_bad_input(self):
        with troupe.Node(self.dir, sync=2, coord=FAST) as n:
            got = []
            n.branch_handler("svc", lambda br: got.append(br.payload))
            n.saga_submit("s-1", [(("svc", b"one"), None),
                                  (("svc", b"two"), ("svc", b"undo"))])
            self.assertEqual(n.gtx_wait("s-1")["status"], "succeed")
            self.assertEqual(got, [b"one", b"two"])
            n.saga_submit("s-1", [(("svc", b"again"), None)])  # exists: OK
            with self.assertRaises(troupe.TroupeError) as cm:
                n.saga_submit("bad gid", [(("svc", b""), None)])
            self.assertEqual(cm.exception.name, "EINVAL")
            with self.assertRaises(troupe.TroupeError) as cm:
                n.saga_submit("s-2", [])
            self.assertEqual(cm.exception.name, "EINVAL")
            with self.assertRaises(TypeError):
                n.saga_submit("s-2", [((1, b""), None)])
            with self.assertRaises(troupe.TroupeError) as cm:
                n.saga_submit("s-2", [(("nobody", b""), None)])
            self.assertEqual(cm.exception.name, "ENOENT")
            self.assertIn("nobody", cm.exception.message)
            with self.assertRaises(troupe.TroupeError) as cm:
                n.gtx_query("s-2")
            self.assertEqual(cm.exception.name, "ENOENT")
            page = n.gtx_list(status="succeed")
            self.assertEqual([t["gid"] for t in page.items], ["s-1"])
            self.assertEqual(page.cursor, "s-1")
            self.assertEqual(n.gtx_list(status="failed").items, [])
            with self.assertRaises(troupe.TroupeError) as cm:
                n.gtx_list(mode="nope")
            self.assertEqual(cm.exception.name, "EINVAL")

    def test_msg_abort_and_force_stop(self):
        with troupe.Node(self.dir, sync=2, coord=FAST) as n:
            got = []
            n.branch_handler("mail", lambda br: got.append(
                (br.mode, br.branch_id, br.op, br.payload)))
            n.msg_prepare("m-1", [("mail", b"hi")], "mail", grace_ms=60000)
            self.assertEqual(n.gtx_query("m-1")["status"], "prepared")
            n.gtx_submit("m-1")
            self.assertEqual(n.gtx_wait("m-1")["status"], "succeed")
            self.assertEqual(got, [("msg", "01", "action", b"hi")])
            # an operator's abort keeps its reason
            n.tcc_prepare("t-1")
            n.gtx_abort("t-1", "by hand")
            q = n.gtx_wait("t-1")
            self.assertEqual((q["status"], q["reason"]),
                             ("failed", "aborted: by hand"))
            # force-stop: failed at once, no call from then on
            n.branch_handler("never", lambda br: "ongoing")
            n.saga_submit("s-1", [(("never", b""), None)])
            n.gtx_force_stop("s-1")
            q = n.gtx_query("s-1")
            self.assertEqual((q["status"], q["reason"]),
                             ("failed", "force-stopped"))
            with self.assertRaises(troupe.TroupeError) as cm:
                n.gtx_retry("s-1")
            self.assertEqual(cm.exception.name, "ECONFLICT")

    def test_xa_transfer_held_then_committed_and_an_abort(self):
        with troupe.Node(self.dir, sync=2, coord=FAST) as n:
            for t in ("checking", "savings"):
                n.create_table(t)
                n.put(t, "alice", {"balance": 100})

            def side(gid, table, delta):
                tx = n.begin()
                d = tx.get(table, "alice")
                tx.put(table, "alice", {"balance": d["balance"] + delta})
                return tx.xa_branch(gid)

            n.xa_begin("x-1")
            self.assertEqual(side("x-1", "checking", -30), "01")
            self.assertEqual(side("x-1", "savings", 30), "02")
            # held until resolved: a transaction on the row conflicts
            other = n.begin()
            other.put("checking", "alice", {"balance": 0})
            with self.assertRaises(troupe.TroupeError) as cm:
                other.commit()
            self.assertEqual(cm.exception.name, "ECONFLICT")
            self.assertEqual(n.get("checking", "alice")["balance"], 100)
            n.gtx_submit("x-1")
            q = n.gtx_wait("x-1")
            self.assertEqual((q["status"], q["mode"]), ("succeed", "xa"))
            self.assertEqual(n.get("checking", "alice")["balance"], 70)
            self.assertEqual(n.get("savings", "alice")["balance"], 130)
            n.xa_begin("x-2")
            self.assertEqual(side("x-2", "savings", 500), "01")
            n.gtx_abort("x-2", "insufficient funds")
            self.assertEqual(n.gtx_wait("x-2")["status"], "failed")
            self.assertEqual(n.get("savings", "alice")["balance"], 130)
            tx = n.begin()
            tx.put("checking", "bob", {"balance": 1})
            with self.assertRaises(troupe.TroupeError) as cm:
                tx.xa_branch("x-none")
            self.assertEqual(cm.exception.name, "ENOENT")
            with self.assertRaises(troupe.TroupeError) as cm:
                n.xa_begin("bad gid")
            self.assertEqual(cm.exception.name, "EINVAL")

    def test_xa_aio(self):
        async def main():
            n = await troupe.aio.open(self.dir, sync=2, coord=FAST)
            await n.create_table("t")
            await n.xa_begin("x-a")
            tx = n.begin()
            tx.put("t", "k", {"v": 1})
            self.assertEqual(await tx.xa_branch("x-a"), "01")
            await n.gtx_submit("x-a")
            self.assertEqual((await n.gtx_wait("x-a"))["status"], "succeed")
            self.assertEqual((await n.get("t", "k"))["v"], 1)
            await n.close()
        asyncio.run(main())
