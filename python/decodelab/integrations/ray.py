"""decodelab as a stage of a Ray Data pipeline, in the shape of ``ray.data.llm`` (pip install
"decodelab[ray]"): a config, ``build_processor(config, preprocess, postprocess)``, and a processor
that maps a ``ray.data.Dataset`` through replicas (Ray actors) that each load the model once.

    import ray
    from decodelab.integrations.ray import ProcessorConfig, build_processor

    config = ProcessorConfig(model="path/to/model.gguf", concurrency=4, batch_size=16,
                             generate_options={"max_new_tokens": 64, "temperature": 0.8})
    processor = build_processor(
        config,
        preprocess=lambda row: {"prompt": row["question"], "sampling_params": {"seed": row["id"]}},
        postprocess=lambda row: {"id": row["id"], "answer": row["generated_text"], "error": row["error"]})
    ds = processor(ray.data.from_items(rows))

A row for ``task="generate"`` holds ``prompt`` (text or token ids) or ``messages`` (a chat), and
may hold ``sampling_params``: generate()'s keywords for that row (``seed``, ``n``, ``logprobs``,
``temperature``, ``max_new_tokens``, ...), over the config's ``generate_options``. Each replica runs
its batch through decodelab's continuous-batching engine, whose seeded requests give the tokens
``Model.generate`` gives in one process, whatever the replicas, batch sizes or order of completion.
``task="score"`` takes ``prompt`` and ``continuation`` (Model.score); ``task="perplexity"`` takes
``text`` (Model.perplexity); ``task="generate_traced"`` runs each generate row alone with
``trace=True`` and returns what ``decodelab.eval.metrics.compare`` tabulates (``RayBackend``). The
output keeps the row's own columns and adds the task's, and ``error``: None, or the message of a row
that could not run (an empty or over-long prompt, a bad option), so one bad row does not fail the
job.
"""
from __future__ import annotations

import dataclasses
import secrets
from typing import Any, Callable, Dict, List, Optional

try:
    import ray
    import ray.data
except ImportError:  # pragma: no cover - the message is the point
    raise ImportError('decodelab.integrations.ray needs Ray Data: pip install "decodelab[ray]"') from None

__all__ = ["ProcessorConfig", "Processor", "build_processor", "RayBackend", "TASKS"]

TASKS = ("generate", "score", "perplexity", "generate_traced")
# Each task's output columns, so every row (an error row too) has the same ones.
_OUTPUTS = {
    "generate": ("generated_text", "generated_token_ids", "generated_texts", "finish_reason",
                 "num_generated_tokens", "logprobs"),
    "score": ("logprob", "token_logprobs", "is_greedy"),
    "perplexity": ("perplexity",),
    "generate_traced": ("token_ids", "decode_seconds", "entropies", "token_probs"),
}


@dataclasses.dataclass(frozen=True)
class ProcessorConfig:
    """What a processor runs: the model, the task, and how many replicas of what size.

    Attributes:
        model: what ``decodelab.load`` takes (a path or a built-in name); each replica loads it
            from there (a memory-mapped file: replicas on one node share its pages).
        task: "generate" (default), "score", "perplexity" or "generate_traced".
        load_options: ``decodelab.load``'s other keywords (dtype, ...); default none. ``threads``
            comes from ``threads_per_replica``.
        concurrency: replicas (Ray actors), >= 1; default 1.
        threads_per_replica: the threads (and Ray CPUs) of each replica, >= 1; default 1.
        batch_size: rows a replica takes at a time, >= 1; default 16.
        generate_options: generate()'s keywords for every row (a row's ``sampling_params``
            override them); default none.
        max_running: sequences a replica decodes together, >= 1; default 16.

    Raises:
        ValueError: a field out of its range, or an unknown task.

    Examples:
        >>> ProcessorConfig(model="stories260K", concurrency=0)
        Traceback (most recent call last):
        ...
        ValueError: concurrency must be an integer >= 1, got 0
    """
    model: str
    task: str = "generate"
    load_options: Dict[str, Any] = dataclasses.field(default_factory=dict)
    concurrency: int = 1
    threads_per_replica: int = 1
    batch_size: int = 16
    generate_options: Dict[str, Any] = dataclasses.field(default_factory=dict)
    max_running: int = 16

    def __post_init__(self):
        if not isinstance(self.model, str) or not self.model:
            raise ValueError(f"model must be a path or a built-in name, got {self.model!r:.80}")
        if self.task not in TASKS:
            raise ValueError(f"task must be one of {', '.join(TASKS)}, got {self.task!r:.40}")
        for name in ("concurrency", "threads_per_replica", "batch_size", "max_running"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"{name} must be an integer >= 1, got {v!r:.40}")
        for name in ("load_options", "generate_options"):
            if not isinstance(getattr(self, name), dict):
                raise ValueError(f"{name} must be a dict of keywords, got {type(getattr(self, name)).__name__}")
        if "threads" in self.load_options:
            raise ValueError("load_options must not set threads: threads_per_replica does")
        if self.generate_options and self.task not in ("generate", "generate_traced"):
            raise ValueError(f"generate_options apply to task 'generate', not {self.task!r}")


class _Replica:
    """One replica: the model loaded once, then batches of rows (a dict of columns) in, out."""

    def __init__(self, config: ProcessorConfig):
        import decodelab

        self.config = config
        self.model = decodelab.load(config.model, threads=config.threads_per_replica, **config.load_options)
        self.engine = None
        if config.task == "generate":
            from decodelab.serve.engine import BatchEngine

            self.engine = BatchEngine(self.model, max_running=config.max_running)

    def __call__(self, batch: Dict[str, Any]) -> Dict[str, List[Any]]:
        cols = {k: list(v) for k, v in batch.items()}
        n_rows = len(next(iter(cols.values()))) if cols else 0
        rows = [{k: _plain(cols[k][i]) for k in cols} for i in range(n_rows)]
        run = {"generate": self._generate, "score": self._score, "perplexity": self._perplexity,
               "generate_traced": self._generate_traced}[self.config.task]
        results = run(rows)
        out = {k: list(v) for k, v in cols.items()}
        for key in _OUTPUTS[self.config.task] + ("error",):
            out[key] = [r.get(key) for r in results]
        return out

    def _generate(self, rows: List[dict]) -> List[dict]:
        # Every row's requests queued first, so the engine batches them; then each row's results.
        pending = []
        for row in rows:
            try:
                pending.append(self._submit(row))
            except Exception as e:  # a bad row: its error, and the batch goes on
                pending.append(_error(e))
        results = []
        for p in pending:
            if isinstance(p, dict):
                results.append(p)
                continue
            try:
                gens = [r.result() for r in p]
            except Exception as e:
                results.append(_error(e))
                continue
            first = gens[0]
            results.append({
                "generated_text": first.text, "generated_token_ids": list(first.token_ids),
                "generated_texts": [g.text for g in gens], "finish_reason": first.finish_reason,
                "num_generated_tokens": len(first.token_ids),
                "logprobs": [lp.logprob for lp in first.logprobs] if first.logprobs is not None else None,
                "error": None})
        return results

    def _options(self, row: dict) -> dict:
        """generate()'s keywords of a row: the config's, then the row's sampling_params."""
        options = dict(self.config.generate_options)
        params = row.get("sampling_params")
        if params is not None:
            if not isinstance(params, dict):
                raise ValueError(f"sampling_params must be a dict of generate() keywords, got {type(params).__name__}")
            options.update({k: v for k, v in params.items() if v is not None})  # Arrow's missing struct keys
        return options

    def _generate_traced(self, rows: List[dict]) -> List[dict]:
        from decodelab.eval.metrics import generation_record

        out = []
        for row in rows:
            try:
                if row.get("prompt") is None or len(row["prompt"]) == 0:
                    raise ValueError("a row needs a prompt (text or token ids), not empty")
                g = self.model.generate(row["prompt"], trace=True, **self._options(row))
                out.append({**generation_record(g), "error": None})
            except Exception as e:
                out.append(_error(e))
        return out

    def _submit(self, row: dict):
        options = self._options(row)
        n = options.pop("n", 1)
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise ValueError(f"n must be an integer >= 1, got {n!r:.40}")
        if ("prompt" in row) == ("messages" in row) or row.get("prompt", row.get("messages")) is None:
            raise ValueError("a row needs one of prompt (text or token ids) and messages (a chat)")
        if row.get("messages") is not None:
            ids = self.model._chat_prompt(row["messages"], None, None)
            options = self.model._chat_options(ids, options)
        else:
            if len(row["prompt"]) == 0:
                raise ValueError("the prompt is empty")
            ids = self.model._ids(row["prompt"])
        if n > 1 and options.get("seed") is None:
            options["seed"] = secrets.randbits(63)  # one seed for the n samples, as generate(n=) has
        # n samples: sequences 0..n-1 of one seed, as generate(n=...) numbers its samples.
        return [self.engine.submit(ids, sequence=s, **options) for s in range(n)]

    def _score(self, rows: List[dict]) -> List[dict]:
        out = []
        for row in rows:
            try:
                s = self.model.score(row.get("prompt"), row.get("continuation"))
                out.append({"logprob": float(s.total), "token_logprobs": [float(x) for x in s.token_logprobs],
                            "is_greedy": bool(s.is_greedy), "error": None})
            except Exception as e:
                out.append(_error(e))
        return out

    def _perplexity(self, rows: List[dict]) -> List[dict]:
        out = []
        for row in rows:
            try:
                out.append({"perplexity": float(self.model.perplexity(row.get("text"))), "error": None})
            except Exception as e:
                out.append(_error(e))
        return out


def _plain(v):
    """A batch cell as plain Python: numpy arrays (token ids, nested messages) as lists."""
    import numpy as np

    if isinstance(v, np.ndarray):
        return [_plain(x) for x in v.tolist()] if v.dtype == object else v.tolist()
    if isinstance(v, np.generic):
        return v.item()
    if isinstance(v, dict):
        return {k: _plain(x) for k, x in v.items()}
    if isinstance(v, list):
        return [_plain(x) for x in v]
    return v


def _error(e: BaseException) -> dict:
    return {"error": f"{type(e).__name__}: {e}"}


@dataclasses.dataclass(frozen=True)
class Processor:
    """A dataset stage: ``processor(ds)`` maps ``preprocess``, the replicas, then ``postprocess``.

    Attributes:
        config: the ProcessorConfig.
        preprocess: a function of one row returning the row the task reads, or None.
        postprocess: a function of one output row returning the row to keep, or None.

    Examples:
        >>> p = build_processor(ProcessorConfig(model="stories260K", concurrency=2),
        ...                     postprocess=lambda row: {"text": row["generated_text"]})
        >>> p.config.concurrency, p.preprocess is None, callable(p.postprocess)
        (2, True, True)
    """
    config: ProcessorConfig
    preprocess: Optional[Callable[[dict], dict]] = None
    postprocess: Optional[Callable[[dict], dict]] = None

    def __call__(self, ds: "ray.data.Dataset") -> "ray.data.Dataset":
        c = self.config
        if self.preprocess is not None:
            ds = ds.map(self.preprocess)
        # A class: a fixed pool of `concurrency` actors, each constructed (the model loaded) once.
        ds = ds.map_batches(_Replica, fn_constructor_kwargs={"config": c}, batch_size=c.batch_size,
                            compute=ray.data.ActorPoolStrategy(size=c.concurrency), num_cpus=c.threads_per_replica)
        if self.postprocess is not None:
            ds = ds.map(self.postprocess)
        return ds


def build_processor(config: ProcessorConfig, preprocess: Optional[Callable[[dict], dict]] = None,
                    postprocess: Optional[Callable[[dict], dict]] = None) -> Processor:
    """The processor of ``config``, as ``ray.data.llm.build_processor`` builds one.

    Args:
        config: a ProcessorConfig.
        preprocess: a function of one input row returning the row the task reads (``prompt`` or
            ``messages`` and ``sampling_params``; ``prompt`` and ``continuation``; ``text``); default
            None: the rows are those already.
        postprocess: a function of one output row (its columns and the task's) returning the row to
            keep; default None: the output rows as they are.

    Returns:
        A Processor: call it on a ``ray.data.Dataset``.

    Raises:
        ValueError: ``config`` is not a ProcessorConfig, or a hook is not callable.

    Examples:
        >>> config = ProcessorConfig(model="stories260K", task="perplexity", batch_size=4)
        >>> build_processor(config).config.task
        'perplexity'
        >>> build_processor(config, preprocess="text")
        Traceback (most recent call last):
        ...
        ValueError: preprocess must be a function of one row, got str
    """
    if not isinstance(config, ProcessorConfig):
        raise ValueError(f"config must be a ProcessorConfig, got {type(config).__name__}")
    for name, f in (("preprocess", preprocess), ("postprocess", postprocess)):
        if f is not None and not callable(f):
            raise ValueError(f"{name} must be a function of one row, got {type(f).__name__}")
    return Processor(config, preprocess, postprocess)


@dataclasses.dataclass(frozen=True)
class RayBackend:
    """A model's work on the Ray cluster that ``ray.init()`` joined, for the layers that take a
    backend: ``decodelab.eval.metrics.compare(..., backend=RayBackend(replicas=4))`` and
    ``DecodelabLM(model, backend=RayBackend(replicas=4))`` (the lm-eval adapter).

    ``replicas`` actors load the model from ``model.path`` with its ``load_options`` and run the
    rows (one per generation or scored pair). Seeded generations and scores equal the local ones,
    so those tables equal the local tables in every column but tokens_per_second. Generate
    keywords travel in the rows, so they must be plain values (numbers, strings, lists).

    Attributes:
        replicas: Ray actors, >= 1; default 2.
        threads_per_replica: each replica's threads, >= 1; default 1.

    Examples:
        >>> RayBackend(replicas=0)
        Traceback (most recent call last):
        ...
        ValueError: concurrency must be an integer >= 1, got 0
    """
    replicas: int = 2
    threads_per_replica: int = 1

    def __post_init__(self):
        self._config("stories260K", {}, "generate", 1)  # checks the fields where ProcessorConfig checks them

    def _config(self, path, load_options, task, n_rows) -> ProcessorConfig:
        # About two batches a replica, at most 16 rows each (ProcessorConfig checks replicas itself).
        per = self.replicas if isinstance(self.replicas, int) and self.replicas > 0 else 1
        return ProcessorConfig(model=path, task=task, load_options=load_options,
                               concurrency=self.replicas, threads_per_replica=self.threads_per_replica,
                               batch_size=max(1, min(16, n_rows // (2 * per))))

    def run(self, model, task: str, rows: List[dict]) -> List[dict]:
        """``rows`` through the replicas with ``task``, out in the order they came in.

        Args:
            model: the decodelab Model (its ``path`` and ``load_options`` are what replicas load).
            task: one of TASKS.
            rows: the rows the task reads (see the module's text), dicts of plain values.

        Returns:
            The output rows, one per input row and in its order: the row's columns, the task's and
            ``error`` (None, or why that row could not run).

        Raises:
            ValueError: the model has no path, or ``task`` is not one of TASKS.
        """
        if not model.path:
            raise ValueError("RayBackend loads the model in each replica from model.path, and this model has none")
        if not rows:
            return []
        config = self._config(model.path, model.load_options, task, len(rows))
        data = [{**row, "_row": k} for k, row in enumerate(rows)]
        out = sorted(build_processor(config)(ray.data.from_items(data)).take_all(), key=lambda r: r["_row"])
        for r in out:
            del r["_row"]
        return out

    def records(self, model, prompts, strategies, *, n: int, max_new_tokens: int, seed: int) -> dict:
        """compare()'s generation records, ``records[strategy][prompt_index][seed_index]``.

        Args:
            model: the decodelab Model (its ``path`` and ``load_options`` are what replicas load).
            prompts: the prompts, as compare() takes them.
            strategies: strategy name -> generate() keywords (plain values).
            n: seeds per prompt and strategy.
            max_new_tokens: the most tokens each generation adds.
            seed: the first seed.

        Returns:
            A dict: strategy name -> per prompt a list of n ``generation_record`` dicts.

        Raises:
            ValueError: the model has no path, or a generation failed (the message names the
                strategy, the prompt and the seed).
        """
        keys = [(name, pi, i) for name in strategies for pi in range(len(prompts)) for i in range(n)]
        rows = [{"prompt": prompts[pi],
                 "sampling_params": {**strategies[name], "seed": seed + i, "max_new_tokens": max_new_tokens}}
                for name, pi, i in keys]
        records = {name: [[None] * n for _ in prompts] for name in strategies}
        for (name, pi, i), r in zip(keys, self.run(model, "generate_traced", rows)):
            if r["error"] is not None:
                raise ValueError(f"strategy {name!r}, prompt {pi}, seed {seed + i}: {r['error']}")
            records[name][pi][i] = {k: r[k] for k in _OUTPUTS["generate_traced"]}
        return records
