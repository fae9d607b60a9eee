// An order placed by a workflow written in JS (docs/coordinator.md,
// "Workflows"; examples/order_workflow.c is the same in C): reserve a
// widget, ask a payment service to charge the customer, wait for the
// service's callback (an awakeable), then ship; when the card is
// declined the workflow fails and the coordinator runs the reservation's
// compensation, which puts the widget back.
//
//   make && make node-deps && node examples/node/order_workflow.js [DIR]
//
// Order o1 is paid and shipped; o2's card is declined and its widget
// released. Prints each order's end and the stock (9: one widget
// shipped). Run again on the same DIR and nothing moves twice: the
// workflows exist, their submits change nothing, no step runs again.
// Exits 1 when the stock or an order is wrong.
'use strict';
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const troupe = require('../../bindings/node');

const STOCK = 10;

async function main(dir) {
    const n = await troupe.open(dir, { sync: 'on', coordinator: { retryMinMs: 100 } });
    try {
        for (const t of ['stock', 'orders'])
            await n.createTable(t).catch((err) => { if (err.code !== 'EEXIST') throw err; });
        if ((await n.get('stock', 'widget')) === undefined)
            await n.put('stock', 'widget', { count: STOCK });

        // Moves the stock by delta once for the branch (the barrier's row
        // and the count commit together); false when it would go below 0.
        const move = async (br, delta) => {
            for (;;) {
                const tx = n.begin();
                if (await tx.barrier(br) === 'execute') {
                    const s = await tx.get('stock', 'widget');
                    if (s.count + delta < 0) {
                        tx.rollback();
                        return false;
                    }
                    tx.put('stock', 'widget', { count: s.count + delta });
                }
                try {
                    await tx.commit();
                    return true;
                } catch (err) {
                    if (err.code !== 'ECONFLICT')
                        throw err;
                }
            }
        };

        // The compensation target: a branch call, op "compensate".
        n.branchHandler('stock', async (br) => {
            console.log(`  ${br.gid}: widget released`);
            return move(br, +1);
        });

        // The payment service: answers each charge later, by callback.
        const service = (id) => setImmediate(() => {
            const p = id.startsWith('o2/') ? n.awakeableReject(id, 'card declined') : n.awakeableResolve(id, 'paid');
            p.catch((err) => { if (err.code !== 'ECONFLICT') console.error(`payment service: ${id}: ${err.message}`); });
        });

        n.workflow('order', async (wf) => {
            await wf.step('reserve', async (ctx) => {
                if (!(await move(ctx, -1)))
                    throw new troupe.WorkflowFailure('sold out');
                console.log(`  ${wf.gid}: widget reserved`);
            }, { compensate: { target: 'stock', payload: 'release' } });
            const id = wf.awakeable('payment');
            await wf.step('charge', async () => { // a step: sent once
                console.log(`  ${wf.gid}: payment requested (callback ${id})`);
                service(id);
            });
            try {
                await wf.await(id);
            } catch (err) {
                if (troupe.isSuspend(err)) // the run stops here: rethrow
                    throw err;
                console.log(`  ${wf.gid}: payment declined (${err.result.toString()})`);
                throw new troupe.WorkflowFailure('payment declined'); // the widget is released
            }
            await wf.step('ship', async () => {
                await n.put('orders', wf.gid, { status: 'shipped' }); // the same row again if repeated
                console.log(`  ${wf.gid}: shipped`);
            });
        });

        const place = async (gid) => {
            console.log(`order ${gid}`);
            await n.workflowSubmit(gid, 'order');
            const q = await n.gtxWait(gid);
            console.log(`order ${gid}: ${q.status}${q.reason ? ', ' + q.reason : ''}`);
            return q.status;
        };
        const s1 = await place('o1');
        const s2 = await place('o2');
        const count = (await n.get('stock', 'widget')).count;
        const shipped = await n.get('orders', 'o1');
        const ok = s1 === 'succeed' && s2 === 'failed' && count === STOCK - 1 &&
            shipped !== undefined && (await n.get('orders', 'o2')) === undefined;
        console.log(`stock: ${count} (${ok ? 'right' : 'WRONG'})`);
        return ok ? 0 : 1;
    } finally {
        await n.close();
    }
}

const dir = process.argv[2] || fs.mkdtempSync(path.join(os.tmpdir(), 'troupe-order-workflow-'));
main(dir).then((rc) => process.exit(rc), (err) => {
    console.error(err);
    process.exit(1);
});
