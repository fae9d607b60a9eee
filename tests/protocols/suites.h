/* The suites of check_protocols, one per unit. */
#ifndef TROUPE_TESTS_PROTOCOLS_SUITES_H
#define TROUPE_TESTS_PROTOCOLS_SUITES_H

#include "tsupport.h"

Suite *
wire_suite(void);
Suite *
malformed_suite(void);
Suite *
pack_suite(void);
Suite *
read_suite(void);
Suite *
transport_suite(void);
Suite *
security_suite(void);

#endif
