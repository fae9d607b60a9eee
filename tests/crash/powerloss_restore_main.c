/*
 * powerloss_restore DIR [JOURNAL]: rolls DIR back to what the power-loss
 * shim recorded as durable (powerloss.h), for use by hand or from scripts
 * after the process that ran under the shim was killed.
 */
#include <stdio.h>

#include "powerloss.h"

int
main(int argc, char **argv)
{
    if (argc < 2 || argc > 3) {
        fprintf(stderr, "usage: %s DIR [JOURNAL]\n", argv[0]);
        return 2;
    }
    pl_restore_stats st;
    if (pl_restore(argv[1], argc == 3 ? argv[2] : NULL, &st) != 0)
        return 1;
    if (!st.journal) {
        printf("no journal: nothing to restore\n");
        return 0;
    }
    printf("restored %u files (%u changed), deleted %u; %llu -> %llu bytes\n",
           st.files_kept, st.files_cut, st.files_gone,
           (unsigned long long)st.bytes_before,
           (unsigned long long)st.bytes_after);
    return 0;
}
