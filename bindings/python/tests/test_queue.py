import asyncio

import troupe
import troupe.aio
from tests.util import NodeCase


class Queue(NodeCase):
    def test_max_attempts_is_checked_and_reaches_the_queue(self):
        with troupe.Node(self.dir, sync=2) as n:
            with self.assertRaises(ValueError):
                n.create_queue("bad", max_attempts=-1)
            with self.assertRaises(troupe.TroupeError):
                n.create_queue("bad", max_attempts=1000001)
            n.create_queue("q", max_attempts=1)
            with self.assertRaises(troupe.TroupeError):
                n.create_queue("q", max_attempts=1)  # exists

    def test_async_handlers_ack(self):
        async def main():
            n = await troupe.aio.open(self.dir, sync=2)
            await n.create_queue("jobs", partitions=4)
            seen = {}
            running = 0
            peak = 0
            done = asyncio.Event()
            fails = set()

            async def handler(ev):
                nonlocal running, peak
                running += 1
                peak = max(peak, running)
                try:
                    await asyncio.sleep(0.001)
                    if ev.payload["n"] % 10 == 0 and ev.attempt == 1:
                        fails.add(ev.id)
                        raise RuntimeError("first attempt fails")
                    seen[ev.id] = ev.attempt
                    if len(seen) == 100:
                        done.set()
                finally:
                    running -= 1

            n.subscribe("jobs", handler, credit=8)
            await asyncio.gather(*(n.publish("jobs", "e%d" % i, "k%d" % i,
                                             {"n": i})
                                   for i in range(100)))
            await asyncio.wait_for(done.wait(), 30)
            self.assertLessEqual(peak, 8)
            self.assertEqual(len(fails), 10)
            for i in fails:
                self.assertEqual(seen[i], 2)  # delivered again
            await n.close()
            # acknowledged: a reopened node delivers only a new event
            with troupe.Node(self.dir, sync=2) as b:
                b.subscribe("jobs")
                b.publish("jobs", "last", "k", {"n": -1})
                got = []
                while "last" not in [e.id.decode() for e in got]:
                    evs = b.events(timeout=20)
                    self.assertTrue(evs, "no event within 20 s")
                    for e in evs:
                        e.ack()
                    got += evs
                self.assertEqual([e.id for e in got], [b"last"])
        asyncio.run(main())

    def test_blocking_reschedule(self):
        with troupe.Node(self.dir, sync=2) as n:
            n.create_queue("q")
            n.subscribe("q")
            n.publish("q", "e", "k", "payload")
            ev = n.events(timeout=20)[0]
            self.assertEqual(ev.payload, "payload")
            self.assertEqual(ev.queue, "q")
            ev.reschedule(0)
            ev2 = n.events(timeout=20)[0]
            self.assertEqual(ev2.id, b"e")
            ev2.ack()
