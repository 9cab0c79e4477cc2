/* The files of an input folder that a command copies into its output (and
 * reads for the model card) are the folder's own regular files: a link that
 * leaves the input (README.md -> /etc/shadow) would carry another file into
 * OUT, and a FIFO, socket or device would block or feed the copy forever. */
#ifndef FF_INPUT_FILES_H
#define FF_INPUT_FILES_H

#include "ff_err.h"

/* Checks each entry of each folder in `inputs` (NULL-terminated, may be
 * NULL; names starting with '.' and folders are neither read nor copied, so
 * are not looked at): a link must resolve inside one of the inputs, or,
 * for a Hugging Face cache snapshot, inside its repo folder (its files link
 * to ../../blobs/); anything else must be a regular file. Refuses with one
 * line naming the file (and the link's target), FF_EIO. Writes nothing. */
int input_files_check(const char *const *inputs, ff_err *e);

#endif
