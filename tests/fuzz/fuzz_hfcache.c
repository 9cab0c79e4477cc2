/* Cache-name resolution: the input's first line is the name given on the
 * command line, the rest the content of its refs/main in a scratch cache
 * that holds that repo's folder. Names with '..', '/', '@', NULs and
 * oversized revisions: resolved inside the scratch cache or refused, never
 * a crash or a path outside it. */
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "fuzz_util.h"
#include "hfcache.h"

static void scratch_repo(const char *org_name)
{
    char path[512];
    snprintf(path, sizeof path, "%s/models--%s", fz_dir(), org_name);
    for (char *p = path + strlen(fz_dir()) + 1; *p; p++)
        if (*p == '/')
            *p = '-';
    mkdir(path, 0700);
    char refs[600], snaps[600];
    snprintf(refs, sizeof refs, "%s/refs", path);
    snprintf(snaps, sizeof snaps, "%s/snapshots", path);
    mkdir(refs, 0700);
    mkdir(snaps, 0700);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const uint8_t *nl = memchr(data, '\n', size);
    size_t nlen = nl ? (size_t)(nl - data) : size;
    if (nlen == 0 || nlen > 300)
        return 0;
    char name[301];
    memcpy(name, data, nlen);
    name[nlen] = 0;
    if (strlen(name) != nlen)
        return 0;   /* argv holds no NUL */
    scratch_repo("org/name");
    char ref[256];
    fz_path(ref, sizeof ref, "models--org--name/refs/main");
    FILE *f = fopen(ref, "wb");
    if (f) {
        if (nl)
            fwrite(nl + 1, 1, size - nlen - 1, f);
        fclose(f);
    }
    hf_env env = {.hub_cache = fz_dir()};
    hf_ref r = {0};
    ff_err e;
    if (hfcache_lookup(name, &env, &r, &e) == FF_OK && r.dir && strncmp(r.dir, fz_dir(), strlen(fz_dir())) != 0)
        abort();   /* a snapshot outside the cache it was looked up in */
    hf_ref_free(&r);
    (void)hfcache_is_name(name);
    return 0;
}
