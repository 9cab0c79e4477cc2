/* Errors are values: every fallible call fills an ff_err and returns its code,
 * so the CLI alone decides what reaches the user and with which exit status. */
#ifndef FF_ERR_H
#define FF_ERR_H

#include <stddef.h>

/* Exit codes are part of the public contract (README, "Exit codes"). */
enum {
    FF_OK = 0,
    FF_EIO = 1,      /* bad input, I/O, anything not listed below */
    FF_EUSAGE = 2,   /* command line */
    FF_EPLAN = 3,    /* the plan breaks an invariant: nothing written */
    FF_EDOCTOR = 4,  /* doctor found a problem quantize refuses to work around */
    FF_ECLASS = 5,   /* diff: architecture classes differ */
    FF_EVERIFY = 6,  /* verify: output failed a check */
};

typedef struct ff_err {
    int code;
    int oom;         /* an allocation failed (ff_oom): not a fact about the input */
    char msg[1024];
} ff_err;

/* Sets the message (printf-style) and returns code, so callers can write
 * `return ff_fail(e, FF_EIO, "...")`. A NULL e is allowed. */
int ff_fail(ff_err *e, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* An allocation failed: FF_EIO with e->oom set, so a caller that must tell a
 * full memory from bad input (doctor's findings, the plan's geometry,
 * verify's verdict) reads a flag, not the message. */
int ff_oom(ff_err *e, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Prefixes context ("file: ") onto an existing message; returns e->code. */
int ff_wrap(ff_err *e, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#endif
