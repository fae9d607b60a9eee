// A bank transfer as a saga, from Node: two accounts in a troupe table,
// each transfer two steps, debit the payer (compensated by a credit back)
// then credit the payee, served by an async branch handler that writes
// the account and the barrier's row in one transaction (so a call
// delivered twice moves the money once). A write that would take a
// balance below 0 or above its limit is a FAILURE: the second transfer's
// credit is, and the coordinator compensates its debit.
//
//   make && (cd bindings/node && npm ci) && node examples/node/bank_saga.js [DIR]
//
// Prints each call, each transfer's end and the balances; exits 1 if the
// books do not balance.
'use strict';
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const troupe = require('../../bindings/node');

const TOTAL = 200;

async function main(dir) {
    const n = await troupe.open(dir, { sync: 'on', coordinator: { retryMinMs: 100 } });
    try {
        await n.createTable('accounts');
        if ((await n.get('accounts', 'alice')) === undefined) {
            await n.put('accounts', 'alice', { balance: 100, limit: 1000 });
            await n.put('accounts', 'bob', { balance: 100, limit: 150 });
        }
        n.branchHandler('bank', async (br) => {
            const { who, delta } = br.value();
            const call = `  ${br.gid} ${br.branchId} ${br.op}: ${who} ${delta > 0 ? '+' : ''}${delta}`;
            for (;;) { // a conflicting transaction: again, on fresh data
                const tx = n.begin();
                const verdict = await tx.barrier(br);
                if (verdict === 'execute') {
                    const acct = await tx.get('accounts', who);
                    const balance = acct.balance + delta;
                    if (balance < 0 || balance > acct.limit) {
                        tx.rollback(); // no barrier row: nothing happened
                        console.log(`${call} refused (balance ${acct.balance}, limit ${acct.limit})`);
                        return false; // FAILURE
                    }
                    tx.put('accounts', who, { ...acct, balance });
                }
                try {
                    await tx.commit();
                } catch (err) {
                    if (err.code === 'ECONFLICT')
                        continue;
                    throw err; // UNKNOWN: the call is retried after its backoff
                }
                console.log(call + (verdict === 'execute' ? '' : ` (${verdict})`));
                return true;
            }
        });
        const transfer = async (gid, payer, payee, amount) => {
            console.log(`transfer ${gid}: ${amount} from ${payer} to ${payee}`);
            await n.sagaSubmit(gid, [
                { action: ['bank', { who: payer, delta: -amount }], compensate: ['bank', { who: payer, delta: amount }] },
                { action: ['bank', { who: payee, delta: amount }], compensate: null },
            ]);
            const q = await n.gtxWait(gid);
            console.log(`transfer ${gid}: ${q.status}${q.reason ? ', ' + q.reason : ''}`);
            return q.status;
        };
        const s1 = await transfer('t1', 'alice', 'bob', 30);
        const s2 = await transfer('t2', 'alice', 'bob', 40); // over bob's limit
        let total = 0;
        for (const who of ['alice', 'bob']) {
            const b = (await n.get('accounts', who)).balance;
            console.log(`${who}: ${b}`);
            total += b;
        }
        const ok = total === TOTAL && s1 === 'succeed' && s2 === 'failed';
        console.log(`total: ${total} (${ok ? 'the books balance' : 'THE BOOKS DO NOT BALANCE'})`);
        return ok ? 0 : 1;
    } finally {
        await n.close();
    }
}

const dir = process.argv[2] || fs.mkdtempSync(path.join(os.tmpdir(), 'troupe-bank-saga-'));
main(dir).then((rc) => process.exit(rc), (err) => {
    console.error(err);
    process.exit(1);
});
