/* libcurl opened at probe time: found, refused with the library named when
 * it is missing, and refused when the library opened is not libcurl. */
#include <string.h>

#include "curl_api.h"
#include "unit.h"

static void test_opens_libcurl(void)
{
    curl_api api;
    ff_err e = {0};
    CHECK_EQ_INT(curl_api_open(&api, "libcurl.so.4", &e), FF_OK);
    CHECK(api.lib != NULL);   /* this binary does not link it */
    CURL *c = api.easy_init();
    CHECK(c != NULL);
    CHECK_EQ_INT(api.easy_setopt(c, CURLOPT_NOSIGNAL, 1L), CURLE_OK);
    CHECK(strlen(api.easy_strerror(CURLE_COULDNT_CONNECT)) > 0);
    api.easy_cleanup(c);
    curl_api_close(&api);
    CHECK(api.lib == NULL);
}

static void test_missing_library_is_named(void)
{
    curl_api api;
    ff_err e = {0};
    CHECK_EQ_INT(curl_api_open(&api, "libcurl-not-here.so.99", &e), FF_EIO);
    CHECK(strstr(e.msg, "libcurl-not-here.so.99") != NULL);
    CHECK(strstr(e.msg, "install libcurl4") != NULL);
}

static void test_library_without_the_calls(void)
{
    curl_api api;
    ff_err e = {0};
    CHECK_EQ_INT(curl_api_open(&api, "libm.so.6", &e), FF_EIO);
    CHECK(strstr(e.msg, "libm.so.6 has no curl_global_init") != NULL);
    CHECK(api.lib == NULL);
}

int main(void)
{
    RUN(test_opens_libcurl);
    RUN(test_missing_library_is_named);
    RUN(test_library_without_the_calls);
    return UNIT_END();
}
