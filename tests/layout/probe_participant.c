/* Includes the table module's participant protocol: only a module that
 * names table in its DEPS (or a target linking troupe_table_internal)
 * may (tests/layout/CMakeLists.txt). */
#include "troupe/internal/participant.h"

int
main(void)
{
    return TROUPE__PART_PREPARE == 7 ? 0 : 1;
}
