"""llama.cpp beside decodelab on one GGUF file (through llama-cpp-python, a benchmark peer that is
not a declared dependency): the evidence that an exported file is the same model.

Examples:
    >>> from decodelab.testing.llama_cpp import compare_gguf
    >>> compare_gguf("my-model", "my-model.gguf") < 1e-2  # doctest: +SKIP
    True
"""
from __future__ import annotations

import numpy as np

__all__ = ["compare_gguf"]


def compare_gguf(folder, gguf_path, n_tokens=24, against="folder", precise=False):
    """Max |logit difference| between llama.cpp on ``gguf_path`` and decodelab on ``folder``.

    Both run one forward pass over a prompt of ``n_tokens`` pseudo-random token ids (a fixed seed,
    ids from 3 up) and the logits of every position are compared: evidence that the export is the
    same model. Needs llama-cpp-python (``import llama_cpp``), which decodelab does not declare.

    Args:
        folder: the model decodelab loads as the reference (the folder the GGUF file was exported
            from); unused when ``against="file"``.
        gguf_path: the GGUF file llama.cpp loads, a str path.
        n_tokens: the prompt's length, in [1, 64] (llama.cpp's context here is 64); default 24.
        against: "folder" (the default): decodelab loads ``folder``. "file": decodelab reads the
            GGUF file itself (its exact fp32 values, ``dtype="float32"``), which isolates how
            llama.cpp reads a quantized file from the quantization error.
        precise: True runs llama.cpp with an f32 KV cache and without flash attention (which
            rounds queries to f16), leaving its f16 GELU table as the main rounding: for models
            whose large attention scores magnify f16 noise; default False.

    Returns:
        The largest absolute logit difference over all positions and tokens, a float.

    Raises:
        ValueError: ``against`` is neither "folder" nor "file".
        ImportError: llama-cpp-python is not installed.
        AssertionError: llama.cpp's decode call failed.

    Examples:
        >>> from decodelab.testing.llama_cpp import compare_gguf
        >>> compare_gguf("my-model", "my-model.gguf", against="file")  # doctest: +SKIP
        0.0003...
    """
    import llama_cpp as lc

    import decodelab

    if against not in ("folder", "file"):
        raise ValueError(f"against must be 'folder' or 'file', got {against!r}")
    m = decodelab.load(folder) if against == "folder" else decodelab.load(gguf_path, dtype="float32")
    V = m.config.vocab_size
    toks = np.random.default_rng(1).integers(3, V, size=n_tokens).tolist()
    ours = m.forward(toks)
    lc.llama_backend_init()
    model = lc.llama_model_load_from_file(gguf_path.encode(), lc.llama_model_default_params())
    cp = lc.llama_context_default_params()
    cp.n_ctx = cp.n_batch = cp.n_ubatch = 64
    if precise:
        cp.type_k = cp.type_v = 0  # GGML_TYPE_F32
        cp.flash_attn_type = 0     # LLAMA_FLASH_ATTN_TYPE_DISABLED
    ctx = lc.llama_init_from_model(model, cp)
    batch = lc.llama_batch_init(n_tokens, 0, 1)
    for j, t in enumerate(toks):
        batch.token[j], batch.pos[j], batch.n_seq_id[j], batch.logits[j] = t, j, 1, 1
        batch.seq_id[j][0] = 0
    batch.n_tokens = n_tokens
    assert lc.llama_decode(ctx, batch) == 0
    theirs = np.stack([np.ctypeslib.as_array(lc.llama_get_logits_ith(ctx, j), shape=(V,)) for j in range(n_tokens)])
    lc.llama_batch_free(batch)
    lc.llama_free(ctx)
    lc.llama_model_free(model)
    return float(np.abs(theirs - ours).max())
