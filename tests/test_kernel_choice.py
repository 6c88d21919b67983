"""Kernel choices measured on the running CPU (decodelab.kernel_choice): bfloat16 layers take
oneDNN's bf16 matmul for prompts only where this CPU runs it clearly faster; the choice is made
once per process, shown by cpu_info(), and an explicit bf16_matmul= overrides it."""
import pytest

import decodelab
from decodelab import kernel_choice
from decodelab._native import _core

NATIVE = _core.bf16_matmul_native()


@pytest.fixture
def fresh(monkeypatch):
    monkeypatch.setattr(kernel_choice, "_CHOICES", {})


def test_a_cpu_without_native_bf16_never_takes_the_bf16_matmul(fresh, monkeypatch):
    monkeypatch.setattr(_core, "bf16_matmul_native", lambda: False)
    assert kernel_choice.bf16_matmul() is False
    assert kernel_choice.choices() == {}  # nothing to measure


def test_the_choice_is_measured_once_and_shown(fresh):
    if not NATIVE:
        pytest.skip("this CPU has no native bf16 products: there is no choice to measure (tested above)")
    first = kernel_choice.bf16_matmul()
    seen = kernel_choice.choices()["bf16_matmul"]
    assert seen["choice"] is first and seen["shape"] == [128, 1024, 1024]
    assert seen["seconds_bf16_matmul"] > 0 and seen["seconds_fp32_inputs"] > 0
    assert first == (seen["seconds_bf16_matmul"] * kernel_choice.MARGIN < seen["seconds_fp32_inputs"])
    assert kernel_choice.bf16_matmul() is first and kernel_choice.choices()["bf16_matmul"] == seen
    assert decodelab.cpu_info()["choices"] == {"bf16_matmul": seen}


@pytest.mark.parametrize("measured", [True, False])
def test_load_follows_the_choice_unless_told(checkpoint, fresh, monkeypatch, measured):
    monkeypatch.setattr(_core, "bf16_matmul_native", lambda: True)
    monkeypatch.setattr(kernel_choice, "_CHOICES", {"bf16_matmul": {"choice": measured}})
    folder = checkpoint("llama-tiny")
    # The engine reports False where the CPU itself has no native bf16, whatever it was asked.
    assert decodelab.load(folder, dtype="bfloat16").bf16_matmul is (measured and NATIVE)
    assert decodelab.load(folder, dtype="bfloat16", bf16_matmul=False).bf16_matmul is False
    assert decodelab.load(folder, dtype="int8").bf16_matmul is False  # the same bits on every CPU
