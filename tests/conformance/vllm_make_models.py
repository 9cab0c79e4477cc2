"""Tiny random bf16 models saved by transformers, servable by vLLM's CPU build (t_vllm.sh).
usage: vllm_make_models.py FIXTURES_DIR OUT_DIR
Writes OUT_DIR/{gemma4_dense,gemma4_moe,llama,qwen3}/bf16, each with a byte-level BPE tokenizer
of exactly the model's vocab (tests/probe/make_model.py's make_tokenizer: <pad>=0 <eos>=1
<bos>=2), seed 0.
- gemma4_dense / gemma4_moe: the fixtures' own Gemma-4 configs (gemma4-tiny-{dense,moe}:
  12 layers, k_eq_v on the dense one, 8 experts top-2 on the MoE one) with head_dim 16 -> 32
  (sliding) and 32 -> 64 (full), because vLLM's CPU attention supports head sizes 32..512.
- llama / qwen3: hidden 128, 2 layers, 4 heads of head_dim 32, 2 KV heads, intermediate 256,
  vocab 512; biases and norms perturbed (as make_tiny_llama.py does) so they carry
  information; qwen3 has q_norm/k_norm and tied embeddings."""
import json, os, shutil, sys, tarfile

import torch
import transformers

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "probe"))
from make_model import make_tokenizer  # noqa: E402


def perturb(m):
    with torch.no_grad():
        for n, p in m.named_parameters():
            if n.endswith(".bias") or "norm" in n:
                p.add_(torch.randn_like(p) * 0.1)


def gemma4(fixtures, name, out):
    tmp = out + ".fixture"
    shutil.rmtree(tmp, ignore_errors=True)
    os.makedirs(tmp)
    with tarfile.open(os.path.join(fixtures, f"gemma4-tiny-{name}.tar.gz")) as t:
        t.extractall(tmp, filter="data")
    src = os.path.join(tmp, f"gemma4-tiny-{name}")
    with open(os.path.join(src, "config.json")) as f:
        raw = json.load(f)
    t = raw["text_config"]
    t["head_dim"] = 32
    t["per_layer_config"] = {k: dict(v, head_dim=64) for k, v in t["per_layer_config"].items()}
    with open(os.path.join(src, "config.json"), "w") as f:
        json.dump(raw, f, indent=2)
    cfg = transformers.Gemma4Config.from_pretrained(src)
    torch.manual_seed(0)
    m = transformers.Gemma4ForConditionalGeneration(cfg).to(torch.bfloat16).eval()
    m.save_pretrained(out)
    shutil.copy(os.path.join(src, "generation_config.json"), out)
    shutil.rmtree(tmp)
    return cfg.text_config.vocab_size


def llama_like(arch, out):
    common = dict(hidden_size=128, num_hidden_layers=2, num_attention_heads=4,
                  num_key_value_heads=2, head_dim=32, intermediate_size=256, vocab_size=512,
                  max_position_embeddings=1024, pad_token_id=0, eos_token_id=1, bos_token_id=2)
    if arch == "llama":
        cfg = transformers.LlamaConfig(**common, tie_word_embeddings=False)
        cls = transformers.LlamaForCausalLM
    else:
        cfg = transformers.Qwen3Config(**common, tie_word_embeddings=True)
        cls = transformers.Qwen3ForCausalLM
    torch.manual_seed(0)
    m = cls(cfg).to(torch.bfloat16).eval()
    perturb(m)
    m.save_pretrained(out)
    return cfg.vocab_size


def main():
    fixtures, out = sys.argv[1], sys.argv[2]
    os.makedirs(out, exist_ok=True)
    for name, make in (("gemma4_dense", lambda d: gemma4(fixtures, "dense", d)),
                       ("gemma4_moe", lambda d: gemma4(fixtures, "moe", d)),
                       ("llama", lambda d: llama_like("llama", d)),
                       ("qwen3", lambda d: llama_like("qwen3", d))):
        d = os.path.join(out, name, "bf16")
        shutil.rmtree(d, ignore_errors=True)
        os.makedirs(os.path.dirname(d), exist_ok=True)
        vocab = make(d)
        make_tokenizer(vocab, d)
        print(f"made {name} -> {d}", file=sys.stderr)


if __name__ == "__main__":
    main()
