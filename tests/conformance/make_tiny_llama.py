"""A tiny random Llama-style causal LM saved by transformers (the conformance input).
usage: make_tiny_llama.py ARCH OUT_DIR     ARCH: llama | qwen2 | qwen3
hidden 64, 2 layers, 4 heads (head_dim 16), 2 KV heads, intermediate 128, vocab 256,
bf16, seed 0. qwen2 has q/k/v biases (made non-zero), qwen3 has q_norm/k_norm and
tied embeddings (no lm_head.weight). Also writes OUT_DIR/ref_logits.pt
({"ids": [1, 32], "logits": [1, 32, 256]}) from the bf16 model, as the Gemma-4
fixtures carry, for hf_load_kl.py."""
import sys, torch, transformers

arch, out = sys.argv[1], sys.argv[2]
common = dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
              head_dim=16, intermediate_size=128, vocab_size=256, max_position_embeddings=128,
              bos_token_id=1, eos_token_id=2, pad_token_id=0)
cfgs = {
    "llama": (transformers.LlamaConfig, transformers.LlamaForCausalLM, dict(tie_word_embeddings=False)),
    "qwen2": (transformers.Qwen2Config, transformers.Qwen2ForCausalLM, dict(tie_word_embeddings=False)),
    "qwen3": (transformers.Qwen3Config, transformers.Qwen3ForCausalLM, dict(tie_word_embeddings=True)),
}
C, M, extra = cfgs[arch]
torch.manual_seed(0)
cfg = C(**common, **extra)
m = M(cfg).to(torch.bfloat16).eval()
with torch.no_grad():
    for n, p in m.named_parameters():
        # random init leaves biases and norms at 0/1: make them carry information
        if n.endswith(".bias") or "norm" in n:
            p.add_(torch.randn_like(p) * 0.1)
m.save_pretrained(out)
g = torch.Generator().manual_seed(0)
ids = torch.randint(3, cfg.vocab_size, (1, 32), generator=g)
with torch.no_grad():
    logits = m(input_ids=ids).logits.float()
torch.save({"ids": ids, "logits": logits}, f"{out}/ref_logits.pt")
print(f"make_tiny_llama: {arch} -> {out} ({sum(p.numel() for p in m.parameters())} params)")
