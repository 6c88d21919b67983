"""load(): a model path (Hugging Face folder, GGUF file or llama2.c .bin) to a Model.

Besides a path, ``load`` takes the name of a model shipped inside the package (``BUILTIN``:
"stories260K") or, with huggingface_hub installed, a Hugging Face repo id ("org/name").

Examples:
    >>> model = decodelab.load("stories260K")
    >>> model.config.arch, model.config.vocab_size, model.dtype
    ('llama', 512, 'float32')
"""
from __future__ import annotations

import dataclasses
import functools
import math
import os
import re
import struct
import threading
from typing import Optional, Union

import numpy as np

from . import kernel_choice, options
from .formats import hf, llama2c
from .formats.gguf import model as gguf_model
from .formats.gguf import reader as gguf_file
from .formats.gguf import tokenizer as gguf_tokenizer
from ._native import _core
from .config import from_hf_dict, load_json
from .model import Model
from .text.tokenizer import Tokenizer, find_tokenizer, load_tokenizer

__all__ = ["load", "generation_defaults", "BUILTIN"]


def _default_threads() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:
        return max(1, os.cpu_count() or 1)


# Exceptions a malformed file can raise inside the readers; load() reports them as ValueError.
_MALFORMED = (TypeError, AttributeError, KeyError, IndexError, OverflowError, RecursionError, UnicodeError,
              struct.error, MemoryError)


# generation_config.json's sampling fields with transformers' GenerationConfig defaults, used where
# do_sample is true; repetition_penalty applies to greedy decoding too, as in transformers.
_SAMPLING_DEFAULTS = {"temperature": 1.0, "top_k": 50, "top_p": 1.0, "min_p": None, "typical_p": 1.0}


def generation_defaults(gen: dict) -> dict:
    """The sampling options a model's generation_config.json asks for, in generate()'s names:
    what generate() uses when it is given no sampling option, sampler or preset.

    With ``do_sample`` true: temperature, top_k, top_p, min_p and typical_p, each with transformers'
    GenerationConfig default where the file leaves it out (1.0, 50, 1.0, None, 1.0), the no-op
    values top_p=1, typical_p=1 and top_k=0 left out. repetition_penalty is kept whenever it is
    not 1, greedy or not, as in transformers.

    Args:
        gen: the parsed generation_config.json ({} when there is none).

    Returns:
        The options as generate() keywords ({} when the file asks for nothing).

    Raises:
        ValueError: an option is not a finite number >= 0 (naming the key and the value), or top_k is
            not an integer.

    Examples:
        >>> from decodelab.loading import generation_defaults
        >>> generation_defaults({"do_sample": True, "temperature": 0.6, "top_p": 0.9})
        {'temperature': 0.6, 'top_k': 50, 'top_p': 0.9}
        >>> generation_defaults({"do_sample": False, "repetition_penalty": 1.1})
        {'repetition_penalty': 1.1}
        >>> generation_defaults({"do_sample": True, "temperature": -1})
        Traceback (most recent call last):
        ...
        ValueError: generation_config.json 'temperature' must be a number >= 0, got -1
    """
    out = {}
    if gen.get("do_sample"):
        for key, default in _SAMPLING_DEFAULTS.items():
            v = gen.get(key, default)
            if v is not None:
                out[key] = v
        if out.get("top_p") == 1.0:  # the neutral values transformers leaves out of its chain
            del out["top_p"]
        if out.get("typical_p") == 1.0:
            del out["typical_p"]
        if out.get("top_k") == 0:
            del out["top_k"]
    if gen.get("repetition_penalty", 1.0) != 1.0:
        out["repetition_penalty"] = gen["repetition_penalty"]
    for key, v in out.items():
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0:
            raise ValueError(f"generation_config.json {key!r} must be a number >= 0, got {v!r}")
    if "top_k" in out and not isinstance(out["top_k"], int):
        raise ValueError(f"generation_config.json 'top_k' must be an integer, got {out['top_k']!r}")
    return out


def _read_model_files(path: str):
    """(config, weight files, tensor table, a call that reads the tokenizer (and returns None where
    there is none), a scratch file to remove once the engine is built, the dtype that keeps a
    block-quantized file's precision or None)."""
    if os.path.isdir(path):
        cfg_path = os.path.join(path, "config.json")
        if not os.path.exists(cfg_path):
            # A folder of downloaded files: its one GGUF file is the model; else say what is there.
            ggufs = sorted(f for f in os.listdir(path) if f.endswith(".gguf"))
            if len(ggufs) == 1:
                return _read_model_files(os.path.join(path, ggufs[0]))
            found = sorted(f for f in os.listdir(path) if f.endswith((".gguf", ".bin")))
            raise FileNotFoundError(f"{path} has no config.json" + (
                f"; pass one of its model files instead: {', '.join(found)}" if found else
                " and no .gguf or llama2.c .bin file; load() reads a Hugging Face folder, a GGUF file or "
                "a llama2.c checkpoint"))
        raw = load_json(cfg_path)
        gen_path = os.path.join(path, "generation_config.json")
        gen = {}
        if os.path.exists(gen_path):
            gen = load_json(gen_path)
            if not isinstance(gen, dict):
                raise ValueError(f"{gen_path} must hold a JSON object")
            if gen.get("eos_token_id") is not None:
                raw = dict(raw, eos_token_id=gen["eos_token_id"])
        config = from_hf_dict(raw)
        config = dataclasses.replace(config, generation_defaults=generation_defaults(gen))
        files, tensors = hf.read_hf_weights(path, config)
        return config, files, tensors, functools.partial(find_tokenizer, path, config.vocab_size), None, None
    if gguf_file.is_gguf(path):
        with gguf_file.GGUFFile(path) as g:  # checked whole, so a malformed file says what is wrong
            config = gguf_model.config_from_gguf(g)
            files, tensors, scratch = gguf_model.weight_table(g, config)
            # The tokenizer reads only the metadata, parsed whole already, so it may run after close.
            tok = functools.partial(gguf_tokenizer.tokenizer_from_gguf, g)
            return config, files, tensors, tok, scratch, gguf_model.native_dtype(g)
    try:
        config, tensors = llama2c.read_llama2c(path)
    except ValueError as e:  # neither GGUF nor a plausible llama2.c checkpoint
        raise ValueError(f"{path} is not a recognised model file: not GGUF, and as a llama2.c checkpoint: {e} "
                         "(load() reads a Hugging Face folder with config.json, a GGUF file or a llama2.c "
                         ".bin checkpoint)") from None
    folder = os.path.dirname(os.path.abspath(path))
    return config, [path], tensors, functools.partial(find_tokenizer, folder, config.vocab_size), None, None


class _Beside:
    """A call run on a thread of its own while the caller goes on; result() waits for it and returns
    its value or raises its exception. load() reads the tokenizer on one while the engine converts
    the weights (the engine lets go of the GIL): building a 150k-260k token BPE takes about as long as
    packing a 4-bit file's layers. A thread per call, not a pool, so that a forked child never
    waits on a pool's thread that stayed in its parent."""

    def __init__(self, fn):
        self._value, self._error = None, None
        self._thread = threading.Thread(target=self._run, args=(fn,), name="decodelab-tokenizer", daemon=True)
        self._thread.start()

    def _run(self, fn):
        try:
            self._value = fn()
        except BaseException as e:  # handed to result()'s caller
            self._error = e

    def wait(self):
        self._thread.join()

    def result(self):
        self.wait()
        if self._error is not None:
            raise self._error
        return self._value


# Models inside the package, by name: stories260K (llama2.c, MIT), the default of the CLI.
BUILTIN = {"stories260K": os.path.join(os.path.dirname(os.path.abspath(__file__)), "models", "stories260K",
                                       "stories260K.bin")}
_REPO_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,95}/[A-Za-z0-9][A-Za-z0-9_.-]{0,95}")
# The files of a Hugging Face repo that load() reads.
_HUB_FILES = ["config.json", "generation_config.json", "*.safetensors", "model.safetensors.index.json",
              "tokenizer.json", "tokenizer_config.json", "chat_template.jinja", "vocab.json", "merges.txt"]


def _resolve(path: str) -> str:
    """A model path as given, a built-in model's name (BUILTIN), or a Hugging Face repo id
    ("org/name") through huggingface_hub, when installed and the files are reachable or cached. A
    name that is also an existing path means the path."""
    if os.path.exists(path):
        return path
    if path in BUILTIN:
        return BUILTIN[path]
    if _REPO_ID.fullmatch(path) and ".." not in path:
        try:
            import huggingface_hub
        except ImportError:
            raise FileNotFoundError(f"model path {path} does not exist; as a Hugging Face repo id it needs "
                                    "huggingface_hub (pip install huggingface_hub), or pass a local folder") from None
        try:
            return huggingface_hub.snapshot_download(path, allow_patterns=_HUB_FILES)
        except Exception as e:  # offline, not cached, no such repo: the hub's own exception types
            raise FileNotFoundError(f"model path {path} does not exist, and the Hugging Face repo {path!r} could not "
                                    f"be fetched or found in the cache ({type(e).__name__}); pass the path of a "
                                    "local folder or file instead") from None
    raise FileNotFoundError(f"model path {path} does not exist (built-in models: {', '.join(BUILTIN)})")


def load(path: Union[str, os.PathLike], *, dtype: Optional[str] = None, threads: Optional[int] = None,
         tokenizer: Union[None, str, os.PathLike, Tokenizer] = None, zero_copy: bool = False,
         kv_block_size: int = _core.default_kv_block_size, bf16_matmul: Optional[bool] = None) -> Model:
    """Load a model: a Hugging Face folder, a GGUF file, a llama2.c checkpoint, or a model by name.

    The path may be a Hugging Face folder (config.json + safetensors), or a folder holding one GGUF
    file and no config.json, a GGUF file (the architectures of
    ``decodelab.formats.gguf.model.ARCHITECTURES``; F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1,
    Q4_K, Q5_K and Q6_K tensors; its gpt2-type BPE, llama-type SentencePiece or gemma4 tokenizer)
    or a llama2.c ``.bin`` checkpoint; or the name of a built-in model (``BUILTIN``:
    "stories260K"), or a Hugging Face repo id ("org/name") fetched through huggingface_hub when it
    is installed and the files are reachable or cached. A name that is also an existing path means
    the path.

    Weights are memory-mapped; fp32, bf16 and f16 stored weights load. Activations, norms,
    attention and accumulation stay fp32, except that int8 layers round their input to 16-bit
    fixed point (a scale per 256 values; error at most 1/65534 of the block's largest value) to sum
    the products exactly in int32, and bfloat16 prompts on a CPU with native bf16 products round
    theirs to bf16 (``bf16_matmul``). int4, int8 and w8a8 run one linear kernel at every number of
    tokens, and the steps between the products (norms, RoPE, attention, activations) sum in one
    fixed order: a token's logits are the same bits whether it was decoded alone, in a batch, or in
    a prompt, on any thread count and at every instruction set (``DECODELAB_ISA``).

    Args:
        path: the model file or folder, a built-in model's name, or a Hugging Face repo id (str or
            os.PathLike).
        dtype: the precision the linear layers and the output head are kept and read in:
            "float32" (exact), "bfloat16" (half the bytes per decode step), "int8" (weight-only,
            one scale per output channel; a quarter of the bytes), "w8a8" (the int8 weights, and
            each linear layer's input rounded to 7-bit integers, a scale per 256 values, error at
            most 1/126 of the block's largest value: faster prompts at a measured cost in accuracy;
            see benchmarks/bench_speed.py and benchmarks/bench_accuracy.py), or "int4" (4-bit values
            per block of 32 inputs with a step and a minimum, from fp32 or bf16 weights by GGUF's
            Q4_1 rule: the same blocks as gguf's quantizer, steps and minima as halves; each layer's
            input rounded to int8 per block of 32, as llama.cpp does; the output head keeps int8).
            A GGUF file's Q4_0, Q4_1 and Q4_K layers become int4 layers with the file's own values,
            read from its mapping with no fp32 copy, the head too where the file stores it in 4
            bits; under "int4" its 5- to 8-bit layers (Q5_0 ... Q8_0) keep 8 bits (int8), as does
            a head stored in more than 4 bits. None (the default) means "float32", and for
            a GGUF file with block-quantized tensors the dtype that keeps its precision: "int4"
            where its layers hold 4-bit blocks, else "int8" (decoded exactly, then rounded per
            output row); "float32" gives exactly the values such a file encodes.
        threads: the most threads a forward pass runs on, 1 to 1024. None (the default) uses every
            core this process may run on, less those other programs keep busy at the time (looked
            at every 20 ms: a step spread over a core that another program also wants waits for it
            at every parallel region; ``benchmarks/bench_busy.py``); a number fixes the count.
        tokenizer: a Tokenizer, or the path of a folder, a tokenizer.json, a GGUF file or a llama2.c
            tokenizer .bin (as ``decodelab.text.load_tokenizer`` reads them), overriding the
            tokenizer found beside the weights; None (the default) uses the one found there (a
            model without one takes token ids only).
        zero_copy: with fp32, the linear layers and the head are by default (False) copied once
            from the file mapping into memory in huge pages, where a decode step reads them 10-20 %
            faster here (bf16 and int8 are converted copies anyway); True reads them from the
            mapping itself instead (no copy at load, pages shared with other processes that map the
            same file). Either way the result is the same bit for bit.
        kv_block_size: tokens per KV-cache block, 1 to 4096; default 64. A decode step reads each
            block's keys and values of a layer and head as one contiguous piece; with 64 decode
            attention at context 960 took 9-29 % less time here than with vLLM's 16. Smaller blocks
            waste less memory per sequence (at most kv_block_size - 1 positions) and copy less when
            a fork first writes to a shared block. The logits are the same bit for bit at every
            block size.
        bf16_matmul: None (the default) means False for int8, whose logits then stay the same bits
            on every path and CPU, and for bfloat16 weights whichever path a short measurement on
            this CPU finds faster (``decodelab.kernel_choice``; shown in
            ``decodelab.cpu_info()["choices"]``). True, on bfloat16 and int8
            weights, on a CPU with native bf16
            products (AVX512_BF16, ``decodelab._core.bf16_matmul_native()``): a linear layer over 80
            or more rows at once (long prompts, very large batches) rounds its input to bf16 and runs
            oneDNN's bf16 matmul, products of bf16 pairs summed in fp32, as transformers and
            llama.cpp do at this precision (AMX tiles where the CPU has them): 2-4 times the speed of
            the fp32 matmul on the weights widened, at a measured cost (benchmarks/bench_accuracy.py).
            int8 layers run it on their int8 values, which bf16 holds exactly, with the scales
            applied to the sums: 1.7x the speed of their own kernel on 512-token prompts, but a
            prompt's logits then differ from the same tokens decoded one by one. Fewer
            rows, decode steps among them, keep their usual inputs. False keeps those for every row
            count too: fp32 arithmetic on the bf16-rounded weights, or the int8 kernel's 16-bit
            inputs. On a CPU without native bf16 the option changes nothing (oneDNN would emulate
            the products, at a fifth of the fp32 matmul's speed), and ``Model.bf16_matmul`` is
            False.

    Returns:
        The loaded Model.

    Raises:
        FileNotFoundError: the path does not exist and is neither a built-in model nor a Hugging
            Face repo id that could be fetched (or huggingface_hub is not installed), a folder
            has no config.json and not exactly one .gguf file (the message names the model files it
            holds), or a ``tokenizer`` path does not exist or holds no tokenizer files.
        ValueError: ``dtype`` is not one of "float32", "bfloat16", "int8", "w8a8", "int4";
            ``threads`` is not in [1, 1024]; ``kv_block_size`` is not in [1, 4096]; or the model
            files or the tokenizer are malformed (the message names the file and what is wrong).
        TypeError: ``kv_block_size`` is not an int, ``zero_copy`` is not a bool, or ``bf16_matmul``
            is neither a bool nor None.

    Examples:
        >>> model = decodelab.load("stories260K")
        >>> model.config.n_layers, model.dtype, model.kv_block_size
        (5, 'float32', 64)
        >>> from decodelab.testing import write_checkpoint
        >>> path = write_checkpoint("ckpt", "llama-tiny")  # a random Hugging Face folder, no tokenizer
        >>> tiny = decodelab.load(path, dtype="int8", threads=1, kv_block_size=16)
        >>> tiny.dtype, tiny.threads, tiny.auto_threads, tiny.kv_block_size, tiny.tokenizer
        ('int8', 1, False, 16, None)
        >>> len(tiny.generate([1, 2, 3], max_new_tokens=4, eos_token_id=[]).token_ids)
        4
        >>> decodelab.load("stories260K", dtype="fp8")
        Traceback (most recent call last):
        ...
        ValueError: dtype must be 'float32', 'bfloat16', 'int8', 'w8a8' or 'int4', got 'fp8'
    """
    path = os.fspath(path)
    if dtype is not None and not isinstance(dtype, str):
        raise ValueError(f"dtype must be one of {', '.join(map(repr, _core.WEIGHT_DTYPES))}, got {dtype!r}")
    if dtype is not None:
        dtype = _core.weight_dtype(dtype)  # the names and their aliases are the engine's (dtypes.h)
    n_threads = _default_threads() if threads is None else options.integer("threads", threads, 1, 1024)
    if isinstance(kv_block_size, bool) or not isinstance(kv_block_size, (int, np.integer)):
        raise TypeError(f"kv_block_size must be an int, got {kv_block_size!r}")
    kv_block_size = int(kv_block_size)
    if not -2**31 <= kv_block_size < 2**31:  # its range is the engine's rule (BlockPool); this only fits it in C++
        raise ValueError(f"kv_block_size must be in [1, {_core.max_kv_block_size}], got {kv_block_size}")
    path = _resolve(path)
    if not isinstance(zero_copy, bool):
        raise TypeError(f"zero_copy must be True or False, got {zero_copy!r}")
    if bf16_matmul is not None and not isinstance(bf16_matmul, bool):
        raise TypeError(f"bf16_matmul must be True, False or None, got {bf16_matmul!r}")
    try:
        config, files, tensors, read_tokenizer, scratch, native = _read_model_files(path)
        core_config = config.to_core()
    except _MALFORMED as e:
        # The readers check what they expect; anything else a mutated file can provoke (a JSON value
        # of the wrong type, nesting past the recursion limit, bytes that are not UTF-8) is the
        # file's fault too.
        raise ValueError(f"{path}: malformed model files ({type(e).__name__}: {e})") from None
    if dtype is None:  # a block-quantized file keeps its precision, and its size in memory
        dtype = native or "float32"
    if bf16_matmul is None:  # int8 keeps one kernel at every row count: the same bits on every path
        bf16_matmul = dtype == "bfloat16" and kernel_choice.bf16_matmul()
    _core.trim_heap()  # what reading the files freed goes back before the weights come
    file_tokenizer = None
    try:
        if tokenizer is None:  # the file's own, read while the engine converts (see _Beside)
            file_tokenizer = _Beside(read_tokenizer)
        engine = _core.Engine(core_config, files, tensors, n_threads, dtype, zero_copy, int(kv_block_size),
                              bf16_matmul)
    except BaseException:
        if file_tokenizer is not None:  # the engine's error is the one to report, once the thread ends
            file_tokenizer.wait()
        raise
    finally:
        if scratch is not None:  # the engine maps what it still reads; the name can go
            os.unlink(scratch)
    engine.auto_threads = threads is None
    try:
        if file_tokenizer is not None:
            tok = file_tokenizer.result()
        elif isinstance(tokenizer, Tokenizer):
            tok = tokenizer
        else:
            tok = load_tokenizer(os.fspath(tokenizer), config.vocab_size)
    except _MALFORMED as e:
        raise ValueError(f"{path}: malformed tokenizer ({type(e).__name__}: {e})") from None
    _core.trim_heap()
    model = Model(engine, config, tok, path)
    # What another process needs to load the same model again (threads aside), e.g. a Ray replica.
    model.load_options = {"dtype": dtype, "zero_copy": zero_copy, "kv_block_size": int(kv_block_size),
                          "bf16_matmul": bf16_matmul}
    if tokenizer is not None:
        model.load_options["tokenizer"] = tokenizer if isinstance(tokenizer, Tokenizer) else os.fspath(tokenizer)
    return model
