"""A bank transfer as a saga, from Python (asyncio): two accounts in a
troupe table, each transfer two steps, debit the payer (compensated by a
credit back) then credit the payee, served by an async branch handler
that writes the account and the barrier's row in one transaction (so a
call delivered twice moves the money once). A write that would take a
balance below 0 or above its limit is a FAILURE: the second transfer's
credit is, and the coordinator compensates its debit.

    make && PYTHONPATH=bindings/python python3 examples/python/bank_saga.py [DIR]

Prints each call, each transfer's end and the balances; exits 1 if the
books do not balance.
"""
import asyncio
import sys
import tempfile

import troupe
import troupe.aio

TOTAL = 200


async def main(path):
    n = await troupe.aio.open(path, sync=1, coord={"retry_min_ms": 100})
    await n.create_table("accounts")
    if await n.get("accounts", "alice") is None:
        await n.put("accounts", "alice", {"balance": 100, "limit": 1000})
        await n.put("accounts", "bob", {"balance": 100, "limit": 150})

    async def bank(br):
        p = br.value()
        while True:  # a conflicting transaction: again, on fresh data
            tx = n.begin()
            verdict = await tx.barrier(br)
            if verdict == "execute":
                acct = await tx.get("accounts", p["who"])
                new = acct["balance"] + p["delta"]
                if not 0 <= new <= acct["limit"]:
                    tx.rollback()  # no barrier row: nothing happened
                    print("  %s %s %s: %s %+d refused (balance %d, limit %d)"
                          % (br.gid, br.branch_id, br.op, p["who"],
                             p["delta"], acct["balance"], acct["limit"]))
                    return False  # FAILURE
                tx.put("accounts", p["who"], dict(acct, balance=new))
            try:
                await tx.commit()
            except troupe.TroupeError as e:
                if e.name == "ECONFLICT":
                    continue
                raise  # UNKNOWN: the call is retried after its backoff
            print("  %s %s %s: %s %+d%s" % (
                br.gid, br.branch_id, br.op, p["who"], p["delta"],
                "" if verdict == "execute" else " (%s)" % verdict))
            return True

    n.branch_handler("bank", bank)

    async def transfer(gid, payer, payee, amount):
        print("transfer %s: %d from %s to %s" % (gid, amount, payer, payee))
        await n.saga_submit(gid, [
            {"action": ("bank", {"who": payer, "delta": -amount}),
             "compensate": ("bank", {"who": payer, "delta": amount})},
            {"action": ("bank", {"who": payee, "delta": amount}),
             "compensate": None},
        ])
        q = await n.gtx_wait(gid)
        print("transfer %s: %s%s" % (gid, q["status"],
                                     ", " + q["reason"] if q["reason"]
                                     else ""))
        return q["status"]

    s1 = await transfer("t1", "alice", "bob", 30)
    s2 = await transfer("t2", "alice", "bob", 40)  # over bob's limit
    total = 0
    for who in ("alice", "bob"):
        b = (await n.get("accounts", who))["balance"]
        print("%s: %d" % (who, b))
        total += b
    await n.close()
    ok = total == TOTAL and s1 == "succeed" and s2 == "failed"
    print("total: %d (%s)" % (total, "the books balance" if ok
                              else "THE BOOKS DO NOT BALANCE"))
    return 0 if ok else 1


if __name__ == "__main__":
    if len(sys.argv) > 1:
        sys.exit(asyncio.run(main(sys.argv[1])))
    with tempfile.TemporaryDirectory(prefix="troupe-bank-saga-") as d:
        sys.exit(asyncio.run(main(d)))
