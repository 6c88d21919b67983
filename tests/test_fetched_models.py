"""The real GGUF files users pick, as ../shared/models/fetch downloads them (.ci/run fetches them
first): Qwen2.5-Coder-0.5B-Instruct and Gemma 3 270M, Q4_K_M. At dtype="float32" decodelab reads
exactly the values the file encodes, and transformers (from_pretrained(..., gguf_file=...), which
dequantizes to fp32) is the reference: logits over 64 positions, whole and through the cache, and
32 greedy tokens; the files' tokenizers against transformers' GGUF tokenizer."""
import json
import os

import numpy as np
import pytest

import decodelab
from decodelab import testing

pytest.importorskip("gguf", reason="the gguf package (a test extra) reads GGUF for transformers")
pytest.importorskip("accelerate", reason="transformers needs accelerate to load a GGUF file (a test extra)")
torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

# Code, as the Coder model is meant for, and prose for the base Gemma; each cut to 64 ids.
TEXT = ('def fibonacci(n):\n    """Return the n-th Fibonacci number, counting from fibonacci(0) = 0."""\n'
        "    a, b = 0, 1\n    for _ in range(n):\n        a, b = b, a + b\n    return a\n\n\n"
        "The capital of France is Paris. It lies on the Seine, in the north of the country, and is known "
        "for its museums.")


def _path(name):
    path = testing.fetched_model(name)
    if path is None:
        pytest.skip(f"{testing.FETCHED[name]} not in {testing.model_cache()}: run ../shared/models/fetch "
                    "(.ci/run does)")
    return path


_PAIRS = {}


def _pair(name):
    """decodelab and transformers at float32 on one file, loaded once per run."""
    if name not in _PAIRS:
        path = _path(name)
        ours = decodelab.load(path, dtype="float32")
        theirs = transformers.AutoModelForCausalLM.from_pretrained(
            os.path.dirname(path), gguf_file=os.path.basename(path), dtype=torch.float32).eval()
        _PAIRS[name] = (name, ours, theirs)
    return _PAIRS[name]


@pytest.fixture(scope="module", autouse=True)
def _free_pairs(one_gguf_parse):
    yield
    _PAIRS.clear()  # the float32 weights of both engines, about 6 GB, kept only for this module


@pytest.fixture(scope="module", params=["qwen2.5-coder-0.5b", "gemma-3-270m"])
def pair(request):
    return _pair(request.param)


@pytest.mark.slow
@pytest.mark.reference
def test_float32_logits_equal_transformers(pair):
    name, ours, theirs = pair
    ids = ours.tokenizer.encode(TEXT)[:64]
    assert len(ids) == 64
    with torch.no_grad():
        ref = theirs(torch.tensor([ids])).logits[0].numpy()
    np.testing.assert_allclose(ours.forward(ids), ref, atol=1e-3, rtol=0, err_msg=name)
    cache = ours.new_cache()  # a prompt, then one token at a time
    rows = [ours.prefill(ids[:32], cache)] + [ours.decode(t, cache) for t in ids[32:]]
    np.testing.assert_allclose(np.stack(rows), ref[31:], atol=1e-3, rtol=0, err_msg=name)


@pytest.mark.slow
@pytest.mark.reference
def test_float32_greedy_tokens_equal_transformers(pair):
    name, ours, theirs = pair
    ids = ours.tokenizer.encode(TEXT)[:24]
    with torch.no_grad():
        ref = theirs.generate(torch.tensor([ids]), max_new_tokens=32, do_sample=False, min_new_tokens=32)[0, 24:]
    got = ours.generate(ids, max_new_tokens=32, eos_token_id=[]).token_ids
    assert got == ref.tolist(), name


# Text as users write it: indents, runs of newlines and tabs (Gemma 3 holds them as user-defined
# tokens, which decode as text), Qwen's user-defined <tool_call> tokens, plain prose.
TEXTS = ["def f(x):\n    return x\n\nprint(f(1))", "Hello, world!\n\n\n  indented\ttab",
         '<tool_call>{"a": 1}</tool_call>', "The capital of France is Paris.", "x  =\t\tk\n\n\n  end"]


_HF_TOKENIZERS = {}


def _hf_tokenizer(name):
    """transformers' tokenizer read from the GGUF file (about 20 s for Qwen's vocabulary): once per run."""
    if name not in _HF_TOKENIZERS:
        path = _path(name)
        _HF_TOKENIZERS[name] = transformers.AutoTokenizer.from_pretrained(os.path.dirname(path),
                                                                          gguf_file=os.path.basename(path))
    return _HF_TOKENIZERS[name]


@pytest.mark.slow
@pytest.mark.reference
@pytest.mark.parametrize("name", ["qwen2.5-coder-0.5b", "gemma-3-270m"])
def test_tokenizer_equals_transformers_gguf_tokenizer(name):
    theirs = _hf_tokenizer(name)
    ours = decodelab.load(_path(name)).tokenizer
    for text in TEXTS:
        ids = ours.encode(text)
        assert ids == theirs(text)["input_ids"], (name, text)
        assert ours.decode(ids) == theirs.decode(ids, skip_special_tokens=True) == text, (name, text)



# A tool as OpenAI's API and transformers take it; non-ASCII text, which tojson keeps as written.
WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "The weather in a city, e.g. Zürich",
    "parameters": {"type": "object", "properties": {"city": {"type": "string", "description": "the city"}},
                   "required": ["city"]}}}
ASK = [{"role": "user", "content": "What is the weather in Paris?"}]


@pytest.mark.slow
@pytest.mark.reference
def test_qwen_tool_prompts_equal_transformers_and_replies_end_at_im_end():
    theirs = _hf_tokenizer("qwen2.5-coder-0.5b")
    model = decodelab.load(_path("qwen2.5-coder-0.5b"))
    call = {"role": "assistant", "content": None,
            "tool_calls": [{"type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}]}
    turns = [ASK, [{"role": "system", "content": "Answer briefly."}] + ASK,
             ASK + [call, {"role": "tool", "content": '{"sky": "clear", "celsius": 21}'}]]
    for messages in turns:
        for tools in (None, [WEATHER]):
            want = theirs.apply_chat_template(messages, tools=tools, add_generation_prompt=True, tokenize=True,
                                              return_dict=True)["input_ids"]
            got = model.tokenizer.apply_chat_template(messages, tools=tools, add_generation_prompt=True, tokenize=True)
            assert got == want, (messages, tools)
    g = model.chat(ASK, tools=[WEATHER])
    im_end = model.tokenizer.encode("<|im_end|>", add_special_tokens=False)
    assert g.finish_reason == "stop" and g.token_ids[-1:] == im_end, g.text
    assert "get_weather" in g.text and "Paris" in g.text, g.text
    pieces = "".join(model.chat_stream(ASK, tools=[WEATHER]))
    assert pieces == g.text


@pytest.mark.slow
def test_a_base_model_without_a_template_says_how_to_chat():
    model = decodelab.load(_path("gemma-3-270m"))
    assert model.tokenizer.chat_template is None
    with pytest.raises(ValueError, match=r"gemma-3-270m-q4_k_m.gguf has no chat template: pass one as "
                                         r"model.chat\(messages, chat_template=...\)"):
        model.chat(ASK)
    assert model.generate("The capital of France is", max_new_tokens=4).generated_tokens == 4
    gemma = ("{{ bos_token }}{% for m in messages %}<start_of_turn>{{ 'model' if m.role == 'assistant' else m.role }}\n"
             "{{ m.content }}<end_of_turn>\n{% endfor %}<start_of_turn>model\n")
    g = model.chat(ASK, chat_template=gemma, max_new_tokens=8)
    assert g.prompt_token_ids[0] == model.tokenizer.bos_token_id and g.generated_tokens >= 1


FIXTURE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures", "real_text.json")


def _fixture():
    with open(FIXTURE, encoding="utf-8") as f:
        return json.load(f)


@pytest.mark.slow
@pytest.mark.reference
def test_gemma3_past_its_sliding_window_equals_transformers():
    """A 600-token prompt (past the 512-position window of Gemma 3's local layers) and 64 cached
    decode steps after it, at float32, against transformers; every 8th prompt row and every decode
    row (262,144 logits each)."""
    name, ours, theirs = _pair("gemma-3-270m")
    ids = _fixture()["ids"][name][:664]
    assert set(ours.config.sliding_window) == {0, 512} and len(ids) == 664  # every sixth layer global
    rows = list(range(0, 600, 8)) + list(range(599, 663))
    with torch.no_grad():
        ref = theirs(torch.tensor([ids]), logits_to_keep=torch.tensor(rows)).logits[0].numpy()
    prompt = ours.forward(ids[:600])[0:600:8]
    np.testing.assert_allclose(prompt, ref[:75], atol=1e-3, rtol=0)
    del prompt
    cache = ours.new_cache()
    got = [ours.prefill(ids[:600], cache)] + [ours.decode(t, cache) for t in ids[600:663]]
    np.testing.assert_allclose(np.stack(got), ref[75:], atol=1e-3, rtol=0)


@pytest.mark.slow
def test_gemma3_samplers_traces_and_logprobs_at_its_vocabulary_width():
    name = "gemma-3-270m"
    ours = _PAIRS[name][1] if name in _PAIRS else decodelab.load(_path(name), dtype="float32")
    ids = _fixture()["ids"][name][:600]
    g = ours.generate(ids, max_new_tokens=4, temperature=0.7, top_k=50, top_p=0.9, min_p=0.02, seed=3,
                      trace=True, logprobs=5, eos_token_id=[])
    assert len(g.token_ids) == 4 and len(g.trace) == 4
    logits = ours.prefill(ids, ours.new_cache())
    assert logits.shape == (262144,)
    logp = logits - np.logaddexp.reduce(logits.astype(np.float64))
    first = g.trace[0]
    assert first.stages[0].name == "raw" and first.stages[0].n_kept > 100_000
    kept = {s.name.split("(")[0]: s.n_kept for s in first.stages}
    assert kept["top_k"] == 50 and kept["min_p"] <= kept["top_p"] <= 50, kept
    assert first.logprob_raw == pytest.approx(logp[g.token_ids[0]], abs=1e-4)
    assert first.rank_raw == 1 + int(np.sum(logp > logp[g.token_ids[0]]))
    lp = g.logprobs[0]
    assert lp.logprob == pytest.approx(logp[g.token_ids[0]], abs=1e-4)
    assert [t.token for t in lp.top] == np.argsort(-logp, kind="stable")[:5].tolist()
    greedy = ours.generate(ids, max_new_tokens=1).token_ids[0]
    assert greedy == int(np.argmax(logits)) and ours.tokenizer.decode([greedy]) == lp.top[0].text


# The default dtype (int4 for these files: Q4_K layers as 4-bit panels, Q5_0/Q6_K/Q8_0 layers as
# 8-bit, each exactly the file's values; activations rounded per block) over 512 positions of the
# stored text. The bars are measured values less about one position (benchmarks/real_models.py):
# llama.cpp itself agrees with the exact float32 model on 98.6% (Qwen) and 94.7% (Gemma) of them.
AGREEMENT = {"qwen2.5-coder-0.5b": {"reference": 0.98, "llama.cpp": 0.975, "perplexity": 0.005},
             "gemma-3-270m": {"reference": 0.965, "llama.cpp": 0.95, "perplexity": 0.01}}


@pytest.mark.slow
@pytest.mark.reference
@pytest.mark.parametrize("name", sorted(AGREEMENT))
def test_default_dtype_top1_agrees_with_float32_and_llama_cpp(name):
    fx = _fixture()
    rec = fx["recorded"][name]
    ids = fx["ids"][name]
    model = decodelab.load(_path(name))
    assert model.dtype == "int4" and model.tokenizer.encode(fx["text"]) == ids
    ref, llama = np.asarray(rec["transformers"]["top1"]), np.asarray(rec["llama_cpp"]["top1"])
    n = len(ref)
    x, nxt = ids[:n], np.asarray(ids[1:n + 1])

    exact = (_PAIRS[name][1] if name in _PAIRS else decodelab.load(_path(name), dtype="float32")).forward(x)
    assert exact.argmax(-1).tolist() == ref.tolist()  # the float32 engine is the reference here
    del exact
    logits = model.forward(x).astype(np.float64)
    top1 = logits.argmax(-1)
    m = logits.max(-1)
    nll = m + np.log(np.exp(logits - m[:, None]).sum(-1)) - logits[np.arange(n), nxt]
    ppl = float(np.exp(nll.mean()))
    bar = AGREEMENT[name]
    assert np.mean(top1 == ref) >= bar["reference"], np.mean(top1 == ref)
    assert np.mean(top1 == llama) >= bar["llama.cpp"], np.mean(top1 == llama)
    assert abs(ppl / rec["transformers"]["perplexity"] - 1) <= bar["perplexity"], ppl
