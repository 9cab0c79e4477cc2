/* Unit tests for the pieces verify/diff/dequantize build on. */
#include "decode.h"
#include "inspect.h"
#include "nvfp4.h"
#include "unit.h"

static void test_module_of(void)
{
    char b[64];
    CHECK(dq_module_of("a.b.weight_packed", b, sizeof b) && strcmp(b, "a.b") == 0);
    CHECK(dq_module_of("a.b.weight_scale", b, sizeof b) == NULL);
    CHECK(dq_module_of("weight_packed", b, sizeof b) == NULL);
}

static void test_group_names(void)
{
    json_t *n = json_pack("[sss]", "m.layers.0.router.proj", "m.layers.11.router.proj", "m.x2.proj");
    json_t *g = insp_group_names(n);
    CHECK_EQ_INT(json_array_size(g), 2);
    CHECK(strcmp(json_string_value(json_object_get(json_array_get(g, 0), "pattern")), "m.layers.N.router.proj") == 0);
    CHECK_EQ_INT(json_integer_value(json_object_get(json_array_get(g, 0), "count")), 2);
    CHECK(strcmp(json_string_value(json_object_get(json_array_get(g, 1), "pattern")), "m.x2.proj") == 0);
    json_decref(g);
    json_decref(n);
}

/* value = code * (fp8 / gs), in that order: code 7 (6.0) with scale 0x38 (1.0). */
static void test_decode_order(void)
{
    uint8_t packed[8] = {0x17, 0, 0, 0, 0, 0, 0, 0}, scale[1] = {0x38};
    float out[16];
    nvfp4_dequantize_rows(packed, scale, 3.0f, 16, 1, out);
    CHECK(out[0] == 6.0f * (1.0f / 3.0f));
    CHECK(out[1] == 0.5f * (1.0f / 3.0f));
    CHECK(ff_f32_to_bf16(out[0]) == ff_f32_to_bf16(2.0f));
}

int main(void)
{
    RUN(test_module_of);
    RUN(test_group_names);
    RUN(test_decode_order);
    return UNIT_END();
}
