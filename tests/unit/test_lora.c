/* LoRA: pattern keys as PEFT matches them, the merge formula (one rounding,
 * fan_in_fan_out), and the pass-level gates (count, produced twice, no-op). */
#include <jansson.h>
#include <math.h>
#include <string.h>

#include "dtype.h"
#include "lora.h"
#include "lora_simd.h"
#include "unit.h"

/* An in-memory "checkpoint" of f32 or bf16 tensors, enough for the merge. */
typedef struct mem {
    uint8_t buf[4096];
    size_t used;
    st_file f;
    ckpt c;
    st_tensor st[4];
    ckpt_tensor t[4];
    int n;
} mem;

static const ckpt_tensor *mem_add(mem *m, ff_dtype dt, int64_t r, int64_t c, const float *v)
{
    st_tensor *s = &m->st[m->n];
    *s = (st_tensor){.dtype = dt, .ndim = 2, .shape = {r, c}, .begin = m->used};
    size_t esz = ff_dtype_size(dt);
    for (int64_t i = 0; i < r * c; i++) {
        if (dt == FF_DT_BF16) {
            uint16_t h = ff_f32_to_bf16(v[i]);
            memcpy(m->buf + m->used + (size_t)i * esz, &h, 2);
        } else {
            memcpy(m->buf + m->used + (size_t)i * esz, &v[i], 4);
        }
    }
    m->used += (size_t)(r * c) * esz;
    s->end = m->used;
    m->f.map = m->buf;
    m->c.files = &m->f;
    m->c.nfiles = 1;
    m->t[m->n] = (ckpt_tensor){.st = s, .file = 0};
    return &m->t[m->n++];
}

static void test_pattern_lookup(void)
{
    json_t *p = json_pack("{s:i, s:i}", "o_proj", 4, "layers\\.\\d+\\.mlp\\.down_proj", 2);
    double v = 0;
    CHECK(lora_pattern_lookup(p, "model.language_model.layers.3.self_attn.o_proj", &v) && v == 4);
    CHECK(!lora_pattern_lookup(p, "model.language_model.layers.3.self_attn.o_proj2", &v));
    CHECK(!lora_pattern_lookup(p, "model.language_model.layers.3.self_attn.xo_proj", &v));
    CHECK(lora_pattern_lookup(p, "model.language_model.layers.11.mlp.down_proj", &v) && v == 2);
    CHECK(!lora_pattern_lookup(p, "model.language_model.layers.x.mlp.down_proj", &v));
    json_decref(p);
}

/* W' = bf16(W + s * B @ A): one rounding, in PEFT's order. */
static void test_merge_formula(void)
{
    mem ad = {0}, bs = {0};
    float A[2 * 3] = {0.5f, -1.0f, 0.25f, 1.5f, 0.75f, -0.5f};   /* r=2, in=3 */
    float B[2 * 2] = {0.1f, 0.2f, -0.3f, 0.05f};                 /* out=2, r=2 */
    float W[2 * 3] = {1.0f, 0.0f, -2.0f, 0.5f, 3.0f, 0.001f};
    lora_adapter l = {0};
    l.ck.files = NULL;
    lora_module m = {.r = 2, .scale = 2.0f};
    m.a = mem_add(&ad, FF_DT_F32, 2, 3, A);
    m.b = mem_add(&ad, FF_DT_F32, 2, 2, B);
    m.base = mem_add(&bs, FF_DT_BF16, 2, 3, W);
    l.ck = ad.c;
    uint16_t out[6];
    uint64_t changed;
    float maxd;
    ff_err e = {0};
    CHECK_EQ_INT(lora_merge_module(&l, &m, bs.buf, out, &changed, &maxd, &e), FF_OK);
    for (int o = 0; o < 2; o++)
        for (int i = 0; i < 3; i++) {
            float acc = 0;
            for (int k = 0; k < 2; k++)
                acc = fmaf(B[o * 2 + k], A[k * 3 + i], acc);
            float want = ff_round_bf16(W[o * 3 + i]) + acc * 2.0f;
            CHECK_EQ_INT(out[o * 3 + i], ff_f32_to_bf16(want));
        }
    CHECK_EQ_INT(changed, 6);
    /* fan_in_fan_out: the base is [in, out]; the result is the transpose. */
    mem bt = {0};
    float WT[3 * 2];
    for (int o = 0; o < 2; o++)
        for (int i = 0; i < 3; i++)
            WT[i * 2 + o] = W[o * 3 + i];
    m.base = mem_add(&bt, FF_DT_BF16, 3, 2, WT);
    l.fan_in_fan_out = 1;
    uint16_t outT[6];
    CHECK_EQ_INT(lora_merge_module(&l, &m, bt.buf, outT, &changed, &maxd, &e), FF_OK);
    for (int o = 0; o < 2; o++)
        for (int i = 0; i < 3; i++)
            CHECK_EQ_INT(outT[i * 2 + o], out[o * 3 + i]);
}

/* The pass gates: a delta below bf16 resolution, a module merged twice, and
 * fewer modules merged than the adapter holds. */
static void test_pass_gates(void)
{
    mem ad = {0}, bs = {0};
    float A[1 * 16], B[2 * 1] = {1e-9f, -1e-9f}, W[2 * 16];
    for (int i = 0; i < 16; i++) {
        A[i] = 1.0f;
        W[i] = W[16 + i] = 1.0f + (float)i;
    }
    lora_module mods[2] = {{.module = "tiny", .r = 1, .scale = 1.0f}, {.module = "never", .r = 1, .scale = 1.0f}};
    mods[0].a = mem_add(&ad, FF_DT_F32, 1, 16, A);
    mods[0].b = mem_add(&ad, FF_DT_F32, 2, 1, B);
    mods[0].base = mem_add(&bs, FF_DT_BF16, 2, 16, W);
    mods[1] = mods[0];
    mods[1].module = "never";
    mods[1].base = NULL;
    lora_adapter l = {.ck = ad.c, .base = &bs.c, .mods = mods, .nmods = 2, .ntensors = 4};
    ff_err e = {0};
    void *buf = NULL;
    CHECK(lora_produce(&l, mods[0].base, &buf, &e) != FF_OK);
    CHECK(strstr(e.msg, "adapter module tiny: the merged weight equals the base in all 32 elements") != NULL);
    CHECK(buf == NULL);
    /* a real delta merges once, not twice */
    float B2[2] = {0.5f, -0.5f};
    mods[0].b = mem_add(&ad, FF_DT_F32, 2, 1, B2);
    l.ck = ad.c;
    CHECK_EQ_INT(lora_produce(&l, mods[0].base, &buf, &e), FF_OK);
    CHECK(buf != NULL);
    free(buf);
    buf = NULL;
    CHECK(lora_produce(&l, mods[0].base, &buf, &e) != FF_OK && strstr(e.msg, "tiny merged twice"));
    /* a tensor no module targets is left to the caller */
    CHECK_EQ_INT(lora_produce(&l, &ad.t[0], &buf, &e), FF_OK);
    CHECK(buf == NULL);
    CHECK(lora_finish(&l, &e) != FF_OK);
    CHECK(strstr(e.msg, "merged 1 of 2 adapter modules (4 tensors); never was never reached") != NULL);
}

/* Every merge kernel gives the scalar kernel's bits: widths with and without
 * a vector tail, ranks 1-17, bases and deltas of every magnitude, NaN, Inf,
 * signed zeros and sums that land halfway between two bf16 values. */
static void test_kernels_same_bits(void)
{
    static const char *const names[] = {"avx2", "avx512"};
    uint64_t seed = 7;
    for (size_t kn = 0; kn < 2; kn++) {
        const lora_kernels *k = lora_kernels_by_name(names[kn]);
        if (!k)
            continue;   /* this CPU lacks it: nothing to compare */
        for (uint64_t n = 1; n <= 150; n += 7) {
            for (int64_t r = 1; r <= 17; r += 4) {
                float u[17], V[17 * 150], acc0[150], acc1[150];
                uint16_t base[150], o0[150], o1[150];
                for (int64_t i = 0; i < r; i++)
                    u[i] = (float)((seed = seed * 6364136223846793005ull + 1) >> 40) / 16777216.0f - 0.5f;
                for (uint64_t i = 0; i < (uint64_t)r * n; i++)
                    V[i] = ((float)((seed = seed * 6364136223846793005ull + 1) >> 40) / 16777216.0f - 0.5f) *
                           ((i % 5) ? 1e-3f : 3.0f);
                for (uint64_t i = 0; i < n; i++)
                    base[i] = (uint16_t)((seed = seed * 6364136223846793005ull + 1) >> 48);
                base[0] = 0x8000;            /* -0 */
                base[n - 1] = 0x7fc1;        /* NaN */
                if (n > 3)
                    base[2] = 0x7f80;        /* Inf */
                if (n > 5)
                    V[5] = NAN;              /* a NaN delta */
                lora_delta_scalar(u, V, r, n, acc0);
                k->delta(u, V, r, n, acc1);
                CHECK(memcmp(acc0, acc1, n * sizeof *acc0) == 0);
                float m0 = 0.0f, m1 = 0.0f;
                uint64_t c0 = lora_apply_bf16_scalar(base, acc0, 0.75f, n, o0, &m0);
                uint64_t c1 = k->apply_bf16(base, acc0, 0.75f, n, o1, &m1);
                CHECK(memcmp(o0, o1, n * sizeof *o0) == 0);
                CHECK_EQ_INT(c0, c1);
                CHECK(m0 == m1);
            }
        }
    }
}

int main(void)
{
    RUN(test_pattern_lookup);
    RUN(test_merge_formula);
    RUN(test_pass_gates);
    RUN(test_kernels_same_bits);
    return UNIT_END();
}
