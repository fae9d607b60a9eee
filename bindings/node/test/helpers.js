// Shared by the tests: a fresh data directory per node, removed at exit,
// and a wait on a condition with a deadline (no sleeps standing in).
'use strict';
const fs = require('fs');
const os = require('os');
const path = require('path');

const dirs = [];
process.on('exit', () => {
    for (const d of dirs)
        fs.rmSync(d, { recursive: true, force: true });
});

function tmpdir() {
    const d = fs.mkdtempSync(path.join(os.tmpdir(), 'troupe-node-'));
    dirs.push(d);
    return d;
}

async function until(cond, ms = 10000, what = 'condition') {
    const end = Date.now() + ms;
    while (!cond()) {
        if (Date.now() > end)
            throw new Error(`timed out waiting for ${what}`);
        await new Promise((r) => setTimeout(r, 5));
    }
}

module.exports = { tmpdir, until };
