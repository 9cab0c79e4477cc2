#!/usr/bin/env bash
# Llama-style family (arch_llama.c): plan counts on tiny checkpoints written with plain
# python3 (struct + json, zero bf16 weights): llama gives 7 x layers dense Linears;
# qwen3 (q_norm/k_norm, tied: no lm_head.weight) the same plus "lm_head" in ignore;
# qwen2 biases are kept; a missing v_proj is refused (exit 3); quantize end to end.
set -u
. "$(dirname "$0")/lib.sh"
W=$WORK/llama; rm -rf "$W"; mkdir -p "$W"

# mk DIR MODEL_TYPE LAYERS [flags: tied bias qknorm no-v1]
mk() {
    python3 - "$@" <<'PY'
import json, os, struct, sys
d, mt, L, flags = sys.argv[1], sys.argv[2], int(sys.argv[3]), set(sys.argv[4:])
H, I, V, KV = 64, 128, 256, 32   # hidden, intermediate, vocab, kv heads x head_dim
t = {"model.embed_tokens.weight": [V, H], "model.norm.weight": [H]}
if "tied" not in flags:
    t["lm_head.weight"] = [V, H]
for l in range(L):
    p = f"model.layers.{l}."
    for n, s in (("q", [H, H]), ("k", [KV, H]), ("v", [KV, H]), ("o", [H, H])):
        if not (n == "v" and l == 1 and "no-v1" in flags):
            t[p + f"self_attn.{n}_proj.weight"] = s
        if "bias" in flags and n != "o":
            t[p + f"self_attn.{n}_proj.bias"] = [s[0]]
    if "qknorm" in flags:
        t[p + "self_attn.q_norm.weight"] = [16]; t[p + "self_attn.k_norm.weight"] = [16]
    t[p + "mlp.gate_proj.weight"] = [I, H]; t[p + "mlp.up_proj.weight"] = [I, H]
    t[p + "mlp.down_proj.weight"] = [H, I]
    t[p + "input_layernorm.weight"] = [H]; t[p + "post_attention_layernorm.weight"] = [H]
hdr, off = {"__metadata__": {"format": "pt"}}, 0
for k, s in t.items():
    n = 2
    for x in s: n *= x
    hdr[k] = {"dtype": "BF16", "shape": s, "data_offsets": [off, off + n]}; off += n
h = json.dumps(hdr).encode(); h += b" " * (-len(h) % 8)
os.makedirs(d, exist_ok=True)
open(os.path.join(d, "model.safetensors"), "wb").write(struct.pack("<Q", len(h)) + h + bytes(off))
cfg = {"architectures": [{"llama": "LlamaForCausalLM", "qwen2": "Qwen2ForCausalLM", "qwen3": "Qwen3ForCausalLM",
                          "mistral": "MistralForCausalLM"}.get(mt, "X")], "model_type": mt,
       "hidden_size": H, "intermediate_size": I, "num_hidden_layers": L, "num_attention_heads": 4,
       "num_key_value_heads": 2, "head_dim": 16, "vocab_size": V, "tie_word_embeddings": "tied" in flags,
       "dtype": "bfloat16"}
json.dump(cfg, open(os.path.join(d, "config.json"), "w"), indent=2)
PY
}

mk "$W/llama" llama 3
$FF plan "$W/llama" > "$W/llama.plan"; prc=$?
if [ $prc -eq 0 ] && grep -q "^family       llama, dense, 3 layers$" "$W/llama.plan" &&
   grep -q "^  dense Linears quantized   21 (config implies 21)$" "$W/llama.plan"; then
    pass llama_plan_7_per_layer "21 dense Linears for 3 layers"
else fail llama_plan_7_per_layer "rc=$prc"; fi
$FF plan --json "$W/llama" > "$W/llama.json"
if python3 -c "import json,sys; j=json.load(open(sys.argv[1])); sys.exit(not (j['family']=='llama' and j['quantized_dense']==21 and j['layers']==3 and j['ignore']==['lm_head'] and j['ok']))" "$W/llama.json"; then
    pass llama_plan_json "family llama, 21 dense, ignore [lm_head]"; else fail llama_plan_json; fi

mk "$W/qwen3" qwen3 2 tied qknorm
$FF plan --json "$W/qwen3" > "$W/qwen3.json"; prc=$?
if [ $prc -eq 0 ] && python3 -c "import json,sys; j=json.load(open(sys.argv[1])); n={f['family']:f for f in j['families']}; sys.exit(not (j['quantized_dense']==14 and j['ignore']==['lm_head'] and n['norm']['kept']==9 and 'lm_head' not in n))" "$W/qwen3.json"; then
    pass qwen3_plan_tied_qknorm "14 dense, q_norm/k_norm kept, tied lm_head in ignore"; else fail qwen3_plan_tied_qknorm "rc=$prc"; fi

mk "$W/qwen2" qwen2 2 bias
$FF plan --json "$W/qwen2" > "$W/qwen2.json"; prc=$?
if [ $prc -eq 0 ] && python3 -c "import json,sys; j=json.load(open(sys.argv[1])); n={f['family']:f for f in j['families']}; sys.exit(not (j['quantized_dense']==14 and n['bias']['kept']==6 and not j['notes']))" "$W/qwen2.json"; then
    pass qwen2_plan_biases_kept "14 dense, 6 biases kept"; else fail qwen2_plan_biases_kept "rc=$prc"; fi

mk "$W/mistral" mistral 2
expect_rc mistral_plan 0 $FF plan "$W/mistral"

mk "$W/no-v" llama 2 no-v1
expect_rc llama_plan_missing_v_proj 3 $FF plan "$W/no-v"
grep -q "dense Linears quantized: 13, but the config implies 14" "$WORK/llama_plan_missing_v_proj.out" ||
    fail llama_plan_missing_v_proj_message

mk "$W/phi" phi3 2
expect_rc unknown_model_type_refused 1 $FF plan "$W/phi"
grep -q "model_type 'phi3' is not a family fp4forge knows" "$WORK/unknown_model_type_refused.out" ||
    fail unknown_model_type_message

# end to end: quantized output has the packed names and the bias/norm tensors as they were
$FF quantize --quiet "$W/qwen2" "$W/qwen2-q" > "$W/q.out" 2>&1; qrc=$?
if [ $qrc -eq 0 ] && python3 - "$W/qwen2-q" <<'PY'
import json, struct, sys
b = open(sys.argv[1] + "/model.safetensors", "rb").read()
h = json.loads(b[8:8 + struct.unpack("<Q", b[:8])[0]])
q = json.load(open(sys.argv[1] + "/config.json"))["quantization_config"]
p = "model.layers.1.self_attn."
ok = (p + "q_proj.weight_packed" in h and p + "q_proj.weight_global_scale" in h and p + "q_proj.bias" in h
      and h[p + "q_proj.bias"]["dtype"] == "BF16" and p + "q_proj.weight" not in h
      and q["ignore"] == ["lm_head"] and q["format"] == "nvfp4-pack-quantized")
sys.exit(not ok)
PY
then pass qwen2_quantize_layout "weight_packed/scale/global_scale, bias kept bf16, ignore [lm_head]"
else fail qwen2_quantize_layout "rc=$qrc $(tail -1 "$W/q.out")"; fi
exit $GOLDEN_RC
