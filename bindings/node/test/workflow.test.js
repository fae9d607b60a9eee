'use strict';
// Workflows written in JS (docs/coordinator.md "Workflows"): memoized
// steps, compensation in reverse, replay across a reopen, awakeables,
// divergence and version markers, the 64-record bound.
const test = require('node:test');
const assert = require('node:assert');
const troupe = require('..');
const { tmpdir } = require('./helpers');

const FAST = { retryMinMs: 50, retryMaxMs: 200 };
const OPTS = { schedulers: 2, sync: 'off', coordinator: FAST };

// Polls gid's query until pred holds (10 s deadline); resolves with it.
async function queryUntil(n, gid, pred, what) {
    const end = Date.now() + 10000;
    for (;;) {
        const q = await n.gtxQuery(gid);
        if (pred(q))
            return q;
        if (Date.now() > end)
            throw new Error(`${gid}: timed out waiting for ${what}: ${JSON.stringify(q)}`);
        await new Promise((r) => setTimeout(r, 5));
    }
}

const held = (n, gid, hold) => queryUntil(n, gid, (q) => q.hold === hold, `hold ${hold}`);

test('workflow: three steps succeed, each fn runs once, results are memoized', async () => {
    const n = await troupe.open(tmpdir(), OPTS);
    try {
        const ran = { a: 0, b: 0, c: 0 };
        let runs = 0;
        const seen = [];
        n.workflow('order', async (wf, input) => {
            runs++;
            const a = await wf.step('a', async (ctx) => {
                ran.a++;
                assert.deepStrictEqual(ctx, { mode: 'workflow', gid: 'o-1', branchId: '01', op: 'action', attempt: ctx.attempt });
                return `${input.toString()}+a`;
            });
            const b = await wf.step('b', async () => { ran.b++; return { got: a.toString() }; });
            const c = await wf.step('c', async () => { ran.c++; return Buffer.from([1, 2, 3]); });
            seen.push([a.toString(), b.toString('hex'), c.toString('hex')]);
        });
        await n.workflowSubmit('o-1', 'order', 'in');
        await n.workflowSubmit('o-1', 'order', 'in'); // exists: nothing twice
        const q = await n.gtxWait('o-1');
        assert.strictEqual(q.status, 'succeed');
        assert.strictEqual(q.mode, 'workflow');
        assert.deepStrictEqual(ran, { a: 1, b: 1, c: 1 });
        assert.strictEqual(runs, 4); // three registrations, then the end
        assert.deepStrictEqual(seen, [['in+a', Buffer.from(troupe_pack({ got: 'in+a' })).toString('hex'), '010203']]);
        assert.deepStrictEqual(q.branches.filter((b) => b.id !== '00').map((b) => [b.id, b.kind, b.name, b.ops[0].state]),
            [['01', 'step', 'a', 'succeeded'], ['02', 'step', 'b', 'succeeded'], ['03', 'step', 'c', 'succeeded']]);
        await assert.rejects(n.workflowSubmit('o-2', 'nobody', 'x'), (e) => e.code === 'ENOENT');
        await assert.rejects(n.workflowSubmit('bad gid', 'order', 'x'), (e) => e.code === 'EINVAL');
        assert.throws(() => n.workflow('order', async () => {}), (e) => e.code === 'EEXIST');
    } finally {
        await n.close();
    }
});

function troupe_pack(v) {
    return require('@msgpack/msgpack').encode(v);
}

test('workflow: a failing step compensates the registered steps in reverse', async () => {
    const n = await troupe.open(tmpdir(), OPTS);
    try {
        const undo = [];
        n.branchHandler('stock', async (br) => {
            undo.push(`${br.mode} ${br.gid} ${br.branchId} ${br.op} ${br.payload.toString()}`);
            return true;
        });
        const ran = [];
        n.workflow('flow', async (wf) => {
            for (const s of ['a', 'b'])
                await wf.step(s, async () => { ran.push(s); return s; }, { compensate: { target: 'stock', payload: `undo-${s}` } });
            await wf.step('c', async () => { ran.push('c'); throw new troupe.WorkflowFailure('card declined'); },
                { compensate: { target: 'stock', payload: 'undo-c' } });
            ran.push('after c'); // never: the failure is let through
        });
        await n.workflowSubmit('f-1', 'flow');
        const q = await n.gtxWait('f-1');
        assert.strictEqual(q.status, 'failed');
        assert.match(q.reason, /step "c" failed: card declined/);
        assert.deepStrictEqual(ran, ['a', 'b', 'c']);
        assert.deepStrictEqual(undo, ['workflow f-1 03 compensate undo-c', 'workflow f-1 02 compensate undo-b',
            'workflow f-1 01 compensate undo-a']);

        // a failure caught by the workflow: it goes on and succeeds, nothing compensated
        undo.length = 0;
        n.workflow('tolerant', async (wf) => {
            await wf.step('a', async () => 'ok', { compensate: { target: 'stock', payload: 'undo-a' } });
            try {
                await wf.step('b', async () => { throw new troupe.WorkflowFailure('nope', 'detail-b'); });
            } catch (e) {
                if (troupe.isSuspend(e))
                    throw e;
                assert.ok(e instanceof troupe.WorkflowFailure);
                assert.strictEqual(e.result.toString(), 'detail-b');
                await wf.step('fallback', async () => 'fb');
                return;
            }
            throw new Error('not reached');
        });
        await n.workflowSubmit('f-2', 'tolerant');
        assert.strictEqual((await n.gtxWait('f-2')).status, 'succeed');
        assert.deepStrictEqual(undo, []);
    } finally {
        await n.close();
    }
});

test('workflow: a replay after a reopen does not run a succeeded step again', async () => {
    const dir = tmpdir();
    const mail = [];
    const ran = { reserve: 0, ask: 0, ship: 0 };
    const flow = async (wf, input) => {
        await wf.step('reserve', async () => { ran.reserve++; return 'r-1'; });
        const id = wf.awakeable('payment');
        await wf.step('ask', async () => { ran.ask++; mail.push(id); });
        const paid = await wf.await(id);
        await wf.step('ship', async () => { ran.ship++; return paid; });
    };
    let n = await troupe.open(dir, OPTS);
    try {
        n.workflow('order', flow);
        await n.workflowSubmit('w-1', 'order', 'x');
        await held(n, 'w-1', 'awaiting');
        assert.deepStrictEqual(ran, { reserve: 1, ask: 1, ship: 0 });
    } finally {
        await n.close();
    }
    ran.reserve = ran.ask = 0;
    n = await troupe.open(dir, OPTS);
    try {
        n.workflow('order', flow);
        const q0 = await n.gtxQuery('w-1');
        assert.strictEqual(q0.status, 'submitted');
        assert.strictEqual(q0.hold, 'awaiting');
        await n.awakeableResolve(mail[0], 'paid');
        const q = await n.gtxWait('w-1');
        assert.strictEqual(q.status, 'succeed');
        assert.deepStrictEqual(ran, { reserve: 0, ask: 0, ship: 1 });
        assert.deepStrictEqual(mail, ['w-1/02']);
    } finally {
        await n.close();
    }
});

test('workflow: awakeables resolved and rejected from the host', async () => {
    const n = await troupe.open(tmpdir(), OPTS);
    try {
        const ids = new Map();
        const got = new Map();
        const undone = [];
        n.branchHandler('undo', async (br) => { undone.push(br.gid); return true; });
        n.workflow('pay', async (wf) => {
            await wf.step('hold', async () => 'h', { compensate: { target: 'undo', payload: '' } });
            const id = wf.awakeable('cb');
            await wf.step('send', async () => { ids.set(wf.gid, id); });
            try {
                got.set(wf.gid, (await wf.await(id)).toString());
            } catch (e) {
                if (!troupe.isSuspend(e))
                    got.set(wf.gid, `rejected: ${e.result.toString()}`);
                throw e; // a rejection fails the workflow
            }
            // held again, so the checks below race no end
            const end = wf.awakeable('end');
            await wf.step('send-end', async () => { ids.set('end', end); });
            await wf.await(end);
        });
        await n.workflowSubmit('p-1', 'pay');
        await n.workflowSubmit('p-2', 'pay');
        await held(n, 'p-1', 'awaiting');
        await held(n, 'p-2', 'awaiting');
        assert.strictEqual(got.size, 0);
        await n.awakeableResolve(ids.get('p-1'), 'ok-1');
        await n.awakeableResolve(ids.get('p-1'), 'ok-1'); // the same again: OK
        await assert.rejects(n.awakeableReject(ids.get('p-1'), 'no'), (e) => e.code === 'ECONFLICT');
        await n.awakeableReject(ids.get('p-2'), 'declined');
        await queryUntil(n, 'p-1', (q) => ids.has('end') && q.hold === 'awaiting', 'the second await');
        await n.awakeableResolve(ids.get('end'));
        assert.strictEqual((await n.gtxWait('p-1')).status, 'succeed');
        const q2 = await n.gtxWait('p-2');
        assert.strictEqual(q2.status, 'failed');
        assert.match(q2.reason, /rejected: declined/);
        assert.deepStrictEqual(Object.fromEntries(got), { 'p-1': 'ok-1', 'p-2': 'rejected: declined' });
        assert.deepStrictEqual(undone, ['p-2']);
        await assert.rejects(n.awakeableResolve('p-9/01', 'x'), (e) => e.code === 'ENOENT');
        await assert.rejects(n.awakeableResolve('', 'x'), (e) => e.code === 'EINVAL');
    } finally {
        await n.close();
    }
});

test('workflow: a divergence is held, visible in the query, and runs again after a fix and a retry', async () => {
    const n = await troupe.open(tmpdir(), OPTS);
    try {
        let ids = [];
        const v1 = async (wf) => {
            await wf.step('a', async () => 'a');
            const id = wf.awakeable('w');
            await wf.step('send', async () => { ids.push(id); });
            await wf.await(id);
        };
        const v2 = async (wf) => {
            await wf.step('x', async () => 'x'); // the recorded path had "a" here
        };
        let impl = v1;
        let swallowed = 0;
        n.workflow('d', async (wf) => {
            try {
                await impl(wf);
            } catch (e) {
                swallowed++; // a catch-all that swallows the suspend: still held
            }
        });
        await n.workflowSubmit('d-1', 'd');
        await held(n, 'd-1', 'awaiting');
        impl = v2;
        await n.awakeableResolve(ids[0], 'go');
        const q = await held(n, 'd-1', 'diverged');
        assert.strictEqual(q.status, 'submitted');
        assert.strictEqual(q.reason, 'replay diverged: position 01 was recorded as step "a" but is now step "x"');
        assert.ok(swallowed > 0);
        impl = v1;
        await n.gtxRetry('d-1');
        assert.strictEqual((await n.gtxWait('d-1')).status, 'succeed');
        assert.deepStrictEqual(ids, ['d-1/02']);
    } finally {
        await n.close();
    }
});

test('workflow: version markers keep old instances on their path; one out of range diverges', async () => {
    const n = await troupe.open(tmpdir(), OPTS);
    try {
        const ids = new Map();
        const versions = new Map();
        const cRan = [];
        const tail = async (wf) => {
            const id = wf.awakeable('w');
            await wf.step('send', async () => { ids.set(wf.gid, id); });
            await wf.await(id);
            await wf.step('b', async () => 'b');
        };
        const v1 = async (wf) => {
            await wf.step('a', async () => 'a');
            await tail(wf);
        };
        const v2 = (min) => async (wf) => {
            await wf.step('a', async () => 'a');
            const v = wf.version('add-c', min, 1);
            versions.set(wf.gid, v);
            if (v >= 1)
                await wf.step('c', async () => { cRan.push(wf.gid); });
            await tail(wf);
        };
        let impl = v1;
        n.workflow('vm', (wf) => impl(wf));
        await n.workflowSubmit('old-1', 'vm');
        await n.workflowSubmit('old-2', 'vm');
        await held(n, 'old-1', 'awaiting');
        await held(n, 'old-2', 'awaiting');
        impl = v2(troupe.VERSION_DEFAULT);
        await n.workflowSubmit('new-1', 'vm');
        await held(n, 'new-1', 'awaiting');
        await n.awakeableResolve(ids.get('old-1'), '');
        await n.awakeableResolve(ids.get('new-1'), '');
        assert.strictEqual((await n.gtxWait('old-1')).status, 'succeed');
        const qn = await n.gtxWait('new-1');
        assert.strictEqual(qn.status, 'succeed');
        assert.strictEqual(versions.get('old-1'), -1);
        assert.strictEqual(versions.get('new-1'), 1);
        assert.deepStrictEqual(cRan, ['new-1']);
        assert.deepStrictEqual(qn.branches.filter((b) => b.id !== '00').map((b) => [b.id, b.kind, b.name, b.version]),
            [['01', 'step', 'a', 0], ['02', 'version', 'add-c', 1], ['03', 'step', 'c', 0], ['04', 'awakeable', 'w', 0],
                ['05', 'step', 'send', 0], ['06', 'step', 'b', 0]]);
        // min raised past the old instances while one is still in flight
        impl = v2(1);
        await n.awakeableResolve(ids.get('old-2'), '');
        const q = await held(n, 'old-2', 'diverged');
        assert.strictEqual(q.reason, 'replay diverged: version marker "add-c" at position 02 is version -1, outside 1..1');
    } finally {
        await n.close();
    }
});

test('workflow: a throw that is no failure runs it again after the backoff, never compensates', async () => {
    const n = await troupe.open(tmpdir(), OPTS);
    const err = console.error;
    console.error = () => {}; // the throws are logged
    try {
        const undo = [];
        n.branchHandler('undo', async (br) => { undo.push(br.branchId); return true; });
        const ran = { a: 0, b: 0 };
        let flaky = 1, broken = 1;
        n.workflow('flaky', async (wf) => {
            await wf.step('a', async () => { ran.a++; }, { compensate: { target: 'undo', payload: '' } });
            await wf.step('b', async () => {
                ran.b++;
                if (flaky-- > 0)
                    throw new Error('the service is down'); // not a WorkflowFailure
                return 'b';
            });
            if (broken-- > 0)
                throw new TypeError('a bug in the workflow'); // RETRY, not FAILED
        });
        await n.workflowSubmit('r-1', 'flaky');
        const q = await n.gtxWait('r-1');
        assert.strictEqual(q.status, 'succeed');
        assert.deepStrictEqual(ran, { a: 1, b: 2 });
        assert.deepStrictEqual(undo, []);
        assert.ok(q.attempts >= 2);
    } finally {
        console.error = err;
        await n.close();
    }
});

test('workflow: at most 64 records; bad arguments are refused', async () => {
    const n = await troupe.open(tmpdir(), OPTS);
    try {
        let refusedAt = -1;
        n.workflow('many', async (wf) => {
            for (let i = 0; i < 70; i++) {
                try {
                    wf.version(`m${i}`, 0, 0);
                } catch (e) {
                    if (troupe.isSuspend(e))
                        throw e;
                    refusedAt = i;
                    assert.strictEqual(e.code, 'EINVAL');
                    break;
                }
            }
            assert.throws(() => wf.awakeable(''), (e) => e.code === 'EINVAL');
            await assert.rejects(wf.step('s', async () => {}, { compensate: { target: 'actor:bank#x', payload: '' } }),
                (e) => e.code === 'EINVAL');
            await assert.rejects(wf.step('s', async () => {}, { compensate: { target: 'actor:@1.0.1#2', payload: '' } }),
                (e) => e.code === 'EINVAL');
            await assert.rejects(wf.await('other/01'), (e) => e.code === 'ENOENT');
        });
        await n.workflowSubmit('m-1', 'many');
        const q = await n.gtxWait('m-1');
        assert.strictEqual(q.status, 'succeed');
        assert.strictEqual(refusedAt, 64);
        assert.strictEqual(q.branches.filter((b) => b.kind === 'version').length, 64);
        assert.throws(() => n.workflow('x'.repeat(129), async () => {}), (e) => e.code === 'EINVAL');
        assert.throws(() => n.workflow('y', 'nope'), (e) => e.code === 'EINVAL');
    } finally {
        await n.close();
    }
});
