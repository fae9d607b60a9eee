#include "tsupport.h"

Suite *
err_suite(void);
Suite *
msg_suite(void);
Suite *
actor_suite(void);
Suite *
ask_suite(void);
Suite *
lifecycle_suite(void);
Suite *
ids_suite(void);
Suite *
remote_suite(void);
Suite *
budget_suite(void);
Suite *
version_suite(void);
Suite *
log_suite(void);
Suite *
sched_stats_suite(void);
Suite *
hist_suite(void);
Suite *
block_suite(void);
Suite *
dispatch_suite(void);
Suite *
completion_suite(void);

int
main(void)
{
    Suite *s[] = {err_suite(),    msg_suite(),       actor_suite(),
                  ask_suite(),    lifecycle_suite(), ids_suite(),
                  remote_suite(), budget_suite(),    version_suite(),
                  log_suite(),    block_suite(),     sched_stats_suite(),
                  hist_suite(),   dispatch_suite(),  completion_suite()};
    return ts_run_suites(s, (int)(sizeof(s) / sizeof(s[0])));
}
