"""chat() and chat_stream() as a user meets them: a template passed as an argument (or with
--chat-template FILE on the command line) for a file without one, the error that names both ways,
tools given to the template, replies that run to their end-of-turn token, and each logprob's text."""
import json
import subprocess
import sys

import pytest

import decodelab

STORY = "{% for m in messages %}{{ m.content }}{% endfor %}"
# Writes the tools as JSON lines before the messages, as tool-aware templates (Qwen2.5's) do.
WITH_TOOLS = ("{% if tools %}{% for t in tools %}{{ t | tojson }}\n{% endfor %}{% endif %}"
              "{% for m in messages %}{{ m.content }}{% endfor %}")
MSGS = [{"role": "user", "content": "Once upon a time"}]
TOOL = {"type": "function", "function": {"name": "weather", "description": "Wetter in einer Stadt",
                                         "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}


@pytest.fixture(scope="module")
def model():
    return decodelab.load("stories260K")


def test_a_model_without_a_template_names_both_ways_to_give_one(model):
    assert model.tokenizer.chat_template is None
    with pytest.raises(ValueError, match=r"has no chat template: pass one as model.chat\(messages, chat_template=...\) "
                                         r"or set model.tokenizer.chat_template \(decodelab chat and serve take "
                                         r"--chat-template FILE\); generate\(\) needs none"):
        model.chat(MSGS)
    with pytest.raises(ValueError, match="has no chat template"):
        model.chat_stream(MSGS)
    assert model.generate("Once upon a time", max_new_tokens=3).generated_tokens == 3


def test_a_template_passed_to_chat_is_rendered(model):
    g = model.chat(MSGS, chat_template=STORY, max_new_tokens=6, eos_token_id=[])
    assert g.prompt_token_ids == model.tokenizer.encode("Once upon a time", add_special_tokens=False)
    assert g.token_ids == model.generate(g.prompt_token_ids, max_new_tokens=6, eos_token_id=[]).token_ids
    pieces = model.chat_stream(MSGS, chat_template=STORY, max_new_tokens=6, eos_token_id=[])
    assert "".join(pieces) == g.text
    assert model.tokenizer.chat_template is None  # the argument is used for that call only
    with pytest.raises(ValueError, match="a chat template is Jinja text"):
        model.chat(MSGS, chat_template=3)


def test_a_reply_runs_to_the_end_of_the_window_unless_capped(model):
    ctx = model.config.max_position_embeddings
    g = model.chat(MSGS, chat_template=STORY, eos_token_id=[])
    assert g.finish_reason == "length" and len(g.prompt_token_ids) + len(g.token_ids) == ctx + 1
    end = g.token_ids[9]  # as if it were the end-of-turn token: the reply stops there
    g = model.chat(MSGS, chat_template=STORY, eos_token_id=end)
    assert g.finish_reason == "stop" and g.token_ids[-1] == end and len(g.token_ids) <= 10
    assert len(model.chat(MSGS, chat_template=STORY, max_new_tokens=5, eos_token_id=[]).token_ids) == 5


def test_tools_reach_the_template(model):
    text = model.tokenizer.apply_chat_template(MSGS, chat_template=WITH_TOOLS, tools=[TOOL])
    assert text == json.dumps(TOOL, ensure_ascii=False) + "\nOnce upon a time"
    g = model.chat(MSGS, chat_template=WITH_TOOLS, tools=[TOOL], max_new_tokens=2)
    assert g.prompt_token_ids == model.tokenizer.encode(text, add_special_tokens=False)
    assert model.tokenizer.apply_chat_template(MSGS, chat_template=WITH_TOOLS) == "Once upon a time"
    for bad, said in [("weather", "tools must be a list"), (TOOL, "tools must be a list"),
                      ([TOOL, "x"], r"tools\[1\] must be a dict"), ([{"f": {1, 2}}], r"tools\[0\] cannot be written")]:
        with pytest.raises(ValueError, match=said):
            model.chat(MSGS, chat_template=WITH_TOOLS, tools=bad)


def test_an_assistant_tool_call_may_have_no_content(model):
    call = {"role": "assistant", "content": None, "tool_calls": [{"function": {"name": "weather", "arguments": {}}}]}
    text = model.tokenizer.apply_chat_template(MSGS + [call], chat_template="{{ messages | length }}")
    assert text == "2"
    with pytest.raises(ValueError, match=r"messages\[1\] must be a dict with str 'role' and 'content'"):
        model.tokenizer.apply_chat_template(MSGS + [{"role": "assistant", "content": None}], chat_template=STORY)


def test_logprobs_carry_each_tokens_text(model):
    g = model.generate("Once upon a time", max_new_tokens=5, logprobs=3, eos_token_id=[])
    for lp in g.logprobs:
        assert lp.text == model.tokenizer.decode([lp.token])
        assert [t.text for t in lp.top] == [model.tokenizer.decode([t.token]) for t in lp.top]
        assert isinstance(lp.top[0], decodelab.TopLogprob) and lp.top[0].logprob >= lp.logprob
    streamed = [lp for p in model.stream_tokens("Once upon a time", max_new_tokens=5, logprobs=3, eos_token_id=[])
                for lp in p.logprobs]
    assert streamed == g.logprobs


def test_stream_keywords_are_checked_as_generates(model):
    for fn in (model.stream, model.stream_tokens):
        with pytest.raises(TypeError, match=fn.__name__ + r"\(\) got an unexpected keyword argument 'top_pp'; "
                                                         "did you mean top_p"):
            fn("Once", top_pp=0.9)
    with pytest.raises(TypeError, match="did you mean max_new_tokens"):
        model.chat(MSGS, chat_template=STORY, max_tokens=3)


def _cli_chat(*args, stdin="Once upon a time\n"):
    return subprocess.run([sys.executable, "-m", "decodelab", "chat", "stories260K", *args], input=stdin,
                          capture_output=True, text=True, timeout=120)


def test_the_cli_chat_takes_a_template_file(tmp_path, model):
    template = tmp_path / "story.jinja"
    template.write_text(STORY)
    p = _cli_chat("--chat-template", str(template), "--max-new-tokens", "8")
    assert p.returncode == 0, p.stderr[-2000:]
    want = model.chat(MSGS, chat_template=STORY, max_new_tokens=8).text
    assert want and want in p.stdout
    p = _cli_chat()
    assert p.returncode == 2 and "has no chat template; pass --chat-template FILE" in p.stderr, p.stderr
    p = _cli_chat("--chat-template", str(tmp_path / "missing.jinja"))
    assert p.returncode == 2 and "cannot read the chat template" in p.stderr and "Traceback" not in p.stderr
