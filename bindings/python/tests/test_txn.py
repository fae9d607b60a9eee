import asyncio

import troupe
import troupe.aio
from tests.util import NodeCase


class Transactions(NodeCase):
    def test_commit_and_conflict(self):
        with troupe.Node(self.dir, sync=2) as n:
            n.create_table("acct")
            n.put("acct", "a", {"bal": 10})
            n.put("acct", "b", {"bal": 0})
            t1, t2 = n.begin(), n.begin()
            a = t1.get("acct", "a")
            t2.get("acct", "a")
            t1.put("acct", "a", {"bal": a["bal"] - 4})
            t1.put("acct", "b", {"bal": 4})
            self.assertEqual(t1.get("acct", "b"), {"bal": 4})  # own write
            t2.put("acct", "a", {"bal": 0})
            t1.commit()
            with self.assertRaises(troupe.TroupeError) as cm:
                t2.commit()
            self.assertEqual(cm.exception.name, "ECONFLICT")
            self.assertEqual(cm.exception.detail[0][:2], ("acct", b"a"))
            self.assertEqual(n.get("acct", "a"), {"bal": 6})
            self.assertEqual(n.get("acct", "b"), {"bal": 4})
            t3 = n.begin()
            t3.put("acct", "a", {"bal": 99})
            t3.rollback()
            self.assertEqual(n.get("acct", "a"), {"bal": 6})
            with self.assertRaises(troupe.TroupeError) as cm:
                t3.rollback()
            self.assertEqual(cm.exception.name, "ESTATE")
            # an id the node does not know is the ABI's ENOENT
            with self.assertRaises(troupe.TroupeError) as cm:
                n._c.txn_rollback(12345)
            self.assertEqual(cm.exception.name, "ENOENT")

    def test_async(self):
        async def main():
            n = await troupe.aio.open(self.dir, sync=2)
            await n.create_table("t")
            tx = n.begin()
            self.assertIsNone(await tx.get("t", "k"))
            tx.put("t", "k", {"v": 1})
            await tx.commit()
            self.assertEqual(await n.get("t", "k"), {"v": 1})
            await n.close()
        asyncio.run(main())
