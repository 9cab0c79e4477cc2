/* A model family is one place: its rule table (which tensors are quantized,
 * which Linears are kept and so go in the ignore list, which share a global
 * scale, how fused 3-D experts split), its invariants, its geometry (for
 * plan, fit and inspect), its doctor checks and its synthetic-checkpoint
 * maker. Code outside a family's folder reaches it only through this struct;
 * the list of families is one table (src/families/family.c). */
#ifndef FF_FAMILY_H
#define FF_FAMILY_H

#include <jansson.h>
#include <regex.h>
#include <stddef.h>
#include <stdint.h>

#include "ff_err.h"

typedef enum {
    ROLE_KEEP = 0,      /* copied byte for byte */
    ROLE_LINEAR,        /* 2-D [out, in] Linear weight: quantized */
    ROLE_EXPERTS_FUSED2,/* 3-D [E, 2I, H]: per expert, rows [0,I) and [I,2I) are two Linears */
    ROLE_EXPERTS_ONE,   /* 3-D [E, out, in]: per expert one Linear */
    /* the same stored transposed, [E, in, 2I] and [E, in, out] (a bmm
     * layout, Llama-4's): each expert's Linear is a column block, transposed */
    ROLE_EXPERTS_FUSED2_T,
    ROLE_EXPERTS_ONE_T,
    /* [E, in, 2I] with gate and up interleaved by column (gpt-oss's
     * GptOssExperts: gate_up[..., ::2], gate_up[..., 1::2]) */
    ROLE_EXPERTS_FUSED2I_T,
} ff_role;

/* Why a kept tensor must never be quantized (plan refuses to, exit 3). */
typedef enum {
    GUARD_NONE = 0,
    GUARD_ROUTER,       /* quantized routers serve NaN; --allow-router-quantization overrides */
    GUARD_FIXED,        /* vision, embeddings, norms, lm_head: never */
} ff_guard;

typedef struct ff_rule {
    const char *regex;        /* POSIX ERE over the whole tensor name */
    ff_role role;
    const char *group;        /* report group ("attention", "experts", "vision", ...) */
    int linear;               /* a Linear's weight (kept ones go in the ignore list) */
    const char *fuse;         /* tie key: members under one parent share a global scale */
    ff_guard guard;
    /* the parent module is a Linear to compressed-tensors too (a "Router"
     * class counts as Linear), so it is listed in ignore beside this one */
    int ignore_parent;
    int tower;                /* part of a vision/audio tower or its projector (fit --text-only) */
    int expert;               /* a 2-D Linear of one expert (per-expert checkpoints): counted as experts */
    /* the quantized module's last name component in the output, when it
     * differs from the source's (Mixtral's w1 written as gate_proj, as
     * llm-compressor's linearized experts and vLLM's mapper name it) */
    const char *out_name;
    /* experts: output module names under "<parent>.<e>." */
    const char *expert_out[2];
} ff_rule;

/* Every built-in family's rule table is a description (docs/family-files.md,
 * ff_family.desc_text), read into these rows; C builds a row only for what
 * a hook decides per tensor (ff_decoder_mtp_rule's multi-token-prediction
 * layers). */
#define FF_KEEP(re, grp, grd) {.regex = (re), .role = ROLE_KEEP, .group = (grp), .guard = (grd)}
#define FF_KEEP_LINEAR(re, grp, grd) {.regex = (re), .role = ROLE_KEEP, .group = (grp), .linear = 1, .guard = (grd)}

/* What the config implies, for the plan's invariants. */
typedef struct ff_expect {
    int64_t dense_linears;    /* quantized 2-D Linears the config implies */
    int64_t expert_linears;   /* MoE layers x experts x 3 */
    int64_t routers;          /* router Linears that must stay unquantized */
    int64_t moe_layers, experts;
    int64_t expert_inter, hidden;
} ff_expect;

/* One decoder layer as vLLM allocates it (fit) and reports show it. */
typedef struct ff_layer {
    int full;            /* full attention (else sliding window) */
    int head_dim;
    int kv_heads;
    int has_kv;          /* 0: reads the KV of an earlier layer (no k/v projections) */
    int k_is_v;          /* the checkpoint has no v_proj: V is computed from K */
    int64_t intermediate;/* dense MLP width (0 on MoE-only layers) */
    /* A linear-attention (Gated DeltaNet) layer keeps a fixed recurrent
     * state per sequence instead of a KV cache per token: its bytes, as
     * vLLM allocates them (conv state + temporal state). 0 elsewhere. */
    int64_t state_bytes;
    /* bytes a token costs beyond K and V, whatever the KV dtype: the sparse-
     * attention indexer's key cache (DeepSeek-V3.2, GLM-5), FP8 keys of
     * index_head_dim plus a float32 scale */
    int64_t extra_per_token;
} ff_layer;

/* k_is_v's name in reports (fit --json): Gemma-4's config calls it
 * attention_k_eq_v, and the first release spelled the key after it, so
 * deploy scripts reading it keep working. */
#define FF_LAYER_K_IS_V_KEY "k_eq_v"

#define FF_MAX_LAYERS 512

/* The model's shape from config.json; fields a family lacks stay 0. */
typedef struct ff_geometry {
    int layers;
    int64_t hidden, vocab;
    int heads;
    int sliding_window;
    int moe, experts, top_k, moe_layers;
    int64_t moe_intermediate;
    int tie_embeddings;
    int has_vision, has_audio;
    ff_layer layer[FF_MAX_LAYERS];
} ff_geometry;

/* Knobs of a synthetic checkpoint (fp4forge synth). A family reads the ones
 * that exist in its architecture; its synth_knobs name those a flag sets. */
typedef struct synth_geom {
    int moe;
    int layers, full_every;       /* every Nth layer is full attention (the last always is) */
    int64_t hidden, intermediate, vocab;
    int heads, kv_heads, head_dim;
    int experts, top_k;
    int64_t moe_intermediate;
    int sliding_window;
    int vision_layers;            /* 0 = no vision tower */
    int64_t vision_hidden, vision_intermediate;
    int vision_heads;
    int64_t shared_intermediate;  /* shared expert MLP width; 0 = none */
    int dense_layers;             /* leading dense (non-MoE) layers */
    int mtp_layers;               /* multi-token-prediction layers after the last decoder layer */
    /* Gated-DeltaNet linear attention (Qwen3.5, Qwen3-Next): heads and head
     * widths of its keys and values, and the causal conv's kernel */
    int linear_k_heads, linear_v_heads, linear_k_dim, linear_v_dim, conv_kernel;
    int ssm_fp32;                 /* the config asks for a float32 recurrent state */
    /* Knobs only one family has (Gemma-4's full-attention KV geometry,
     * per-layer embeddings, config schema): that family names the slots in
     * its own header, and its synth_knobs set them. */
    int own[8];
    uint64_t seed;
    char preset[32];              /* the --arch preset, for families with several */
} synth_geom;

struct synth_list;
struct ff_famdesc;
struct dctx;
struct doctor_report;
struct doctor_finding;

/* One doctor check: adds findings to r. */
typedef void (*ff_doctor_check)(struct dctx *c, struct doctor_report *r);
/* One fix for one finding: edits c's JSON (or copies files) and sets
 * f->fixed or f->refused with f->note. Returns FF_OK unless I/O failed. */
typedef int (*ff_doctor_fix)(struct dctx *c, struct doctor_finding *f, ff_err *e);
typedef struct ff_doctor_code {
    const char *code;
    ff_doctor_fix fix;        /* NULL: nothing to repair in place (a broken upload) */
} ff_doctor_code;

/* One synth flag a family understands: --flag sets one synth_geom field.
 * Each family lists every knob it reads (the shared rows below keep one
 * help text per flag); synth refuses a knob the preset's family does not
 * list, and its --help shows the union over the family table, in order. */
typedef enum {
    FF_KNOB_INT = 0,          /* an int field, 0 .. 2^30 */
    FF_KNOB_INT64,            /* an int64_t width, 0 .. 2^40 */
    FF_KNOB_CLEAR,            /* a switch (arg NULL): sets the int field to 0 */
    FF_KNOB_CHOICE,           /* arg "a|b|...": the int field gets the index of the value */
} ff_knob_kind;

typedef struct ff_synth_knob {
    const char *flag;         /* "--layers" */
    const char *arg;          /* "N", "a|b" (a choice); NULL for a switch */
    const char *help;         /* one line for synth --help */
    ff_knob_kind kind;
    size_t off;               /* the synth_geom field it sets */
} ff_synth_knob;

/* A number knob: its kind follows the field's type. */
#define FF_KNOB_NUM(flag, arg, field, help)                                                                  \
    {(flag), (arg), (help), sizeof(((synth_geom *)0)->field) == sizeof(int) ? FF_KNOB_INT : FF_KNOB_INT64, \
     offsetof(synth_geom, field)}
/* The rows families share, one help text each. */
#define FF_KNOB_LAYERS FF_KNOB_NUM("--layers", "N", layers, "decoder layers")
#define FF_KNOB_HIDDEN FF_KNOB_NUM("--hidden", "H", hidden, "hidden size")
#define FF_KNOB_INTERMEDIATE FF_KNOB_NUM("--intermediate", "I", intermediate, "dense MLP width")
#define FF_KNOB_HEADS FF_KNOB_NUM("--heads", "N", heads, "attention heads")
#define FF_KNOB_KV_HEADS FF_KNOB_NUM("--kv-heads", "N", kv_heads, "KV heads on sliding layers")
#define FF_KNOB_HEAD_DIM FF_KNOB_NUM("--head-dim", "D", head_dim, "head dim on sliding layers")
#define FF_KNOB_FULL_EVERY \
    FF_KNOB_NUM("--full-every", "N", full_every, "every Nth layer is full attention (default 6)")
#define FF_KNOB_VOCAB FF_KNOB_NUM("--vocab", "V", vocab, "vocabulary size")
#define FF_KNOB_EXPERTS FF_KNOB_NUM("--experts", "E", experts, "experts per layer (MoE presets)")
#define FF_KNOB_MOE_INTERMEDIATE \
    FF_KNOB_NUM("--moe-intermediate", "I", moe_intermediate, "expert MLP width (MoE presets)")
#define FF_KNOB_TOP_K FF_KNOB_NUM("--top-k", "K", top_k, "experts per token (MoE presets)")
#define FF_KNOB_VISION_LAYERS \
    FF_KNOB_NUM("--vision-layers", "N", vision_layers, "vision tower layers (0 = no vision tower)")
#define FF_KNOB_VISION_HIDDEN FF_KNOB_NUM("--vision-hidden", "H", vision_hidden, "vision hidden size")
#define FF_KNOB_VISION_INTERMEDIATE \
    FF_KNOB_NUM("--vision-intermediate", "I", vision_intermediate, "vision MLP width")
/* A decoder's shape, and a vision tower's. */
#define FF_KNOBS_DECODER FF_KNOB_LAYERS, FF_KNOB_HIDDEN, FF_KNOB_INTERMEDIATE, FF_KNOB_HEADS, FF_KNOB_KV_HEADS, \
                         FF_KNOB_HEAD_DIM
#define FF_KNOBS_MOE FF_KNOB_EXPERTS, FF_KNOB_MOE_INTERMEDIATE, FF_KNOB_TOP_K
#define FF_KNOBS_VISION FF_KNOB_VISION_LAYERS, FF_KNOB_VISION_HIDDEN, FF_KNOB_VISION_INTERMEDIATE
#define FF_KNOBS_END {NULL, NULL, NULL, FF_KNOB_INT, 0}

typedef struct ff_synth_preset {
    const char *name;         /* --arch value, "<family>-<variant>" */
    const char *what;         /* one line for --help */
} ff_synth_preset;

typedef struct ff_family {
    const char *name;
    const char *model_types;  /* the config model_type values it claims, for messages */
    int (*matches)(const json_t *config);
    const ff_rule *rules;
    size_t nrules;
    /* what the config implies, for the plan's invariants */
    int (*expect)(const json_t *config, ff_expect *x, ff_err *e);
    /* what the dense-count invariant counts, for its message */
    const char *dense_rule;
    /* the model's shape from config.json (fit, inspect, plan reports) */
    int (*geometry)(const json_t *config, ff_geometry *g, ff_err *e);
    /* A rule that overrides the table for one checkpoint (may be NULL): for
     * what a regex cannot tell, such as multi-token-prediction layers past
     * num_hidden_layers, which vLLM's main model skips and which are kept. */
    const ff_rule *(*override_rule)(const json_t *config, const char *name);
    /* Linear modules left alone that have no tensor of their own (a tied
     * lm_head): listed in ignore when absent. NULL-terminated, may be NULL. */
    const char *const *implicit_ignore;
    /* A line the plan notes for every checkpoint of the family (what serving
     * its output needs, or cannot do), or NULL. */
    const char *note;
    /* doctor: NULL-terminated checks and the codes they raise (with fixes) */
    const ff_doctor_check *doctor_checks;
    const ff_doctor_code *doctor_codes;
    /* doctor: per-family state, opened once per run (may be NULL) */
    int (*doctor_open)(struct dctx *c, ff_err *e);
    void (*doctor_close)(struct dctx *c);
    /* synth: presets (NULL-terminated by name), their geometry, and the
     * checkpoint itself: tensors in save order, config.json, aux files */
    const ff_synth_preset *synth_presets;
    /* the flags that scale its presets (NULL-terminated by flag) */
    const ff_synth_knob *synth_knobs;
    int (*synth_preset)(const char *preset, const char *size, synth_geom *g, ff_err *e);
    int (*synth_tensors)(const synth_geom *g, struct synth_list *l, ff_err *e);
    json_t *(*synth_config)(const synth_geom *g);
    int (*synth_aux)(const synth_geom *g, const char *dir, ff_err *e);
    /* fit: bytes vLLM's encoder profiling takes for the vision tower the
     * config describes (its encoder cache and the tower's transient tensors,
     * batched_tokens being max_num_batched_tokens); NULL: the family has no
     * tower. */
    uint64_t (*encoder_bytes)(const json_t *config, const ff_geometry *g, int64_t batched_tokens);
    /* A family described as data (docs/family-files.md): its rule table,
     * config keys and invariants are this text, and matches, rules, expect,
     * geometry and override_rule stay unset; the C hooks above that data
     * cannot say (doctor, synth, encoder) sit beside it. */
    const char *desc_text;
    /* set in an instance (ff_family_open, ff_family_load): the parsed text */
    const struct ff_famdesc *desc;
} ff_family;

/* Fused 3-D experts split per expert are named "<parent>.<e>.<out>", parent
 * the fused tensor's name less its last component and out a rule's
 * expert_out: llm-compressor's linearized names, the ones vLLM's loaders map.
 * ff_expert_module writes expert e's Linear `out` of fused tensor `fused` to
 * buf; ff_expert_module_parse tells whether module is shaped so, with its
 * parent's length, e and out (NULL-able outputs). */
void ff_expert_module(char *buf, size_t n, const char *fused, int64_t e, const char *out);
int ff_expert_module_parse(const char *module, size_t *parent_len, long *e, const char **out);

/* Families known, NULL-terminated: the one table. */
extern const ff_family *const ff_families[];
const ff_family *ff_family_detect(const json_t *config);
const ff_family *ff_family_by_name(const char *name);
/* The family owning a synth preset, or NULL. */
const ff_family *ff_family_by_preset(const char *preset);
/* "name (model types); name (model types)" for messages. */
void ff_family_list(char *buf, size_t n);
/* "preset|preset|..." for synth's help and errors. */
void ff_family_presets(char *buf, size_t n);

/* A family ready to read: a described one parsed into an instance *own
 * holds (ff_family_close it), a C one or an instance as is (*own NULL). */
int ff_family_open(const ff_family *f, const ff_family **out, ff_family **own, ff_err *e);
void ff_family_close(ff_family *f);
/* A user's description file (--family-file) as a family; errors name the
 * file and the line. ff_family_close it. */
int ff_family_load(const char *path, ff_family **out, ff_err *e);
/* The same from text in memory; origin names it in errors. */
int ff_family_parse(const char *text, size_t len, const char *origin, ff_family **out, ff_err *e);
/* Whether f claims this config (its model_type), and what the config
 * implies for the plan's invariants: through the hook or the description. */
int ff_family_claims(const ff_family *f, const json_t *config);
int ff_family_expect(const ff_family *f, const json_t *config, ff_expect *x, ff_err *e);

/* The model's geometry through the family's hook, malloc'd (free() it);
 * NULL with e filled (e may be NULL) when the config does not give it. */
ff_geometry *ff_geometry_new(const ff_family *fam, const json_t *config, ff_err *e);

/* The Linears vLLM loads as one GEMM (its packed_modules_mapping): the
 * group of a Linear's last name component (its first len bytes), "qkv",
 * "gate_up", "w13", "mla_a", or NULL; and a group's k-th member leaf, NULL
 * past the last. Checked whatever a family's rules say (src/plan). */
const char *ff_fused_group(const char *leaf, size_t len);
const char *ff_fused_partner(const char *group, size_t k);
/* Whether a Linear's last name component (first len bytes) is one vLLM's
 * models load as a Linear a scheme quantizes (q_proj, gate_proj, w1, ...):
 * plan --infer quantizes no other, and a router-shaped Linear under
 * another name is taken for a router. */
int ff_linear_leaf(const char *leaf, size_t len);
/* The routed experts a config gives, whatever family reads it: the first of
 * ff_expert_count_keys > 0, at the top or in text_config (*key names it). */
extern const char *const ff_expert_count_keys[];
int64_t ff_config_experts(const json_t *config, const char **key);

/* Compiled rules of one family (no global state: one per plan). */
typedef struct ff_matcher {
    const ff_family *fam;     /* an instance when the family is described */
    ff_family *own;
    const json_t *config;     /* for the family's override_rule; may be NULL */
    regex_t *re;
    size_t n;
} ff_matcher;

/* config: the checkpoint's config.json (borrowed; may be NULL). */
int ff_matcher_init(ff_matcher *m, const ff_family *fam, const json_t *config, ff_err *e);
void ff_matcher_free(ff_matcher *m);
/* First matching rule, or NULL (unknown tensors are kept and reported). */
const ff_rule *ff_match(const ff_matcher *m, const char *name);

#endif
