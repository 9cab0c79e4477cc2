"""Tiny random MoE models of the families fp4forge added, saved by transformers 5.17
(the real names and config keys, scaled down; head_dim 32, bf16, seed 0).
usage: make_tiny_moe_families.py FAMILY OUT_DIR
FAMILY: qwen3_moe | qwen2_moe | mixtral | glm4_moe | llama4 | qwen3_5_moe | qwen3_5 | qwen3_next |
        minimax_m2 | glm4_moe_lite | deepseek_v32 | glm_moe_dsa | llama4_text |
        ernie4_5_moe | hunyuan_v1_moe
(qwen3_5_moe is the image-text model Qwen3.5/3.6 MoE ships as; qwen3_5 the dense causal LM;
ernie4_5_moe and hunyuan_v1_moe have no built-in fp4forge family: t_infer.sh)
Non-trivial norms and biases (random init leaves them 1/0), and OUT_DIR/ref_logits.pt
({"ids", "logits"}) from the bf16 model for hf_load_kl.py."""
import sys, torch, transformers as T

fam, out = sys.argv[1], sys.argv[2]
base = dict(hidden_size=64, num_hidden_layers=3, num_attention_heads=2, num_key_value_heads=1, head_dim=32,
            vocab_size=256, max_position_embeddings=128, bos_token_id=1, eos_token_id=2, pad_token_id=0,
            tie_word_embeddings=False)
if fam == "qwen3_moe":
    cfg, M = T.Qwen3MoeConfig(**base, intermediate_size=96, moe_intermediate_size=32, num_experts=4,
                              num_experts_per_tok=2, mlp_only_layers=[0]), T.Qwen3MoeForCausalLM
elif fam == "qwen2_moe":
    cfg, M = T.Qwen2MoeConfig(**base, intermediate_size=96, moe_intermediate_size=32, num_experts=4,
                              num_experts_per_tok=2, shared_expert_intermediate_size=64,
                              mlp_only_layers=[0]), T.Qwen2MoeForCausalLM
elif fam == "mixtral":
    cfg, M = T.MixtralConfig(**base, intermediate_size=32, num_local_experts=4, num_experts_per_tok=2), \
        T.MixtralForCausalLM
elif fam == "glm4_moe":
    cfg, M = T.Glm4MoeConfig(**base, intermediate_size=96, moe_intermediate_size=32, n_routed_experts=4,
                             n_shared_experts=1, num_experts_per_tok=2, first_k_dense_replace=1, n_group=1,
                             topk_group=1, attention_bias=True), T.Glm4MoeForCausalLM
elif fam == "llama4":
    text = dict(base, intermediate_size=32, intermediate_size_mlp=96, num_local_experts=4, num_experts_per_tok=1,
                interleave_moe_layer_step=2, attention_chunk_size=128)
    cfg = T.Llama4Config(text_config=text, vision_config=dict(
        hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2, image_size=56,
        patch_size=14, vision_output_dim=64, projector_input_dim=64, projector_output_dim=64))
    M = T.Llama4ForConditionalGeneration
elif fam in ("qwen3_5_moe", "qwen3_5", "qwen3_next"):
    # Gated-DeltaNet layers 0-2, full attention at 3; linear heads few but 128 wide, the
    # published width (vLLM's CPU chunk_gated_delta_rule refuses 16 and 32)
    lin = dict(base, num_hidden_layers=4, linear_num_key_heads=1, linear_num_value_heads=2, linear_key_head_dim=128,
               linear_value_head_dim=128, linear_conv_kernel_dim=4)
    moe = dict(moe_intermediate_size=32, shared_expert_intermediate_size=32, num_experts=4, num_experts_per_tok=2)
    if fam == "qwen3_5_moe":
        cfg = T.Qwen3_5MoeConfig(text_config=dict(lin, **moe), vision_config=dict(
            depth=1, hidden_size=32, intermediate_size=64, num_heads=2, out_hidden_size=64, patch_size=16,
            temporal_patch_size=2, spatial_merge_size=2))
        M = T.Qwen3_5MoeForConditionalGeneration
    elif fam == "qwen3_5":
        cfg, M = T.Qwen3_5TextConfig(**lin, intermediate_size=96), T.Qwen3_5ForCausalLM
    else:
        cfg, M = T.Qwen3NextConfig(**lin, intermediate_size=96, **moe, mlp_only_layers=[1]), T.Qwen3NextForCausalLM
elif fam == "minimax_m2":
    cfg, M = T.MiniMaxM2Config(**base, intermediate_size=32, num_local_experts=4, num_experts_per_tok=2,
                               use_qk_norm=True), T.MiniMaxM2ForCausalLM
    # keys the published config has and vLLM's minimax_m2.py reads (transformers does not):
    # the rotated width (all of head_dim here, as transformers rotates it), the sigmoid
    # router and its correction bias
    cfg.rotary_dim, cfg.scoring_func, cfg.use_routing_bias = 32, "sigmoid", True
elif fam == "glm4_moe_lite":
    mla = dict(base, num_key_value_heads=2)   # MLA: one latent, every head its own K and V
    del mla["head_dim"]
    cfg, M = T.Glm4MoeLiteConfig(**mla, intermediate_size=96, moe_intermediate_size=32, n_routed_experts=4,
                                 n_shared_experts=1, num_experts_per_tok=2, first_k_dense_replace=1, n_group=1,
                                 topk_group=1, q_lora_rank=128, kv_lora_rank=512, qk_rope_head_dim=64,
                                 qk_nope_head_dim=64, v_head_dim=64), T.Glm4MoeLiteForCausalLM
    # (the published latent, 512 + 64: vLLM's CPU MLA decode kernel takes 576, as in
    # t_deepseek_fp8.py's mla576 model)
elif fam in ("deepseek_v32", "glm_moe_dsa"):
    # DeepSeek sparse attention: every layer's lightning indexer (wq_b, wk, weights_proj,
    # k_norm); vLLM's routing keys (topk_method, scoring_func) as the published configs
    mla = dict(base, num_key_value_heads=2)
    del mla["head_dim"]
    C, M = (T.DeepseekV32Config, T.DeepseekV32ForCausalLM) if fam == "deepseek_v32" else \
        (T.GlmMoeDsaConfig, T.GlmMoeDsaForCausalLM)
    cfg = C(**mla, intermediate_size=96, moe_intermediate_size=32, n_routed_experts=4, n_shared_experts=1,
            num_experts_per_tok=2, first_k_dense_replace=1, n_group=1, topk_group=1, q_lora_rank=32,
            kv_lora_rank=32, qk_rope_head_dim=16, qk_nope_head_dim=32, v_head_dim=32, index_n_heads=4,
            index_head_dim=32, index_topk=8, topk_method="noaux_tc", scoring_func="sigmoid")
elif fam == "llama4_text":
    cfg = T.Llama4TextConfig(**base, intermediate_size=32, intermediate_size_mlp=96, num_local_experts=4,
                             num_experts_per_tok=1, interleave_moe_layer_step=2, attention_chunk_size=128)
    M = T.Llama4ForCausalLM
elif fam == "ernie4_5_moe":
    # ERNIE-4.5-21B-A3B's keys: layer 0 dense (moe_layer_start_index 1), two shared experts
    # as one MLP of 2 x moe_intermediate_size, the router a bare fp32 parameter (not a Linear)
    # with its moe_statics.e_score_correction_bias
    cfg, M = T.Ernie4_5_MoeConfig(**base, intermediate_size=96, moe_intermediate_size=32, moe_num_experts=4,
                                  moe_k=2, moe_num_shared_experts=2, moe_layer_start_index=1,
                                  moe_layer_interval=1, use_bias=False), T.Ernie4_5_MoeForCausalLM
elif fam == "hunyuan_v1_moe":
    # Hunyuan-A13B's layout: every layer MoE, one shared MLP (shared_mlp) of intermediate_size,
    # experts of intermediate_size too, the router an fp32 Linear (mlp.gate.wg), q/k RMSNorm
    cfg, M = T.HunYuanMoEV1Config(**base, intermediate_size=32, num_experts=4, moe_topk=2), \
        T.HunYuanMoEV1ForCausalLM
else:
    sys.exit(f"unknown family {fam}")
torch.manual_seed(0)
m = M(cfg).to(torch.bfloat16).eval()
with torch.no_grad():
    for n, p in m.named_parameters():
        if n.endswith(".bias") or "norm" in n:
            p.add_(torch.randn_like(p) * 0.1)
    if fam in ("ernie4_5_moe", "hunyuan_v1_moe"):
        # ERNIE's router (a bare fp32 parameter _init_weights leaves alone) starts all zero and
        # its correction bias zero: random, so the routing is not a tie (Hunyuan's wg is an
        # nn.Linear, initialised already; the all-zero test leaves it as it is)
        for n, p in m.named_parameters():
            if n.endswith(("mlp.gate.weight", "mlp.gate.wg.weight")) and not p.any():
                p.normal_(0, 0.02)
            elif n.endswith("e_score_correction_bias"):
                p.add_(torch.randn_like(p) * 0.1)
m.save_pretrained(out)
vocab = cfg.get_text_config().vocab_size
g = torch.Generator().manual_seed(0)
ids = torch.randint(3, vocab, (1, 32), generator=g)
with torch.no_grad():
    logits = m(input_ids=ids).logits.float()
torch.save({"ids": ids, "logits": logits}, f"{out}/ref_logits.pt")
print(f"make_tiny_moe_families: {fam} -> {out} ({sum(p.numel() for p in m.parameters())} params)")
