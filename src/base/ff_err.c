#include "ff_err.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

int ff_fail(ff_err *e, int code, const char *fmt, ...)
{
    if (!e)
        return code;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->msg, sizeof e->msg, fmt, ap);
    va_end(ap);
    e->code = code;
    e->oom = 0;
    return code;
}

int ff_oom(ff_err *e, const char *fmt, ...)
{
    if (!e)
        return FF_EIO;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->msg, sizeof e->msg, fmt, ap);
    va_end(ap);
    e->code = FF_EIO;
    e->oom = 1;
    return FF_EIO;
}

int ff_wrap(ff_err *e, const char *fmt, ...)
{
    if (!e)
        return FF_EIO;
    char prefix[512], old[sizeof e->msg];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(prefix, sizeof prefix, fmt, ap);
    va_end(ap);
    memcpy(old, e->msg, sizeof old);
    size_t n = strlen(prefix);
    if (n >= sizeof e->msg)
        n = sizeof e->msg - 1;
    memcpy(e->msg, prefix, n);
    size_t m = strlen(old);
    if (m > sizeof e->msg - 1 - n)
        m = sizeof e->msg - 1 - n;
    memcpy(e->msg + n, old, m);
    e->msg[n + m] = 0;
    return e->code;
}
