#include "commands.h"

#include <stdio.h>

#include "ff_err.h"

const ff_command ff_commands[] = {
    {"synth", cmd_synth, "write a synthetic bf16 checkpoint with real Gemma-4 names and geometry"},
    {"plan", cmd_plan, "print what quantize would do (headers only) and check its invariants"},
    {"quantize", cmd_quantize, "bf16 checkpoint -> NVFP4A16 (compressed-tensors nvfp4-pack-quantized)"},
    {"dequantize", cmd_dequantize, "NVFP4 checkpoint -> bf16 checkpoint, exactly as compressed-tensors decompresses"},
    {"inspect", cmd_inspect, "tensor table by family, shards, architecture class, quantization_config"},
    {"verify", cmd_verify, "check a quantized output (decode, scales, ignore list, aux files; --against SRC)"},
    {"diff", cmd_diff, "compare two checkpoints family by family (refuses mismatched classes)"},
    {"doctor", cmd_doctor, "find (and --fix) config drift, missing aux files, tokenizer truncation"},
    {"merge", cmd_merge, "merge a PEFT LoRA adapter into a bf16 checkpoint"},
    {"fit", cmd_fit, "will this checkpoint serve on this GPU at this context?"},
    {"probe", cmd_probe, "gate a served OpenAI-compatible endpoint (NaN logprobs, empty output)"},
    {NULL, NULL, NULL},
};

int cmd_report(const char *cmd, const ff_err *e)
{
    fprintf(stderr, "fp4forge %s: %s\n", cmd, e->msg);
    return e->code ? e->code : FF_EIO;
}
