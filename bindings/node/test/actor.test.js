'use strict';
const test = require('node:test');
const assert = require('node:assert');
const troupe = require('..');
const { tmpdir } = require('./helpers');

test('actors: a served actor answers asks from an async handler', async () => {
    const n = await troupe.open(tmpdir(), { schedulers: 2 });
    try {
        const seen = [];
        n.serveActor('greeter', async (msg) => {
            seen.push(msg);
            await new Promise((r) => setImmediate(r)); // real async work
            if (msg.kind === 2)
                throw new Error('no greeting for ' + msg.body.toString());
            return Buffer.from('hello, ' + msg.body.toString());
        }, { concurrency: 8, tag: 7 });
        const reply = await n.ask('greeter', 1, 'ann');
        assert.ok(Buffer.isBuffer(reply));
        assert.strictEqual(reply.toString(), 'hello, ann');
        assert.strictEqual(seen[0].kind, 1);
        assert.strictEqual(seen[0].ask, true);
        assert.strictEqual(seen[0].tag, 7);
        assert.ok(seen[0].deadline > Date.now() - 60000);
        // many at once, each its own reply
        const names = Array.from({ length: 50 }, (_, i) => `c${i}`);
        const got = await Promise.all(names.map((x) => n.ask('greeter', 1, x)));
        got.forEach((b, i) => assert.strictEqual(b.toString(), `hello, c${i}`));
        // a throw is a FAILURE: the asker gets EFAILED with the detail
        await assert.rejects(n.ask('greeter', 2, 'bob'), (err) => {
            assert.strictEqual(err.code, 'EFAILED');
            assert.strictEqual(err.detail.toString(), 'no greeting for bob');
            return true;
        });
    } finally {
        await n.close();
    }
});

test('actors: bad input and an unknown actor are clear errors', async () => {
    const n = await troupe.open(tmpdir(), { schedulers: 1 });
    try {
        assert.throws(() => n.serveActor('', async () => {}), /actor/);
        assert.throws(() => n.serveActor('a', 'not a function'), /handler/);
        n.serveActor('dup', async () => {});
        assert.throws(() => n.serveActor('dup', async () => {}), (err) => err instanceof troupe.TroupeError);
        await assert.rejects(n.ask('nobody-serves-this', 1, 'x', { timeoutMs: 2000 }), (err) => err instanceof troupe.TroupeError);
    } finally {
        await n.close();
    }
});
