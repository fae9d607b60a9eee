"""An order placed by a workflow written in Python (asyncio;
docs/coordinator.md "Workflows"; examples/order_workflow.c is the same
in C): reserve a widget, ask a payment service to charge the customer,
wait for the service's callback (an awakeable), then ship; when the card
is declined the workflow fails and the coordinator runs the
reservation's compensation, which puts the widget back.

    make && PYTHONPATH=bindings/python python3 examples/python/order_workflow.py [DIR]

Order o1 is paid and shipped; o2's card is declined and its widget
released. Prints each order's end and the stock (9: one widget
shipped). Run again on the same DIR and nothing moves twice. Exits 1
when the stock or an order is wrong.
"""
import asyncio
import sys
import tempfile

import troupe
import troupe.aio

STOCK = 10


async def main(path):
    n = await troupe.aio.open(path, sync=1, coord={"retry_min_ms": 100})
    for t in ("stock", "orders"):
        try:
            await n.create_table(t)
        except troupe.TroupeError as e:
            if e.name != "EEXIST":
                raise
    if await n.get("stock", "widget") is None:
        await n.put("stock", "widget", {"count": STOCK})

    async def move(br, delta):
        """Moves the stock by delta once for the branch (the barrier's
        row and the count commit together); False below 0."""
        while True:
            tx = n.begin()
            if await tx.barrier(br) == "execute":
                s = await tx.get("stock", "widget")
                if s["count"] + delta < 0:
                    tx.rollback()
                    return False
                tx.put("stock", "widget", {"count": s["count"] + delta})
            try:
                await tx.commit()
                return True
            except troupe.TroupeError as e:
                if e.name != "ECONFLICT":
                    raise

    async def stock(br):  # the compensation target: op "compensate"
        print("  %s: widget released" % br.gid)
        return await move(br, +1)

    n.branch_handler("stock", stock)

    async def service(id):  # the payment service: answers by callback
        try:
            if id.startswith("o2/"):
                await n.awakeable_reject(id, "card declined")
            else:
                await n.awakeable_resolve(id, "paid")
        except troupe.TroupeError as e:
            if e.name != "ECONFLICT":  # answered already
                print("payment service: %s: %s" % (id, e))

    tasks = set()

    async def order(wf, input):
        async def reserve(ctx):
            if not await move(ctx, -1):
                raise troupe.WorkflowFailure("sold out")
            print("  %s: widget reserved" % wf.gid)
        await wf.step("reserve", reserve, compensate=("stock", "release"))
        id = wf.awakeable("payment")

        def charge(ctx):  # a step: sent once
            print("  %s: payment requested (callback %s)" % (wf.gid, id))
            t = asyncio.get_running_loop().create_task(service(id))
            tasks.add(t)
            t.add_done_callback(tasks.discard)
        await wf.step("charge", charge)
        try:
            await wf.await_(id)
        except troupe.WorkflowFailure as e:  # Suspend is no Exception
            print("  %s: payment declined (%s)" % (wf.gid, e.result.decode()))
            raise troupe.WorkflowFailure("payment declined")

        async def ship(ctx):
            await n.put("orders", wf.gid, {"status": "shipped"})
            print("  %s: shipped" % wf.gid)
        await wf.step("ship", ship)

    n.workflow("order", order)

    async def place(gid):
        print("order %s" % gid)
        await n.workflow_submit(gid, "order")
        q = await n.gtx_wait(gid)
        print("order %s: %s%s" % (gid, q["status"],
                                  ", " + q["reason"] if q["reason"] else ""))
        return q["status"]

    s1 = await place("o1")
    s2 = await place("o2")
    count = (await n.get("stock", "widget"))["count"]
    ok = s1 == "succeed" and s2 == "failed" and count == STOCK - 1 and \
        await n.get("orders", "o1") is not None and \
        await n.get("orders", "o2") is None
    await n.close()
    print("stock: %d (%s)" % (count, "right" if ok else "WRONG"))
    return 0 if ok else 1


if __name__ == "__main__":
    if len(sys.argv) > 1:
        sys.exit(asyncio.run(main(sys.argv[1])))
    with tempfile.TemporaryDirectory(prefix="troupe-order-workflow-") as d:
        sys.exit(asyncio.run(main(d)))
