import asyncio

import troupe
import troupe.aio
from tests.util import NodeCase

BY_NAME = [{"name": "by_name", "fields": [("name", "string")]}]


class TablesBlocking(NodeCase):
    def test_rows_scan_query(self):
        with troupe.Node(self.dir, sync=2) as n:
            n.create_table("t", BY_NAME)
            docs = {b"k%d" % i: {"name": "n%d" % (i % 3), "i": i,
                                 "f": i / 2, "ok": i % 2 == 0,
                                 "tags": ["a", None], "raw": b"\x00\x01"}
                    for i in range(30)}
            for k, d in docs.items():
                n.put("t", k, d)
            for k, d in docs.items():
                self.assertEqual(n.get("t", k), d)
            self.assertIsNone(n.get("t", b"absent"))
            # pages: every row once, in key order, by the cursor
            seen, after = [], None
            while True:
                p = n.scan("t", limit=7, after=after)
                seen += [k for k, _ in p.rows]
                if not p.more:
                    break
                after = p.cursor
            self.assertEqual(seen, sorted(docs))
            hits = n.query("t", "by_name", values=["n1"], limit=100).hits
            want = sorted(k for k, d in docs.items() if d["name"] == "n1")
            self.assertEqual([h[1] for h in hits], want)
            self.assertEqual([h[2] for h in hits], [docs[k] for k in want])
            self.assertTrue(n.delete("t", b"k0"))
            self.assertFalse(n.delete("t", b"k0"))
            self.assertIsNone(n.get("t", "k0"))


class TablesAsync(NodeCase):
    def test_many_in_flight(self):
        async def main():
            n = await troupe.aio.open(self.dir, sync=2)
            await n.create_table("t", BY_NAME)
            await asyncio.gather(*(n.put("t", "k%03d" % i, {"name": "x",
                                                            "i": i})
                                   for i in range(300)))
            got = await asyncio.gather(*(n.get("t", "k%03d" % i)
                                         for i in range(300)))
            self.assertEqual([g["i"] for g in got], list(range(300)))
            p = await n.scan("t", limit=1000)
            self.assertEqual(len(p.rows), 300)
            q = await n.query("t", "by_name", values=["x"], limit=5)
            self.assertEqual(len(q.hits), 5)
            self.assertTrue(q.more)
            await n.close()
        asyncio.run(main())
