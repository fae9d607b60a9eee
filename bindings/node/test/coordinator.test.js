'use strict';
const test = require('node:test');
const assert = require('node:assert');
const { encode, decode } = require('@msgpack/msgpack');
const troupe = require('..');
const { tmpdir } = require('./helpers');

const FAST = { retryMinMs: 50, retryMaxMs: 200 };

test('coordinator: a saga whose second step fails compensates the first; the barrier runs business once', async () => {
    const n = await troupe.open(tmpdir(), { schedulers: 2, sync: 'off', coordinator: FAST });
    try {
        await n.createTable('accounts');
        await n.put('accounts', 'a', { balance: 100 });
        await n.put('accounts', 'b', { balance: 0 });
        const calls = [];
        let lose = true;
        n.branchHandler('bank', async (br) => {
            calls.push(`${br.mode} ${br.gid} ${br.branchId} ${br.op} ${br.attempt}`);
            const p = br.value();
            if (p.fail)
                return false; // FAILURE: the saga compensates
            const tx = n.begin();
            const v = await tx.barrier(br);
            if (v === 'execute') {
                const d = await tx.get('accounts', p.acct);
                tx.put('accounts', p.acct, { balance: d.balance + p.delta });
            }
            await tx.commit();
            if (br.op === 'action' && lose) {
                lose = false; // committed, the answer lost: delivered again
                return 'unknown';
            }
            return true;
        });
        await n.sagaSubmit('tr-1', [
            { action: ['bank', { acct: 'a', delta: -30 }], compensate: ['bank', { acct: 'a', delta: 30 }] },
            { action: ['bank', Buffer.from(encode({ acct: 'b', fail: true }))], compensate: null },
        ]);
        const q = await n.gtxWait('tr-1');
        assert.strictEqual(q.status, 'failed');
        assert.strictEqual(q.mode, 'saga');
        assert.deepStrictEqual(q.branches.map((b) => [b.id, b.ops.map((o) => o.op)]),
            [['01', ['action', 'compensate']], ['02', ['action']]]);
        assert.deepStrictEqual(calls, [
            'saga tr-1 01 action 1', 'saga tr-1 01 action 2',
            'saga tr-1 02 action 1', 'saga tr-1 01 compensate 1']);
        assert.strictEqual((await n.get('accounts', 'a')).balance, 100);
        assert.strictEqual((await n.get('accounts', 'b')).balance, 0);
        // delivered once more by hand: duplicated
        const tx = n.begin();
        assert.strictEqual(await tx.barrier({ mode: 'saga', gid: 'tr-1', branchId: '01', op: 'action' }), 'duplicated');
        tx.rollback();
        await assert.rejects(n.gtxAbort('tr-1', 'late'), (err) => err.code === 'ECONFLICT');
        await assert.rejects(n.gtxQuery('nope'), (err) => err.code === 'ENOENT');
    } finally {
        await n.close();
    }
});

test('coordinator: tcc confirms; a throwing handler is UNKNOWN and retried', async () => {
    const n = await troupe.open(tmpdir(), { schedulers: 2, sync: 'off', coordinator: FAST });
    const err = console.error;
    console.error = () => {}; // the handler's throw is logged
    try {
        const seen = [];
        let boom = true;
        n.branchHandler('res', (br) => {
            seen.push(`${br.branchId} ${br.op} ${br.payload.toString()}`);
            if (boom) {
                boom = false;
                throw new Error('fails once');
            }
            return 'success';
        });
        await n.tccPrepare('t-1');
        assert.strictEqual(await n.tccRegister('t-1', ['res', 'ok'], ['res', 'undo']), '01');
        await n.gtxSubmit('t-1');
        assert.strictEqual((await n.gtxWait('t-1')).status, 'succeed');
        assert.deepStrictEqual(seen, ['01 confirm ok', '01 confirm ok']);
    } finally {
        console.error = err;
        await n.close();
    }
});

test('coordinator: bad input is refused with a clear error, nothing submitted', async () => {
    const n = await troupe.open(tmpdir(), { schedulers: 1, sync: 'off' });
    try {
        n.branchHandler('svc', () => true);
        await assert.rejects(n.sagaSubmit('bad gid', [{ action: ['svc', 'x'] }]), /gid/);
        await assert.rejects(n.sagaSubmit('g-1', 'nope'), /steps/);
        await assert.rejects(n.sagaSubmit('g-1', [{ action: 'svc' }]), /action/);
        await assert.rejects(n.sagaSubmit('g-1', []), (e) => e.code === 'EINVAL');
        await assert.rejects(n.sagaSubmit('g-1', [{ action: ['nobody', 'x'] }]), (e) => e.code === 'ENOENT' && /nobody/.test(e.message));
        await assert.rejects(n.gtxQuery('g-1'), (e) => e.code === 'ENOENT');
        assert.throws(() => n.branchHandler('svc', () => true), (e) => e.code === 'EEXIST');
        const tx = n.begin();
        await assert.rejects(tx.barrier({ mode: 'saga', gid: 'g-1', branchId: '01', op: 'bogus' }), (e) => e.code === 'EINVAL');
        tx.rollback();
        await n.sagaSubmit('g-2', [{ action: ['svc', 'x'] }]);
        assert.strictEqual((await n.gtxWait('g-2')).status, 'succeed');
        const page = await n.gtxList({ status: 'succeed' });
        assert.deepStrictEqual(page.items.map((t) => t.gid), ['g-2']);
        assert.strictEqual(page.cursor, 'g-2');
        assert.deepStrictEqual((await n.gtxList({ mode: 'tcc' })).items, []);
        await assert.rejects(n.gtxList({ mode: 'nope' }), (e) => e.code === 'EINVAL');
        await assert.rejects(n.gtxList({ limit: 0 }), (e) => e.code === 'EINVAL');
    } finally {
        await n.close();
    }
});

test('coordinator: an xa transfer prepares both sides, holds them, commits on submit; an aborted one rolls back', async () => {
    const n = await troupe.open(tmpdir(), { schedulers: 2, sync: 'off', coordinator: FAST });
    try {
        await n.createTable('checking');
        await n.createTable('savings');
        await n.put('checking', 'alice', { balance: 100 });
        await n.put('savings', 'alice', { balance: 100 });
        const side = async (gid, table, delta) => {
            const tx = n.begin();
            const d = await tx.get(table, 'alice');
            tx.put(table, 'alice', { balance: d.balance + delta });
            return tx.xaBranch(gid);
        };
        await n.xaBegin('x-1');
        assert.strictEqual(await side('x-1', 'checking', -30), '01');
        assert.strictEqual(await side('x-1', 'savings', 30), '02');
        // held until resolved: a transaction on the same row conflicts
        const other = n.begin();
        other.put('checking', 'alice', { balance: 0 });
        await assert.rejects(other.commit(), (err) => err.code === 'ECONFLICT');
        assert.strictEqual((await n.get('checking', 'alice')).balance, 100);
        await n.gtxSubmit('x-1');
        const q = await n.gtxWait('x-1');
        assert.strictEqual(q.status, 'succeed');
        assert.strictEqual(q.mode, 'xa');
        assert.strictEqual((await n.get('checking', 'alice')).balance, 70);
        assert.strictEqual((await n.get('savings', 'alice')).balance, 130);
        // an aborted one: the prepared side is rolled back
        await n.xaBegin('x-2');
        assert.strictEqual(await side('x-2', 'savings', 500), '01');
        await n.gtxAbort('x-2', 'insufficient funds');
        const q2 = await n.gtxWait('x-2');
        assert.strictEqual(q2.status, 'failed');
        assert.strictEqual((await n.get('savings', 'alice')).balance, 130);
        // a branch of no xa; a transaction used after its prepare
        const tx = n.begin();
        tx.put('checking', 'bob', { balance: 1 });
        await assert.rejects(tx.xaBranch('x-none'), (err) => err.code === 'ENOENT');
        assert.throws(() => tx.put('checking', 'bob', {}), (err) => err.code === 'ENOENT');
        await assert.rejects(n.xaBegin('bad gid'), (err) => err.code === 'EINVAL');
    } finally {
        await n.close();
    }
});
