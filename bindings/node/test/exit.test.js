'use strict';
// A node the program never closes: the process still exits on its own
// (the wake socket holds it only while something waits), closing the node
// from process.on('exit'), with exit code 0, well within a deadline.
const test = require('node:test');
const assert = require('node:assert');
const { spawnSync } = require('node:child_process');
const path = require('path');
const { tmpdir } = require('./helpers');

const INDEX = JSON.stringify(path.join(__dirname, '..'));

function child(body) {
    const script = `const troupe = require(${INDEX});
        (async () => { ${body} })().catch((e) => { console.error(e); process.exit(3); });`;
    const t0 = Date.now();
    const r = spawnSync(process.execPath, ['-e', script], { env: { ...process.env, DIR: tmpdir() }, timeout: 20000, encoding: 'utf8' });
    return { ...r, ms: Date.now() - t0 };
}

test('exits cleanly without close: falls off the end with work done', () => {
    const r = child(`const n = await troupe.open(process.env.DIR, { schedulers: 2 });
        await n.createTable('t');
        for (let i = 0; i < 100; i++) await n.put('t', 'k' + i, { i });
        await n.createQueue('q');
        await n.publish('q', { id: 'e', payload: 1 });
        const m = await troupe.open(process.env.DIR + '/second', { schedulers: 1 });
        await m.createTable('t');
        await m.put('t', 'k', { i: 1 });
        console.log('done');`);
    assert.strictEqual(r.error, undefined, String(r.error));
    assert.strictEqual(r.signal, null, `killed by ${r.signal}: ${r.stderr}`);
    assert.strictEqual(r.status, 0, r.stderr);
    assert.match(r.stdout, /done/);
});

test('exits cleanly with process.exit while a subscription and requests run', () => {
    const r = child(`const n = await troupe.open(process.env.DIR, { schedulers: 2 });
        await n.createTable('t');
        await n.createQueue('q', { partitions: 2 });
        let handled = 0;
        n.subscribe('q', async () => { handled++; });
        for (let i = 0; i < 50; i++) await n.publish('q', { id: 'e' + i, payload: i });
        const wait = () => new Promise((r) => setTimeout(r, 5));
        while (handled < 50) await wait();
        for (let i = 0; i < 100; i++) n.put('t', 'k' + i, { i }).catch(() => {});
        console.log('handled', handled);
        process.exit(0);`);
    assert.strictEqual(r.error, undefined, String(r.error));
    assert.strictEqual(r.signal, null, `killed by ${r.signal}: ${r.stderr}`);
    assert.strictEqual(r.status, 0, r.stderr);
    assert.match(r.stdout, /handled 50/);
});

test('a subscription keeps the process alive until close', () => {
    const r = child(`const n = await troupe.open(process.env.DIR, { schedulers: 2 });
        await n.createQueue('q');
        let got = false;
        n.subscribe('q', async () => { got = true; setImmediate(() => n.close()); });
        // published from a timer well after the main script ended
        setTimeout(() => n.publish('q', { id: 'late', payload: 1 }).catch(() => {}), 200);
        process.on('exit', () => console.log('got', got));`);
    assert.strictEqual(r.status, 0, r.stderr);
    assert.match(r.stdout, /got true/);
});
