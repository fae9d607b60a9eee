/*
 * check_storage: one Check binary for the storage module.
 *
 * Plain run: the engine, batch/read/scan, key codec and commit pipeline
 * suites. With TROUPE_CHECK_FAULTS=1 (the storage_faults CTest entry, which
 * also sets LD_PRELOAD to the fault shim) only the fault-injection suite
 * runs: it needs the shim in the process from the start.
 */
#include <stdlib.h>

#include "stest.h"

int
main(void)
{
    const char *faults = getenv("TROUPE_CHECK_FAULTS");
    if (faults != NULL && *faults != '\0' && *faults != '0') {
        Suite *s[] = {storage_faults_suite()};
        return ts_run_suites(s, 1);
    }
    Suite *s[] = {storage_engine_suite(),   storage_scan_suite(),
                  storage_keycodec_suite(), storage_commit_suite(),
                  storage_log_suite(),      storage_readonly_suite()};
    return ts_run_suites(s, (int)(sizeof(s) / sizeof(s[0])));
}
