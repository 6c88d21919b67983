"""Hugging Face transformers as the reference implementation, on the same weights."""
import numpy as np
import torch
from transformers import AutoModelForCausalLM


def hf_model(folder):
    m = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32, attn_implementation="eager")
    m.eval()
    return m


def hf_logits(model, ids):
    with torch.no_grad():
        return model(torch.tensor([list(ids)])).logits[0].numpy()


def hf_greedy(model, ids, max_new_tokens, stop_on_eos=True):
    with torch.no_grad():
        out = model.generate(
            torch.tensor([list(ids)]),
            attention_mask=torch.ones(1, len(ids), dtype=torch.long),
            do_sample=False,
            max_new_tokens=max_new_tokens,
            eos_token_id=model.config.eos_token_id if stop_on_eos else None,
            pad_token_id=0,
        )
    return out[0, len(ids):].tolist()


def max_abs_diff(a, b):
    return float(np.max(np.abs(np.asarray(a, dtype=np.float64) - np.asarray(b, dtype=np.float64))))
