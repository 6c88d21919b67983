"""The real GGUF files users pick, as ../shared/models/fetch downloads them (.ci/run fetches them
first): Qwen2.5-Coder-0.5B-Instruct and Gemma 3 270M, Q4_K_M. At dtype="float32" decodelab reads
exactly the values the file encodes, and transformers (from_pretrained(..., gguf_file=...), which
dequantizes to fp32) is the reference: logits over 64 positions, whole and through the cache, and
32 greedy tokens; the files' tokenizers against transformers' GGUF tokenizer."""
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


@pytest.fixture(scope="module", params=["qwen2.5-coder-0.5b", "gemma-3-270m"])
def pair(request):
    path = _path(request.param)
    ours = decodelab.load(path, dtype="float32")
    theirs = transformers.AutoModelForCausalLM.from_pretrained(os.path.dirname(path), gguf_file=os.path.basename(path),
                                                               dtype=torch.float32).eval()
    return request.param, ours, theirs


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
