/* fp4forge dequantize: NVFP4 checkpoint -> bf16 checkpoint, bit for bit what
 * compressed-tensors' decompressor gives, so fp4forge output can be compared
 * (or served) by tools that read only bf16. */
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "cliopt.h"
#include "commands.h"
#include "dequantize.h"

static const cli_opt options[] = {
    {"--shard-size", "SIZE", "target shard size, e.g. 5GB (default), 500MB"},
    {"--force", NULL, "replace OUT_DIR if it exists"},
    {"--threads", "N", "worker threads (default: all cores; the bytes do not depend on it)"},
    {"--quiet", NULL, "no progress bar"},
    {NULL, NULL, NULL},
};

const cli_spec dequantize_spec = {
    "dequantize", "Q_DIR OUT_DIR",
    "Writes a bf16 checkpoint from an NVFP4 one: each module's weight_packed, weight_scale and\n"
    "weight_global_scale become <module>.weight BF16 [out, in] = bf16(code * (fp8 scale /\n"
    "global scale)) computed in f32 (what compressed-tensors' decompressor does); every other\n"
    "tensor is copied, in the same order. A mixed output's FP8 weight-only modules (quantize\n"
    "--fp8: weight F8_E4M3, weight_scale per row) become <module>.weight = code * scale rounded\n"
    "to the scale's dtype (compressed-tensors' naive decompressor). A NaN, zero or negative\n"
    "scale is refused, naming the tensor. config.json loses quantization_config; other files\n"
    "are copied. Output is staged in OUT_DIR.partial-PID and renamed into place when complete.",
    options, 2, 2, NULL,
};

int cmd_dequantize(const cli_args *args)
{
    const cli_args a = *args;
    ff_err e = {0};
    dequant_opts o = {.force = cli_flag(&a, "--force"), .progress = !cli_flag(&a, "--quiet") && isatty(2)};
    if (cli_threads(&a, &o.threads, &e) || cli_shard_size(&a, &o.shard_size, &e))
        return cmd_report("dequantize", &e);
    int rc = dequantize_run(a.pos[0], a.pos[1], &o, &e);
    if (rc)
        return cmd_report("dequantize", &e);
    printf("fp4forge dequantize: %s\n", a.pos[1]);
    return 0;
}
