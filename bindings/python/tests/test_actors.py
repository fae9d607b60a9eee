import asyncio

import troupe
import troupe.aio
from tests.util import NodeCase


class Actors(NodeCase):
    def test_serve_and_ask(self):
        async def main():
            n = await troupe.aio.open(self.dir, sync=2)

            async def greeter(msg):
                self.assertTrue(msg.ask)
                if msg.kind == 2:
                    raise ValueError("no such greeting")
                await asyncio.sleep(0)
                return b"hello " + msg.body

            n.serve_actor("greeter", greeter, credit=4)
            got = await asyncio.gather(*(n.ask("greeter", 1, b"n%d" % i)
                                         for i in range(20)))
            self.assertEqual(got, [b"hello n%d" % i for i in range(20)])
            with self.assertRaises(troupe.TroupeError) as cm:
                await n.ask("greeter", 2, b"x")
            self.assertEqual(cm.exception.name, "EFAILED")
            self.assertEqual(cm.exception.detail, b"no such greeting")
            with self.assertRaises(troupe.TroupeError) as cm:
                await n.ask("nobody", 1)
            self.assertEqual(cm.exception.name, "ENOENT")
            await n.close()
        asyncio.run(main())
