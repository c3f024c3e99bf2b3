"""What the capture records of memory (tracekit.capture.memory): the model per device, an OOM as a result."""

from __future__ import annotations

import json

import pytest

torch = pytest.importorskip("torch")

from tracekit.capture import memory  # noqa: E402


def test_model_state_counts_parameters_gradients_and_optimizer_state_once():
    # GIVEN a model whose two layers share one weight, trained one Adam step (state: 2 tensors of each
    # parameter's size and a step count), its gradients kept
    a = torch.nn.Linear(8, 8)
    b = torch.nn.Linear(8, 8)
    b.weight = a.weight
    model = torch.nn.Sequential(a, b)
    opt = torch.optim.Adam(model.parameters())
    model(torch.randn(2, 8)).sum().backward()
    opt.step()
    # WHEN
    state = memory.model_state()["cpu"]
    # THEN the shared weight counts once (64 + 8 + 8 floats), its gradients likewise, the state twice that
    params = (64 + 8 + 8) * 4
    assert state["parameters"] >= params and state["gradients"] >= params  # other live models may add
    steps = sum(int(s["step"].numel() * s["step"].element_size()) for s in opt.state.values())
    mine = {id(p) for p in model.parameters()}
    assert len(mine) == 3
    assert state["optimizer_state"] >= 2 * params + steps


def test_columns_align_the_readings_with_the_steps():
    rows = [{"allocated": 1, "allocated_peak": 2}, None]
    cols = memory.columns(rows)
    assert cols["allocated"] == [1, None] and cols["ooms"] == [None, None]
    assert set(cols) == set(memory.ALLOCATOR_KEYS)


def test_an_out_of_memory_error_is_a_result_that_says_where(monkeypatch):
    # GIVEN the allocator's error raised inside a library function called from user code
    err = RuntimeError(
        "CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79.11 GiB"
    )
    assert memory.is_out_of_memory(err)
    assert not memory.is_out_of_memory(ValueError("CUDA out of memory"))

    def train():
        raise err

    try:
        train()
    except RuntimeError as exc:
        caught = exc
    monkeypatch.setattr(torch.cuda, "max_memory_allocated", lambda: 70 * 2**30)
    monkeypatch.setattr(torch.cuda, "memory_allocated", lambda: 69 * 2**30)
    monkeypatch.setattr(torch.cuda, "memory_reserved", lambda: 71 * 2**30)
    # WHEN
    oom = memory.out_of_memory(caught, "ProfilerStep#2 (active, step 6 of 9)", 80 * 2**30)
    # THEN one line with the step, the place, the peak of the total and the request
    assert oom["message"] == (
        "out of memory at ProfilerStep#2 (active, step 6 of 9) in test_capture_memory.py:"
        f"{train.__code__.co_firstlineno + 1} (train): peak 70.00 of 80.00 GiB, asked for 2.00 GiB more"
    )
    assert oom["tried_bytes"] == 2 * 2**30 and oom["total_bytes"] == 80 * 2**30
    json.dumps(oom)  # it goes into the manifest
