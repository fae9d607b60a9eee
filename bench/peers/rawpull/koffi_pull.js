// The raw koffi peer of node_pull_batch: a tight loop that pulls batches
// of up to 256 task records from librawpull.so (credit 1024) into one Buffer and
// answers each SUCCESS, without troupe behind it. MODE `each` (the
// default, the loop ../shared/HOSTS.md measured by hand at ~939k/s)
// answers with one reply call per task; `batch` packs the answers into a
// reply Buffer handed back in one call.
//
//   node koffi_pull.js LIBRAWPULL [TASKS] [each|batch]
//
// Human lines on stderr; the median tasks/s of $BENCH_REPS reps (default
// 5) alone on the last stdout line (bench/peers/peer_run.h).
'use strict';
const koffi = require('koffi');

const lib = koffi.load(process.argv[2]);
const start = lib.func('int raw_start(uint64_t n, uint32_t credit)');
const finish = lib.func('uint64_t raw_finish(void)');
const nextBatch = lib.func('int raw_next_batch(void *buf, size_t cap, int max)');
const replyBatch = lib.func('int raw_reply_batch(const void *buf, size_t len)');
const reply = lib.func('int raw_reply(uint64_t id, uint32_t outcome, const void *body, size_t len)');

const TASKS = Number(process.argv[3] || 1000000);
const MODE = process.argv[4] || 'each';
if (MODE !== 'each' && MODE !== 'batch')
    throw new Error(`raw koffi: mode ${MODE}: each or batch`);
const REPS = Number(process.env.BENCH_REPS || 5);
const BATCH = 256;
const CREDIT = 1024;
const FIXED = 32;
const buf = Buffer.alloc(1 << 20);
const rbuf = Buffer.alloc(BATCH * 16);

function rep() {
    if (start(TASKS, CREDIT) !== 0)
        throw new Error('raw koffi: raw_start failed');
    let done = 0;
    const t0 = process.hrtime.bigint();
    for (;;) {
        const n = nextBatch(buf, buf.length, BATCH);
        if (n < 0)
            break;
        let off = 0, roff = 0;
        for (let i = 0; i < n; i++) {
            const hlen = buf.readUInt16LE(off + 14);
            const blen = buf.readUInt32LE(off + 20);
            if (MODE === 'each') {
                reply(buf.readBigUInt64LE(off), 1, null, 0);
            } else {
                buf.copy(rbuf, roff, off, off + 8); // the id
                rbuf.writeUInt32LE(1, roff + 8);    // SUCCESS
                rbuf.writeUInt32LE(0, roff + 12);   // no body
                roff += 16;
            }
            off += (FIXED + hlen + blen + 7) & ~7;
        }
        if (roff > 0)
            replyBatch(rbuf, roff);
        done += n;
    }
    const s = Number(process.hrtime.bigint() - t0) / 1e9;
    const good = finish();
    if (Number(good) !== TASKS)
        throw new Error(`raw koffi: ${good} good replies of ${TASKS}`);
    return done / s;
}

rep(); // warm-up
const rates = [];
for (let r = 0; r < REPS; r++) {
    const v = rep();
    rates.push(v);
    process.stderr.write(`raw koffi pull (${MODE}): rep ${r + 1}: ${Math.round(v)} tasks/s\n`);
}
rates.sort((a, b) => a - b);
console.log(rates[Math.floor(rates.length / 2)].toFixed(1));
