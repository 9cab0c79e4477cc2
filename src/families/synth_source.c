#include "synth_source.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dtype.h"
#include "nvfp4.h"

#define FP8_BLK 128
#define INT4_GROUP 32
#define MX_GROUP 32

/* Which tensors a vendor stores quantized: DeepSeek-V3's and MiniMax-M2's
 * FP8 (and MXFP4) set is every decoder-layer projection and expert w1/w2/w3,
 * not the router, the embeddings, the norms or lm_head. */
static int is_projection(const synth_tensor *t)
{
    size_t n = strlen(t->name);
    const char *layers = strstr(t->name, "model.layers.");   /* also under language_model. */
    if (t->ndim != 2 || !layers || (layers != t->name && strncmp(t->name, "language_model.model.layers.", 28) != 0) ||
        n < 8 || strcmp(t->name + n - 7, ".weight") != 0)
        return 0;
    const char *last = t->name + n - 8;   /* the module's own name component */
    while (last > t->name && *last != '.')
        last--;
    const char *proj = strstr(last, "proj");   /* q_a_proj, kv_a_proj_with_mqa, eh_proj, ... */
    int w123 = last[0] == '.' && last[1] == 'w' && last[2] >= '1' && last[2] <= '3' && last[3] == '.';
    return w123 || (proj && proj < t->name + n - 7);
}

/* The INT4 (Kimi-K2.5) and MXFP4 (gpt-oss, Kimi-K3) uploads' set: the
 * routed experts only, not the shared ones ("mlp.experts.E." or
 * "block_sparse_moe.experts.E."). */
static int is_routed_expert(const synth_tensor *t)
{
    return is_projection(t) && strstr(t->name, ".experts.") != NULL && !strstr(t->name, "shared_experts");
}

static int stored_quantized(synth_source src, const synth_tensor *t)
{
    if (src == SYNTH_INT4)
        return is_routed_expert(t) && t->shape[1] % INT4_GROUP == 0;
    if (src == SYNTH_MXFP4)
        return is_routed_expert(t) && t->shape[1] % MX_GROUP == 0;
    return src == SYNTH_FP8_BLOCK && is_projection(t);
}

static void part(st_out *o, char *name, const synth_tensor *t, const char *suffix, ff_dtype dt, int ndim, int64_t a,
                 int64_t b)
{
    size_t stem = strlen(t->name) - strlen("weight");   /* "<mod>." */
    snprintf(name, SYNTH_PART_NAME, "%.*s%s", (int)stem, t->name, suffix);
    *o = (st_out){.name = name, .dtype = dt, .ndim = ndim, .shape = {a, b}};
    o->nbytes = (uint64_t)a * (ndim == 2 ? (uint64_t)b : 1) * ff_dtype_size(dt);
}

size_t synth_source_parts(synth_source src, const synth_tensor *t, st_out *outs,
                          char names[SYNTH_MAX_PARTS][SYNTH_PART_NAME])
{
    if (!stored_quantized(src, t))
        return 0;
    int64_t N = t->shape[0], K = t->shape[1];
    switch (src) {
    case SYNTH_FP8_BLOCK:
        part(&outs[0], names[0], t, "weight", FF_DT_F8_E4M3, 2, N, K);
        part(&outs[1], names[1], t, "weight_scale_inv", FF_DT_F32, 2, (N + FP8_BLK - 1) / FP8_BLK,
             (K + FP8_BLK - 1) / FP8_BLK);
        return 2;
    case SYNTH_INT4:
        part(&outs[0], names[0], t, "weight_packed", FF_DT_I32, 2, N, K / 8);
        part(&outs[1], names[1], t, "weight_scale", FF_DT_BF16, 2, N, K / INT4_GROUP);
        part(&outs[2], names[2], t, "weight_shape", FF_DT_I64, 1, 2, 0);
        return 3;
    case SYNTH_MXFP4:
        part(&outs[0], names[0], t, "weight_packed", FF_DT_U8, 2, N, K / 2);
        part(&outs[1], names[1], t, "weight_scale", FF_DT_U8, 2, N, K / MX_GROUP);
        return 2;
    default:
        return 0;
    }
}

/* Per 128x128 block (edge blocks partial) scale = amax / 448 (1 for an
 * all-zero block), q = e4m3(w / scale), weight_scale_inv = scale: what
 * tests/conformance/t_deepseek_fp8.py does with torch. */
static void encode_fp8(const uint16_t *w, uint64_t N, uint64_t K, uint8_t *q, float *s)
{
    uint64_t sr = (N + FP8_BLK - 1) / FP8_BLK, sc = (K + FP8_BLK - 1) / FP8_BLK;
    for (uint64_t br = 0; br < sr; br++)
        for (uint64_t bc = 0; bc < sc; bc++) {
            uint64_t r1 = (br + 1) * FP8_BLK < N ? (br + 1) * FP8_BLK : N;
            uint64_t c1 = (bc + 1) * FP8_BLK < K ? (bc + 1) * FP8_BLK : K;
            float amax = 0.0f;
            for (uint64_t r = br * FP8_BLK; r < r1; r++)
                for (uint64_t c = bc * FP8_BLK; c < c1; c++)
                    amax = fmaxf(amax, fabsf(ff_bf16_to_f32(w[r * K + c])));
            float scale = amax > 0.0f ? amax / 448.0f : 1.0f;
            s[br * sc + bc] = scale;
            for (uint64_t r = br * FP8_BLK; r < r1; r++)
                for (uint64_t c = bc * FP8_BLK; c < c1; c++) {
                    float v = ff_bf16_to_f32(w[r * K + c]) / scale;
                    q[r * K + c] = ff_f32_to_e4m3(fminf(fmaxf(v, -448.0f), 448.0f));
                }
        }
}

static float group_amax(const uint16_t *w, uint64_t n)
{
    float amax = 0.0f;
    for (uint64_t i = 0; i < n; i++)
        amax = fmaxf(amax, fabsf(ff_bf16_to_f32(w[i])));
    return amax;
}

/* compressed-tensors' symmetric min-max INT4: scale = amax / 7.5 in bf16,
 * q = round(w / scale) in [-8, 7], stored +8, eight to an int32 word. */
static void encode_int4(const uint16_t *w, uint64_t N, uint64_t K, uint32_t *words, uint16_t *scales)
{
    memset(words, 0, N * (K / 8) * sizeof *words);
    for (uint64_t g = 0; g < N * K / INT4_GROUP; g++) {
        const uint16_t *x = w + g * INT4_GROUP;
        float s = ff_round_bf16(group_amax(x, INT4_GROUP) / 7.5f);
        s = s > 0.0f ? s : 1.0f;
        scales[g] = ff_f32_to_bf16(s);
        for (uint64_t i = 0; i < INT4_GROUP; i++) {
            float q = fminf(fmaxf(rintf(ff_bf16_to_f32(x[i]) / s), -8.0f), 7.0f);
            uint64_t at = g * INT4_GROUP + i;
            words[at / 8] |= (uint32_t)((int)q + 8) << (4 * (at % 8));
        }
    }
}

/* MXFP4 as the OCP MX spec encodes it: exponent floor(log2(amax)) - 2,
 * biased by 127; codes E2M1 of w / 2^exponent, two to a byte. */
static void encode_mxfp4(const uint16_t *w, uint64_t N, uint64_t K, uint8_t *packed, uint8_t *scales)
{
    for (uint64_t g = 0; g < N * K / MX_GROUP; g++) {
        const uint16_t *x = w + g * MX_GROUP;
        float amax = group_amax(x, MX_GROUP);
        int e = amax > 0.0f ? (int)floorf(log2f(amax)) - 2 + 127 : 0;   /* OCP MX: emax of E2M1 is 2 */
        e = e < 0 ? 0 : e > 254 ? 254 : e;
        scales[g] = (uint8_t)e;
        float inv = ldexpf(1.0f, 127 - e);
        for (uint64_t i = 0; i < MX_GROUP; i += 2) {
            uint8_t lo = nvfp4_fp4_code(ff_bf16_to_f32(x[i]) * inv), hi = nvfp4_fp4_code(ff_bf16_to_f32(x[i + 1]) * inv);
            packed[(g * MX_GROUP + i) / 2] = (uint8_t)(lo | hi << 4);
        }
    }
}

int synth_source_write(synth_source src, const synth_tensor *t, const uint16_t *w, ckpt_writer *wr, size_t out,
                       ff_err *e)
{
    uint64_t N = (uint64_t)t->shape[0], K = (uint64_t)t->shape[1];
    st_out parts[SYNTH_MAX_PARTS];
    char names[SYNTH_MAX_PARTS][SYNTH_PART_NAME];
    size_t np = synth_source_parts(src, t, parts, names);
    void *buf[SYNTH_MAX_PARTS] = {0};
    int rc = FF_OK;
    for (size_t i = 0; i < np && rc == FF_OK; i++)
        if (!(buf[i] = malloc(parts[i].nbytes + 1)))
            rc = ff_oom(e, "out of memory");
    if (rc == FF_OK && src == SYNTH_FP8_BLOCK)
        encode_fp8(w, N, K, buf[0], buf[1]);
    else if (rc == FF_OK && src == SYNTH_INT4) {
        encode_int4(w, N, K, buf[0], buf[1]);
        int64_t shape[2] = {(int64_t)N, (int64_t)K};
        memcpy(buf[2], shape, sizeof shape);
    } else if (rc == FF_OK && src == SYNTH_MXFP4)
        encode_mxfp4(w, N, K, buf[0], buf[1]);
    for (size_t i = 0; i < np && rc == FF_OK; i++)
        rc = ckpt_writer_put(wr, out + i, buf[i], parts[i].nbytes, e);
    for (size_t i = 0; i < np; i++)
        free(buf[i]);
    return rc;
}

static json_t *ct_qconfig(const char *format, const char *type, int group, const char *ignore)
{
    json_t *q = json_pack("{s:s, s:s, s:s, s:{s:{s:[s], s:{s:i, s:s, s:b, s:s, s:i, s:b, s:n}, s:n, s:n}}, s:[s]}",
                          "quant_method", "compressed-tensors", "format", format, "quantization_status", "compressed",
                          "config_groups", "group_0", "targets", "Linear", "weights", "num_bits", 4, "type", type,
                          "symmetric", 1, "strategy", "group", "group_size", group, "dynamic", 0, "actorder",
                          "input_activations", "output_activations", "ignore", "lm_head");
    if (q && ignore)
        json_array_append_new(json_object_get(q, "ignore"), json_string(ignore));
    return q;
}

static json_t *kimi_int4_qconfig(void)
{
    json_t *q = ct_qconfig("pack-quantized", "int", INT4_GROUP, NULL), *ig = json_array();
    static const char *const ignore[] = {"re:.*self_attn.*", "re:.*shared_experts.*",
                                         "re:.*mlp\\.(gate|up|gate_up|down)_proj.*", "re:.*lm_head.*",
                                         "re:.*vision_tower.*", "re:.*mm_projector.*"};
    for (size_t i = 0; i < sizeof ignore / sizeof *ignore; i++)
        json_array_append_new(ig, json_string(ignore[i]));
    json_object_set_new(q, "ignore", ig);
    return q;
}

json_t *synth_source_qconfig(synth_source src)
{
    switch (src) {
    case SYNTH_FP8_BLOCK:   /* DeepSeek-V3's published quantization_config */
        return json_pack("{s:s, s:s, s:s, s:[i, i]}", "activation_scheme", "dynamic", "fmt", "e4m3", "quant_method",
                         "fp8", "weight_block_size", FP8_BLK, FP8_BLK);
    case SYNTH_INT4:   /* Kimi-K2.6's: routed experts only (its ignore list, anchored with .* as loaders need) */
        return kimi_int4_qconfig();
    case SYNTH_MXFP4:
        return ct_qconfig("mxfp4-pack-quantized", "float", MX_GROUP, "re:.*(self_attn|shared_experts|mlp\\.(gate|up|down)_proj).*");
    default:
        return NULL;
    }
}
