#include "curl_api.h"

#include <dlfcn.h>
#include <stddef.h>
#include <string.h>

static const struct {
    const char *name;
    size_t at;
} CALLS[] = {
    {"curl_global_init", offsetof(curl_api, global_init)},
    {"curl_global_cleanup", offsetof(curl_api, global_cleanup)},
    {"curl_easy_init", offsetof(curl_api, easy_init)},
    {"curl_easy_setopt", offsetof(curl_api, easy_setopt)},
    {"curl_easy_perform", offsetof(curl_api, easy_perform)},
    {"curl_easy_getinfo", offsetof(curl_api, easy_getinfo)},
    {"curl_easy_strerror", offsetof(curl_api, easy_strerror)},
    {"curl_easy_cleanup", offsetof(curl_api, easy_cleanup)},
    {"curl_slist_append", offsetof(curl_api, slist_append)},
    {"curl_slist_free_all", offsetof(curl_api, slist_free_all)},
};

/* Every call from `from` (RTLD_DEFAULT or a handle); the first missing name
 * when one is, else NULL. POSIX lets dlsym's object pointer be stored as a
 * function pointer, which is what the copy does. */
static const char *resolve(curl_api *api, void *from)
{
    for (size_t i = 0; i < sizeof CALLS / sizeof *CALLS; i++) {
        void *f = dlsym(from, CALLS[i].name);
        if (!f)
            return CALLS[i].name;
        memcpy((char *)api + CALLS[i].at, &f, sizeof f);
    }
    return NULL;
}

int curl_api_open(curl_api *api, const char *soname, ff_err *e)
{
    memset(api, 0, sizeof *api);
    if (resolve(api, RTLD_DEFAULT)) {
        api->lib = dlopen(soname, RTLD_NOW | RTLD_LOCAL);
        if (!api->lib)
            return ff_fail(e, FF_EIO, "probe needs libcurl (%s), which could not be opened: %s; "
                           "install libcurl4 (Debian/Ubuntu) or the fp4forge wheel", soname, dlerror());
        const char *missing = resolve(api, api->lib);
        if (missing) {
            dlclose(api->lib);
            api->lib = NULL;
            return ff_fail(e, FF_EIO, "%s has no %s: not a libcurl 7 or 8", soname, missing);
        }
    }
    if (api->global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK) {
        curl_api_close(api);
        return ff_fail(e, FF_EIO, "libcurl failed to initialise");
    }
    return FF_OK;
}

void curl_api_close(curl_api *api)
{
    if (api->global_cleanup)
        api->global_cleanup();
    if (api->lib)
        dlclose(api->lib);
    memset(api, 0, sizeof *api);
}
