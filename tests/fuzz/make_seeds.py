"""Writes the fuzzers' seed corpora (tests/fuzz/corpus/<harness>/), small and valid, so
each harness starts inside the parser rather than at its first refusal.
usage: python3 tests/fuzz/make_seeds.py   (stdlib only; the output is checked in)
fuzz_quantize's seeds are whole source folders that `fp4forge synth` writes (FP4FORGE, default
build/fp4forge); without that binary they are left as checked in."""
import json, os, struct, subprocess, tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
SEP = b"\n=====\n"


def st(tensors, meta=None):
    """A safetensors file: tensors = [(name, dtype, shape, bytes)]."""
    hdr, data = {}, b""
    if meta:
        hdr["__metadata__"] = meta
    for name, dt, shape, raw in tensors:
        hdr[name] = {"dtype": dt, "shape": shape, "data_offsets": [len(data), len(data) + len(raw)]}
        data += raw
    h = json.dumps(hdr, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    return struct.pack("<Q", len(h)) + h + data


def bf16(n, v=0x3F80):
    return struct.pack(f"<{n}H", *[(v + i) & 0x7FFF for i in range(n)])


def write(harness, name, blob):
    d = os.path.join(HERE, "corpus", harness)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(blob)


LLAMA = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 16,
         "intermediate_size": 32, "num_hidden_layers": 1, "num_attention_heads": 2,
         "num_key_value_heads": 1, "head_dim": 8, "vocab_size": 32, "max_position_embeddings": 64,
         "torch_dtype": "bfloat16"}
QWEN_MOE = dict(LLAMA, architectures=["Qwen3MoeForCausalLM"], model_type="qwen3_moe", num_experts=2,
                num_experts_per_tok=1, moe_intermediate_size=16, decoder_sparse_step=1, mlp_only_layers=[])
L = "model.layers.0."
dense = [("model.embed_tokens.weight", "BF16", [32, 16], bf16(512)),
         (L + "self_attn.q_proj.weight", "BF16", [16, 16], bf16(256)),
         (L + "self_attn.k_proj.weight", "BF16", [8, 16], bf16(128)),
         (L + "self_attn.v_proj.weight", "BF16", [8, 16], bf16(128)),
         (L + "self_attn.o_proj.weight", "BF16", [16, 16], bf16(256)),
         (L + "mlp.gate_proj.weight", "BF16", [32, 16], bf16(512)),
         (L + "mlp.up_proj.weight", "BF16", [32, 16], bf16(512)),
         (L + "mlp.down_proj.weight", "BF16", [16, 32], bf16(512)),
         (L + "input_layernorm.weight", "BF16", [16], bf16(16)),
         ("model.norm.weight", "BF16", [16], bf16(16)),
         ("lm_head.weight", "BF16", [32, 16], bf16(512))]
moe = [t for t in dense if "mlp." not in t[0]] + [(L + "mlp.gate.weight", "BF16", [2, 16], bf16(32))]
for e in range(2):
    moe += [(L + f"mlp.experts.{e}.gate_proj.weight", "BF16", [16, 16], bf16(256)),
            (L + f"mlp.experts.{e}.up_proj.weight", "BF16", [16, 16], bf16(256)),
            (L + f"mlp.experts.{e}.down_proj.weight", "BF16", [16, 16], bf16(256))]
small = [("a", "F32", [2, 2], struct.pack("<4f", 1, 2, 3, 4)), ("b", "BF16", [0], b""),
         ("c", "F8_E4M3", [4], b"\x38\x40\x48\x50"), ("d", "U8", [3, 1], b"\x01\x02\x03")]

write("safetensors", "small", st(small, {"format": "pt"}))
write("safetensors", "llama", st(dense[:4]))
write("safetensors", "empty", st([]))

index = {"metadata": {"total_size": 0}, "weight_map": {t[0]: "model.safetensors" for t in dense}}
write("checkpoint", "llama", json.dumps(LLAMA).encode() + SEP + SEP + st(dense))
write("checkpoint", "llama_index", json.dumps(LLAMA).encode() + SEP + json.dumps(index).encode() + SEP + st(dense))
write("checkpoint", "qwen3_moe", json.dumps(QWEN_MOE).encode() + SEP + SEP + st(moe))

G4 = {"architectures": ["Gemma4ForConditionalGeneration"], "model_type": "gemma4",
      "text_config": {"model_type": "gemma4_text", "hidden_size": 16, "num_hidden_layers": 2,
                      "num_attention_heads": 2, "num_key_value_heads": 1, "head_dim": 8,
                      "global_head_dim": 16, "num_global_key_value_heads": 1, "attention_k_eq_v": True,
                      "layer_types": ["sliding_attention", "full_attention"], "vocab_size": 32,
                      "sliding_window": 16, "intermediate_size": 32}}
tok = {"version": "1.0", "truncation": {"direction": "Right", "max_length": 512, "strategy": "LongestFirst",
                                        "stride": 0}, "padding": None, "added_tokens": [],
       "model": {"type": "BPE", "vocab": {"a": 0, "b": 1}, "merges": []}}
tcfg = {"tokenizer_class": "PreTrainedTokenizerFast", "model_max_length": 512, "truncation_side": "right"}
write("doctor", "gemma4_trunc", json.dumps(G4).encode() + SEP + json.dumps(tok).encode() + SEP
      + json.dumps(tcfg).encode())
write("doctor", "llama", json.dumps(LLAMA).encode() + SEP + SEP + SEP + st(dense))
write("doctor", "utf8", json.dumps({"model_type": "a" + "\u00e9" * 300}).encode())

acfg = {"peft_type": "LORA", "r": 2, "lora_alpha": 4, "target_modules": ["q_proj", "v_proj"],
        "rank_pattern": {"v_proj": 1}, "alpha_pattern": {}, "use_rslora": False, "use_dora": False,
        "bias": "none", "fan_in_fan_out": False, "modules_to_save": None}
P = "base_model.model.model.layers.0.self_attn."
lora = [(P + "q_proj.lora_A.weight", "F32", [2, 16], b"\0" * 128),
        (P + "q_proj.lora_B.weight", "F32", [16, 2], struct.pack("<32f", *([0.5] * 32))),
        (P + "v_proj.lora_A.weight", "BF16", [1, 16], bf16(16)),
        (P + "v_proj.lora_B.weight", "BF16", [8, 1], bf16(8))]
write("lora", "two_modules", json.dumps(acfg).encode() + SEP + st(lora))
write("lora", "regex_targets", json.dumps(dict(acfg, target_modules=".*\\.(q|v)_proj")).encode() + SEP + st(lora))

chat = {"choices": [{"message": {"content": "hi there", "tool_calls": [
    {"type": "function", "function": {"name": "get_weather", "arguments": "{\"city\": \"Oslo\"}"}}]},
    "finish_reason": "length", "logprobs": {"content": [{"token": "hi", "logprob": -0.5},
                                                        {"token": " there", "logprob": -1.25}]}}],
        "usage": {"completion_tokens": 2}}
comp = {"choices": [{"text": "aaaa", "finish_reason": "length",
                     "logprobs": {"token_logprobs": [-0.1, -0.1, None, -1e5], "tokens": ["a", "a", "a", "a"]}}]}
models = {"data": [{"id": "m", "max_model_len": 4096}, {"id": "other"}]}
write("probe", "chat", b"\x01" + json.dumps(chat).encode())
write("probe", "tools", b"\x02" + json.dumps(chat).encode())
write("probe", "completion", b"\x00" + json.dumps(comp).encode())
write("probe", "models", b"\x00" + json.dumps(models).encode())
write("probe", "error400", b"\x04" + json.dumps({"error": {"message": "NaN in logits"}}).encode())

# FP8-block source: weights F8_E4M3 + weight_scale_inv per 128x128 block (a partial
# edge block in each direction), the quantization_config DeepSeek-V3 ships.
DS = {"architectures": ["DeepseekV3ForCausalLM"], "model_type": "deepseek_v3", "hidden_size": 130,
      "num_hidden_layers": 1, "vocab_size": 32,
      "quantization_config": {"quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "dynamic",
                              "weight_block_size": [128, 128]}}
fp8 = [(L + "self_attn.o_proj.weight", "F8_E4M3", [130, 130], bytes(range(256)) * 66 + bytes(4)),
       (L + "self_attn.o_proj.weight_scale_inv", "F32", [2, 2], struct.pack("<4f", 0.5, 1.0, 2.0, 1e-3)),
       (L + "mlp.down_proj.weight", "F8_E4M3", [4, 130], bytes(520)),
       (L + "mlp.down_proj.weight_scale_inv", "F32", [1, 2], struct.pack("<2f", 1.0, 3.0))]
write("fp8_source", "deepseek", json.dumps(DS).encode() + SEP + st(fp8))

# Vendor-quantized sources (fuzz_sources): compressed-tensors INT4 pack-quantized (I32
# codes, BF16 scale per 32, I64 weight_shape), MXFP4 (U8 codes, U8 E8M0 per 32) and
# gpt-oss's own MXFP4 experts (blocks [E, R, G, 16], scales [E, R, G], bias [E, R]).
def ct(fmt, typ):
    return {"model_type": "deepseek_v3", "num_hidden_layers": 1,
            "quantization_config": {"quant_method": "compressed-tensors", "format": fmt, "config_groups": {
                "group_0": {"targets": ["Linear"], "weights": {"num_bits": 4, "type": typ, "symmetric": True,
                                                               "strategy": "group", "group_size": 32}}}}}
E = "model.layers.0.mlp.experts.0.down_proj."
int4 = [(E + "weight_packed", "I32", [4, 8], bytes(range(128))),
        (E + "weight_scale", "BF16", [4, 2], bf16(8, 0x3C00)),
        (E + "weight_shape", "I64", [2], struct.pack("<2q", 4, 64))]
write("sources", "int4", json.dumps(ct("pack-quantized", "int")).encode() + SEP + st(int4))
mx = [(E + "weight_packed", "U8", [4, 32], bytes(range(128))), (E + "weight_scale", "U8", [4, 2], bytes([0, 1, 127, 254] * 2))]
write("sources", "mxfp4", json.dumps(ct("mxfp4-pack-quantized", "float")).encode() + SEP + st(mx))
G = "model.layers.0.mlp.experts."
oss = [(G + "gate_up_proj_blocks", "U8", [2, 4, 1, 16], bytes(range(128))),
       (G + "gate_up_proj_scales", "U8", [2, 4, 1], bytes([120, 121, 0, 254, 127, 126, 125, 124])),
       (G + "gate_up_proj_bias", "BF16", [2, 4], bf16(8)),
       (G + "down_proj_blocks", "U8", [2, 2, 1, 16], bytes(range(64))),
       (G + "down_proj_scales", "U8", [2, 2, 1], bytes([127] * 4)),
       (G + "down_proj_bias", "BF16", [2, 2], bf16(4))]
write("sources", "gptoss", json.dumps({"model_type": "gpt_oss", "quantization_config": {"quant_method": "mxfp4"}}).encode()
      + SEP + st(oss))
# transformers' bf16 gpt-oss: fused experts used as x @ W, no quantization_config
oss16 = [(G + "gate_up_proj", "BF16", [2, 32, 4], bf16(256)), (G + "gate_up_proj_bias", "BF16", [2, 4], bf16(8)),
         (G + "down_proj", "BF16", [2, 2, 32], bf16(128)), (G + "down_proj_bias", "BF16", [2, 32], bf16(64))]
write("sources", "gptoss_bf16", json.dumps({"model_type": "gpt_oss", "num_local_experts": 2, "hidden_size": 32,
                                            "intermediate_size": 2}).encode() + SEP + st(oss16))

# Report pages (fuzz_html): a verify result and a diff --values result, as the
# commands write them, one name claiming a huge layer index.
VR = {"output": "q", "against": "src", "ok": False, "class": "moe",
      "checks": {"decode": {"ok": True, "detail": "2 modules", "items": []},
                 "fused_scales": {"ok": False, "detail": "", "items": ["layers.3.experts.5.up_proj"]}},
      "error": {"max_rel_limit": 0.25, "max_rel": 0.1},
      "tensors": [{"module": "model.layers.0.self_attn.q_proj", "family": "attention", "rel_error": 0.09,
                   "snr_db": 20.1, "numel": 4096},
                  {"module": "model.layers.2147483647.mlp.experts.3000000.up_proj", "family": "experts",
                   "rel_error": 0.3, "snr_db": 10.0, "numel": 64}]}
write("html", "verify", json.dumps(VR).encode())
DR = {"a": "q", "b": "q2", "class_a": "moe", "class_b": "moe", "refused": False, "same": False,
      "values": [{"tensor": "model.layers.1.mlp.experts.2.up_proj.weight_global_scale", "bytes_differing": 4,
                  "bytes": 4, "relative_difference": 1.0}],
      "values_by_module": {"model.layers.1.mlp.experts.2.up_proj": 1.0, "model.layers.0.self_attn.q_proj": 0.0},
      "shards_a": [{"file": "model.safetensors", "bytes": 10, "tensors": 3}]}
write("html", "diff_values", json.dumps(DR).encode())

# The card's front matter (fuzz_card): the YAML shapes base cards use.
write("card", "license_keys", b"license: gemma\nlicense_link: https://ai.google.dev/gemma/terms\n"
      b"pipeline_tag: image-text-to-text\nlanguage:\n- en\n- fr\n")
write("card", "alias_flow", b"license: &l \"other\n  license\"\nlicense_name: *l\nlanguage: [en,\n  de]\n")
write("card", "folded_injection", b"license: >\n  other\n  terms\ndescription: \"t\\nlicense: evil\"\n")

# Cache names (fuzz_hfcache): the name on the first line, refs/main after it.
write("hfcache", "main", b"org/name\n0123456789abcdef0123456789abcdef01234567\n")
write("hfcache", "revision", b"org/name@v2\nmain\n")
write("hfcache", "traversal", b"org/name\n../../../../etc\n")

# An NVFP4 checkpoint (fuzz_dequantize): one module whole, one with its codes
# missing, one with an input_scale beside it.
Q = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 32, "num_hidden_layers": 1,
     "vocab_size": 32, "quantization_config": {"quant_method": "compressed-tensors", "format": "nvfp4-pack-quantized"}}
nv = [(L + "self_attn.q_proj.weight_packed", "U8", [4, 16], bytes(range(64))),
      (L + "self_attn.q_proj.weight_scale", "F8_E4M3", [4, 2], bytes([0x38, 0x40, 0x00, 0x7f, 0x30, 0x31, 0x32, 0x33])),
      (L + "self_attn.q_proj.weight_global_scale", "F32", [1], struct.pack("<f", 448.0)),
      (L + "self_attn.k_proj.weight_scale", "F8_E4M3", [4, 2], bytes(8)),
      (L + "self_attn.k_proj.weight_global_scale", "F32", [1], struct.pack("<f", 1e-40)),
      (L + "self_attn.q_proj.input_scale", "F32", [1], struct.pack("<f", 1.0))]
write("dequantize", "modules", json.dumps(Q).encode() + SEP + st(nv))


# Whole source folders for the quantize job (fuzz_quantize): config.json, then the shard, as
# synth writes them at toy size: bf16, FP8-block, INT4, MXFP4 (Qwen3-MoE) and gpt-oss.
FF = os.environ.get("FP4FORGE", os.path.join(HERE, "..", "..", "build", "fp4forge"))
TOY = ["--layers", "1", "--hidden", "32", "--intermediate", "32", "--moe-intermediate", "32", "--experts", "2",
       "--vocab", "16", "--heads", "2", "--kv-heads", "1", "--head-dim", "16"]
if os.access(FF, os.X_OK):
    for name, args in [("bf16", ["--arch", "qwen3-moe", "--source", "bf16"]),
                       ("fp8_block", ["--arch", "qwen3-moe", "--source", "fp8-block"]),
                       ("int4", ["--arch", "qwen3-moe", "--source", "int4"]),
                       ("mxfp4", ["--arch", "qwen3-moe", "--source", "mxfp4"]),
                       ("gptoss", ["--arch", "gpt-oss-20b"])]:
        with tempfile.TemporaryDirectory() as tmp:
            subprocess.run([FF, "synth", *args, *TOY, os.path.join(tmp, "m")], check=True, stdout=subprocess.DEVNULL)
            parts = [open(os.path.join(tmp, "m", f), "rb").read() for f in ("config.json", "model.safetensors")]
            write("quantize", name, SEP.join(parts))
else:
    print("make_seeds: %s not built; corpus/quantize left as it is" % FF)
