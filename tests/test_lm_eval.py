"""The lm-evaluation-harness adapter: lm_eval.simple_evaluate runs a tiny local task of each
request type (multiple choice on loglikelihood, loglikelihood_rolling, generate_until) on
stories260K, and every response equals Model.score or Model.generate."""
import json
import os

import pytest

os.environ.setdefault("HF_DATASETS_OFFLINE", "1")  # the tasks read local files only
lm_eval = pytest.importorskip("lm_eval", reason="the adapter is tested with lm-evaluation-harness (pip install lm_eval)")

MC = [{"question": "Once upon a time, there was a little", "choices": [" girl", " banana", " the"], "answer": 0},
      {"question": "The dog was very", "choices": [" happy", " table", " of"], "answer": 2}]
ROLL = [{"text": "Once upon a time, there was a little girl named Lily."}, {"text": "The sun was hot."}]
GEN = [{"question": "Once upon a time", "answer": ", there was a little girl"}, {"question": "Lily saw a", "answer": " cat"}]


def _tasks(d):
    for name, rows in (("mc", MC), ("roll", ROLL), ("gen", GEN)):
        with open(os.path.join(d, f"{name}.jsonl"), "w") as f:
            f.writelines(json.dumps(r) + "\n" for r in rows)
    head = "dataset_path: json\ntest_split: train\ndataset_kwargs:\n  data_files: {path}\n"
    specs = {
        "dl_mc": "output_type: multiple_choice\ndoc_to_text: '{{question}}'\ndoc_to_choice: '{{choices}}'\n"
                 "doc_to_target: '{{answer}}'\ntarget_delimiter: ''\nmetric_list:\n  - metric: acc\n",
        "dl_roll": "output_type: loglikelihood_rolling\ndoc_to_text: ''\ndoc_to_target: '{{text}}'\n"
                   "metric_list:\n  - metric: word_perplexity\n",
        "dl_gen": "output_type: generate_until\ndoc_to_text: '{{question}}'\ndoc_to_target: '{{answer}}'\n"
                  "target_delimiter: ''\ngeneration_kwargs:\n  until: ['.', ' named']\n  max_gen_toks: 8\n"
                  "  do_sample: false\nmetric_list:\n  - metric: exact_match\n",
    }
    for task, body in specs.items():
        data = os.path.join(d, task.split("_")[1] + ".jsonl")
        with open(os.path.join(d, task + ".yaml"), "w") as f:
            f.write(f"task: {task}\n" + head.format(path=data) + body)


@pytest.mark.slow
def test_simple_evaluate_equals_score_and_generate(stories, tmp_path):
    from lm_eval.tasks import TaskManager

    from decodelab.integrations.lm_eval import DecodelabLM

    _tasks(str(tmp_path))
    res = lm_eval.simple_evaluate(model=DecodelabLM(stories), tasks=["dl_mc", "dl_roll", "dl_gen"],
                                  task_manager=TaskManager(include_path=str(tmp_path)), log_samples=True)
    samples = res["samples"]
    # loglikelihood: (Score.total, Score.is_greedy) for each choice; acc from their argmax
    right = 0
    for s, doc in zip(sorted(samples["dl_mc"], key=lambda s: s["doc_id"]), MC):
        got = [r[0] for r in s["resps"]]
        want = [stories.score(ctx, cont) for ctx, cont in s["arguments"]]
        assert got == [(w.total, w.is_greedy) for w in want]
        right += max(range(len(want)), key=lambda i: want[i].total) == doc["answer"]
    assert res["results"]["dl_mc"]["acc,none"] == right / len(MC) == 0.5
    # loglikelihood_rolling: the text's tokens after BOS, scored once each
    for s in samples["dl_roll"]:
        (text,) = s["arguments"][0]
        ids = stories.tokenizer.encode(text, add_special_tokens=False)
        assert s["resps"][0][0] == pytest.approx(stories.score([stories.tokenizer.bos_token_id], ids).total, abs=1e-9)
    # generate_until: greedy generate() with the request's stop strings and token budget
    for s in samples["dl_gen"]:
        ctx, kw = s["arguments"][0]
        assert s["resps"][0][0] == stories.generate(ctx, max_new_tokens=8, temperature=0, stop=kw["until"]).text
    assert res["results"]["dl_gen"]["exact_match,none"] == 0.5


def test_the_adapter_refuses_bad_arguments(stories):
    from decodelab.integrations.lm_eval import DecodelabLM

    with pytest.raises(ValueError, match="give either model"):
        DecodelabLM()
    with pytest.raises(ValueError, match="give either model"):
        DecodelabLM(model=stories, pretrained="stories260K")
