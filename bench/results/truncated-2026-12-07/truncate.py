"""A base model cut after its first LAYERS blocks: HOME/models/NAME, a plain causal LM of the same family (config
num_hidden_layers = LAYERS; for Gemma 3 its layer_types cut alike), its final norm and tied output layer kept.

usage: truncate.py SOURCE_DIR TARGET_DIR LAYERS
A lab question: does a one-block student whose trained block reads the middle blocks' states (where a linear read of
a headline carries best to unseen wording) read unseen wording better than one whose trained block is the last?
"""
import shutil
import sys
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

source, target, layers = Path(sys.argv[1]), Path(sys.argv[2]), int(sys.argv[3])
model = AutoModelForCausalLM.from_pretrained(source, dtype=torch.float32)
decoder = model.get_decoder()
decoder.layers = decoder.layers[:layers]
model.config.num_hidden_layers = layers
if getattr(model.config, "layer_types", None):
    model.config.layer_types = model.config.layer_types[:layers]
model.save_pretrained(target)
AutoTokenizer.from_pretrained(source).save_pretrained(target)
for extra in ("source.json",):
    if (source / extra).exists():
        shutil.copy(source / extra, target / extra)
print(f"{target}: {layers} blocks, {sum(p.numel() for p in model.parameters()):,} parameters")
