"""The green-list watermark end to end: the detector's z-score is standard normal on text it did
not mark, and 200 tokens that SmolLM2 sampled through samplers.Watermark are found. (Equality
with transformers' processor and detector is in test_sampler_fidelity.py.)"""
import os

import numpy as np
import pytest

import decodelab
import decodelab.samplers as S
from decodelab.samplers.watermark import WatermarkDetector

from conftest import MODELS, _need

SMOLLM = os.path.join(MODELS, "smollm2-135m-instruct", "SmolLM2-135M-Instruct.Q4_1.gguf")


def test_z_is_standard_normal_without_a_watermark():
    rng = np.random.default_rng(0)
    d = WatermarkDetector(1000)
    z = np.array([d(rng.integers(0, 1000, 100).tolist()).z_score for _ in range(400)])
    assert abs(z.mean()) < 0.2 and 0.85 < z.std() < 1.15


@pytest.fixture(scope="module")
def smollm():
    return decodelab.load(_need(SMOLLM), dtype="int8")


@pytest.mark.slow
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_smollm2_watermark_is_detected_and_plain_text_is_not(smollm, seed):
    m = smollm
    vocab = m.config.vocab_size
    prompt = m.tokenizer.apply_chat_template(
        [{"role": "user", "content": "Write a short story about a lighthouse keeper."}], add_generation_prompt=True)
    det = WatermarkDetector(vocab)
    marked = m.generate(prompt, sampler=S.Chain([S.Watermark(vocab), S.Dist(seed)]), max_new_tokens=200,
                        eos_token_id=[])
    plain = m.generate(prompt, sampler=S.Chain([S.Dist(seed)]), max_new_tokens=200, eos_token_id=[])
    assert len(marked.token_ids) == len(plain.token_ids) == 200
    hit, miss = det(marked.token_ids), det(plain.token_ids)
    assert hit.z_score > 4 and hit.prediction and hit.p_value < 1e-4
    assert miss.z_score < 2 and not miss.prediction
