#include "commands.h"

#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>

#include "cmd_common.h"
#include "version.h"
#include "writer.h"

const ff_command ff_commands[] = {
    {&synth_spec, cmd_synth, "write a synthetic bf16 checkpoint with a family's real names and geometry", 0,
     synth_knob_opts, 2},
    {&plan_spec, cmd_plan, "print what quantize would do (headers only) and check its invariants", -1, NULL, 0},
    {&quantize_spec, cmd_quantize, "bf16 checkpoint -> NVFP4A16 (compressed-tensors nvfp4-pack-quantized)", 1, NULL, 0},
    {&dequantize_spec, cmd_dequantize, "NVFP4 checkpoint -> bf16 checkpoint, exactly as compressed-tensors decompresses", 1, NULL, 0},
    {&inspect_spec, cmd_inspect, "tensor table by family, shards, architecture class, quantization_config", -1, NULL, 0},
    {&verify_spec, cmd_verify, "check a quantized output (decode, scales, ignore list, aux files; --against SRC)", -1, NULL, 0},
    {&diff_spec, cmd_diff, "compare two checkpoints family by family (refuses mismatched classes)", -1, NULL, 0},
    {&doctor_spec, cmd_doctor, "find (and --fix) config drift, missing aux files, tokenizer truncation", -1, NULL, 0},
    {&merge_spec, cmd_merge, "merge a PEFT LoRA adapter into a bf16 checkpoint", 2, NULL, 0},
    {&fit_spec, cmd_fit, "will this checkpoint serve on this GPU at this context?", -1, NULL, 0},
    {&probe_spec, cmd_probe, "gate a served OpenAI-compatible endpoint (NaN logprobs, empty output)", -1, NULL, 0},
    {&repair_scales_spec, cmd_repair_scales, "one global scale per fused group of an NVFP4 checkpoint (re-express or --against SRC)", 1, NULL, 0},
    {&completion_spec, cmd_completion, "print a bash or zsh completion script (from these option tables)", -1, NULL, 0},
    {NULL, NULL, NULL, -1, NULL, 0},
};

const cli_spec *ff_command_spec(const ff_command *c, cli_spec *tmp, cli_opt *buf, size_t cap)
{
    if (!c->more_opts || cap == 0)
        return c->spec;
    size_t n = 0, i = 0;
    const cli_opt *o = c->spec->opts;
    for (; o && o[i].name && i < c->more_at && n + 1 < cap; i++)
        buf[n++] = o[i];
    n += c->more_opts(buf + n, cap - 1 - n);
    for (; o && o[i].name && n + 1 < cap; i++)
        buf[n++] = o[i];
    buf[n] = (cli_opt){NULL, NULL, NULL};
    *tmp = *c->spec;
    tmp->opts = buf;
    return tmp;
}

const ff_command *ff_command_find(const char *name)
{
    for (const ff_command *c = ff_commands; c->spec; c++)
        if (strcmp(c->spec->cmd, name) == 0)
            return c;
    return NULL;
}

/* An interrupted write leaves nothing behind: SIGINT, SIGTERM and SIGHUP are
 * blocked in every thread and taken by one thread, which removes this run's
 * staging folder and then lets the signal end the process as it would have
 * (exit status 128 + signal). */
typedef struct interrupt_guard {
    const char *out_dir;
    sigset_t set;
} interrupt_guard;

static void *await_interrupt(void *arg)
{
    interrupt_guard *g = arg;
    int sig;
    if (sigwait(&g->set, &sig) != 0)
        return NULL;
    ckpt_writer_discard(g->out_dir);
    signal(sig, SIG_DFL);
    pthread_sigmask(SIG_UNBLOCK, &g->set, NULL);
    raise(sig);
    return NULL;
}

static void guard_interrupts(interrupt_guard *g, const char *out_dir)
{
    g->out_dir = out_dir;
    sigemptyset(&g->set);
    sigaddset(&g->set, SIGINT);
    sigaddset(&g->set, SIGTERM);
    sigaddset(&g->set, SIGHUP);
    pthread_t t;
    if (pthread_sigmask(SIG_BLOCK, &g->set, NULL) == 0 && pthread_create(&t, NULL, await_interrupt, g) == 0)
        pthread_detach(t);
}

int ff_command_dispatch(const ff_command *c, int argc, char **argv)
{
    cli_args a;
    ff_err e = {0};
    cli_spec merged;
    cli_opt opts[FF_MAX_OPTS];
    const cli_spec *spec = ff_command_spec(c, &merged, opts, FF_MAX_OPTS);
    if (cli_parse(spec, argc, argv, &a, &e))
        return cmd_report(c->spec->cmd, &e);
    if (a.help) {
        cli_print_help(spec, stdout);
        return 0;
    }
    if (a.version) {
        printf("fp4forge %s\n", FP4FORGE_VERSION);
        return 0;
    }
    /* Cache names become snapshot folders here, once for every command, so
     * each command's body sees folders only. Static like the guard: the
     * guard may hold the default OUT it made until the process ends. */
    static cli_inputs inputs;
    if (cli_resolve_inputs(c->spec->cmd, &a, &inputs, &e)) {
        cli_inputs_free(&inputs);
        return cmd_report(c->spec->cmd, &e);
    }
    static interrupt_guard guard;   /* lives until the process ends */
    if (c->out_pos >= 0 && c->out_pos < a.npos)
        guard_interrupts(&guard, a.pos[c->out_pos]);
    return c->run(&a);
}

int cmd_report(const char *cmd, const ff_err *e)
{
    fprintf(stderr, "fp4forge %s: %s\n", cmd, e->msg);
    return e->code ? e->code : FF_EIO;
}
