"""Workflows written in Python (docs/coordinator.md "Workflows"):
memoized steps, compensation in reverse, replay across a reopen,
awakeables, divergence, version markers, the 64-record bound; the
asyncio form, and the blocking form driven from its pull loop."""

import asyncio
import logging
import time

import troupe
import troupe.aio
from troupe import msgpack
from tests.util import NodeCase

FAST = {"retry_min_ms": 50, "retry_max_ms": 200}


async def query_until(n, gid, pred, what, timeout=10.0):
    """Polls gid's query until pred holds, with a deadline."""
    until = time.monotonic() + timeout
    while True:
        q = await n.gtx_query(gid)
        if pred(q):
            return q
        if time.monotonic() > until:
            raise AssertionError("%s: no %s: %r" % (gid, what, q))
        await asyncio.sleep(0.005)


def held(n, gid, hold):
    return query_until(n, gid, lambda q: q["hold"] == hold, "hold " + hold)


def records(q):
    return [(b["id"], b["kind"], b["name"], b["version"],
             b["ops"][0]["state"]) for b in q["branches"] if b["id"] != "00"]


class Workflows(NodeCase):
    def run_async(self, main):
        asyncio.run(main())

    def test_three_steps_succeed_each_fn_once_results_memoized(self):
        async def main():
            n = await troupe.aio.open(self.dir, sync=2, coord=FAST)
            ran = {"a": 0, "b": 0, "c": 0}
            runs = [0]
            seen = []

            async def order(wf, input):
                runs[0] += 1

                async def a(ctx):
                    ran["a"] += 1
                    self.assertEqual((ctx.mode, ctx.gid, ctx.branch_id,
                                      ctx.op), ("workflow", "o-1", "01",
                                                "action"))
                    return input + b"+a"

                def b(ctx):  # a plain function is a step fn too
                    ran["b"] += 1
                    return {"got": ra.decode()}

                async def c(ctx):
                    ran["c"] += 1
                    return bytes([1, 2, 3])

                ra = await wf.step("a", a)
                rb = await wf.step("b", b)
                rc = await wf.step("c", c)
                seen.append((ra, msgpack.unpackb(rb), rc))

            n.workflow("order", order)
            await n.workflow_submit("o-1", "order", b"in")
            await n.workflow_submit("o-1", "order", b"in")  # nothing twice
            q = await n.gtx_wait("o-1")
            self.assertEqual(q["status"], "succeed")
            self.assertEqual(q["mode"], "workflow")
            self.assertEqual(ran, {"a": 1, "b": 1, "c": 1})
            self.assertEqual(runs[0], 4)  # three registrations, the end
            self.assertEqual(seen, [(b"in+a", {"got": "in+a"},
                                     b"\x01\x02\x03")])
            self.assertEqual(records(q), [
                ("01", "step", "a", 0, "succeeded"),
                ("02", "step", "b", 0, "succeeded"),
                ("03", "step", "c", 0, "succeeded")])
            with self.assertRaises(troupe.TroupeError) as cm:
                await n.workflow_submit("o-2", "nobody", b"x")
            self.assertEqual(cm.exception.name, "ENOENT")
            with self.assertRaises(troupe.TroupeError) as cm:
                await n.workflow_submit("bad gid", "order", b"x")
            self.assertEqual(cm.exception.name, "EINVAL")
            await n.close()
        self.run_async(main)

    def test_failing_step_compensates_registered_steps_in_reverse(self):
        async def main():
            n = await troupe.aio.open(self.dir, sync=2, coord=FAST)
            undo = []

            async def stock(br):
                undo.append("%s %s %s %s %s" % (br.mode, br.gid, br.branch_id,
                                                br.op, br.payload.decode()))
                return True

            n.branch_handler("stock", stock)
            ran = []

            async def flow(wf, input):
                for s in ("a", "b"):
                    async def fn(ctx, s=s):
                        ran.append(s)
                    await wf.step(s, fn, compensate=("stock", "undo-" + s))

                async def c(ctx):
                    ran.append("c")
                    raise troupe.WorkflowFailure("card declined")
                await wf.step("c", c, compensate=("stock", "undo-c"))
                ran.append("after c")  # never: the failure is let through

            n.workflow("flow", flow)
            await n.workflow_submit("f-1", "flow")
            q = await n.gtx_wait("f-1")
            self.assertEqual(q["status"], "failed")
            self.assertIn('step "c" failed: card declined', q["reason"])
            self.assertEqual(ran, ["a", "b", "c"])
            self.assertEqual(undo, ["workflow f-1 03 compensate undo-c",
                                    "workflow f-1 02 compensate undo-b",
                                    "workflow f-1 01 compensate undo-a"])

            # a failure caught by the workflow: it goes on, nothing undone
            undo.clear()

            async def tolerant(wf, input):
                await wf.step("a", lambda ctx: "ok",
                              compensate=("stock", "undo-a"))

                def b(ctx):
                    raise troupe.WorkflowFailure("nope", b"detail-b")
                try:
                    await wf.step("b", b)
                except troupe.WorkflowFailure as e:
                    self.assertEqual(e.result, b"detail-b")
                    await wf.step("fallback", lambda ctx: "fb")

            n.workflow("tolerant", tolerant)
            await n.workflow_submit("f-2", "tolerant")
            self.assertEqual((await n.gtx_wait("f-2"))["status"], "succeed")
            self.assertEqual(undo, [])
            await n.close()
        self.run_async(main)

    def test_replay_after_reopen_runs_no_succeeded_step_again(self):
        mail = []
        ran = {"reserve": 0, "ask": 0, "ship": 0}

        async def flow(wf, input):
            async def reserve(ctx):
                ran["reserve"] += 1
                return "r-1"
            await wf.step("reserve", reserve)
            id = wf.awakeable("payment")

            async def ask(ctx):
                ran["ask"] += 1
                mail.append(id)
            await wf.step("ask", ask)
            paid = await wf.await_(id)

            async def ship(ctx):
                ran["ship"] += 1
                return paid
            await wf.step("ship", ship)

        async def first():
            n = await troupe.aio.open(self.dir, sync=2, coord=FAST)
            n.workflow("order", flow)
            await n.workflow_submit("w-1", "order", b"x")
            await held(n, "w-1", "awaiting")
            self.assertEqual(ran, {"reserve": 1, "ask": 1, "ship": 0})
            await n.close()

        async def second():
            n = await troupe.aio.open(self.dir, sync=2, coord=FAST)
            n.workflow("order", flow)
            q0 = await n.gtx_query("w-1")
            self.assertEqual((q0["status"], q0["hold"]),
                             ("submitted", "awaiting"))
            await n.awakeable_resolve(mail[0], b"paid")
            q = await n.gtx_wait("w-1")
            self.assertEqual(q["status"], "succeed")
            self.assertEqual(ran, {"reserve": 0, "ask": 0, "ship": 1})
            self.assertEqual(mail, ["w-1/02"])
            await n.close()

        self.run_async(first)
        ran["reserve"] = ran["ask"] = 0
        self.run_async(second)

    def test_awakeables_resolved_and_rejected_from_the_host(self):
        async def main():
            n = await troupe.aio.open(self.dir, sync=2, coord=FAST)
            ids, got, undone = {}, {}, []

            async def undo(br):
                undone.append(br.gid)
            n.branch_handler("undo", undo)

            async def pay(wf, input):
                await wf.step("hold", lambda ctx: "h",
                              compensate=("undo", b""))
                id = wf.awakeable("cb")
                await wf.step("send", lambda ctx: ids.__setitem__(wf.gid, id))
                try:
                    got[wf.gid] = (await wf.await_(id)).decode()
                except troupe.WorkflowFailure as e:
                    got[wf.gid] = "rejected: " + e.result.decode()
                    raise  # a rejection fails the workflow
                # held again, so the checks below race no end
                end = wf.awakeable("end")
                await wf.step("send-end",
                              lambda ctx: ids.__setitem__("end", end))
                await wf.await_(end)

            n.workflow("pay", pay)
            await n.workflow_submit("p-1", "pay")
            await n.workflow_submit("p-2", "pay")
            await held(n, "p-1", "awaiting")
            await held(n, "p-2", "awaiting")
            self.assertEqual(got, {})
            await n.awakeable_resolve(ids["p-1"], b"ok-1")
            await n.awakeable_resolve(ids["p-1"], b"ok-1")  # the same: OK
            with self.assertRaises(troupe.TroupeError) as cm:
                await n.awakeable_reject(ids["p-1"], b"no")
            self.assertEqual(cm.exception.name, "ECONFLICT")
            await n.awakeable_reject(ids["p-2"], "declined")
            await query_until(n, "p-1", lambda q: "end" in ids and
                              q["hold"] == "awaiting", "the second await")
            await n.awakeable_resolve(ids["end"])
            self.assertEqual((await n.gtx_wait("p-1"))["status"], "succeed")
            q2 = await n.gtx_wait("p-2")
            self.assertEqual(q2["status"], "failed")
            self.assertIn("rejected: declined", q2["reason"])
            self.assertEqual(got, {"p-1": "ok-1", "p-2": "rejected: declined"})
            self.assertEqual(undone, ["p-2"])
            with self.assertRaises(troupe.TroupeError) as cm:
                await n.awakeable_resolve("p-9/01", b"x")
            self.assertEqual(cm.exception.name, "ENOENT")
            with self.assertRaises(troupe.TroupeError) as cm:
                await n.awakeable_resolve("", b"x")
            self.assertEqual(cm.exception.name, "EINVAL")
            await n.close()
        self.run_async(main)

    def test_divergence_is_held_visible_and_runs_after_fix_and_retry(self):
        async def main():
            n = await troupe.aio.open(self.dir, sync=2, coord=FAST)
            ids = []

            async def v1(wf):
                await wf.step("a", lambda ctx: "a")
                id = wf.awakeable("w")
                await wf.step("send", lambda ctx: ids.append(id))
                await wf.await_(id)

            async def v2(wf):
                await wf.step("x", lambda ctx: "x")  # recorded: "a"

            impl = [v1]
            caught = [0]

            async def d(wf, input):
                try:
                    await impl[0](wf)
                except Exception:  # Suspend is no Exception: not caught
                    caught[0] += 1
                    raise

            n.workflow("d", d)
            await n.workflow_submit("d-1", "d")
            await held(n, "d-1", "awaiting")
            impl[0] = v2
            await n.awakeable_resolve(ids[0], b"go")
            q = await held(n, "d-1", "diverged")
            self.assertEqual(q["status"], "submitted")
            self.assertEqual(q["reason"], 'replay diverged: position 01 was '
                             'recorded as step "a" but is now step "x"')
            self.assertEqual(caught[0], 0)
            impl[0] = v1
            await n.gtx_retry("d-1")
            self.assertEqual((await n.gtx_wait("d-1"))["status"], "succeed")
            self.assertEqual(ids, ["d-1/02"])
            await n.close()
        self.run_async(main)

    def test_version_markers_keep_old_instances_on_their_path(self):
        async def main():
            n = await troupe.aio.open(self.dir, sync=2, coord=FAST)
            ids, versions, c_ran = {}, {}, []

            async def tail(wf):
                id = wf.awakeable("w")
                await wf.step("send", lambda ctx: ids.__setitem__(wf.gid, id))
                await wf.await_(id)
                await wf.step("b", lambda ctx: "b")

            async def v1(wf):
                await wf.step("a", lambda ctx: "a")
                await tail(wf)

            def v2(lo):
                async def f(wf):
                    await wf.step("a", lambda ctx: "a")
                    v = wf.version("add-c", lo, 1)
                    versions[wf.gid] = v
                    if v >= 1:
                        await wf.step("c", lambda ctx: c_ran.append(wf.gid))
                    await tail(wf)
                return f

            impl = [v1]

            async def vm(wf, input):
                await impl[0](wf)

            n.workflow("vm", vm)
            await n.workflow_submit("old-1", "vm")
            await n.workflow_submit("old-2", "vm")
            await held(n, "old-1", "awaiting")
            await held(n, "old-2", "awaiting")
            impl[0] = v2(troupe.VERSION_DEFAULT)
            await n.workflow_submit("new-1", "vm")
            await held(n, "new-1", "awaiting")
            await n.awakeable_resolve(ids["old-1"])
            await n.awakeable_resolve(ids["new-1"])
            self.assertEqual((await n.gtx_wait("old-1"))["status"], "succeed")
            qn = await n.gtx_wait("new-1")
            self.assertEqual(qn["status"], "succeed")
            self.assertEqual(versions, {"old-1": -1, "new-1": 1})
            self.assertEqual(c_ran, ["new-1"])
            self.assertEqual([r[:4] for r in records(qn)], [
                ("01", "step", "a", 0), ("02", "version", "add-c", 1),
                ("03", "step", "c", 0), ("04", "awakeable", "w", 0),
                ("05", "step", "send", 0), ("06", "step", "b", 0)])
            # min raised past the old instances while one is in flight
            impl[0] = v2(1)
            await n.awakeable_resolve(ids["old-2"])
            q = await held(n, "old-2", "diverged")
            self.assertEqual(q["reason"], 'replay diverged: version marker '
                             '"add-c" at position 02 is version -1, outside '
                             '1..1')
            await n.close()
        self.run_async(main)

    def test_a_raise_that_is_no_failure_runs_again_never_compensates(self):
        async def main():
            n = await troupe.aio.open(self.dir, sync=2, coord=FAST)
            undo, ran = [], {"a": 0, "b": 0}
            flaky, broken = [1], [1]

            async def u(br):
                undo.append(br.branch_id)
            n.branch_handler("undo", u)

            async def flow(wf, input):
                await wf.step("a", lambda ctx: ran.__setitem__("a",
                                                               ran["a"] + 1),
                              compensate=("undo", b""))

                def b(ctx):
                    ran["b"] += 1
                    flaky[0] -= 1
                    if flaky[0] >= 0:
                        raise OSError("the service is down")
                    return "b"
                await wf.step("b", b)
                broken[0] -= 1
                if broken[0] >= 0:
                    raise TypeError("a bug in the workflow")  # RETRY

            n.workflow("flaky", flow)
            log = logging.getLogger("troupe")
            level = log.level
            log.setLevel(logging.CRITICAL)  # the raises are logged
            try:
                await n.workflow_submit("r-1", "flaky")
                q = await n.gtx_wait("r-1")
            finally:
                log.setLevel(level)
            self.assertEqual(q["status"], "succeed")
            self.assertEqual(ran, {"a": 1, "b": 2})
            self.assertEqual(undo, [])
            self.assertGreaterEqual(q["attempts"], 2)
            await n.close()
        self.run_async(main)

    def test_at_most_64_records_and_bad_arguments(self):
        async def main():
            n = await troupe.aio.open(self.dir, sync=2, coord=FAST)
            refused_at = [-1]

            async def many(wf, input):
                for i in range(70):
                    try:
                        wf.version("m%d" % i, 0, 0)
                    except troupe.TroupeError as e:
                        self.assertEqual(e.name, "EINVAL")
                        refused_at[0] = i
                        break
                with self.assertRaises(troupe.TroupeError):
                    wf.awakeable("")
                for bad in ("actor:bank#x", "actor:@1.0.1#2"):
                    with self.assertRaises(troupe.TroupeError):
                        await wf.step("s", lambda ctx: None,
                                      compensate=(bad, b""))
                with self.assertRaises(troupe.TroupeError) as cm:
                    await wf.await_("other/01")
                self.assertEqual(cm.exception.name, "ENOENT")

            n.workflow("many", many)
            await n.workflow_submit("m-1", "many")
            q = await n.gtx_wait("m-1")
            self.assertEqual(q["status"], "succeed")
            self.assertEqual(refused_at[0], 64)
            self.assertEqual(len([b for b in q["branches"]
                                  if b.get("kind") == "version"]), 64)
            with self.assertRaises(troupe.TroupeError):
                n.workflow("x" * 129, many)
            await n.close()
        self.run_async(main)

    def test_blocking_form_runs_workflows_from_its_pull_loop(self):
        ran = {"a": 0, "send": 0, "ship": 0}
        sent = []

        def flow(wf, input):
            def a(ctx):
                ran["a"] += 1
                return input.upper()
            r = wf.step("a", a)
            id = wf.awakeable("cb")

            def send(ctx):
                ran["send"] += 1
                sent.append(id)
            wf.step("send", send)
            paid = wf.await_(id)

            def ship(ctx):
                ran["ship"] += 1
                return r + b" " + paid
            wf.step("ship", ship)

        with troupe.Node(self.dir, sync=2, coord=FAST) as n:
            n.workflow("order", flow)
            n.workflow_submit("b-1", "order", b"abc")
            until = time.monotonic() + 10
            while n.gtx_query("b-1")["hold"] != "awaiting":
                self.assertLess(time.monotonic(), until)
                n.serve(0.01)
            self.assertEqual(sent, ["b-1/02"])
            n.awakeable_resolve(sent[0], b"paid")
            q = n.gtx_wait("b-1")
            self.assertEqual(q["status"], "succeed")
            self.assertEqual(ran, {"a": 1, "send": 1, "ship": 1})


if __name__ == "__main__":
    logging.basicConfig()
