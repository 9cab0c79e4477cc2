/* Minimal unit-test harness: CHECK records and continues, the test binary
 * prints one "PASS/FAIL name" line per test and exits non-zero on failure. */
#ifndef FF_UNIT_H
#define FF_UNIT_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int unit_failed_checks;
static int unit_tests_passed, unit_tests_failed;

#define CHECK(cond)                                                                     \
    do {                                                                                \
        if (!(cond)) {                                                                  \
            fprintf(stderr, "  %s:%d: CHECK(%s) failed\n", __FILE__, __LINE__, #cond);  \
            unit_failed_checks++;                                                       \
        }                                                                               \
    } while (0)

#define CHECK_EQ_INT(a, b)                                                              \
    do {                                                                                \
        long long _a = (long long)(a), _b = (long long)(b);                             \
        if (_a != _b) {                                                                 \
            fprintf(stderr, "  %s:%d: %s == %lld, expected %s == %lld\n", __FILE__,      \
                    __LINE__, #a, _a, #b, _b);                                          \
            unit_failed_checks++;                                                       \
        }                                                                               \
    } while (0)

#define RUN(fn)                                                                         \
    do {                                                                                \
        int _before = unit_failed_checks;                                               \
        fn();                                                                           \
        if (unit_failed_checks == _before) {                                            \
            printf("PASS %s\n", #fn);                                                   \
            unit_tests_passed++;                                                        \
        } else {                                                                        \
            printf("FAIL %s\n", #fn);                                                   \
            unit_tests_failed++;                                                        \
        }                                                                               \
    } while (0)

#define UNIT_END() (unit_tests_failed ? 1 : 0)

#endif
