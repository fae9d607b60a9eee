'use strict';
const test = require('node:test');
const assert = require('node:assert');
const troupe = require('..');
const { tmpdir } = require('./helpers');

test('tables: put, get, delete round trip', async () => {
    const n = await troupe.open(tmpdir(), { schedulers: 2, workers: 2 });
    try {
        await n.createTable('users');
        const doc = { name: 'ann', age: 30, tags: ['a', 'b'], nested: { ok: true } };
        await n.put('users', 'u1', doc);
        await n.put('users', Buffer.from([0, 1, 2]), { bin: true });
        assert.deepStrictEqual(await n.get('users', 'u1'), doc);
        assert.deepStrictEqual(await n.get('users', Buffer.from([0, 1, 2])), { bin: true });
        assert.strictEqual(await n.get('users', 'missing'), undefined);
        assert.strictEqual(await n.delete('users', 'u1'), true);
        assert.strictEqual(await n.delete('users', 'u1'), false);
        assert.strictEqual(await n.get('users', 'u1'), undefined);
        // many requests at once, each resolved by its own completion
        const keys = Array.from({ length: 500 }, (_, i) => `k${String(i).padStart(4, '0')}`);
        await Promise.all(keys.map((k, i) => n.put('users', k, { i })));
        const got = await Promise.all(keys.map((k) => n.get('users', k)));
        got.forEach((d, i) => assert.deepStrictEqual(d, { i }));
    } finally {
        await n.close();
    }
});

test('tables: scan pages with a cursor, forward and reverse', async () => {
    const n = await troupe.open(tmpdir(), { schedulers: 2 });
    try {
        await n.createTable('t');
        const keys = Array.from({ length: 25 }, (_, i) => `r${String(i).padStart(2, '0')}`);
        for (const k of keys)
            await n.put('t', k, { k });
        const seen = [];
        let after = null;
        for (;;) {
            const page = await n.scan('t', { limit: 7, after });
            assert.ok(page.rows.length <= 7);
            for (const r of page.rows) {
                assert.deepStrictEqual(r.value, { k: r.key.toString() });
                seen.push(r.key.toString());
            }
            if (!page.more)
                break;
            assert.ok(page.cursor);
            after = page.cursor;
        }
        assert.deepStrictEqual(seen, keys);
        const rev = await n.scan('t', { reverse: true, limit: 3 });
        assert.deepStrictEqual(rev.rows.map((r) => r.key.toString()), ['r24', 'r23', 'r22']);
        const range = await n.scan('t', { start: 'r05', end: 'r08' });
        assert.deepStrictEqual(range.rows.map((r) => r.key.toString()), ['r05', 'r06', 'r07']);
        assert.strictEqual(range.more, false);
    } finally {
        await n.close();
    }
});

test('index query: values, ranges, rows', async () => {
    const n = await troupe.open(tmpdir(), { schedulers: 2 });
    try {
        await n.createTable('people', [
            { name: 'by_city', fields: [['city', 'string'], ['age', 'int']], unique: false },
        ]);
        const people = [['a', 'oslo', 30], ['b', 'oslo', 20], ['c', 'rome', 40], ['d', 'oslo', 50]];
        for (const [k, city, age] of people)
            await n.put('people', k, { city, age });
        const oslo = await n.query('people', 'by_city', { values: ['oslo'], rows: true });
        assert.deepStrictEqual(oslo.hits.map((h) => h.pk.toString()), ['b', 'a', 'd']);
        assert.deepStrictEqual(oslo.hits[0].value, { city: 'oslo', age: 20 });
        const mid = await n.query('people', 'by_city', { from: ['oslo', 25], to: ['oslo', 60], rows: true });
        assert.deepStrictEqual(mid.hits.map((h) => h.pk.toString()), ['a', 'd']);
        const page = await n.query('people', 'by_city', { limit: 2 });
        assert.strictEqual(page.hits.length, 2);
        assert.strictEqual(page.more, true);
        const rest = await n.query('people', 'by_city', { after: page.cursor });
        assert.strictEqual(rest.hits.length, 2);
        await assert.rejects(n.query('people', 'nope'), (e) => e.code === 'ENOINDEX' && /"nope"/.test(e.message));
    } finally {
        await n.close();
    }
});

test('transactions: commit, read own writes, ECONFLICT with the conflict list, rollback', async () => {
    const n = await troupe.open(tmpdir(), { schedulers: 2 });
    try {
        await n.createTable('acct');
        await n.put('acct', 'x', { bal: 10 });
        const t1 = n.begin();
        assert.deepStrictEqual(await t1.get('acct', 'x'), { bal: 10 });
        t1.put('acct', 'x', { bal: 11 });
        assert.deepStrictEqual(await t1.get('acct', 'x'), { bal: 11 });
        t1.put('acct', 'y', { bal: 1 });
        await t1.commit();
        assert.deepStrictEqual(await n.get('acct', 'x'), { bal: 11 });
        assert.throws(() => t1.put('acct', 'x', {}), (e) => e.code === 'ENOENT');

        // two transactions read x, both write it: the second commit conflicts
        const a = n.begin();
        const b = n.begin();
        await a.get('acct', 'x');
        await b.get('acct', 'x');
        a.put('acct', 'x', { bal: 100 });
        b.put('acct', 'x', { bal: 200 });
        await a.commit();
        await assert.rejects(b.commit(), (e) => {
            assert.ok(e instanceof troupe.TroupeError);
            assert.strictEqual(e.code, 'ECONFLICT');
            assert.strictEqual(e.errno, 16);
            assert.strictEqual(e.conflicts.length, 1);
            assert.strictEqual(e.conflicts[0].table, 'acct');
            assert.strictEqual(e.conflicts[0].key.toString(), 'x');
            assert.ok(e.conflicts[0].kinds > 0);
            return true;
        });
        assert.deepStrictEqual(await n.get('acct', 'x'), { bal: 100 });

        const r = n.begin();
        r.delete('acct', 'y');
        r.rollback();
        assert.deepStrictEqual(await n.get('acct', 'y'), { bal: 1 });
        assert.throws(() => r.rollback(), (e) => e.code === 'ENOENT');
    } finally {
        await n.close();
    }
});

test('errors on bad input carry code names and messages', async () => {
    await assert.rejects(troupe.open(''), (e) => e.code === 'EINVAL' && /dir/.test(e.message));
    await assert.rejects(troupe.open(tmpdir(), { sync: 'maybe' }), (e) => e.code === 'EINVAL' && /sync/.test(e.message));
    const n = await troupe.open(tmpdir(), { schedulers: 2 });
    try {
        await n.createTable('t');
        await assert.rejects(n.get('nope', 'k'), (e) => e.code === 'ENOTABLE' && /nope/.test(e.message));
        await assert.rejects(n.get("t", 42), (e) => e.code === 'EINVAL' && /key/.test(e.message));
        await assert.rejects(n.put("t", "k", [1, 2]), (e) => e.code === 'EINVAL' && /plain object/.test(e.message));
        await assert.rejects(n.get("", "k"), (e) => e.code === 'EINVAL' && /table/.test(e.message));
        await assert.rejects(n.scan("t", { limit: -1 }), (e) => e.code === 'EINVAL' && /limit/.test(e.message));
        await assert.rejects(n.get('t', ''), (e) => e.code === 'EINVAL' && e.message.length > 'EINVAL: '.length);
        await assert.rejects(n.put('t', Buffer.alloc(100000), { a: 1 }), (e) => e.code === 'ETOOBIG' || e.code === 'EINVAL');
        await assert.rejects(n.createTable('t2', [{ name: 'i', fields: [['a', 'complex']] }]), (e) => e.code === 'EINVAL');
        await assert.rejects(n.publish('noqueue', { id: 'e', payload: 1 }), (e) => e.code === 'ENOQUEUE' && /noqueue/.test(e.message));
        assert.throws(() => n.subscribe('q', 'not a function'), (e) => e.code === 'EINVAL');
        assert.throws(() => n.subscribe('noqueue', async () => {}), (e) => e.code === 'ENOQUEUE');
        // the node still works after all of that
        await n.put('t', 'k', { ok: 1 });
        assert.deepStrictEqual(await n.get('t', 'k'), { ok: 1 });
    } finally {
        await n.close();
    }
    await assert.rejects(n.get('t', 'k'), (e) => e.code === 'ECLOSED');
});

test('EBUSY from the bound waits in JS and is retried, never reaching the user', async () => {
    const n = await troupe.open(tmpdir(), { schedulers: 2, maxRequests: 4 });
    try {
        await n.createTable('t');
        const N = 300;
        await Promise.all(Array.from({ length: N }, (_, i) => n.put('t', `k${i}`, { i })));
        const got = await Promise.all(Array.from({ length: N }, (_, i) => n.get('t', `k${i}`)));
        got.forEach((d, i) => assert.deepStrictEqual(d, { i }));
    } finally {
        await n.close();
    }
});

test('close with requests in flight rejects them with ECLOSED', async () => {
    const n = await troupe.open(tmpdir(), { schedulers: 2, maxRequests: 8 });
    await n.createTable('t');
    const ps = Array.from({ length: 200 }, (_, i) => n.put('t', `k${i}`, { i }));
    const closing = n.close();
    const results = await Promise.allSettled(ps);
    await closing;
    const rejected = results.filter((r) => r.status === 'rejected');
    assert.ok(rejected.length > 0, 'some requests were in flight at close');
    for (const r of rejected)
        assert.strictEqual(r.reason.code, 'ECLOSED');
    assert.strictEqual(n.closed, true);
    assert.strictEqual(await n.close(), undefined); // a second close is the first's
});
