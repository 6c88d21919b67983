"""Constrained decoding: JSON Schema, regex, choice and Lark / GBNF grammars as the chain's first
stage (llguidance's masks). Every SmolLM2 sample for a nested schema parses and validates; regex
and choice outputs always match; the stage's mask equals llguidance's own matcher on recorded
steps; EOS waits for a complete grammar; samples, beams, streams and drafts all keep to it; bad
grammars are refused before decoding."""
import json
import os
import re

import numpy as np
import pytest

import decodelab
from decodelab import Grammar
from decodelab.samplers import grammar as constraints

from conftest import MODELS, _need

llguidance = pytest.importorskip("llguidance", reason="constrained decoding needs llguidance (decodelab[constrained])")
jsonschema = pytest.importorskip("jsonschema", reason="the outputs are checked with jsonschema")

SMOLLM = os.path.join(MODELS, "smollm2-135m-instruct", "SmolLM2-135M-Instruct.Q4_1.gguf")

# Nested objects, enums, arrays, a pattern; compact JSON (llguidance's whitespace_flexible off)
# keeps the 100 samples short.
PERSON = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 16},
        "age": {"type": "integer", "minimum": 0, "maximum": 120},
        "role": {"enum": ["student", "teacher", "researcher"]},
        "address": {"type": "object", "properties": {"city": {"type": "string", "maxLength": 16},
                                                     "zip": {"type": "string", "pattern": "^[0-9]{5}$"}},
                    "required": ["city", "zip"], "additionalProperties": False},
        "skills": {"type": "array", "items": {"type": "string", "maxLength": 12}, "minItems": 1, "maxItems": 3},
    },
    "required": ["name", "age", "role", "address", "skills"],
    "additionalProperties": False,
    "x-guidance": {"whitespace_flexible": False},
}


@pytest.fixture(scope="module")
def smol():
    return decodelab.load(_need(SMOLLM))


@pytest.fixture(scope="module")
def ask(smol):
    def prompt(text):
        return smol.tokenizer.apply_chat_template([{"role": "user", "content": text}], add_generation_prompt=True,
                                                  tokenize=True)
    return prompt


@pytest.mark.slow
def test_100_seeded_json_samples_parse_and_validate(smol, ask):
    p = ask("Give me a person as JSON: name, age, role, address (city, zip) and skills.")
    texts = []
    for seed in range(4):
        g = smol.generate(p, json_schema=PERSON, max_new_tokens=160, temperature=1.0, seed=seed, n=25)
        assert {s.finish_reason for s in g.sequences} == {"stop"}
        texts += [s.text for s in g.sequences]
    assert len(texts) == 100
    for t in texts:
        jsonschema.validate(json.loads(t), PERSON)
    # the keys come in the schema's order
    assert list(json.loads(texts[0])) == list(PERSON["properties"])
    assert len(set(texts)) > 50  # sampled, not one answer repeated


def test_regex_and_choice_outputs_always_match(smol, ask):
    date = r"(19|20)[0-9]{2}-(0[1-9]|1[0-2])-(0[1-9]|[12][0-9]|3[01])"
    g = smol.generate(ask("When did the first person walk on the moon? Give the date."), regex=date,
                      max_new_tokens=20, temperature=1.0, seed=3, n=10)
    for s in g.sequences:
        assert s.finish_reason == "stop" and re.fullmatch(date, s.text), s.text
    labels = ["positive", "negative", "neutral"]
    g = smol.generate(ask("Sentiment of 'I loved this film!'? One word."), choice=labels, max_new_tokens=8,
                      temperature=1.0, seed=0, n=10)
    assert all(s.text in labels and s.finish_reason == "stop" for s in g.sequences)
    assert smol.generate(ask("Sentiment of 'I loved this film!'?"), choice=labels, max_new_tokens=8).text in labels


def test_the_mask_equals_llguidances_own_matcher(smol, ask):
    """On every recorded step, the tokens the grammar stage kept are exactly those an independent
    llguidance matcher allows after the same tokens."""
    p = ask("Give me a person as JSON.")
    g = smol.generate(p, json_schema=PERSON, max_new_tokens=100, temperature=1.0, seed=5, trace="full")
    V = smol.config.vocab_size
    lt = llguidance.LLTokenizer(smol.tokenizer._tok.to_str(), n_vocab=V, eos_token=smol._default_eos())
    m = llguidance.LLMatcher(lt, constraints.Grammar.json_schema(PERSON).compiled)
    words = np.zeros((V + 31) // 32, np.uint32)
    assert len(g.trace) == len(g.token_ids) > 10
    for step, token in zip(g.trace, g.token_ids):
        stage = next(s for s in step.stages if s.name == "grammar(json_schema)")
        kept = ~np.isneginf(stage.logits)
        m.unsafe_compute_mask_ptr(words.ctypes.data, words.nbytes)
        allowed = np.unpackbits(words.view(np.uint8), bitorder="little")[:V].astype(bool)
        np.testing.assert_array_equal(kept, allowed)
        assert stage.n_kept == allowed.sum()
        assert m.consume_token(token)
    assert m.is_accepting() == (g.finish_reason == "stop")  # a whole value, or cut by length


def test_eos_waits_for_a_complete_grammar_and_a_cut_is_length(smol, ask):
    p = ask("Give me a person as JSON.")
    g = smol.generate(p, json_schema=PERSON, max_new_tokens=4, temperature=0)
    assert g.finish_reason == "length" and len(g.token_ids) == 4
    with pytest.raises(json.JSONDecodeError):
        json.loads(g.text)
    # the grammar's stage removes EOS until the value is whole, whatever the model prefers
    g = smol.generate(ask("Say hi."), regex=r"hi there, friend", max_new_tokens=20, trace=True)
    assert g.text == "hi there, friend" and g.finish_reason == "stop"
    eos = set(smol._default_eos())
    for step in g.trace[:-1]:
        assert step.token not in eos


def test_samples_beams_streams_and_drafts_keep_to_the_grammar(smol, ask):
    p = ask("Give me a person as JSON.")
    greedy = smol.generate(p, json_schema=PERSON, max_new_tokens=100, temperature=0)
    jsonschema.validate(json.loads(greedy.text), PERSON)
    # a stream gives the same text in pieces
    assert "".join(smol.stream(p, json_schema=PERSON, max_new_tokens=100, temperature=0)) == greedy.text
    # beams: every returned sequence is a whole, valid value
    b = smol.generate(p, json_schema=PERSON, max_new_tokens=100, num_beams=3, num_return_sequences=3)
    for s in b.sequences:
        jsonschema.validate(json.loads(s.text), PERSON)
    # speculative decoding: drafts the grammar refuses are rejected, so greedy output is unchanged
    for draft in ("prompt_lookup", decodelab.load(SMOLLM, dtype="int8")):
        spec = smol.generate(p, json_schema=PERSON, max_new_tokens=100, temperature=0, draft=draft)
        assert spec.token_ids == greedy.token_ids
        assert spec.speculation.drafted > 0


def test_lark_and_gbnf_grammars(smol, ask):
    lark = 'start: "The answer is " NUMBER "."\nNUMBER: /[0-9]{1,3}/'
    g = smol.generate(ask("What is 6 times 7?"), grammar=lark, max_new_tokens=12, temperature=0)
    assert re.fullmatch(r"The answer is [0-9]{1,3}\.", g.text), g.text
    gbnf = 'root ::= ("yes" | "no") "!"'
    g = smol.generate(ask("Is water wet?"), grammar=Grammar(gbnf, syntax="gbnf"), max_new_tokens=5)
    assert g.text in ("yes!", "no!")


def test_a_llama2c_tokenizer_takes_a_grammar(stories):
    g = stories.generate("Once upon a time", choice=[" there was a cat", " there was a dog"], max_new_tokens=12,
                         temperature=1.0, seed=1, n=6)
    assert {s.text for s in g.sequences} <= {" there was a cat", " there was a dog"}
    assert all(s.finish_reason == "stop" for s in g.sequences)


def test_a_grammar_is_a_chain_stage_in_traces(smol, ask):
    g = smol.generate(ask("Pick a colour."), choice=["red", "green", "blue"], temperature=0.7, top_p=0.9, seed=2,
                      trace=True)
    names = [s.name for s in g.trace[0].stages]
    assert names[:2] == ["raw", "grammar(choice)"] and "top_p(0.9)" in names
    first = g.trace[0].stages[1]
    assert first.n_kept < 20 and 0.0 < first.mass_removed <= 1.0  # the prefixes of the three words


@pytest.mark.parametrize("kwargs,message", [
    (dict(json_schema="{not json"), "json_schema is not valid JSON"),
    (dict(json_schema=[1, 2]), "json_schema must be a JSON object"),
    (dict(json_schema={"type": "nonsense"}), "invalid json_schema grammar"),
    (dict(regex="(unclosed"), "invalid regex grammar"),
    (dict(regex=5), "regex must be a str"),
    (dict(grammar="start: undefined_rule"), "invalid lark grammar"),
    (dict(grammar=Grammar), "grammar must be a decodelab.Grammar or a Lark grammar str"),
    (dict(choice=[]), "choice must be a non-empty list"),
    (dict(choice="yes"), "choice must be a list of strings"),
    (dict(choice=["a", ""]), "non-empty strings"),
    (dict(regex="a", choice=["a"]), "exclusive; got regex, choice"),
    (dict(regex="a", eos_token_id=[]), "needs an end-of-sequence token"),
])
def test_bad_grammars_are_refused_before_decoding(smol, kwargs, message):
    with pytest.raises(ValueError, match=message):
        smol.generate("hi", max_new_tokens=4, **kwargs)


def test_bad_grammar_objects():
    with pytest.raises(ValueError, match="syntax must be one of lark, gbnf, regex, json_schema, choice"):
        Grammar("start: 'a'", syntax="ebnf")
    with pytest.raises(ValueError, match="invalid gbnf grammar"):
        Grammar("root ::= (", syntax="gbnf")
    with pytest.raises(ValueError, match="must be a non-empty str"):
        Grammar("   ")


def test_a_failing_rule_raises_and_the_model_stays_usable(stories):
    """A token-mask rule that raises ends the generation with its exception, not a crash; a rule
    that allows every token changes nothing."""
    from decodelab import _core, samplers

    class Rule(samplers.Sampler):
        def __init__(self, fn):
            self._core = _core.sampler_token_mask(fn, "rule")

    def boom(generated, sequence, address, n_words):
        raise RuntimeError("the rule failed")

    def everything(generated, sequence, address, n_words):
        np.frombuffer((np.ctypeslib.ctypes.c_uint32 * n_words).from_address(address), np.uint32)[:] = 0xFFFFFFFF

    with pytest.raises(RuntimeError, match="the rule failed"):
        stories.generate("Once upon a time", max_new_tokens=5, sampler=samplers.Chain([Rule(boom), samplers.Greedy()]))
    plain = stories.generate("Once upon a time", max_new_tokens=12)
    ruled = stories.generate("Once upon a time", max_new_tokens=12,
                             sampler=samplers.Chain([Rule(everything), samplers.Greedy()]))
    assert ruled.token_ids == plain.token_ids
