// BullMQ peer for troupe's queue benchmarks (issue 4, part 5): the same
// workload as queue_e2e_* / queue_due_* run against BullMQ on a local Redis.
//
//   peer_bullmq sync 1      events/s, AOF on (appendfsync everysec), 1 worker
//   peer_bullmq nosync 1    events/s, AOF off (no persistence at all), 1 worker
//   peer_bullmq sync 4      events/s, AOF everysec, 4 workers
//   peer_bullmq sync 1 16   events/s, 1 worker taking up to 16 jobs at once
//   peer_bullmq due N p50   due time -> processor start, p50 in microseconds,
//   peer_bullmq due N p99     over N delayed events (AOF everysec, 1 worker)
//
// The arguments may come as separate words or as one word ("sync 1"), which
// is how bench_run_peer (bench/peers/peer_run.h) passes them. Like every peer
// it prints human lines on stderr and one number, the median of $BENCH_REPS
// reps (default 5), on its last stdout line; it exits non-zero on failure.
//
// Redis: each run starts its own redis-server (Debian's) on a free loopback
// port (--bind 127.0.0.1) with a fresh temp dir, `--save ""` and either
// `--appendonly yes --appendfsync everysec` (sync, due) or `--appendonly no`
// (nosync); waits for it to answer PING; FLUSHALLs before every rep; and at
// the end (also on an error or SIGINT/SIGTERM/SIGHUP) stops it and removes
// the temp dir. If this process is SIGKILLed, the redis-server is orphaned.
//
// The e2e workload (sync, nosync), per rep, timed from the first publish to
// the last completion:
// - the workers are started and ready (connected, idle) before the clock
//   starts;
// - the producer publishes N events (N = $BULLMQ_EVENTS, default 20000),
//   each due now (no delay): name "event", data {key, seq, body} of 100
//   bytes as JSON, the business key "customer-NNNNNN" cycling over 1000
//   keys (BullMQ has no partitions; the key is carried in the data only);
// - it publishes with Queue.addBulk in chunks of 100, one chunk at a time
//   (each chunk is one pipelined round trip of 100 addStandardJob scripts),
//   concurrently with consumption in the same process. That is BullMQ's own
//   batch API and the fastest producer measured here (individual Queue.add
//   calls with up to 100 in flight were no faster: 4.8k-6.2k vs 6.2k-6.3k
//   events/s end to end, the workers being the bottleneck either way);
//   $BULLMQ_PRODUCER=single selects them, for comparison;
// - every worker's processor is a no-op that returns undefined; BullMQ then
//   completes the job (moveToFinished: the job leaves the active list for
//   the completed set, and the worker fetches its next job in the same
//   script). That is the acknowledge; the clock stops at the worker's
//   'completed' event for the Nth job;
// - completed history is kept (removeOnComplete: false, BullMQ's own
//   default, set explicitly), as Tito/troupe keep completed rows; BullMQ's
//   event stream (XADD per state change, capped at ~10000) stays at its
//   default too;
// - after the clock stops, the rep checks that Redis holds N completed jobs.
// "4 workers" is 4 Worker instances in this process with concurrency 1 each
// (each with its own pair of Redis connections: commands and blocking
// fetch), i.e. 4 independent consumers that each handle one event at a
// time. A third argument (or $BULLMQ_CONCURRENCY; default 1) sets each
// Worker's concurrency, BullMQ's counterpart of a troupe worker's credit
// (most events held at once): give the peer the credit troupe's bench uses.
// Everything runs in one Node process (single-threaded JS): on a 2-core
// machine Node and redis-server take one core each.
//
// The due workload, per rep: one idle worker; N delayed events are added up
// front (addBulk), their due times $BULLMQ_DUE_LEAD_MS (default 300) after
// the adds start and then $BULLMQ_DUE_SPACING_MS (default 5) apart, so that
// with prompt delivery each would come due alone to an idle worker. BullMQ's due time of a job is
// timestamp + delay (ms; the peer sets both so the due time is exact); the
// latency is the wall clock at processor start minus that due time, read
// with microsecond resolution (performance.now() calibrated against
// Date.now()'s millisecond tick). The rep's figure is the p50 or p99 of
// the N latencies; stderr shows both. The idle worker waits for the next
// due job in a BZPOPMIN whose timeout is the time left, and redis-server
// expires blocking timeouts only when its event loop wakes, at least every
// 1/hz s: with Redis's default hz 10 that adds up to ~100 ms (p50 ~45 ms,
// p99 ~95 ms measured), with $BULLMQ_REDIS_HZ=100 up to ~10 ms. The peer
// keeps Redis's default, as BullMQ's users run it.
//
// A warm-up rep, not counted, precedes the reps (min(N/10, 2000) events;
// for due, min(N/10, 200)).
// Other knobs: $BULLMQ_APPENDFSYNC overrides everysec (say "always"),
// $BULLMQ_REDIS_HZ sets redis-server's --hz.
// Self-check: bench/peers/bullmq/selfcheck.sh.

import { spawn } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { performance } from 'node:perf_hooks';
import { fileURLToPath } from 'node:url';
import { Queue, Worker } from 'bullmq';
import IORedis from 'ioredis';

// redis-server state, for the cleanup on any exit path
let redis = null; // ChildProcess
let redisExited = null; // Promise resolved on exit
let tmpDir = null;
let redisLog = '';

const log = (...a) => console.error('peer_bullmq:', ...a);

function die(msg) {
  log(msg);
  cleanupSync();
  process.exit(1);
}

function intEnv(name, def, min) {
  const s = process.env[name];
  if (s === undefined || s === '') return def;
  const v = Number(s);
  if (!Number.isInteger(v) || v < min) die(`${name}=${s}: want an integer >= ${min}`);
  return v;
}

// ---------------------------------------------------------------- arguments
const usage =
  'usage: peer_bullmq sync|nosync WORKERS [CONCURRENCY] | due N [p50|p99]   (one number on stdout)';
const argv = process.argv.slice(2).join(' ').trim().split(/\s+/).filter(Boolean);
const mode = argv[0];
let workers = 1;
let dueCount = 0;
let pct = 'p50';
let concArg = null;
if (mode === 'sync' || mode === 'nosync') {
  if (argv.length < 2 || argv.length > 3 || !argv.slice(1).every((a) => /^[1-9][0-9]*$/.test(a))) die(usage);
  workers = Number(argv[1]);
  if (argv[2] !== undefined) concArg = Number(argv[2]);
} else if (mode === 'due') {
  if (argv.length < 2 || argv.length > 3 || !/^[1-9][0-9]*$/.test(argv[1])) die(usage);
  dueCount = Number(argv[1]);
  if (argv[2] !== undefined) {
    if (argv[2] !== 'p50' && argv[2] !== 'p99') die(usage);
    pct = argv[2];
  }
} else {
  die(usage);
}
const reps = intEnv('BENCH_REPS', 5, 1);
const events = intEnv('BULLMQ_EVENTS', 20000, 1);
const concurrency = concArg ?? intEnv('BULLMQ_CONCURRENCY', 1, 1);
const dueLeadMs = intEnv('BULLMQ_DUE_LEAD_MS', 300, 0);
const dueSpacingMs = intEnv('BULLMQ_DUE_SPACING_MS', 5, 0);
const producer = process.env.BULLMQ_PRODUCER || 'bulk';
if (producer !== 'bulk' && producer !== 'single') die('BULLMQ_PRODUCER: bulk or single');
const appendfsync = process.env.BULLMQ_APPENDFSYNC || 'everysec';
if (!['always', 'everysec', 'no'].includes(appendfsync)) die('BULLMQ_APPENDFSYNC: always, everysec or no');
const aof = mode !== 'nosync';
const redisHz = intEnv('BULLMQ_REDIS_HZ', 0, 0); // 0: redis-server's default (10)
const CHUNK = 100;

// ---------------------------------------------------------------- redis-server

function cleanupSync() {
  if (redis && redis.exitCode === null && redis.signalCode === null) {
    try {
      redis.kill('SIGKILL');
    } catch {
      /* already gone */
    }
  }
  redis = null;
  if (tmpDir) {
    try {
      rmSync(tmpDir, { recursive: true, force: true });
    } catch {
      /* best effort */
    }
    tmpDir = null;
  }
}

for (const sig of ['SIGINT', 'SIGTERM', 'SIGHUP']) {
  process.on(sig, () => {
    log(`${sig}: stopping redis-server`);
    cleanupSync();
    process.exit(128 + os.constants.signals[sig]);
  });
}
process.on('exit', cleanupSync);
process.on('uncaughtException', (e) => die(`error: ${e && e.stack ? e.stack : e}`));
process.on('unhandledRejection', (e) => die(`error: ${e && e.stack ? e.stack : e}`));

function freePort() {
  return new Promise((resolve, reject) => {
    const srv = net.createServer();
    srv.unref();
    srv.on('error', reject);
    srv.listen(0, '127.0.0.1', () => {
      const { port } = srv.address();
      srv.close(() => resolve(port));
    });
  });
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// Resolves true once redis answers PING with +PONG, false if not yet.
function ping(port) {
  return new Promise((resolve) => {
    const s = net.connect({ host: '127.0.0.1', port });
    let buf = '';
    const done = (ok) => {
      s.destroy();
      resolve(ok);
    };
    s.setTimeout(500, () => done(false));
    s.on('error', () => done(false));
    s.on('connect', () => s.write('PING\r\n'));
    s.on('data', (d) => {
      buf += d.toString();
      if (buf.includes('\r\n')) done(buf.startsWith('+PONG'));
    });
  });
}

async function startRedis() {
  tmpDir = mkdtempSync(path.join(process.env.TMPDIR || os.tmpdir(), 'troupe-bullmq.'));
  for (let attempt = 1; attempt <= 5; attempt++) {
    const port = await freePort();
    const args = ['--port', String(port), '--bind', '127.0.0.1', '--dir', tmpDir,
      '--save', '', '--daemonize', 'no', '--protected-mode', 'yes',
      '--maxmemory-policy', 'noeviction', '--logfile', ''];
    if (redisHz) args.push('--hz', String(redisHz));
    if (aof) args.push('--appendonly', 'yes', '--appendfsync', appendfsync);
    else args.push('--appendonly', 'no');
    redisLog = '';
    const child = spawn('redis-server', args, { stdio: ['ignore', 'pipe', 'pipe'] });
    redis = child;
    redisExited = new Promise((r) => child.once('exit', (code, sig) => r({ code, sig })));
    const keep = (d) => {
      redisLog = (redisLog + d.toString()).slice(-4000);
    };
    child.stdout.on('data', keep);
    child.stderr.on('data', keep);
    let spawnErr = null;
    child.once('error', (e) => {
      spawnErr = e;
    });
    const deadline = Date.now() + 10000;
    while (Date.now() < deadline) {
      if (spawnErr) die(`cannot run redis-server (${spawnErr.message}); scripts/install-deps.sh --bench installs it`);
      if (child.exitCode !== null || child.signalCode !== null) break;
      if (await ping(port)) {
        log(`redis-server ${redisVersion()} on 127.0.0.1:${port}, ${aof ? `AOF on, appendfsync ${appendfsync}` : 'AOF off'}, hz ${redisHz || 'default'}, dir ${tmpDir}`);
        return port;
      }
      await sleep(20);
    }
    if (child.exitCode === null && child.signalCode === null) {
      child.kill('SIGKILL');
      await redisExited;
      die(`redis-server did not answer on port ${port} within 10 s:\n${redisLog}`);
    }
    log(`redis-server exited at start (attempt ${attempt}, port ${port}):\n${redisLog.trim().split('\n').slice(-3).join('\n')}`);
  }
  die('redis-server would not start');
}

let redisVersionStr = null;
function redisVersion() {
  if (redisVersionStr === null) {
    const m = /v=([0-9.]+)/.exec(redisLog) || /Redis version=([0-9.]+)/.exec(redisLog);
    redisVersionStr = m ? m[1] : '(version unknown)';
  }
  return redisVersionStr;
}

async function stopRedis(admin) {
  if (!redis) return;
  const child = redis;
  admin.on('error', () => {}); // the shutdown drops its connection
  try {
    await admin.call('SHUTDOWN', 'NOSAVE');
  } catch {
    /* the connection drops as it shuts down */
  }
  admin.disconnect();
  const t = setTimeout(() => child.kill('SIGKILL'), 5000);
  await redisExited;
  clearTimeout(t);
  redis = null;
  cleanupSync(); // removes the temp dir
}

// ---------------------------------------------------------------- clocks
// Wall clock in ms with microsecond resolution: performance.now() plus an
// offset fixed at a Date.now() millisecond tick.
let wallOffset = 0;
function calibrateClock() {
  let best = -Infinity;
  for (let i = 0; i < 5; i++) {
    const start = Date.now();
    let d;
    let p;
    do {
      p = performance.now();
      d = Date.now();
    } while (d === start);
    best = Math.max(best, d - p);
  }
  wallOffset = best;
}
const wallMs = () => performance.now() + wallOffset;

// ---------------------------------------------------------------- workload
const keys = 1000;
function eventData(i) {
  const key = `customer-${String(i % keys).padStart(6, '0')}`;
  const data = { key, seq: i, body: '' };
  const pad = 100 - JSON.stringify(data).length;
  data.body = 'x'.repeat(Math.max(0, pad));
  return data;
}
const jobOpts = { removeOnComplete: false, removeOnFail: false, attempts: 1 };

function quantile(sorted, q) {
  if (sorted.length === 0) return NaN;
  const idx = Math.min(sorted.length - 1, Math.max(0, Math.ceil(q * sorted.length) - 1));
  return sorted[idx];
}
const median = (xs) => {
  const s = [...xs].sort((a, b) => a - b);
  const n = s.length;
  return n % 2 ? s[(n - 1) / 2] : (s[n / 2 - 1] + s[n / 2]) / 2;
};

async function closeAll(queue, ws) {
  await Promise.all(ws.map((w) => w.close()));
  await queue.close();
}

async function repE2E(connection, admin, n) {
  await admin.flushall();
  const qname = 'bench';
  const queue = new Queue(qname, { connection, defaultJobOptions: jobOpts });
  await queue.waitUntilReady();
  let done = 0;
  let failed = null;
  let finish;
  const allDone = new Promise((r) => {
    finish = r;
  });
  const ws = [];
  for (let w = 0; w < workers; w++) {
    const worker = new Worker(qname, async () => undefined, { connection, concurrency, autorun: false });
    worker.on('completed', () => {
      if (++done === n) finish();
    });
    worker.on('failed', (job, err) => {
      failed = err;
      finish();
    });
    worker.on('error', (err) => {
      failed = err;
      finish();
    });
    await worker.waitUntilReady();
    ws.push(worker);
  }
  ws.forEach((w) => w.run().catch((e) => {
    failed = e;
    finish();
  }));
  await sleep(50); // let every worker reach its blocking wait

  const t0 = performance.now();
  if (producer === 'bulk') {
    for (let i = 0; i < n && !failed; i += CHUNK) {
      const jobs = [];
      for (let j = i; j < Math.min(n, i + CHUNK); j++) jobs.push({ name: 'event', data: eventData(j), opts: jobOpts });
      await queue.addBulk(jobs);
    }
  } else {
    const inflight = new Set();
    for (let i = 0; i < n && !failed; i++) {
      const p = queue.add('event', eventData(i), jobOpts);
      inflight.add(p);
      p.finally(() => inflight.delete(p));
      if (inflight.size >= CHUNK) await Promise.race(inflight);
    }
    await Promise.all(inflight);
  }
  const tPub = performance.now();
  await allDone;
  const t1 = performance.now();
  if (failed) throw failed;
  const counts = await queue.getJobCounts('completed', 'wait', 'active', 'failed', 'delayed');
  await closeAll(queue, ws);
  if (counts.completed !== n)
    throw new Error(`expected ${n} completed jobs in redis, found ${JSON.stringify(counts)}`);
  const rate = n / ((t1 - t0) / 1000);
  return { rate, pubMs: tPub - t0, totalMs: t1 - t0, counts };
}

async function repDue(connection, admin, n) {
  await admin.flushall();
  calibrateClock();
  const qname = 'bench-due';
  const queue = new Queue(qname, { connection, defaultJobOptions: jobOpts });
  await queue.waitUntilReady();
  const lat = [];
  let failed = null;
  let finish;
  const allDone = new Promise((r) => {
    finish = r;
  });
  const worker = new Worker(
    qname,
    async (job) => {
      lat.push((wallMs() - job.data.due) * 1000);
      if (lat.length === n) finish();
    },
    { connection, concurrency, autorun: false },
  );
  worker.on('failed', (job, err) => {
    failed = err;
    finish();
  });
  worker.on('error', (err) => {
    failed = err;
    finish();
  });
  await worker.waitUntilReady();
  worker.run().catch((e) => {
    failed = e;
    finish();
  });
  await sleep(50);
  const base = Date.now() + dueLeadMs;
  for (let i = 0; i < n; i += CHUNK) {
    const jobs = [];
    for (let j = i; j < Math.min(n, i + CHUNK); j++) {
      const now = Date.now();
      const due = base + j * dueSpacingMs;
      const data = eventData(j);
      data.due = due;
      // due time = timestamp + delay, exactly
      jobs.push({ name: 'event', data, opts: { ...jobOpts, timestamp: now, delay: Math.max(0, due - now) } });
    }
    await queue.addBulk(jobs);
  }
  const late = Date.now() - base;
  await allDone;
  if (failed) throw failed;
  await closeAll(queue, worker ? [worker] : []);
  if (late > 0) log(`warning: adding took ${late} ms past the first due time (raise BULLMQ_DUE_LEAD_MS)`);
  lat.sort((a, b) => a - b);
  return { p50: quantile(lat, 0.5), p99: quantile(lat, 0.99), min: lat[0], max: lat[lat.length - 1] };
}

// ---------------------------------------------------------------- main
async function main() {
  let bullmqVersion = '?';
  try {
    const here = path.dirname(fileURLToPath(import.meta.url));
    bullmqVersion = JSON.parse(readFileSync(path.join(here, 'node_modules/bullmq/package.json'), 'utf8')).version;
  } catch {
    /* only for the log line */
  }
  const port = await startRedis();
  const connection = { host: '127.0.0.1', port };
  const admin = new IORedis({ host: '127.0.0.1', port, maxRetriesPerRequest: 1, retryStrategy: () => null });
  await admin.ping();
  log(`bullmq ${bullmqVersion}, node ${process.version}, ${reps} reps`);

  const figures = [];
  if (mode === 'due') {
    log(`due: ${dueCount} delayed events, ${dueSpacingMs} ms apart, first due ${dueLeadMs} ms after adding starts, 1 worker (concurrency ${concurrency}); latency = processor start - due time`);
    const warm = await repDue(connection, admin, Math.max(1, Math.min(Math.floor(dueCount / 10), 200)));
    log(`warm-up: p50 ${warm.p50.toFixed(0)} us, p99 ${warm.p99.toFixed(0)} us (not counted)`);
    for (let r = 1; r <= reps; r++) {
      const x = await repDue(connection, admin, dueCount);
      log(`rep ${r}/${reps}: p50 ${x.p50.toFixed(0)} us, p99 ${x.p99.toFixed(0)} us (min ${x.min.toFixed(0)}, max ${x.max.toFixed(0)})`);
      figures.push(x[pct]);
    }
  } else {
    log(`${mode}: ${events} events of 100 bytes (JSON), ${workers} worker(s) x concurrency ${concurrency}, producer ${producer === 'bulk' ? `addBulk x${CHUNK}` : `add, ${CHUNK} in flight`}, completed jobs kept`);
    const warm = await repE2E(connection, admin, Math.max(1, Math.min(Math.floor(events / 10), 2000)));
    log(`warm-up: ${warm.rate.toFixed(0)} events/s (not counted)`);
    for (let r = 1; r <= reps; r++) {
      const x = await repE2E(connection, admin, events);
      log(`rep ${r}/${reps}: ${x.rate.toFixed(0)} events/s (published in ${x.pubMs.toFixed(0)} ms, all completed in ${x.totalMs.toFixed(0)} ms; ${x.counts.completed} completed jobs in redis)`);
      figures.push(x.rate);
    }
  }
  await stopRedis(admin);
  const m = median(figures);
  const unit = mode === 'due' ? `us (${pct} latency, due -> processor start)` : 'events/s';
  log(`median of ${reps}: ${m.toFixed(mode === 'due' ? 0 : 1)} ${unit}`);
  process.stdout.write(`${m.toFixed(mode === 'due' ? 0 : 1)}\n`, () => process.exit(0));
}

main().catch((e) => die(`error: ${e && e.stack ? e.stack : e}`));
