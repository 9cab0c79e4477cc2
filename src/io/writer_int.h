/* For the library's own streaming writers (quantize's write-combining
 * buffer, synth's parallel fill and sparse files), which write at the
 * absolute offsets the layout promised instead of through ckpt_writer_put. */
#ifndef FF_WRITER_INT_H
#define FF_WRITER_INT_H

#include "shards.h"
#include "writer.h"

shard_set *ckpt_writer_shards(ckpt_writer *w);

#endif
