/*
 * The catalog's DDL order (troupe/internal/catalog.h): one FIFO of jobs
 * per catalog, of which only the head runs, a step at a time. Owns the
 * queue fields (dq_head, dq_tail, dq_busy) of struct troupe_catalog,
 * guarded by `mu`.
 *
 * A job is a state machine of short steps rather than one function that
 * blocks its worker: a table drop waits for the table actor to quiesce,
 * and the actor's write preparations need a STORAGE worker; a job that
 * held the worker through that wait would wait on itself whenever the
 * lane has one thread (and on every thread it holds in general). So a
 * step that starts something asynchronous returns WAIT and frees its
 * thread; the completion calls troupe__ddl_resume, which queues the next
 * step on the lane. Waiting is a state of the job, never a thread.
 *
 * Only the head runs, so each change sees the catalog the previous one
 * left without a lock held across steps. Each step is its own lane job
 * with no completion (troupe_runtime_work_in, done NULL), so neither the
 * steps nor a job's done need scheduler 0: a _wait form works from a
 * host thread in embedded mode before the host runs its loop. When the
 * lane refuses (ECLOSED at shutdown, ENOMEM) the step runs on the calling
 * thread: the job still completes exactly once.
 */
#include "catalog_int.h"

static void
ddl_step_fn(void *arg);

/* The job's next step to the lane, or, when the lane refuses, false. */
static bool
ddl_to_lane(troupe__ddl *job)
{
    return troupe_runtime_work_in(job->cat->rt, TROUPE_LANE_STORAGE, 0,
                                  ddl_step_fn, NULL, job) == TROUPE_OK;
}

/* Ends the head job: the next one becomes the head (returned), or the
 * queue goes idle (NULL), and a stopping catalog whose queue drained is
 * told so. job->done may free job. */
static troupe__ddl *
ddl_end(troupe__ddl *job)
{
    troupe_catalog *c = job->cat;
    pthread_mutex_lock(&c->mu);
    troupe__ddl *next = c->dq_head;
    if (next != NULL) {
        c->dq_head = next->next;
        if (c->dq_head == NULL)
            c->dq_tail = NULL;
    } else {
        c->dq_busy = false;
    }
    bool stopped = next == NULL && c->state == CATALOG_STOPPING;
    pthread_mutex_unlock(&c->mu);
    job->done(job);
    if (stopped)
        troupe__catalog_stopped(c);
    return next;
}

/* Runs job's steps on this thread until one waits; each job that ends
 * hands the next to the lane, or runs it here when the lane refuses. */
static void
ddl_run(troupe__ddl *job)
{
    while (job != NULL) {
        troupe__ddl_step r;
        do
            r = job->step(job);
        while (r == TROUPE__DDL_NEXT);
        if (r == TROUPE__DDL_WAIT)
            return;
        job = ddl_end(job);
        if (job != NULL && ddl_to_lane(job))
            return;
    }
}

static void
ddl_step_fn(void *arg)
{
    ddl_run(arg);
}

troupe_err
troupe__ddl_submit(troupe__ddl *job)
{
    troupe_catalog *c = job->cat;
    job->next = NULL;
    pthread_mutex_lock(&c->mu);
    if (c->state != CATALOG_RUNNING) {
        pthread_mutex_unlock(&c->mu);
        return TROUPE_ESTATE;
    }
    bool head = !c->dq_busy;
    if (head) {
        c->dq_busy = true;
    } else {
        if (c->dq_tail != NULL)
            c->dq_tail->next = job;
        else
            c->dq_head = job;
        c->dq_tail = job;
    }
    pthread_mutex_unlock(&c->mu);
    if (head)
        troupe__ddl_resume(job);
    return TROUPE_OK;
}

void
troupe__ddl_resume(troupe__ddl *job)
{
    if (!ddl_to_lane(job))
        ddl_run(job);
}
