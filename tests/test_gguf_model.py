"""The shared SmolLM2-135M-Instruct GGUF file (Q4_1, Q8_0 embedding) as a model: logits and greedy
tokens against transformers loading the same file (it decodes to fp32, the exact reference for
dtype="float32"), its tokenizer against transformers' GGUF tokenizer, its metadata as config."""
import glob
import os
import struct
import tempfile

import numpy as np
import pytest

import decodelab
from decodelab import testing
from decodelab.formats.gguf import model as gguf_model
from decodelab.formats.gguf.reader import GGUFFile

from conftest import MODELS, _need

pytest.importorskip("gguf", reason="the gguf package (a test extra) reads GGUF for transformers")
pytest.importorskip("accelerate", reason="transformers needs accelerate to load a GGUF file (a test extra)")
torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

FOLDER = os.path.join(MODELS, "smollm2-135m-instruct")
NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
PATH = os.path.join(FOLDER, NAME)
CHAT = "<|im_start|>user\nWhat is the capital of France? Answer in one word.<|im_end|>\n<|im_start|>assistant\n"
TEXTS = ["The capital of France is", "Hello, world! 😀🎉 and 日本語のテキスト, 世界", "    x  =\t\tk\n\n\n  end",
         "def f(a, b):\n    return a ** 2 + b  # 12345 67.89", "<|im_start|>user\nhi<|im_end|>\n", "", " ",
         "don't won't it's I'm we've", "ÀÉÎÕÜ ñ ß ø", "a\u200bb\u00a0c"]


@pytest.fixture(scope="module", autouse=True)
def _parse_once(one_gguf_parse):
    pass


@pytest.fixture(scope="module")
def ours():
    _need(PATH)
    return decodelab.load(PATH, dtype="float32")


@pytest.fixture(scope="module")
def theirs():
    _need(PATH)
    m = transformers.AutoModelForCausalLM.from_pretrained(FOLDER, gguf_file=NAME, dtype=torch.float32)
    return m.eval()


@pytest.mark.slow
@pytest.mark.reference
def test_logits_equal_transformers_on_the_gguf_file(ours, theirs):
    ids = ours.tokenizer.encode(CHAT + "The capital of France is Paris. " * 8)[:64]
    assert len(ids) == 64
    with torch.no_grad():
        ref = theirs(torch.tensor([ids])).logits[0].numpy()
    np.testing.assert_allclose(ours.forward(ids), ref, atol=1e-3, rtol=0)
    # Cached: a prompt, then one token at a time.
    cache = ours.new_cache()
    rows = [ours.prefill(ids[:48], cache)] + [ours.decode(t, cache) for t in ids[48:]]
    np.testing.assert_allclose(np.stack(rows), ref[47:], atol=1e-3, rtol=0)


@pytest.mark.slow
@pytest.mark.reference
def test_score_equals_transformers_on_the_gguf_file(ours, theirs):
    """Model.score on the dequantized file: the sum of log-softmax of transformers' logits at the
    continuation's positions, within 1e-3."""
    s = ours.score("The capital of France is", " Paris, a city on the Seine.")
    ids = ours.tokenizer.encode("The capital of France is") + s.token_ids
    with torch.no_grad():
        ref = torch.log_softmax(theirs(torch.tensor([ids])).logits[0].double(), -1).numpy()
    want = [ref[s.n_prompt_tokens - 1 + i, t] for i, t in enumerate(s.token_ids)]
    np.testing.assert_allclose(s.token_logprobs, want, atol=1e-3, rtol=0)
    assert abs(s.total - sum(want)) < 1e-3


@pytest.mark.slow
@pytest.mark.reference
def test_greedy_tokens_equal_transformers(ours, theirs):
    for prompt in [CHAT, "Once upon a time", "The capital of France is"]:
        ids = ours.tokenizer.encode(prompt)
        with torch.no_grad():
            ref = theirs.generate(torch.tensor([ids]), max_new_tokens=40, do_sample=False, eos_token_id=None,
                                  pad_token_id=2)[0, len(ids):].tolist()
        assert ours.generate(ids, max_new_tokens=40, eos_token_id=[]).token_ids == ref, prompt


@pytest.mark.slow
def test_the_instruct_model_answers_paris(ours):
    g = ours.generate(CHAT, max_new_tokens=20)
    assert "Paris" in g.text and g.finish_reason == "stop" and g.token_ids[-1] == 2
    # The default for a file of 4-bit layers is int4 (the file's own values), which answers the same.
    m = decodelab.load(PATH)
    assert m.dtype == "int4" and "Paris" in m.generate(CHAT, max_new_tokens=20).text


@pytest.mark.slow
@pytest.mark.reference
def test_tokenizer_equals_transformers_gguf_tokenizer(ours):
    ref = transformers.AutoTokenizer.from_pretrained(FOLDER, gguf_file=NAME)
    for text in TEXTS:
        assert ours.tokenizer.encode(text) == ref.encode(text, add_special_tokens=False), text
        if "<|" not in text:  # decode() leaves special tokens out of the text
            assert ours.tokenizer.decode(ours.tokenizer.encode(text)) == text


def test_digits_split_before_the_byte_level_regex(ours):
    # tokenizer.ggml.pre = smollm: llama.cpp (llama-vocab.cpp) splits each digit off first, then
    # applies GPT-2's regex to the pieces, as SmolLM2's tokenizer.json does (Digits, then
    # ByteLevel). So whitespace just before a digit ends its piece and merges whole; transformers'
    # GGUF converter skips the digit split and gives two tab tokens here.
    tab2 = ours.tokenizer.encode("\t\t")
    assert len(tab2) == 1
    assert ours.tokenizer.encode("=\t\t1") == ours.tokenizer.encode("=") + tab2 + ours.tokenizer.encode("1")


def test_metadata_becomes_the_config(ours):
    c = ours.config
    assert (c.n_layers, c.hidden_size, c.n_heads, c.n_kv_heads, c.intermediate_size, c.vocab_size) == \
        (30, 576, 9, 3, 1536, 49152)
    assert (c.rope_theta, c.max_position_embeddings, c.tie_word_embeddings, c.rope_interleaved) == \
        (100000.0, 8192, True, True)
    assert c.eos_token_id == [2] and c.bos_token_id == 1


@pytest.mark.slow
def test_no_scratch_file_is_left_behind():
    _need(PATH)
    pattern = os.path.join(tempfile.gettempdir(), "decodelab-gguf-*")
    before = set(glob.glob(pattern))
    decodelab.load(PATH, dtype="bfloat16")
    assert set(glob.glob(pattern)) <= before


def _with_metadata(tmp_path, key: str, value_type: int, payload: bytes) -> str:
    """The shared file with one metadata value replaced (same length) or a string value changed."""
    with open(PATH, "rb") as f:
        data = bytearray(f.read())
    with GGUFFile(PATH) as g:
        assert key in g.metadata
    k = struct.pack("<Q", len(key)) + key.encode()
    at = data.index(k) + len(k)
    assert struct.unpack_from("<I", data, at)[0] == value_type
    data[at + 4:at + 4 + len(payload)] = payload
    p = tmp_path / "edited.gguf"
    p.write_bytes(bytes(data))
    return str(p)


@pytest.mark.slow
def test_other_architectures_and_bad_shapes_are_refused_by_name(tmp_path):
    _need(PATH)
    # "llama" -> "qwe2a": a string of the same length.
    path = _with_metadata(tmp_path, "general.architecture", 8, struct.pack("<Q", 5) + b"qwe2a")
    with pytest.raises(ValueError, match="GGUF architecture 'qwe2a' is not supported yet"):
        decodelab.load(path)
    path = _with_metadata(tmp_path, "llama.vocab_size", 4, struct.pack("<I", 50000))
    with pytest.raises(ValueError, match="llama.vocab_size 50000 differs from the 49152 rows"):
        decodelab.load(path)
    path = _with_metadata(tmp_path, "llama.attention.head_count", 4, struct.pack("<I", 7))
    with pytest.raises(ValueError, match="head_count 7 .* do not divide evenly"):
        decodelab.load(path)
    path = _with_metadata(tmp_path, "tokenizer.ggml.pre", 8, struct.pack("<Q", 6) + b"qwen2x")
    with pytest.raises(ValueError, match="GGUF pre-tokenizer 'qwen2x' is not supported yet"):
        decodelab.load(path)


MESSAGES = [{"role": "user", "content": "What is the capital of France? Answer in one word."}]


@pytest.mark.slow
def test_chat_answers_paris_and_streams_the_same_text(ours):
    g = ours.chat(MESSAGES, max_new_tokens=30)
    assert "Paris" in g.text and g.finish_reason == "stop"
    assert "".join(ours.chat_stream(MESSAGES, max_new_tokens=30)) == g.text


@pytest.mark.slow
@pytest.mark.reference
def test_chat_template_renders_as_transformers_does(ours):
    ref = transformers.AutoTokenizer.from_pretrained(FOLDER, gguf_file=NAME)
    convs = [MESSAGES,
             [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"},
              {"role": "assistant", "content": "Hello! 😀"}, {"role": "user", "content": "日本語で?"}]]
    for msgs in convs:
        for gen in (False, True):
            text = ours.tokenizer.apply_chat_template(msgs, add_generation_prompt=gen)
            assert text == ref.apply_chat_template(msgs, add_generation_prompt=gen, tokenize=False)
            assert ours.tokenizer.apply_chat_template(msgs, add_generation_prompt=gen, tokenize=True) == \
                ref.encode(text, add_special_tokens=False)


@pytest.mark.slow
def test_chat_templates_are_untrusted_input(ours):
    tok = ours.tokenizer
    with pytest.raises(ValueError, match=r"messages\[0\] must be a dict with str 'role' and 'content'"):
        tok.apply_chat_template([{"role": "user"}])
    with pytest.raises(ValueError, match="messages must be a list"):
        tok.apply_chat_template("hi")
    from decodelab.text import chat_template as chat
    with pytest.raises(ValueError, match="chat template error: no system role"):
        chat.render("{{ raise_exception('no system role') }}", MESSAGES)
    with pytest.raises(ValueError, match="chat template error"):  # the sandbox refuses internals
        chat.render("{{ messages.__class__.__mro__[1].__subclasses__() }}", MESSAGES)
    with pytest.raises(ValueError, match="rendered more than"):
        chat.render("{% for i in range(100000) %}{% for j in range(100000) %}x{% endfor %}{% endfor %}", MESSAGES)
    with pytest.raises(ValueError, match="chat template error: .*Range too big"):
        chat.render("{% for i in range(100000000) %}x{% endfor %}", MESSAGES)
    assert chat.render("{{ extra }}|{{ messages[0].role }}", MESSAGES, extra=3) == "3|user"


def test_a_folder_chat_template_comes_from_tokenizer_config(tmp_path):
    import json

    from decodelab import testing
    folder = testing.write_checkpoint(str(tmp_path / "m"), "llama-tiny", byte_tokenizer=True)
    with open(os.path.join(folder, "tokenizer_config.json"), "w") as f:
        json.dump({"chat_template": "{% for m in messages %}<{{ m.role }}>{{ m.content }}{% endfor %}"}, f)
    m = decodelab.load(folder)
    assert m.tokenizer.apply_chat_template([{"role": "user", "content": "hi"}]) == "<user>hi"
    with open(os.path.join(folder, "chat_template.jinja"), "w") as f:
        f.write("J{{ messages|length }}")
    assert decodelab.load(folder).tokenizer.apply_chat_template(MESSAGES) == "J1"


@pytest.mark.slow
def test_cli_chat_in_a_terminal(sigint):
    """decodelab chat through a pseudo-terminal: a streamed answer, /reset, Ctrl-C ending a reply
    (not the program), Ctrl-D quitting."""
    _need(PATH)
    pexpect = pytest.importorskip("pexpect", reason="drives the CLI through a pseudo-terminal")
    import sys
    child = pexpect.spawn(sys.executable, ["-m", "decodelab", "chat", PATH, "--threads", "2"], encoding="utf-8",
                          timeout=120, env=dict(os.environ, PYTHONUNBUFFERED="1"))
    try:
        child.expect("Ctrl-D quits")
        child.expect("> ")
        child.sendline("What is the capital of France? Answer in one word.")
        child.expect("Paris")
        child.expect("> ")
        child.sendline("/reset")
        child.expect(r"\[conversation reset\]")
        child.expect("> ")
        child.sendline("Write a very long story about a dragon who learns to bake bread.")
        child.expect("bake bread\\.\r\n")  # the terminal's echo of the line
        child.expect(r"\w+ \w+ \w+")  # the reply has started
        child.sendintr()
        child.expect(r"\[reply stopped\]")
        child.expect("> ")  # still running, ready for the next message
        child.sendeof()
        child.expect(pexpect.EOF)
    finally:
        child.close()
    assert child.exitstatus == 0


@pytest.mark.slow
@pytest.mark.reference
def test_a_chain_inside_transformers_generate_gives_decodelabs_tokens(ours, theirs):
    from transformers import LogitsProcessorList

    import decodelab.samplers as S
    from decodelab.integrations.transformers import as_logits_processor

    chain = S.Chain([S.RepetitionPenalty(1.3), S.PresencePenalty(0.5), S.TopK(20), S.MinP(0.1)])
    for prompt in [CHAT, "Once upon a time"]:
        ids = ours.tokenizer.encode(prompt)
        want = ours.generate(ids, sampler=S.Chain(chain.stages + [S.Greedy()]), max_new_tokens=30,
                             eos_token_id=[]).token_ids
        with torch.no_grad():
            out = theirs.generate(torch.tensor([ids]), do_sample=False, max_new_tokens=30, min_new_tokens=30,
                                  logits_processor=LogitsProcessorList([as_logits_processor(chain)]),
                                  pad_token_id=0)
        assert out[0, len(ids):].tolist() == want
        plain = ours.generate(ids, max_new_tokens=30, eos_token_id=[]).token_ids
        assert plain != want  # the penalties changed the continuation: the adapter did act


def test_the_adapter_refuses_a_chain_that_picks_the_token():
    import decodelab.samplers as S
    from decodelab.integrations.transformers import as_logits_processor

    with pytest.raises(ValueError, match="ends in Greedy, which picks the token itself"):
        as_logits_processor(S.Chain([S.TopK(5), S.Greedy()]))
    p = as_logits_processor(S.TopK(1))
    scores = torch.tensor([[0.0, 2.0, 1.0], [3.0, 0.0, 1.0]])
    out = p(torch.tensor([[0], [1]]), scores)
    assert torch.isinf(out).sum() == 4 and out[0, 1] == 2.0 and out[1, 0] == 3.0


@pytest.mark.slow
def test_int4_keeps_the_files_4_bit_values_and_agrees_with_fp32(ours):
    """The Q4_1 file's default, int4: its layers are the file's own 4-bit values (only the
    activations are rounded, to int8 per block of 32, as llama.cpp rounds them), in fewer bytes
    than int8. Teacher-forced over 2048 positions of real text (the standard library's
    docstrings, four windows of 512): top-1 agreement with the exact fp32 read of at least 96.5 %
    and a mean |logit error| below 0.17. Per window of 512 both decodelab (95.5-97.3 %) and
    llama.cpp on the same file (96.7-98.2 %) land on either side of 97 %: the flips are near-ties,
    at the same mean error (bench_accuracy.py --only-gguf reports the first window)."""
    q4 = decodelab.load(PATH)
    q8 = decodelab.load(PATH, dtype="int8")
    assert q4.dtype == "int4" and q4.weight_bytes["quantized"] < 0.85 * q8.weight_bytes["quantized"]
    ids = ours.tokenizer.encode(testing.stdlib_docstrings())[:2048]
    a, b = q4.forward(ids), ours.forward(ids)
    agree, err = (a.argmax(-1) == b.argmax(-1)).mean(), np.abs(a - b).mean()
    assert agree >= 0.965 and err < 0.17, (agree, err)
    assert "Paris" in q4.chat([{"role": "user", "content": "What is the capital of France? Answer in one word."}],
                              max_new_tokens=8).text
