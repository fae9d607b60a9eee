import asyncio

import troupe
import troupe.aio
from tests.util import NodeCase


class Errors(NodeCase):
    def test_bad_input(self):
        with troupe.Node(self.dir) as n:
            cases = [
                (lambda: n.get("nope", "k"), "ENOTABLE", "nope"),
                (lambda: n.put("nope", "k", {}), "ENOTABLE", None),
                (lambda: n.create_table(""), "EINVAL", None),
                (lambda: n.create_table("t", [{"name": "x"}]), "EINVAL",
                 "fields"),
                (lambda: n.create_queue("q", 0), "EINVAL", None),
                (lambda: n.publish("nope", "i", "k", 1), "ENOQUEUE", None),
                (lambda: n.scan("nope", limit=0), "EINVAL", None),
            ]
            n.create_table("t")
            cases += [
                (lambda: n.get("t", b""), "EINVAL", None),
                (lambda: n.put("t", "k", [1, 2]), "EPROTO", None),
                (lambda: n.scan("t", limit=0), "EINVAL", None),
                (lambda: n.query("t", "nope", values=[1]), "ENOINDEX", None),
                (lambda: n.subscribe("nope"), "ENOQUEUE", None),
            ]
            for call, name, text in cases:
                with self.assertRaises(troupe.TroupeError) as cm:
                    call()
                self.assertEqual(cm.exception.name, name, cm.exception)
                self.assertTrue(cm.exception.message, (name, cm.exception))
                if text:
                    self.assertIn(text, cm.exception.message)
            with self.assertRaises(TypeError):
                n.get("t", 5)
            with self.assertRaises(TypeError):
                n.put("t", "k", object())
        with self.assertRaises(troupe.TroupeError) as cm:
            n.close()
        self.assertEqual(cm.exception.name, "ESTATE")
        with self.assertRaises(troupe.TroupeError) as cm:
            n.get("t", "k")
        self.assertEqual(cm.exception.name, "ECLOSED")

    def test_busy_bound(self):
        async def main():
            n = await troupe.aio.open(self.dir, sync=2)
            await n.create_table("t")
            n.set_limits(requests=4)
            # more than the bound at once: EBUSY is absorbed by draining
            # when completions are waiting, else raised
            got = await asyncio.gather(*(n.get("t", "k%d" % i)
                                         for i in range(4)))
            self.assertEqual(got, [None] * 4)
            n._c.get("t", "a")
            n._c.get("t", "b")
            n._c.get("t", "c")
            n._c.get("t", "d")
            with self.assertRaises(troupe.TroupeError) as cm:
                n._c.get("t", "e")
            self.assertEqual(cm.exception.name, "EBUSY")
            await n.close()
        asyncio.run(main())
