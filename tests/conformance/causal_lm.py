"""Runs a Gemma-4 conformance script on a text-only causal LM.
usage: causal_lm.py SCRIPT ARGS...
The scripts load through AutoModelForImageTextToText (Gemma-4 is multimodal); here that
name is bound to AutoModelForCausalLM before SCRIPT runs, so llmc_quantize.py and
hf_load_kl.py serve the Llama-style family unchanged (llmc_quantize.py's extra Gemma-4
ignore patterns match nothing in a Llama layout)."""
import sys, runpy
import transformers
transformers.AutoModelForImageTextToText = transformers.AutoModelForCausalLM
script = sys.argv[1]
sys.argv = sys.argv[1:]
runpy.run_path(script, run_name="__main__")
