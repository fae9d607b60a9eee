#include "suites.h"

int
main(void)
{
    Suite *suites[] = {wire_suite(), malformed_suite(), pack_suite(),
                       read_suite(), transport_suite(), security_suite()};
    return ts_run_suites(suites, (int)(sizeof(suites) / sizeof(suites[0])));
}
