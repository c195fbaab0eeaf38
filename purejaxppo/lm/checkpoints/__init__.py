"""Hugging Face model folders in and out (``config.json``, safetensors, the GPT-2 and Llama tensor
layouts), the tokenizer and its chat template. Local files only: nothing is downloaded."""
