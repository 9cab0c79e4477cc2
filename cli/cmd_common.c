#include "cmd_common.h"

#include <string.h>
#include <sys/resource.h>

void recipe_from_cli(const cli_args *a, recipe_args *r)
{
    memset(r, 0, sizeof *r);
    int it = 0, n = 0;
    const char *v;
    while ((v = cli_next(a, "--ignore", &it)))
        r->ignore[n++] = v;
    r->opts.ignore_re = r->ignore;
    r->opts.nignore = n;
    it = n = 0;
    while ((v = cli_next(a, "--only", &it)))
        r->only[n++] = v;
    r->opts.only_re = r->only;
    r->opts.nonly = n;
    r->opts.allow_router = cli_flag(a, "--allow-router-quantization");
    r->opts.allow_partial = cli_flag(a, "--allow-partial");
}

uint64_t peak_rss_bytes(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (uint64_t)ru.ru_maxrss * 1024;
}
