/*
 * The library's own version: compiled here, so that a program reads the
 * version of the library it runs with, not the header it was built with.
 */
#include "troupe/version.h"

const char *
troupe_version(void)
{
    return TROUPE_VERSION_STRING;
}

int
troupe_version_number(void)
{
    return TROUPE_VERSION_NUMBER;
}
