#include "troupe/err.h"

const char *
troupe_strerror(troupe_err err)
{
    switch (err) {
#define TROUPE_ERR_TEXT(name, num, text)                                       \
    case TROUPE_##name:                                                        \
        return text;
        TROUPE_ERR_LIST(TROUPE_ERR_TEXT)
#undef TROUPE_ERR_TEXT
    }
    return "unknown error";
}

const char *
troupe_err_name(troupe_err err)
{
    switch (err) {
#define TROUPE_ERR_NAME(name, num, text)                                       \
    case TROUPE_##name:                                                        \
        return #name;
        TROUPE_ERR_LIST(TROUPE_ERR_NAME)
#undef TROUPE_ERR_NAME
    }
    return "UNKNOWN_ERROR";
}
