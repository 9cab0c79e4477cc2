"""llm-compressor's model_free_ptq NVFP4A16 on a checkpoint folder (the peer that
reads safetensors directly, as fp4forge does), CPU. usage: llmc_model_free.py SRC DST
Prints one JSON line: {"ok": bool, "seconds": s, "error": "..."}; a refusal is data
for the bench table, not a crash."""
import json, sys, time, traceback

src, dst = sys.argv[1], sys.argv[2]
t0 = time.time()
try:
    from llmcompressor import model_free_ptq
    ign = ["lm_head", "re:.*vision_tower.*", "re:.*audio_tower.*", "re:.*embed_vision.*",
           "re:.*embed_audio.*", "re:.*router.*", "re:.*per_layer.*", "re:.*embed_tokens.*"]
    model_free_ptq(src, dst, scheme="NVFP4A16", ignore=ign, max_workers=1, device="cpu")
    print(json.dumps({"ok": True, "seconds": time.time() - t0, "error": ""}))
except Exception as e:  # the refusal is the result
    msg = f"{type(e).__name__}: {e}".replace("\n", " ")[:300]
    print(json.dumps({"ok": False, "seconds": time.time() - t0, "error": msg}))
    traceback.print_exc(file=sys.stderr)
