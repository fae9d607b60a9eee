#include "tsupport.h"

Suite *
kv_suite(void);

int
main(void)
{
    Suite *s[] = {kv_suite()};
    return ts_run_suites(s, (int)(sizeof(s) / sizeof(s[0])));
}
