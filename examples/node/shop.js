// A small shop on troupe, from Node.
//
// Products with their stock live in one table, orders in another. Placing
// an order publishes an event on the "orders" queue (partitioned by
// customer); an async handler awaits the payment service (a timer
// standing in for it), then in one serializable transaction takes the
// stock and marks the order paid, or rejects it when the stock is short.
// Two handlers that take the same product at once conflict: the loser's
// event stays pending and comes again on fresh data. At the end the stock
// sold plus the stock left must be the stock the shop opened with, and
// every order must be paid or rejected.
//
//   make && (cd bindings/node && npm ci) && node examples/node/shop.js [DIR]
//
// Exits 1 if the books do not balance.
'use strict';
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const troupe = require('../../bindings/node');

const PRODUCTS = 8, STOCK = 50, ORDERS = 300;

function rng(seed) { // a small deterministic generator, so runs compare
    let x = seed;
    return () => (x = (x * 1103515245 + 12345) % 2147483648) / 2147483648;
}

// Calls fn with every document of table, a page at a time (cursors).
async function eachRow(node, table, fn) {
    for (let after = null; ;) {
        const page = await node.scan(table, { limit: 100, after });
        for (const r of page.rows)
            fn(r.value);
        if (!page.more)
            return;
        after = page.cursor;
    }
}

async function main(dir) {
    const node = await troupe.open(dir, { sync: 'on' });
    let sold = 0, left = 0, paid = 0, rejected = 0, retried = 0;
    try {
        await node.createTable('products');
        await node.createTable('orders');
        await Promise.all(Array.from({ length: PRODUCTS }, (_, i) =>
            node.put('products', `p${i}`, { name: `product ${i}`, stock: STOCK })));
        await node.createQueue('orders', { partitions: 4 });

        let handled = 0, finish;
        const finished = new Promise((resolve) => { finish = resolve; });
        node.subscribe('orders', async (ev) => {
            const { order, product, qty } = ev.payload;
            if (ev.attempt > 1)
                retried++;
            await new Promise((r) => setTimeout(r, 1)); // the payment service
            const tx = node.begin();
            const p = await tx.get('products', product);
            const o = await tx.get('orders', order);
            if (o.status !== 'placed') { // at least once: already handled
                tx.rollback();
                return;
            }
            if (p.stock < qty) {
                tx.put('orders', order, { ...o, status: 'rejected' });
            } else {
                tx.put('products', product, { ...p, stock: p.stock - qty });
                tx.put('orders', order, { ...o, status: 'paid' });
            }
            await tx.commit(); // ECONFLICT rejects: the event comes again
            // (the order's status makes a delivery after a lost ack a no-op)
            if (++handled === ORDERS)
                finish();
        }, { concurrency: 16 });

        const rand = rng(7);
        const placed = [];
        for (let i = 0; i < ORDERS; i++) {
            const order = `o${String(i).padStart(4, '0')}`;
            const product = `p${Math.floor(rand() * PRODUCTS)}`;
            const qty = 1 + Math.floor(rand() * 3);
            const customer = `c${Math.floor(rand() * 40)}`;
            placed.push(node.put('orders', order, { customer, product, qty, status: 'placed' })
                .then(() => node.publish('orders', {
                    id: order, key: customer, payload: { order, product, qty },
                })));
        }
        await Promise.all(placed);
        await finished;

        await eachRow(node, 'products', (doc) => { left += doc.stock; });
        await eachRow(node, 'orders', (doc) => {
            if (doc.status === 'paid') {
                paid++;
                sold += doc.qty;
            } else if (doc.status === 'rejected') {
                rejected++;
            }
        });
    } finally {
        await node.close();
    }
    console.log(`shop: ${paid} orders paid, ${rejected} rejected, ${retried} ` +
                `deliveries retried after a conflict; ${sold} sold + ${left} left ` +
                `(opened with ${PRODUCTS * STOCK})`);
    return sold + left === PRODUCTS * STOCK && paid + rejected === ORDERS ? 0 : 1;
}

const dir = process.argv[2] || fs.mkdtempSync(path.join(os.tmpdir(), 'troupe-shop-'));
main(dir).then((rc) => process.exit(rc), (err) => {
    console.error(err);
    process.exit(1);
});
