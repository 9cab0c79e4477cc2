"""Prepares the seats the probe test serves, all fp4forge NVFP4A16 output of one tiny real
Gemma-4 MoE checkpoint, served by vLLM's CPU build through fp4forge's TEST plugin (tests/vllm).
usage: make_model.py FIXTURE_TARBALL OUT FP4FORGE
- OUT/bf16: the fixture's own Gemma-4 config (default gemma4-tiny-moe: Gemma4ForConditionalGeneration,
  vocab 512, 12 layers, 8 experts top-2, per_layer_config) re-instantiated by transformers with
  random bf16 weights (seed 0), with ONE change: head_dim 16 -> 32 on the sliding layers and
  32 -> 64 on the full-attention layers, because vLLM's CPU attention kernels support head sizes
  32..512 only ("Unsupported CPU attention configuration: head_dim=16"). Not served.
- OUT/healthy: `fp4forge quantize OUT/bf16` (attention, MLP and experts NVFP4, routers kept).
- OUT/router: the same with layer 0's MoE router quantized on purpose
  (`--allow-router-quantization --only <every attention/MLP/expert Linear> --only <that router>`);
  only when the fixture has MoE routers.
- OUT/nan: healthy with ONE fp8 block scale of layers.0.mlp.down_proj set to NaN (0x7f), so 16
  weights dequantize to NaN.
- OUT/loop: healthy with one embedding row scaled up (tied embeddings = the LM head).

The fixture has no tokenizer files, so we train a byte-level BPE of exactly the
model's vocab (512) on a fixed corpus: deterministic, nothing downloaded."""
import json, os, shutil, sys, tarfile

from safetensors.torch import load_file, save_file
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

SPECIALS = ["<pad>", "<eos>", "<bos>", "<unk>", "<start_of_turn>", "<end_of_turn>"]
TEMPLATE = ("{{ bos_token }}{% for m in messages %}<start_of_turn>{{ m['role'] }}\n"
            "{% if m['content'] is string %}{{ m['content'] }}{% else %}"
            "{% for c in m['content'] %}{% if c['type'] == 'text' %}{{ c['text'] }}{% endif %}"
            "{% endfor %}{% endif %}<end_of_turn>\n{% endfor %}"
            "{% if add_generation_prompt %}<start_of_turn>model\n{% endif %}")
CORPUS = ("The quick brown fox jumps over the lazy dog. A seat is probed before "
          "an alias moves to it. Numbers 0 1 2 3 4 5 6 7 8 9 and words: model, "
          "server, request, token, weather, city, Paris, London, health, check. ") * 50


def make_tokenizer(vocab, out):
    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tr = trainers.BpeTrainer(vocab_size=vocab, special_tokens=SPECIALS,
                             initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                             show_progress=False)
    tok.train_from_iterator([CORPUS], trainer=tr)
    assert tok.get_vocab_size() <= vocab, tok.get_vocab_size()
    assert tok.token_to_id("<eos>") == 1 and tok.token_to_id("<bos>") == 2
    tok.save(os.path.join(out, "tokenizer.json"))
    cfg = {"tokenizer_class": "PreTrainedTokenizerFast", "bos_token": "<bos>",
           "eos_token": "<eos>", "pad_token": "<pad>", "unk_token": "<unk>",
           "model_max_length": 4096, "chat_template": TEMPLATE}
    with open(os.path.join(out, "tokenizer_config.json"), "w") as f:
        json.dump(cfg, f, indent=2)


def plant_nan(src, dst):
    import torch
    from safetensors import safe_open
    shutil.copytree(src, dst)
    path = os.path.join(dst, "model.safetensors")
    with safe_open(path, "pt") as f:
        meta = f.metadata()
    sd = load_file(path)
    key = next(k for k in sorted(sd) if k.endswith("layers.0.mlp.down_proj.weight_scale"))
    assert sd[key].dtype == torch.float8_e4m3fn, sd[key].dtype
    sd[key].view(torch.uint8)[0, 0] = 0x7F  # e4m3fn NaN
    save_file(sd, path, metadata=meta)
    print("planted NaN in", key, "[0, 0]")


def make_model(fixture, dst):
    import torch
    from transformers import Gemma4Config, Gemma4ForConditionalGeneration
    path = os.path.join(fixture, "config.json")
    with open(path) as f:
        raw = json.load(f)
    t = raw["text_config"]
    t["head_dim"] = 32
    t["per_layer_config"] = {k: dict(v, head_dim=64) for k, v in t["per_layer_config"].items()}
    with open(path, "w") as f:
        json.dump(raw, f, indent=2)
    cfg = Gemma4Config.from_pretrained(fixture)
    torch.manual_seed(0)
    m = Gemma4ForConditionalGeneration(cfg).to(torch.bfloat16)
    m.save_pretrained(dst)
    shutil.copy(os.path.join(fixture, "generation_config.json"), dst)


def plant_loop(src, dst):
    """A seat whose output collapses onto one token: one embedding row scaled
    up so far (tied embeddings = the LM head) that greedy picks it always."""
    shutil.copytree(src, dst)
    path = os.path.join(dst, "model.safetensors")
    from safetensors import safe_open
    with safe_open(path, "pt") as f:
        meta = f.metadata()
    sd = load_file(path)
    key = next(k for k in sorted(sd) if k.endswith("language_model.embed_tokens.weight"))
    tok = Tokenizer.from_file(os.path.join(src, "tokenizer.json"))
    tid = tok.encode(" the").ids[0]
    sd[key][tid] *= 1000
    save_file(sd, path, metadata=meta)
    print("scaled embedding row", tid, "of", key)


def quantize(ff, src, dst, *extra):
    import subprocess
    r = subprocess.run([ff, "quantize", src, dst, "--no-doctor", "--quiet", *extra],
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines = [x for x in r.stdout.splitlines() if "router quantized on request" not in x]
    print("\n".join(lines[-4:]))
    if r.returncode != 0:
        sys.exit(f"fp4forge quantize {' '.join(extra)} failed (exit {r.returncode})")


def main():
    tarball, out, ff = sys.argv[1], sys.argv[2], sys.argv[3]
    shutil.rmtree(out, ignore_errors=True)
    os.makedirs(out)
    with tarfile.open(tarball) as t:
        t.extractall(out, filter="data")
    name = next(n for n in os.listdir(out) if n.startswith("gemma4-tiny"))
    bf16 = os.path.join(out, "bf16")
    make_model(os.path.join(out, name), bf16)
    shutil.rmtree(os.path.join(out, name))
    with open(os.path.join(bf16, "config.json")) as f:
        text = json.load(f)["text_config"]
    make_tokenizer(text["vocab_size"], bf16)
    healthy = os.path.join(out, "healthy")
    quantize(ff, bf16, healthy)
    if text.get("enable_moe_block"):
        quantize(ff, bf16, os.path.join(out, "router"), "--allow-router-quantization",
                 "--only", r"language_model\.layers\.[0-9]+\.(self_attn|mlp|experts)\.",
                 "--only", r"language_model\.layers\.0\.router\.proj$")
    plant_nan(healthy, os.path.join(out, "nan"))
    plant_loop(healthy, os.path.join(out, "loop"))


if __name__ == "__main__":
    main()
