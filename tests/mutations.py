"""Seeded mutations of model files, for the loader fuzz test and the atheris harness: each takes a
file's bytes and a random generator and returns damaged bytes of the same kind of file."""
import json
import random
import struct

INTERESTING_INTS = [0, 1, -1, 2, 255, 256, 65535, 65536, 2**31 - 1, 2**31, -2**31, 2**32, 2**63 - 1, 2**64 - 1]


def mutate_bytes(data: bytes, rng: random.Random) -> bytes:
    """Byte-level damage: flips, interesting integers written over, truncation, insertion, repeats."""
    b = bytearray(data)
    for _ in range(rng.randint(1, 4)):
        op = rng.randrange(6)
        if not b:
            b += bytes(rng.randrange(256) for _ in range(8))
        i = rng.randrange(len(b))
        if op == 0:
            b[i] ^= 1 << rng.randrange(8)
        elif op == 1:
            v = rng.choice(INTERESTING_INTS)
            fmt = rng.choice(["<i", "<I", "<q", "<Q"])
            try:
                raw = struct.pack(fmt, v)
            except struct.error:
                continue
            b[i:i + len(raw)] = raw
        elif op == 2:
            del b[rng.randrange(len(b) + 1):]
        elif op == 3:
            b[i:i] = bytes(rng.randrange(256) for _ in range(rng.randint(1, 16)))
        elif op == 4:
            j = rng.randrange(len(b))
            b[i:i] = b[j:j + rng.randint(1, 64)]
        else:
            b[i] = rng.randrange(256)
    return bytes(b)


def _odd_value(rng: random.Random):
    return rng.choice([None, True, "x", "", [], {}, [1, 2], {"a": 1}, 1e308, -1e308, float("nan"), 0.5, -1, 0,
                       2**31, 2**70, -2**70, "\udcff"[:0] + "é", [[[[[]]]]], "1" * 1000])


def mutate_json_value(obj, rng: random.Random):
    """Structural damage to parsed JSON: a value replaced by one of another type, a key dropped,
    a deep nest."""
    if isinstance(obj, dict) and obj and rng.random() < 0.8:
        k = rng.choice(list(obj))
        op = rng.randrange(4)
        out = dict(obj)
        if op == 0:
            del out[k]
        elif op == 1:
            out[k] = _odd_value(rng)
        elif op == 2:
            out[k] = mutate_json_value(out[k], rng)
        else:
            v = 1
            for _ in range(rng.choice([10, 100, 3000])):
                v = [v]
            out[k] = v
        return out
    if isinstance(obj, list) and obj and rng.random() < 0.8:
        out = list(obj)
        i = rng.randrange(len(out))
        out[i] = mutate_json_value(out[i], rng) if rng.random() < 0.5 else _odd_value(rng)
        return out
    return _odd_value(rng)


def mutate_json_text(text: bytes, rng: random.Random) -> bytes:
    if rng.random() < 0.3:
        return mutate_bytes(text, rng)
    try:
        obj = json.loads(text)
    except ValueError:
        return mutate_bytes(text, rng)
    out = mutate_json_value(obj, rng)
    try:
        return json.dumps(out).encode()
    except (ValueError, RecursionError):
        return b"[" * 100000


def mutate_safetensors(data: bytes, rng: random.Random) -> bytes:
    """Damage to the header (its JSON, its length) or to the file's bytes."""
    if len(data) < 8 or rng.random() < 0.4:
        return mutate_bytes(data, rng)
    (n,) = struct.unpack("<Q", data[:8])
    header, rest = data[8:8 + n], data[8 + n:]
    if rng.random() < 0.2:
        return struct.pack("<Q", rng.choice(INTERESTING_INTS) % 2**64) + data[8:]
    new = mutate_json_text(header, rng)
    return struct.pack("<Q", len(new)) + new + rest
