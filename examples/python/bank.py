"""A small bank on troupe, from Python (asyncio).

Accounts live in a table; transfers are events on a partitioned queue
(partitioned by the paying account), published durably. An async handler
checks each transfer (an awaited call standing in for a fraud service),
then moves the money in one serializable transaction that also records
the transfer, so a delivery after a lost acknowledgement is a no-op. A transaction that
conflicts with a concurrent one raises, which leaves the event pending:
the queue delivers it again and it is retried on fresh data. A transfer
the payer cannot cover is acknowledged as refused. At the end every
balance is read back and the total must be what it was.

    make && PYTHONPATH=bindings/python python3 examples/python/bank.py [DIR]

Exits 1 if the books do not balance.
"""
import asyncio
import random
import sys
import tempfile

import troupe
import troupe.aio

ACCOUNTS = 20
OPENING = 1000
TRANSFERS = 400


async def main(path):
    n = await troupe.aio.open(path, sync=1)
    try:
        await n.create_table("accounts")
        await n.create_table("transfers")  # one row per transfer handled
        await asyncio.gather(*(n.put("accounts", f"acct{i:02}",
                                     {"owner": f"customer {i}",
                                      "balance": OPENING})
                               for i in range(ACCOUNTS)))
        await n.create_queue("transfers", partitions=4)

        done = asyncio.Event()
        stats = {"moved": 0, "refused": 0, "retried": 0, "handled": 0}

        async def on_transfer(ev):
            t = ev.payload
            await asyncio.sleep(0.001)  # the fraud service's answer
            if ev.attempt > 1:
                stats["retried"] += 1
            tx = n.begin()
            if await tx.get("transfers", ev.id) is not None:
                tx.rollback()  # at least once: handled before its ack was lost
                return
            src = await tx.get("accounts", t["from"])
            dst = await tx.get("accounts", t["to"])
            if src["balance"] < t["amount"]:
                tx.put("transfers", ev.id, dict(t, status="refused"))
                await tx.commit()
                stats["refused"] += 1
            else:
                tx.put("transfers", ev.id, dict(t, status="moved"))
                tx.put("accounts", t["from"],
                       dict(src, balance=src["balance"] - t["amount"]))
                tx.put("accounts", t["to"],
                       dict(dst, balance=dst["balance"] + t["amount"]))
                await tx.commit()  # ECONFLICT raises: delivered again
                stats["moved"] += 1
            stats["handled"] += 1
            if stats["handled"] == TRANSFERS:
                done.set()

        n.subscribe("transfers", on_transfer, credit=16)
        rnd = random.Random(7)
        pubs = []
        for i in range(TRANSFERS):
            a, b = rnd.sample(range(ACCOUNTS), 2)
            pubs.append(n.publish("transfers", f"t{i:04}", f"acct{a:02}",
                                  {"from": f"acct{a:02}", "to": f"acct{b:02}",
                                   "amount": rnd.randint(1, 400)}))
        await asyncio.gather(*pubs)
        await asyncio.wait_for(done.wait(), timeout=120)

        total, after = 0, None
        while True:
            page = await n.scan("accounts", limit=100, after=after)
            total += sum(doc["balance"] for _, doc in page.rows)
            if not page.more:
                break
            after = page.cursor
    finally:
        await n.close()
    print(f"bank: {stats['moved']} transfers moved, {stats['refused']} "
          f"refused, {stats['retried']} deliveries retried after a conflict; "
          f"total "
          f"{total} (opening {ACCOUNTS * OPENING})")
    return 0 if total == ACCOUNTS * OPENING else 1


if __name__ == "__main__":
    path = sys.argv[1] if len(sys.argv) > 1 else tempfile.mkdtemp(
        prefix="troupe-bank-")
    sys.exit(asyncio.run(main(path)))
