#include "tsupport.h"

Suite *
common_suite(void);
Suite *
kv_suite(void);
Suite *
table_suite(void);
Suite *
index_suite(void);
Suite *
txn_suite(void);
Suite *
ttl_suite(void);
Suite *
queue_suite(void);
Suite *
hostile_suite(void);
Suite *
lanes_suite(void);
Suite *
catalog_suite(void);
Suite *
errors_suite(void);
Suite *
hostactor_suite(void);
Suite *
barrier_suite(void);
Suite *
gtx_suite(void);
Suite *
coord_suite(void);
Suite *
workflow_suite(void);
Suite *
httpsaga_suite(void);
Suite *
xa_suite(void);
Suite *
xagtx_suite(void);

int
main(void)
{
    Suite *s[] = {
        common_suite(),   kv_suite(),      table_suite(),  index_suite(),
        txn_suite(),      ttl_suite(),     queue_suite(),  hostile_suite(),
        lanes_suite(),    catalog_suite(), errors_suite(), hostactor_suite(),
        barrier_suite(),  gtx_suite(),     coord_suite(),  workflow_suite(),
        httpsaga_suite(), xa_suite(),      xagtx_suite()};
    return ts_run_suites(s, (int)(sizeof(s) / sizeof(s[0])));
}
