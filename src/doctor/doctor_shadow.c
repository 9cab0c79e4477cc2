#include "doctor_shadow.h"

#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "doctor.h"
#include "fsutil.h"
#include "input_files.h"

/* Weights are linked, never copied: the shadow costs kilobytes. */
static int build_shadow(const char *in_dir, const char *shadow, ff_err *e)
{
    int rc = fs_mkdir_p(shadow, e);
    size_t n = 0;
    char **files = rc ? NULL : fs_list_files(in_dir, &n, e);
    if (!files)
        return rc ? rc : e->code;
    char abs_in[PATH_MAX];
    if (!realpath(in_dir, abs_in))
        rc = ff_fail(e, FF_EIO, "%s: %s", in_dir, strerror(errno));
    for (size_t i = 0; i < n && rc == FF_OK; i++) {
        char *src = fs_join(abs_in, files[i]), *dst = fs_join(shadow, files[i]);
        if (fs_ends_with(files[i], ".safetensors")) {
            if (symlink(src, dst) != 0)
                rc = ff_fail(e, FF_EIO, "%s: cannot link: %s", dst, strerror(errno));
        } else {
            rc = fs_copy_file(src, dst, e);
        }
        free(src);
        free(dst);
    }
    fs_free_list(files, n);
    return rc;
}

int doctor_input_prepare(doctor_input *d, const char *in_dir, const char *out_dir, int fix,
                         const char *aux_from, FILE *out, ff_err *e)
{
    memset(d, 0, sizeof *d);
    d->dir = in_dir;
    int rc = doctor_gate(in_dir, 0, NULL, fix ? NULL : out, e);
    if (rc != FF_EDOCTOR || !fix)
        return rc;
    /* the shadow copies the input's files: a link out of it or a FIFO is
     * refused before anything is copied, as the writer would refuse it */
    const char *inputs[] = {in_dir, NULL};
    if ((rc = input_files_check(inputs, e)))
        return rc;
    d->shadow = fs_shadow_path(out_dir);
    if (!d->shadow)
        return ff_oom(e, "out of memory");
    fs_rm_rf(d->shadow);
    rc = build_shadow(in_dir, d->shadow, e);
    if (!rc)
        rc = doctor_gate(d->shadow, 1, aux_from, out, e);
    if (!rc)
        d->dir = d->shadow;
    return rc;
}

void doctor_input_done(doctor_input *d)
{
    if (d->shadow) {
        fs_rm_rf(d->shadow);
        free(d->shadow);
    }
    memset(d, 0, sizeof *d);
}
