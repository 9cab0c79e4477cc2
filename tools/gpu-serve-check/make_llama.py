"""A tiny random bf16 Llama (fp4forge's synth has no Llama preset), for the H200 vLLM check.
usage: make_llama.py OUT_DIR
LlamaForCausalLM saved by transformers (5.17 on the H200 image) with seed 0: hidden 256,
2 layers, 4 heads of 64, 2 KV heads, MLP 512, vocab 512, untied lm_head; norms perturbed
so they carry information. Every quantized Linear has natural Marlin tiles (N % 64, K % 128).
No tokenizer: run_vllm.py serves token ids (skip_tokenizer_init)."""
import sys

import torch
import transformers


def main(out):
    cfg = transformers.LlamaConfig(hidden_size=256, num_hidden_layers=2, num_attention_heads=4,
                                   num_key_value_heads=2, head_dim=64, intermediate_size=512,
                                   vocab_size=512, max_position_embeddings=1024, pad_token_id=0,
                                   eos_token_id=1, bos_token_id=2, tie_word_embeddings=False)
    torch.manual_seed(0)
    m = transformers.LlamaForCausalLM(cfg).to(torch.bfloat16).eval()
    with torch.no_grad():
        for n, p in m.named_parameters():
            if "norm" in n:
                p.add_(torch.randn_like(p) * 0.1)
    m.save_pretrained(out)
    print(f"make_llama: {out}", file=sys.stderr)


if __name__ == "__main__":
    main(sys.argv[1])
