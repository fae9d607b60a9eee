import asyncio
import os
import subprocess
import sys
import textwrap

import troupe
import troupe.aio
from tests.util import NodeCase


class Close(NodeCase):
    def test_close_with_work_in_flight(self):
        async def main():
            n = await troupe.aio.open(self.dir, sync=2)
            await n.create_table("t")
            await n.create_queue("q")
            started = asyncio.Event()

            async def stuck(ev):
                started.set()
                await asyncio.sleep(3600)

            n.subscribe("q", stuck, credit=2, timeout_ms=60000)
            await n.publish("q", "e", "k", 1)
            await asyncio.wait_for(started.wait(), 10)
            puts = [asyncio.ensure_future(n.put("t", "k%d" % i, {"i": i}))
                    for i in range(200)]
            await n.close()
            res = await asyncio.gather(*puts, return_exceptions=True)
            for r in res:  # each settled once: stored, or ECLOSED
                self.assertTrue(r is None or
                                (isinstance(r, troupe.TroupeError) and
                                 r.name == "ECLOSED"), r)
            with self.assertRaises(troupe.TroupeError):
                await n.close()
            # the held event is pending again
            with troupe.Node(self.dir) as b:
                b.subscribe("q")
                evs = b.events(timeout=10)
                self.assertEqual([e.id for e in evs], [b"e"])
                evs[0].ack()
        asyncio.run(main())

    def test_interpreter_exit_with_threads(self):
        code = textwrap.dedent("""
            import sys, troupe
            n = troupe.Node(sys.argv[1], sync=2)
            n.create_table("t")
            n.create_queue("q")
            n.subscribe("q")
            n._c.put("t", "k", {"v": 1})   # in flight at exit
            n.publish("q", "e", "k", 1)
            n.events(timeout=5)             # held at exit
            print("exiting")
        """)
        p = subprocess.run([sys.executable, "-c", code, self.dir],
                           capture_output=True, text=True, timeout=120,
                           env=os.environ.copy())
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn("exiting", p.stdout)
