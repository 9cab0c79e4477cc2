#include "encoder.h"

#include "jsonio.h"

uint64_t ff_encoder_pooled_bytes(const json_t *vision, int64_t hidden, int64_t batched_tokens, int64_t per_image,
                                 int64_t pool)
{
    int64_t vh = jsonio_int(vision, "hidden_size", 0), vi = jsonio_int(vision, "intermediate_size", 0);
    int64_t budget = batched_tokens > per_image ? batched_tokens : per_image;
    int64_t images = (budget + per_image - 1) / per_image;
    uint64_t patches = (uint64_t)(images * per_image * pool * pool);
    uint64_t cache = (uint64_t)budget * (uint64_t)hidden * 2;
    return cache + patches * (uint64_t)(4 * vh + 3 * vi) * 2;
}

uint64_t ff_encoder_default_bytes(const json_t *config, const ff_geometry *g, int64_t batched_tokens)
{
    const json_t *v = json_object_get(config, "vision_config");
    if (!json_is_object(v))
        return 0;
    return ff_encoder_pooled_bytes(v, g->hidden, batched_tokens, jsonio_int(v, "default_output_length", 280),
                                   jsonio_int(v, "pooling_kernel_size", 3));
}
