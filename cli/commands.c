#include "commands.h"

#include <stdio.h>
#include <string.h>

const ff_command ff_commands[] = {
    {&synth_spec, cmd_synth, "write a synthetic bf16 checkpoint with a family's real names and geometry"},
    {&plan_spec, cmd_plan, "print what quantize would do (headers only) and check its invariants"},
    {&quantize_spec, cmd_quantize, "bf16 checkpoint -> NVFP4A16 (compressed-tensors nvfp4-pack-quantized)"},
    {&dequantize_spec, cmd_dequantize, "NVFP4 checkpoint -> bf16 checkpoint, exactly as compressed-tensors decompresses"},
    {&inspect_spec, cmd_inspect, "tensor table by family, shards, architecture class, quantization_config"},
    {&verify_spec, cmd_verify, "check a quantized output (decode, scales, ignore list, aux files; --against SRC)"},
    {&diff_spec, cmd_diff, "compare two checkpoints family by family (refuses mismatched classes)"},
    {&doctor_spec, cmd_doctor, "find (and --fix) config drift, missing aux files, tokenizer truncation"},
    {&merge_spec, cmd_merge, "merge a PEFT LoRA adapter into a bf16 checkpoint"},
    {&fit_spec, cmd_fit, "will this checkpoint serve on this GPU at this context?"},
    {&probe_spec, cmd_probe, "gate a served OpenAI-compatible endpoint (NaN logprobs, empty output)"},
    {NULL, NULL, NULL},
};

const ff_command *ff_command_find(const char *name)
{
    for (const ff_command *c = ff_commands; c->spec; c++)
        if (strcmp(c->spec->cmd, name) == 0)
            return c;
    return NULL;
}

int ff_command_dispatch(const ff_command *c, int argc, char **argv)
{
    cli_args a;
    ff_err e = {0};
    if (cli_parse(c->spec, argc, argv, &a, &e))
        return cmd_report(c->spec->cmd, &e);
    if (a.help) {
        cli_print_help(c->spec, stdout);
        return 0;
    }
    return c->run(&a);
}

int cmd_report(const char *cmd, const ff_err *e)
{
    fprintf(stderr, "fp4forge %s: %s\n", cmd, e->msg);
    return e->code ? e->code : FF_EIO;
}
