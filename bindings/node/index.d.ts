// Types of troupe's Node binding (index.js; README.md says how to use it).

/** Raw key bytes: a string is taken as UTF-8. */
export type Key = string | Buffer | Uint8Array;
/** A document: one msgpack map. */
export type Doc = Record<string, unknown>;

export interface OpenOptions {
    /** Scheduler threads (0: one per core, at most 256). */
    schedulers?: number;
    /** Storage threads (0: 4, at most 256). */
    workers?: number;
    /** Durability of every write: 'default' (the database's), 'on' (synced
     * before the Promise resolves) or 'off'; true/false for 'on'/'off'. */
    sync?: 'default' | 'on' | 'off' | boolean;
    /** Requests in flight the node takes before the binding queues them in
     * JS (default 4096). */
    maxRequests?: number;
    /** Bytes of results not yet taken before requests queue (default 64 MiB). */
    maxBytes?: number;
    /** The coordinator's options (0 or absent: its defaults, 8 shards,
     * backoff 10 s doubling to 300 s; sync as the node's). */
    coordinator?: { shards?: number; retryMinMs?: number; retryMaxMs?: number;
                    sync?: 'default' | 'on' | 'off' | boolean };
}

/** A branch's call: [pull target, payload]; a Buffer or string payload
 * goes as its bytes, anything else is packed as msgpack. */
export type GtxCall = [string, Buffer | Uint8Array | string | unknown];

export interface SagaStep {
    action: GtxCall;
    compensate?: GtxCall | null;
}

export interface SagaOptions {
    timeoutToFailMs?: number;
    /** 0: retry an action for ever */
    retryLimit?: number;
    /** every action whose dependencies succeeded runs at once */
    concurrent?: boolean;
    /** with concurrent: bit j of after[i] set when step i waits for step j */
    after?: Array<number | bigint>;
}

/** A call of a global transaction's branch, as a branch handler gets it. */
export interface Branch {
    mode: 'saga' | 'tcc' | 'msg' | string;
    gid: string;
    /** "01".., "00" for a message's query-back */
    branchId: string;
    op: 'action' | 'compensate' | 'confirm' | 'cancel' | 'msg' | string;
    payload: Buffer;
    /** the number of this dispatch: 1 the first */
    attempt: number;
    /** Unix ms: an answer after it is refused (the call is UNKNOWN) */
    deadline: number;
    /** The payload decoded as msgpack (a non-bytes payload was packed so). */
    value(): unknown;
}

/** undefined or true SUCCESS, false FAILURE, or the outcome's name or number. */
export type BranchOutcome = boolean | undefined | null | 'success' | 'failure' | 'ongoing' |
    'unknown' | 1 | 2 | 3 | 4;

export type BarrierVerdict = 'execute' | 'null_compensation' | 'duplicated';

export interface GtxOp {
    op: string;
    target: string;
    state: 'todo' | 'dispatched' | 'succeeded' | 'failed';
    attempts: number;
    last: 'success' | 'failure' | 'ongoing' | 'unknown' | null;
}

export interface GtxInfo {
    mode: 'saga' | 'tcc' | 'msg' | string;
    status: 'prepared' | 'submitted' | 'aborting' | 'succeed' | 'failed';
    reason: string;
    steps: number;
    attempts: number;
    created_ms: number;
    updated_ms: number;
    finished_ms: number;
    next_due_ms: number;
    /** a workflow held: diverged from its records, or awaiting an awakeable */
    hold: 'diverged' | 'awaiting' | null;
    /** a workflow's records carry kind, name and version too */
    branches: Array<{ id: string; ops: GtxOp[]; kind?: 'step' | 'awakeable' | 'version';
                      name?: string; version?: number }>;
}

/** What a step's fn gets: the barrier's branch (pass it to tx.barrier). */
export interface StepContext {
    mode: 'workflow';
    gid: string;
    /** the step's position, "01".. */
    branchId: string;
    op: 'action';
    /** the run's dispatch number */
    attempt: number;
}

/** A step's result: bytes as they are, anything else packed as msgpack. */
export type StepResult = Buffer | Uint8Array | string | unknown;

/** A workflow function's handle on its run (valid during the run only). */
export interface WorkflowRun {
    readonly gid: string;
    readonly attempt: number;
    readonly deadline: number;
    /** The memoized result of step `name`, or runs fn once now (a new step
     * is registered first: the run stops with a Suspend). Rejects with a
     * WorkflowFailure when fn threw one. */
    step(name: string, fn: (ctx: StepContext) => StepResult | Promise<StepResult>,
         opts?: { compensate?: { target: string; payload?: StepResult } | null }): Promise<Buffer>;
    /** Awakeable `name`'s id ("gid/branch-id"); throws a Suspend while it is
     * being registered. */
    awakeable(name: string): string;
    /** Its resolution; a Suspend until then; a WorkflowFailure if rejected. */
    await(id: string): Promise<Buffer>;
    /** Version marker `change`: the recorded version, max the first time,
     * VERSION_DEFAULT (-1) for an instance older than the marker. */
    version(change: string, min: number, max: number): number;
}

export type WorkflowFn = (wf: WorkflowRun, input: Buffer) => Promise<unknown> | unknown;

/** Every failure: `code` is troupe's name of it ('ECONFLICT', 'ENOTABLE',
 * 'ECLOSED', ...), `errno` its number (troupe/err.h). */
export class TroupeError extends Error {
    readonly code: string;
    readonly errno: number;
    /** ECONFLICT of a commit: the (table, key) pairs that conflicted. */
    conflicts?: Conflict[];
}

export interface Conflict {
    table: string;
    key: Buffer;
    /** TROUPE_CONFLICT_* bits: 1 stale read, 2 reserved unique value. */
    kinds: number;
}

export interface IndexSpec {
    name: string;
    /** [path, type]: type one of string, int, float, bool, timestamp,
     * bytes, string_casefold. */
    fields: [string, string][];
    unique?: boolean;
}

export interface ScanOptions {
    start?: Key;
    end?: Key;
    /** The cursor of the previous page. */
    after?: Buffer | null;
    /** Rows per page (default 100). */
    limit?: number;
    reverse?: boolean;
}

export interface Page<T> {
    cursor: Buffer | null;
    more: boolean;
    rows: T[];
}

export interface Row {
    key: Buffer;
    value: Doc;
}

export interface QueryOptions {
    /** Leading values, equal. */
    values?: unknown[];
    /** Leading values, a range. */
    from?: unknown[];
    to?: unknown[];
    after?: Buffer | null;
    limit?: number;
    reverse?: boolean;
    /** Hits carry the rows' documents (else the entries' values). */
    rows?: boolean;
}

export interface Hit {
    key: Buffer;
    pk: Buffer;
    value: unknown;
}

export interface QueryPage {
    hits: Hit[];
    cursor: Buffer | null;
    more: boolean;
}

export interface QueueEvent {
    queue: string;
    id: string;
    key: string;
    payload: unknown;
    /** 1 for the first delivery, + 1 for each redelivery. */
    attempt: number;
    /** The runnable time, Unix ms. */
    time: number;
    partition: number;
    owner: { kind: string; id: string } | null;
    /** Unix ms: a resolution after it no longer counts. */
    deadline: number;
}

export interface PublishEvent {
    id: Key;
    /** Business key (default: the id). */
    key?: Key;
    payload?: unknown;
    /** Due time: Unix ms or a Date (default: now). */
    time?: number | Date;
}

/** What a queue handler resolves to: nothing acks the event; a
 * reschedule moves it to that time (Unix ms or a Date). A throw or a
 * rejection leaves it pending: delivered again with attempt + 1. */
export type QueueResult = void | undefined | { reschedule: number | Date };

export interface SubscribeOptions {
    /** Events handed to the handler at once (default 64, at most 65536). */
    concurrency?: number;
    /** Ms for a handler to settle before the event counts as UNKNOWN
     * (pending again); default 30000. */
    timeoutMs?: number;
}

export interface Task {
    kind: number;
    attempt: number;
    deadline: number;
    header: Buffer;
    body: Buffer;
}

export type Outcome = 'SUCCESS' | 'FAILURE' | 'ONGOING' | 'UNKNOWN' | 1 | 2 | 3 | 4;
export type TaskResult = void | undefined | { outcome: Outcome; body?: Key };

export interface Subscription {
    readonly name: string;
    readonly concurrency: number;
    /** Handlers running now. */
    readonly inFlight: number;
}

export interface ActorMessage {
    kind: number;
    /** true when the sender waits for a reply */
    ask: boolean;
    tag: number;
    /** Unix ms: an answer after it is refused */
    deadline: number;
    body: Buffer;
}

export type ActorReply = Buffer | Uint8Array | string | undefined | null;

export interface Transaction {
    get(table: string, key: Key): Promise<Doc | undefined>;
    put(table: string, key: Key, doc: Doc): void;
    delete(table: string, key: Key): void;
    /** Rejects with a TroupeError: ECONFLICT carries `conflicts`. */
    commit(): Promise<void>;
    rollback(): void;
    /** The barrier for a branch inside this transaction: do the business
     * writes only on 'execute'; commit in every case. */
    barrier(branch: Pick<Branch, 'mode' | 'gid' | 'branchId' | 'op'>): Promise<BarrierVerdict>;
    /** Prepares this transaction as a branch of xa gid; resolves with its
     * branch id once its writes are held (ends the transaction). */
    xaBranch(gid: string): Promise<string>;
}

export interface Node {
    readonly closed: boolean;
    createTable(name: string, indexes?: IndexSpec[]): Promise<void>;
    get(table: string, key: Key): Promise<Doc | undefined>;
    put(table: string, key: Key, doc: Doc): Promise<void>;
    /** true when a row was deleted, false when there was none. */
    delete(table: string, key: Key): Promise<boolean>;
    scan(table: string, opts?: ScanOptions): Promise<Page<Row>>;
    query(table: string, index: string, opts?: QueryOptions): Promise<QueryPage>;
    begin(): Transaction;
    /** maxAttempts: an event delivered that many times without an
     * outcome is parked instead of delivered again (default: no limit). */
    createQueue(name: string, opts?: { partitions?: number; retentionMs?: number;
                                       maxAttempts?: number }): Promise<void>;
    publish(queue: string, event: PublishEvent): Promise<void>;
    subscribe(queue: string, handler: (ev: QueueEvent) => QueueResult | Promise<QueueResult>,
              opts?: SubscribeOptions): Subscription;
    /** Serves actor `name` (addressable from this node and others):
     * handler's return (bytes, a string or nothing) answers an ask; a
     * throw answers EFAILED with the error's message as the detail. */
    serveActor(name: string, handler: (msg: ActorMessage) => ActorReply | Promise<ActorReply>,
               opts?: SubscribeOptions & { tag?: number; target?: string }): Subscription;
    /** Asks actor `name`: the reply's body, or a TroupeError (EFAILED with
     * `detail`, EUNKNOWN when no outcome came, ETIMEDOUT). */
    ask(name: string, kind: number, body?: Key, opts?: { timeoutMs?: number }): Promise<Buffer>;
    /** A raw pull target: tasks its producers submit, answered by handler. */
    serve(target: string, handler: (t: Task) => TaskResult | Promise<TaskResult>,
          opts?: SubscribeOptions): Subscription;
    /** Submits saga gid; resolves once committed (also when gid exists). */
    sagaSubmit(gid: string, steps: SagaStep[], opts?: SagaOptions): Promise<void>;
    tccPrepare(gid: string): Promise<void>;
    /** Begins xa gid: branches by tx.xaBranch, then gtxSubmit or gtxAbort. */
    xaBegin(gid: string): Promise<void>;
    /** Resolves with the branch id, after which the branch's try may run. */
    tccRegister(gid: string, confirm: GtxCall, cancel: GtxCall): Promise<string>;
    msgPrepare(gid: string, steps: GtxCall[], queryTarget: string,
               opts?: { graceMs?: number }): Promise<void>;
    gtxSubmit(gid: string): Promise<void>;
    gtxAbort(gid: string, reason?: string): Promise<void>;
    gtxRetry(gid: string): Promise<void>;
    gtxForceStop(gid: string): Promise<void>;
    gtxQuery(gid: string): Promise<GtxInfo>;
    /** Stored transactions in gid order after `after`, filtered. */
    gtxList(opts?: { status?: GtxInfo['status']; mode?: string; after?: string; limit?: number }):
        Promise<{ items: Array<Omit<GtxInfo, 'branches' | 'next_due_ms'> & { gid: string }>;
                  cursor: string | null; more: boolean }>;
    /** Polls the query until the status is one of statuses (default
     * succeed, failed). */
    gtxWait(gid: string, opts?: { statuses?: string[]; timeoutMs?: number }): Promise<GtxInfo>;
    /** Serves the branches whose calls name target; a throw is UNKNOWN
     * (logged, retried after the backoff). */
    branchHandler(target: string, handler: (b: Branch) => BranchOutcome | Promise<BranchOutcome>,
                  opts?: SubscribeOptions): Subscription;
    /** Registers workflow `name` (a pull target of that name). */
    workflow(name: string, fn: WorkflowFn, opts?: SubscribeOptions): Subscription;
    /** Submits instance gid of workflow `name`; resolves once committed
     * (also when gid exists). */
    workflowSubmit(gid: string, name: string, input?: StepResult): Promise<void>;
    awakeableResolve(id: string, payload?: StepResult): Promise<void>;
    awakeableReject(id: string, reason?: StepResult): Promise<void>;
    /** Fails every request still pending with ECLOSED, then closes the node. */
    close(): Promise<void>;
}

/** Thrown from a step's fn: the step fails with result (default: the
 * message's bytes). wf.step/wf.await reject with one; one that leaves the
 * workflow fails it (compensating every registered step, in reverse). */
export class WorkflowFailure extends Error {
    constructor(message: string, result?: StepResult);
    readonly result: Buffer;
    readonly step?: string;
    readonly awakeable?: string;
}
/** Whether e is the signal that stops a run: a catch must rethrow it. */
export function isSuspend(e: unknown): boolean;
export const VERSION_DEFAULT: -1;

export const OUTCOME: { SUCCESS: 1; FAILURE: 2; ONGOING: 3; UNKNOWN: 4 };
export function open(dir: string, opts?: OpenOptions): Promise<Node>;
/** The libtroupe.so this process loads: $TROUPE_LIB, else the build tree's,
 * else the system's libtroupe.so.0. */
export function libraryPath(): string;
