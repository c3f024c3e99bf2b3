"""Workloads and their knobs, in-process on CPU: each knob changes what the step does."""

from __future__ import annotations

import json

import pytest

from tracekit.capture.knobs import (
    COMMON_KNOBS,
    Knob,
    KnobError,
    parse_schedule,
    resolve_knobs,
    schedule_phase,
    schedule_steps,
)
from tracekit.capture.workload import WORKLOAD_NAMES, Context, describe, knobs_of, load

torch = pytest.importorskip("torch")


def _ctx(name: str, **given: object) -> Context:
    knobs = resolve_knobs(knobs_of(name), {k: str(v) for k, v in given.items()}, "cpu", name)
    return Context("cpu", knobs)


def _op_counts(runner, steps: int = 1) -> dict[str, int]:
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for _ in range(steps):
            runner.step()
    return {e.key: e.count for e in prof.key_averages()}


def test_knob_values_are_typed_and_checked():
    knob = Knob("amp", False, "mixed precision")
    assert knob.convert("TRUE") is True and knob.convert("off") is False
    with pytest.raises(KnobError, match="--set amp=2: expected true or false"):
        knob.convert("2")
    with pytest.raises(KnobError, match="--set batch_size=many: expected int"):
        Knob("batch_size", 256, "b").convert("many")
    with pytest.raises(KnobError, match="choose one of none, sgd, adam"):
        Knob("optimizer", "none", "o", choices=("none", "sgd", "adam")).convert("lbfgs")


def test_cpu_defaults_scale_down_unless_set():
    cpu = resolve_knobs(knobs_of("heavy_mlp"), {}, "cpu", "heavy_mlp")
    gpu = resolve_knobs(knobs_of("heavy_mlp"), {}, "cuda", "heavy_mlp")
    assert (gpu["hidden"], gpu["layers"], gpu["batch_size"]) == (4096, 8, 256)  # the article's sizes
    assert cpu["hidden"] < gpu["hidden"] and cpu["layers"] < gpu["layers"]
    assert resolve_knobs(knobs_of("heavy_mlp"), {"hidden": "4096"}, "cpu", "x")["hidden"] == 4096


def test_schedule_text_and_phases():
    sched = parse_schedule("wait=1,warmup=1,active=3,repeat=2")
    assert schedule_steps(sched) == 10
    assert [schedule_phase(sched, i) for i in range(5)] == ["wait", "warmup", "active", "active", "active"]
    assert parse_schedule(None) == sched
    with pytest.raises(KnobError, match="unknown key; use wait, warmup, active, repeat, skip_first"):
        parse_schedule("wait=1,activ=3")
    with pytest.raises(KnobError, match="repeat must be at least 1"):
        parse_schedule("repeat=0")


def test_workloads_command_lists_every_workload_and_knob_with_defaults():
    from typer.testing import CliRunner

    from tracekit.cli import get_app

    result = CliRunner().invoke(get_app(), ["workloads", "--json"])
    assert result.exit_code == 0, result.output
    docs = json.loads(result.output)
    assert [d["name"] for d in docs] == list(WORKLOAD_NAMES) == ["heavy_mlp", "dataloader_train", "tiny_ops"]
    dl = {k["name"]: k for k in docs[1]["knobs"]}
    assert dl["num_workers"]["default"] == 4 and dl["num_workers"]["cpu_default"] == 2
    for knob in ("pin_memory", "prefetch_factor", "persistent_workers", "sample_sleep_ms", "amp", "nproc"):
        assert knob in dl
    assert {k["name"] for k in docs[0]["common_knobs"]} == {k.name for k in COMMON_KNOBS}
    text = CliRunner().invoke(get_app(), ["workloads"]).output
    assert "num_workers=4 (cpu: 2)" in text and "sync_every_layer=False" in text
    assert describe() == docs


def test_heavy_mlp_sync_every_layer_reads_each_layer_on_the_host():
    plain = _op_counts(load("heavy_mlp").build(_ctx("heavy_mlp", layers=3, hidden=16, batch_size=2)))
    synced = _op_counts(
        load("heavy_mlp").build(_ctx("heavy_mlp", layers=3, hidden=16, batch_size=2, sync_every_layer=True))
    )
    assert "aten::item" not in plain
    assert synced["aten::item"] == 2 * (1 + 3) + 1  # one per module: input and 3 hidden Linear+ReLU, output


def test_heavy_mlp_amp_grad_accum_and_checkpointing():
    knobs = {"layers": 2, "hidden": 16, "batch_size": 4, "grad_accum": 3}
    plain = _op_counts(load("heavy_mlp").build(_ctx("heavy_mlp", **knobs)))
    runner = load("heavy_mlp").build(_ctx("heavy_mlp", checkpoint=2, amp=True, **knobs))
    counts = _op_counts(runner)
    assert runner.samples_per_step == 12
    assert plain["aten::addmm"] == 3 * 4  # 3 micro-batches through 4 Linear layers, one step
    # checkpoint_sequential(2 segments of 7 modules) recomputes the first segment's 2 Linears in backward
    assert counts["aten::addmm"] == 3 * (4 + 2)
    assert counts["aten::_to_copy"] >= plain.get("aten::_to_copy", 0) + 3 * 4 * 2  # autocast: bf16 casts
    assert (
        runner.trainer.amp_dtype == torch.bfloat16 and runner.trainer.scaler is None
    )  # CPU: bf16, no scaler
    assert any(p.grad is None for p in runner.trainer.module.parameters())  # zero_grad after the step


def test_dataloader_train_slow_samples_and_epochs():
    ctx = _ctx(
        "dataloader_train", dataset_size=24, batch_size=8, features=8, hidden=8, num_workers=0,
        sample_sleep_ms=1, log_every=0, amp=True,
    )  # fmt: skip
    runner = load("dataloader_train").build(ctx)
    counts = _op_counts(runner, steps=4)  # 3 batches per epoch: the 4th step starts epoch 2
    # 4 batches, plus the __next__ that ended epoch 1 (StopIteration)
    assert counts["enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__"] == 5
    assert counts["Optimizer.step#Adam.step"] == 4
    assert runner.samples_per_step == 8
    sample, label = runner.loader.dataset[0]
    assert torch.equal(sample, runner.loader.dataset.data[0] * 2 - 1) and 0 <= int(label) < 10


def test_dataloader_train_logs_loss_every_n_batches(capsys):
    runner = load("dataloader_train").build(
        _ctx(
            "dataloader_train",
            dataset_size=32,
            batch_size=4,
            features=8,
            hidden=8,
            num_workers=0,
            log_every=2,
        )
    )
    for _ in range(4):
        runner.step()
    assert [line.split(":")[0] for line in capsys.readouterr().out.splitlines()] == ["batch 2", "batch 4"]


def test_tiny_ops_runs_n_ops_elementwise_pairs():
    counts = _op_counts(load("tiny_ops").build(_ctx("tiny_ops", n_ops=25)))
    assert counts["aten::mul"] == 25 and counts["aten::add"] == 25


def test_unknown_workload_names_the_choices():
    with pytest.raises(KnobError, match="unknown workload 'bert'; choose one of heavy_mlp, dataloader_train"):
        load("bert")


def test_host_spin_runs_before_every_layer_and_adds_no_torch_op(monkeypatch):
    from workloads import _train

    sizes = {"layers": 3, "hidden": 16, "batch_size": 2}
    plain = _op_counts(load("heavy_mlp").build(_ctx("heavy_mlp", **sizes)))
    runner = load("heavy_mlp").build(_ctx("heavy_mlp", host_spin_us=20, **sizes))
    iterations = runner.manifest_extra["host_spin"]["iterations"]
    calls = []
    monkeypatch.setattr(_train, "spin", lambda n: calls.append(n))
    assert _op_counts(runner) == plain  # pure interpreter work: the same ops, one forward per step
    assert calls == [iterations] * (2 * (1 + 3) + 1)  # input and 3 hidden Linear+ReLU, output Linear


def test_host_spin_calibration_hits_its_target_roughly():
    from workloads._train import calibrate_spin

    assert calibrate_spin(0) == {"target_us": 0.0, "iterations": 0}
    small, large = calibrate_spin(50.0), calibrate_spin(400.0)
    # 8× the target is about 8× the loop (each a median of timed trials; wide bands: a loaded CI box)
    assert 3 < large["iterations"] / small["iterations"] < 20
    assert 0.3 * 400 < large["check_us"] < 3 * 400
    assert large["ns_per_iteration"] > 0
    with pytest.raises(KnobError, match="host_spin_us=-1.0: must not be negative"):
        calibrate_spin(-1.0)


def test_host_spin_refuses_checkpointing_and_reaches_the_dataloader_model():
    with pytest.raises(KnobError, match="host_spin_us works layer by layer .* set checkpoint=0"):
        load("heavy_mlp").build(_ctx("heavy_mlp", layers=1, hidden=8, checkpoint=1, host_spin_us=5))
    ctx = _ctx(
        "dataloader_train", dataset_size=16, batch_size=8, features=8, hidden=8, num_workers=0,
        log_every=0, host_spin_us=5,
    )  # fmt: skip
    runner = load("dataloader_train").build(ctx)
    assert runner.manifest_extra["host_spin"]["iterations"] > 0


@pytest.fixture
def restore_tf32():
    saved = (
        torch.backends.cuda.matmul.allow_tf32,
        torch.backends.cudnn.allow_tf32,
        torch.get_float32_matmul_precision(),
    )
    yield
    torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = saved[:2]
    torch.set_float32_matmul_precision(saved[2])


def test_tf32_sets_both_backends_on_cuda_only(restore_tf32):
    from workloads._train import set_tf32

    before = torch.get_float32_matmul_precision()
    runner = load("heavy_mlp").build(_ctx("heavy_mlp", layers=1, hidden=8, tf32=True))
    assert "tf32" not in runner.manifest_extra  # CPU: nothing set, nothing reported
    assert torch.get_float32_matmul_precision() == before
    # the CUDA path only sets torch's flags, which a CPU build of torch also holds
    on = set_tf32(Context("cuda", {"tf32": True}))
    assert on == {"matmul_allow_tf32": True, "cudnn_allow_tf32": True, "float32_matmul_precision": "high"}
    off = set_tf32(Context("cuda", {"tf32": False}))
    assert off == {
        "matmul_allow_tf32": False,
        "cudnn_allow_tf32": False,
        "float32_matmul_precision": "highest",
    }


def test_cuda_graphs_is_refused_on_cpu_in_one_line(tmp_path, capsys):
    from tests.clirun import run_main

    with pytest.raises(KnobError, match=r"cuda_graphs=true needs a CUDA device; this capture runs on cpu"):
        load("heavy_mlp").build(_ctx("heavy_mlp", layers=1, hidden=8, cuda_graphs=True))
    args = ["capture", "heavy_mlp", "--device", "cpu", "--set", "cuda_graphs=true", "-o", str(tmp_path)]
    code, out, err = run_main(args, capsys)
    assert code == 2 and "Traceback" not in out + err
    assert "cuda_graphs=true needs a CUDA device" in err


def test_cuda_graphs_refuses_what_a_graph_cannot_hold():
    from workloads._modes import check_modes

    def check(**knobs):
        refused = {"sync_every_layer (a .item() per layer)": bool(knobs.pop("sync", False))}
        check_modes("cuda", {"cuda_graphs": True, **knobs}, refused)

    check()  # the plain step is capturable
    with pytest.raises(KnobError, match=r"cannot capture sync_every_layer \(a .item\(\) per layer\)"):
        check(sync=True)
    with pytest.raises(KnobError, match="cuda_graphs=true and compile=true: pick one"):
        check(compile=True)
    with pytest.raises(KnobError, match="compile=true with host_spin_us > 0"):
        check_modes("cpu", {"compile": True, "host_spin_us": 5.0}, {})
    for knobs in ({"amp": True}, {"nproc": 2, "world": 2}, {"checkpoint": 1}):
        world = knobs.pop("world", 1)
        ctx = Context("cuda", {"cuda_graphs": True, "grad_accum": 1, "amp_dtype": "auto", **knobs}, 0, world)
        from workloads._train import Trainer

        with pytest.raises(KnobError, match="cuda_graphs=true cannot capture"):
            Trainer(ctx, torch.nn.Linear(2, 2))


def test_compile_runs_the_model_through_torch_compile():
    # GIVEN heavy_mlp with compile=true (backend aot_eager: Dynamo and AOTAutograd, no C compiler: quick)
    sizes = {"layers": 1, "hidden": 8, "batch_size": 2, "in_features": 8, "out_features": 4}
    runner = load("heavy_mlp").build(
        _ctx("heavy_mlp", compile=True, compile_backend="aot_eager", optimizer="sgd", **sizes)
    )
    # WHEN two steps run
    runner.step()
    counts = _op_counts(runner)
    # THEN the step goes through Dynamo's compiled region (looked up by its guards) and AOT's function
    assert type(runner.trainer.model).__name__ == "OptimizedModule"
    assert counts["TorchDynamo Cache Lookup"] == 1
    assert any(k.startswith("Torch-Compiled Region") for k in counts)
    assert counts["CompiledFunction"] == 1 and "aten::addmm" not in counts or counts["aten::addmm"] >= 1
