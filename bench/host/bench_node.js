// bench_node: troupe's Node binding (bindings/node) as a host, beside its
// peers, in one run (bench/host/CMakeLists.txt writes the wrapper that
// runs it with TROUPE_LIB = libtroupe_bench.so).
//
//   bench node_queue_e2e <v> events/s peer queue_e2e_sync <c> ratio <r>
//   bench node_queue_e2e_bullmq <v> events/s peer bullmq_sync_1_c32 <b> ratio <r>
//   bench node_pull_batch <v> tasks/s peer koffi_pull_each <k> ratio <r>
//   bench node_pull_batch_vs_batched <v> tasks/s peer koffi_pull_batch <k> ratio <r>
//   bench host_idle_cpu <v> cpu-s
//   bench pull_wake_p50_us <v> us
//
// node_queue_e2e: bench_queue's queue_e2e_sync workload, through Node: a
// fresh queue of 4 partitions per rep, one subscription of concurrency 32
// (bench_queue's credit) with an async no-op handler (`await null`), the
// node synced; 20000 events (BENCH_QUEUE_EVENTS) published due now in
// chunks of 100 (100 in flight, await all, next chunk), id the sequence
// number, key "customer-NNNNNN" over 1000 keys, payload a map {key, seq,
// body} of 100 bytes of msgpack. The clock stops when the last handler
// has settled and its ack has been handed back (reply_batch): bench_queue
// waits for the outcome commits too (its worker's drain), which this ABI
// does not expose, so this figure leaves out the last group commit of up
// to 32 acks (a few ms of a run of seconds). Every event must be handled
// exactly once. The C figure and BullMQ's come from bench_queue run here
// with the filter queue_e2e_sync (its own reps, each beside one of
// BullMQ's), before the Node reps.
//
// node_pull_batch: TASKS (BENCH_PULL_TASKS, 1000000) tasks with a 16-byte
// body through the binding's pull loop (serve(): a target of credit 1024,
// batches of <= 256, replies batched once per drain) from the feed thread
// of libtroupe_bench.so (bench/host/feed.c), a sync handler; tasks/s from
// the feed's start to its last outcome. Peers: the raw koffi loop against
// librawpull.so (same credit, batch, body), run after each rep with
// BENCH_REPS=1: `peer_koffi_pull TASKS each` (batched pulls, one reply
// call per task: the loop ../shared/HOSTS.md measured by hand at ~939k/s,
// the peer, goal >= 0.5x) and `peer_koffi_pull TASKS batch`
// (replies batched too: a tight loop with no handler, no event loop and
// no runtime behind it; the bound, printed beside).
//
// host_idle_cpu: a node open with a subscription (queue, nothing
// published) and a served pull target (nothing fed), idle for
// BENCH_IDLE_S (10) seconds: the CPU seconds the whole process used
// (process.cpuUsage: user + system of every thread, troupe's included;
// /proc/self/stat's utime + stime, the same in clock ticks, is printed
// beside it as a check). Goal ~0: nothing polls.
//
// pull_wake_p50_us: the median microseconds from publish (the call) to
// the handler's start, on an idle host (node unsynced, so no fsync sits in
// the path), over BENCH_WAKE_N (300) events, each published 2 ms after the
// previous one was handled.
//
// Reps: BENCH_REPS (5) after one warm-up; figures are medians. argv[2]
// runs only the figures whose name contains it. Any failed check exits 1.
'use strict';

const fs = require('fs');
const os = require('os');
const path = require('path');
const { spawnSync } = require('child_process');
const koffi = require(path.join(__dirname, '..', '..', 'bindings', 'node', 'node_modules', 'koffi'));
const troupe = require(path.join(__dirname, '..', '..', 'bindings', 'node'));
const { encode } = require(path.join(__dirname, '..', '..', 'bindings', 'node', 'node_modules', '@msgpack', 'msgpack'));

const REPS = Math.max(1, Math.min(64, Number(process.env.BENCH_REPS || 5)));
const ONLY = process.argv[2] || '';
const EVENTS = Number(process.env.BENCH_QUEUE_EVENTS || 20000);
const TASKS = Number(process.env.BENCH_PULL_TASKS || 1000000);
const IDLE_S = Number(process.env.BENCH_IDLE_S || 10);
const WAKE_N = Number(process.env.BENCH_WAKE_N || 300);
const PEERS = process.env.TROUPE_PEERS_DIR || '';
const BENCH_DIR = process.env.TROUPE_BENCH_DIR || '';

const want = (name) => ONLY === '' || name.includes(ONLY);
const median = (v) => {
    const s = [...v].sort((a, b) => a - b);
    const n = s.length;
    return n % 2 ? s[(n - 1) / 2] : (s[n / 2 - 1] + s[n / 2]) / 2;
};
const g = (v) => Number(v.toPrecision(6)).toString();
function line(name, v, unit, peer, pv) {
    if (peer === undefined)
        console.log(`bench ${name} ${g(v)} ${unit}`);
    else
        console.log(`bench ${name} ${g(v)} ${unit} peer ${peer} ${g(pv)} ratio ${(pv > 0 ? v / pv : 0).toFixed(3)}`);
}
function fail(msg) {
    console.error(`bench_node: ${msg}`);
    process.exit(1);
}
const tmp = fs.mkdtempSync(path.join(process.env.TMPDIR || os.tmpdir(), 'troupe-bench-node-'));
process.on('exit', () => fs.rmSync(tmp, { recursive: true, force: true }));
let dirs = 0;
const newDir = () => path.join(tmp, `n${++dirs}`);

// ---- node_queue_e2e ------------------------------------------------------

function payload(seq, key) {
    // a map {key, seq, body} of exactly 100 bytes of msgpack
    let body = '';
    let b = encode({ key, seq, body });
    body = 'x'.repeat(100 - b.length - 1); // the str header grows by 1 past 31
    b = encode({ key, seq, body });
    while (b.length < 100) { body += 'x'; b = encode({ key, seq, body }); }
    while (b.length > 100) { body = body.slice(1); b = encode({ key, seq, body }); }
    return { key, seq, body };
}

async function e2eRep(node, n, rep) {
    const q = `e2e${rep}`;
    await node.createQueue(q, { partitions: 4 });
    const seen = new Uint8Array(n);
    let handled = 0;
    let finish;
    const all = new Promise((r) => { finish = r; });
    node.subscribe(q, async (ev) => {
        await null;
        seen[ev.payload.seq]++;
        if (++handled === n)
            setImmediate(() => setImmediate(finish)); // the last ack flushed
    }, { concurrency: 32 });
    const events = Array.from({ length: n }, (_, i) => {
        const key = `customer-${String(i % 1000).padStart(6, '0')}`;
        return { id: String(i), key, payload: payload(i, key) };
    });
    await new Promise((r) => setTimeout(r, 50)); // subscriptions settle
    const t0 = process.hrtime.bigint();
    for (let i = 0; i < n; i += 100)
        await Promise.all(events.slice(i, i + 100).map((e) => node.publish(q, e)));
    await all;
    const s = Number(process.hrtime.bigint() - t0) / 1e9;
    for (let i = 0; i < n; i++)
        if (seen[i] !== 1)
            fail(`node_queue_e2e: event ${i} handled ${seen[i]} times`);
    return n / s;
}

function cFigures() {
    const bin = path.join(BENCH_DIR, 'bench_queue');
    if (!BENCH_DIR || !fs.existsSync(bin)) {
        console.error('bench_node: bench_queue not found: no C or BullMQ figure');
        return { c: -1, bullmq: -1, peer: 'bullmq_sync_1_c32' };
    }
    const r = spawnSync(bin, ['queue_e2e_sync'], { encoding: 'utf8', stdio: ['ignore', 'pipe', 'inherit'] });
    process.stderr.write(r.stdout.split('\n').map((l) => l && `  [bench_queue] ${l}`).join('\n'));
    const m = /^bench queue_e2e_sync (\S+) events\/s peer (\S+) (\S+) ratio/m.exec(r.stdout || '');
    if (!m)
        return { c: -1, bullmq: -1, peer: 'bullmq_sync_1_c32' };
    return { c: Number(m[1]), bullmq: Number(m[3]), peer: m[2] };
}

async function queueE2e() {
    const peer = cFigures();
    const node = await troupe.open(newDir(), { sync: 'on' });
    await e2eRep(node, Math.max(1, Math.min(2000, EVENTS / 10)), 0); // warm-up
    const v = [];
    for (let r = 1; r <= REPS; r++) {
        v.push(await e2eRep(node, EVENTS, r));
        process.stderr.write(`node_queue_e2e rep ${r}: ${Math.round(v[r - 1])} events/s\n`);
    }
    await node.close();
    const m = median(v);
    line('node_queue_e2e', m, 'events/s', 'queue_e2e_sync', peer.c);
    line('node_queue_e2e_bullmq', m, 'events/s', peer.peer, peer.bullmq);
}

// ---- node_pull_batch -------------------------------------------------------

function peerOnce(name, args) {
    if (!PEERS)
        return -1;
    const r = spawnSync(path.join(PEERS, name), args, { encoding: 'utf8', env: { ...process.env, BENCH_REPS: '1' }, stdio: ['ignore', 'pipe', 'inherit'] });
    if (r.status !== 0)
        return -1;
    const last = r.stdout.trim().split('\n').pop();
    const v = Number(last);
    return Number.isFinite(v) ? v : -1;
}

async function pullBatch() {
    const so = koffi.load(process.env.TROUPE_LIB);
    const feed = so.func('int troupe_bench_feed(void *n, const char *target, uint64_t count, uint32_t body_len)');
    const feedWait = so.func('int troupe_bench_feed_wait(void *n, _Out_ uint64_t *succeeded)');
    const node = await troupe.open(newDir(), { sync: 'off' });
    let count = 0;
    node.serve('feed', () => { count++; }, { concurrency: 1024 });
    const rep = async (n) => {
        count = 0;
        const t0 = process.hrtime.bigint();
        if (feed(node._h, 'feed', n, 16) !== 0)
            fail('troupe_bench_feed failed');
        const ok = [0];
        const rc = await new Promise((res, rej) => feedWait.async(node._h, ok, (e, v) => (e ? rej(e) : res(v))));
        const s = Number(process.hrtime.bigint() - t0) / 1e9;
        if (rc !== 0 || Number(ok[0]) !== n || count !== n)
            fail(`node_pull_batch: feed_wait ${rc}, ${ok[0]} succeeded and ${count} handled of ${n}`);
        return n / s;
    };
    await rep(Math.max(1, TASKS / 10));
    const v = [], pe = [], pb = [];
    for (let r = 1; r <= REPS; r++) {
        v.push(await rep(TASKS));
        pe.push(peerOnce('peer_koffi_pull', [String(TASKS), 'each']));
        pb.push(peerOnce('peer_koffi_pull', [String(TASKS), 'batch']));
        process.stderr.write(`node_pull_batch rep ${r}: troupe ${Math.round(v[r - 1])} tasks/s, raw koffi ${Math.round(pe[r - 1])} (each) ${Math.round(pb[r - 1])} (batch) tasks/s\n`);
    }
    await node.close();
    const med = (p) => (p.some((x) => x < 0) ? -1 : median(p));
    line('node_pull_batch', median(v), 'tasks/s', 'koffi_pull_each', med(pe));
    line('node_pull_batch_vs_batched', median(v), 'tasks/s', 'koffi_pull_batch', med(pb));
}

// ---- host_idle_cpu, pull_wake_p50_us ---------------------------------------

function statTicks() {
    const s = fs.readFileSync('/proc/self/stat', 'utf8');
    const f = s.slice(s.lastIndexOf(')') + 2).split(' ');
    return Number(f[11]) + Number(f[12]); // utime, stime (fields 14, 15)
}

async function idleRep() {
    const node = await troupe.open(newDir());
    await node.createQueue('idle');
    node.subscribe('idle', async () => fail('host_idle_cpu: an event came'));
    node.serve('idle-pull', () => fail('host_idle_cpu: a task came'));
    await new Promise((r) => setTimeout(r, 200)); // startup settles
    const c0 = process.cpuUsage(), k0 = statTicks();
    await new Promise((r) => setTimeout(r, IDLE_S * 1000));
    const c = process.cpuUsage(c0), k = statTicks() - k0;
    await node.close();
    const cpu = (c.user + c.system) / 1e6;
    process.stderr.write(`host_idle_cpu: ${cpu.toFixed(4)} cpu-s over ${IDLE_S} s (/proc/self/stat: ${(k / 100).toFixed(2)} s)\n`);
    return cpu;
}

async function wakeRep() {
    const node = await troupe.open(newDir(), { sync: 'off' });
    await node.createQueue('wake');
    let t0 = 0n, got;
    const lat = [];
    node.subscribe('wake', async () => {
        lat.push(Number(process.hrtime.bigint() - t0) / 1e3);
        got();
    }, { concurrency: 1 });
    await new Promise((r) => setTimeout(r, 50));
    for (let i = 0; i < WAKE_N; i++) {
        const seen = new Promise((r) => { got = r; });
        t0 = process.hrtime.bigint();
        node.publish('wake', { id: `w${i}`, payload: i });
        await seen;
        await new Promise((r) => setTimeout(r, 2));
    }
    await node.close();
    const m = median(lat);
    process.stderr.write(`pull_wake: p50 ${m.toFixed(1)} us over ${lat.length} events\n`);
    return m;
}

async function main() {
    if (want('node_queue_e2e'))
        await queueE2e();
    if (want('node_pull_batch'))
        await pullBatch();
    if (want('host_idle_cpu')) {
        const v = [];
        for (let r = 0; r < REPS; r++)
            v.push(await idleRep());
        line('host_idle_cpu', median(v), 'cpu-s');
    }
    if (want('pull_wake_p50_us')) {
        await wakeRep(); // warm-up
        const v = [];
        for (let r = 0; r < REPS; r++)
            v.push(await wakeRep());
        line('pull_wake_p50_us', median(v), 'us');
    }
}

main().catch((e) => fail(e.stack || String(e)));
