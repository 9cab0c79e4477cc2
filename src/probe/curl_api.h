/* libcurl, opened when a probe runs instead of when the program starts.
 *
 * Why: linked, libcurl brings ~30 libraries (TLS, Kerberos, LDAP, IDN) that
 * the loader maps and initialises before main on every command; a program
 * that only prints a line took 4.6 ms with them and 0.7 ms without on the
 * 2-core VM (perf stat -r 100), and quantize, which never speaks HTTP, paid
 * it at the head of every run. A binary that does link libcurl (the wheel:
 * auditwheel bundles only what is linked) is served from the loaded copy. */
#ifndef FF_CURL_API_H
#define FF_CURL_API_H

#include <curl/curl.h>

#include "ff_err.h"

/* The libcurl calls probe makes. */
typedef struct curl_api {
    CURLcode (*global_init)(long flags);
    void (*global_cleanup)(void);
    CURL *(*easy_init)(void);
    CURLcode (*easy_setopt)(CURL *c, CURLoption opt, ...);
    CURLcode (*easy_perform)(CURL *c);
    CURLcode (*easy_getinfo)(CURL *c, CURLINFO info, ...);
    const char *(*easy_strerror)(CURLcode rc);
    void (*easy_cleanup)(CURL *c);
    struct curl_slist *(*slist_append)(struct curl_slist *list, const char *s);
    void (*slist_free_all)(struct curl_slist *list);
    void *lib;   /* dlopen handle; NULL when the calls came from the program */
} curl_api;

/* Finds the calls in the program, else opens soname ("libcurl.so.4"), and
 * runs curl_global_init. FF_EIO, naming the library, when it is missing. */
int curl_api_open(curl_api *api, const char *soname, ff_err *e);
/* curl_global_cleanup, then closes what curl_api_open opened. */
void curl_api_close(curl_api *api);

#endif
