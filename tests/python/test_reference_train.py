"""pipeplan_reference_train and the data it reads: the loss goes down and is
deterministic, the data order and the synthetic draws are as documented, a
pipelined run of the compiled stages gives the same losses, bad input exits 2."""

import json

import pytest
import torch

import pipeplan_data
import pipeplan_package as pp
import pipeplan_reference_train as ref
import pipeplan_stage_compile as sc
import stage_chain


def train(fixture, steps=12, **kw):
    package = pp.load_package(fixture["package"])
    loss = kw.pop("loss", package.manifest["loss"])
    data = pipeplan_data.open_data(kw.pop("data", "tensors:" + fixture["data"]),
                                   package.manifest, loss)
    args = dict(optimizer="adamw", lr=1e-2, batch_size=16, microbatches=4, steps=steps)
    args.update(kw)
    return ref.train(package, data, loss, **args)


@pytest.mark.parametrize("name", ["gpt", "cnn"])
def test_loss_decreases_and_is_deterministic(fixtures, name):
    first = train(fixtures[name])
    assert [x["step"] for x in first] == list(range(12))
    losses = [x["loss"] for x in first]
    assert sum(losses[-3:]) < sum(losses[:3])
    assert train(fixtures[name]) == first


def test_microbatches_sum_to_the_batch_mean(fixtures):
    one = train(fixtures["gpt"], steps=1, microbatches=1, optimizer="sgd", lr=0.0)
    four = train(fixtures["gpt"], steps=1, microbatches=4, optimizer="sgd", lr=0.0)
    assert four[0]["loss"] == pytest.approx(one[0]["loss"], rel=1e-6)


def test_float64_tracks_float32(fixtures):
    f32 = train(fixtures["cnn"], steps=5, optimizer="sgd", lr=0.05, momentum=0.9)
    f64 = train(fixtures["cnn"], steps=5, optimizer="sgd", lr=0.05, momentum=0.9,
                dtype=torch.float64)
    for a, b in zip(f32, f64):
        assert a["loss"] == pytest.approx(b["loss"], rel=1e-4)
    assert f32 != f64


def test_tensor_rows_cycle(fixtures):
    package = pp.load_package(fixtures["cnn"]["package"])
    data = pipeplan_data.open_data("tensors:" + fixtures["cnn"]["data"], package.manifest,
                                   "cross_entropy")
    saved = torch.load(fixtures["cnn"]["data"])
    inputs, targets = data.batch(3, 24)  # rows 72..95 of 64: 8..31
    assert torch.equal(inputs[0], saved["inputs"][8:32])
    assert torch.equal(targets, saved["targets"][8:32])
    mbs = pipeplan_data.microbatches(inputs, targets, 3)
    assert torch.equal(mbs[1][1], saved["targets"][16:24])


def test_synthetic_draws_as_documented(fixtures):
    """Generator seeded with N * 2**32 + step; the inputs in manifest order, then
    the targets."""
    for name, seed, step in (("gpt", 7, 5), ("cnn", 0, 0), ("skip", 3, 2)):
        package = pp.load_package(fixtures[name]["package"])
        loss = package.manifest["loss"]
        data = pipeplan_data.open_data("synthetic:seed=%d" % seed, package.manifest, loss)
        inputs, targets = data.batch(step, 6)
        g = torch.Generator()
        g.manual_seed(seed * 2 ** 32 + step)
        if name == "gpt":
            want_x = torch.randint(0, 64, (6, 16), generator=g, dtype=torch.int64)
            want_t = torch.randint(0, 64, (6, 16), generator=g, dtype=torch.int64)
        elif name == "cnn":
            want_x = torch.randn(6, 3, 8, 8, generator=g)
            want_t = torch.randint(0, 10, (6,), generator=g, dtype=torch.int64)
        else:
            want_x = torch.randn(6, 16, generator=g)
            want_t = torch.randn(6, 8, generator=g)
        assert torch.equal(inputs[0], want_x) and torch.equal(targets, want_t)
    losses = train(fixtures["gpt"], steps=3, data="synthetic:seed=1", batch_size=8)
    assert len(losses) == 3


def chain_losses(fixture, stages_dir, steps, node_stage=None):
    """Losses of the gpt's compiled stages (3 of them, or `node_stage`), run as
    the executor runs them (stage_chain) with one optimizer over the canonical
    parameters (the tied embedding's gradient summed over its stages), clipped
    to 1.0."""
    package = pp.load_package(fixture["package"])
    n = len(package.manifest["nodes"])
    node_stage = node_stage or [i * 3 // n for i in range(n)]
    sc.write_stages(fixture["package"], node_stage, 4, stages_dir)
    manifest, modules = stage_chain.load_stages(stages_dir, package.params)
    master = {k: v.clone().requires_grad_() for k, v in package.params.items()}
    params = [master[p["name"]] for p in package.manifest["parameters"]]
    opt = ref.make_optimizer(params, "adamw", 1e-2)
    data = pipeplan_data.open_data("tensors:" + fixture["data"], package.manifest,
                                   "cross_entropy")
    got = []
    for step in range(steps):
        with torch.no_grad():
            for entry, module in zip(manifest["stages"], modules):
                for p in entry["parameters"]:
                    stage_chain._param(module, p["path"]).copy_(master[p["name"]])
        batches = pipeplan_data.microbatches(*data.batch(step, 16), 4)
        loss, grads = stage_chain.run_step(manifest, modules, "cross_entropy", batches)
        for name, tensor in master.items():
            tensor.grad = grads[name]
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        got.append(loss)
    return got


def test_pipelined_stages_train_like_the_reference(fixtures, tmp_path):
    """The Python form of the C++ exactness test: the stages give the
    reference's losses (one process's rounding differs a little)."""
    got = chain_losses(fixtures["gpt"], str(tmp_path / "st"), 8)
    want = train(fixtures["gpt"], steps=8, clip_grad_norm=1.0)
    for a, b in zip(got, want):
        assert a == pytest.approx(b["loss"], rel=1e-5)


def test_pipelined_mode_rounds_as_the_stages(fixtures, tmp_path):
    """--pipelined: the tied embedding's gradient summed per stage after the
    microbatches and the loss in float64, as the stages do: every loss the
    same bits (what lets elastic_bench tell drift from a wrong step)."""
    got = chain_losses(fixtures["gpt"], str(tmp_path / "st"), 8)
    want = train(fixtures["gpt"], steps=8, clip_grad_norm=1.0, pipelined=True)
    assert got == [x["loss"] for x in want]


def test_together_rounds_as_a_stage_holding_every_use(fixtures, tmp_path):
    """--together: on steps whose split holds the tied embedding and LM head on
    one stage (the elastic drills met [idx], [size], [the rest]), the stage adds
    the two uses per microbatch, as one process does; the reference then rounds
    as that stage, and without --together it does not."""
    n = len(pp.load_package(fixtures["gpt"]["package"]).manifest["nodes"])
    got = chain_losses(fixtures["gpt"], str(tmp_path / "st"), 8, [0, 1] + [2] * (n - 2))
    together = tmp_path / "together.json"
    together.write_text(json.dumps([{"from_step": 0, "to_step": 7,
                                     "parameters": ["wte.weight"]}]))
    want = train(fixtures["gpt"], steps=8, clip_grad_norm=1.0, pipelined=True,
                 together=str(together))
    assert got == [x["loss"] for x in want]
    apart = train(fixtures["gpt"], steps=8, clip_grad_norm=1.0, pipelined=True)
    assert got != [x["loss"] for x in apart]
    with pytest.raises(ref.TrainError, match="--together .* needs --pipelined"):
        train(fixtures["gpt"], steps=1, together=str(together))
    together.write_text(json.dumps([{"from_step": 0, "to_step": 7, "parameters": ["nope"]}]))
    with pytest.raises(ref.TrainError, match="--together"):
        train(fixtures["gpt"], steps=1, pipelined=True, together=str(together))


def test_cli(fixtures, tmp_path):
    out = tmp_path / "losses.json"
    assert ref.main(["--package", fixtures["cnn"]["package"],
                     "--data", "tensors:" + fixtures["cnn"]["data"], "--optimizer", "sgd",
                     "--lr", "0.05", "--momentum", "0.9", "--weight-decay", "1e-4",
                     "--clip-grad-norm", "5", "--batch-size", "8", "--microbatches", "2",
                     "--steps", "3", "--start-step", "4", "--out", str(out)]) == 0
    losses = json.loads(out.read_text())
    assert [x["step"] for x in losses] == [4, 5, 6]
    want = train(fixtures["cnn"], steps=3, start_step=4, optimizer="sgd", lr=0.05,
                 momentum=0.9, weight_decay=1e-4, clip_grad_norm=5.0, batch_size=8,
                 microbatches=2)
    assert losses == want


def test_device(fixtures, tmp_path, capsys):
    on_cpu = train(fixtures["gpt"], steps=3)
    assert train(fixtures["gpt"], steps=3, device="cpu") == on_cpu
    args = ["--package", fixtures["gpt"]["package"], "--data",
            "tensors:" + fixtures["gpt"]["data"], "--optimizer", "adamw", "--lr", "1e-2",
            "--batch-size", "16", "--microbatches", "4", "--steps", "3",
            "--out", str(tmp_path / "l.json")]
    assert ref.main(args + ["--device", "nonsense"]) == 2
    assert "--device 'nonsense'" in capsys.readouterr().err
    if not torch.cuda.is_available():
        assert ref.main(args + ["--device", "cuda:0"]) == 2
        assert "--device cuda:0: CUDA is not available" in capsys.readouterr().err
        return
    on_gpu = train(fixtures["gpt"], steps=3, device="cuda:0")
    for a, b in zip(on_gpu, on_cpu):
        assert a["loss"] == pytest.approx(b["loss"], rel=1e-3)


def test_bad_input_exit_2(fixtures, tmp_path, capsys):
    base = ["--package", fixtures["gpt"]["package"], "--optimizer", "adam", "--lr", "1e-3",
            "--steps", "1", "--out", str(tmp_path / "l.json")]

    def error(*args):
        assert ref.main(base + list(args)) == 2
        assert not (tmp_path / "l.json").exists()
        return capsys.readouterr().err

    data = "tensors:" + fixtures["gpt"]["data"]
    assert "--batch-size 10 must be a positive multiple of --microbatches 4" in error(
        "--data", data, "--batch-size", "10", "--microbatches", "4")
    assert "input 'idx' is torch.float32 [64, 3, 8, 8]" in error(
        "--data", "tensors:" + fixtures["cnn"]["data"], "--batch-size", "8",
        "--microbatches", "2")
    assert "mse needs floating-point targets" in error(
        "--data", data, "--loss", "mse", "--batch-size", "8", "--microbatches", "2")
    torch.save({"inputs": torch.zeros(4, 16, dtype=torch.int64)}, tmp_path / "x.pt")
    assert "has no \"targets\"" in error(
        "--data", "tensors:%s" % (tmp_path / "x.pt"), "--batch-size", "8",
        "--microbatches", "2")
    assert "want tensors:FILE or synthetic:seed=N" in error(
        "--data", "synthetic:7", "--batch-size", "8", "--microbatches", "2")
