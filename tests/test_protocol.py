"""What makes a pair differ only in its arm, and a tuned comparison carry its claims: every parameter an arm
shares with the baseline starts alike at one seed; the machine (threads, device, dtype) is recorded with each
run and a difference between runs is said; a tuned comparison's seeds each draw their own data order and
windows, stage 1 choosing on one half of the validation split and stage 2 reporting on the other; a choice
whose margin is within the seeds' spread is said to be one; batches are checked seed by seed."""

import json
from types import SimpleNamespace

import pytest
import torch
from helpers import tiny_args, train_main

from model import GPT, GPTConfig
from nlq.comparison import tuning
from nlq.comparison.compare import Run, fingerprint_report
from nlq.run.config import TrainConfig
from nlq.run.inputs import evaluation_windows, open_data

SMALL = dict(n_layer=2, n_head=4, n_embd=32, block_size=16, vocab_size=40)
ARMS = [
    dict(query_mode="identity"),
    dict(query_mode="residual_gelu"),
    dict(query_mode="residual"),
    dict(mlp_ratio=4.75),
    dict(query_mode="identity", n_kv_head=2),
]


def initial(seed, **arm):
    torch.manual_seed(seed)
    return GPT(GPTConfig(**SMALL, **arm)).state_dict()


@pytest.mark.parametrize("arm", ARMS, ids=lambda a: ",".join(f"{k}={v}" for k, v in a.items()))
def test_every_parameter_an_arm_shares_with_the_baseline_starts_alike(arm):
    base, other = initial(7, **{k: v for k, v in arm.items() if k == "n_kv_head"}), initial(7, **arm)
    shared = [k for k in base if k in other and base[k].shape == other[k].shape]
    assert len(shared) >= 10
    assert all(torch.equal(base[k], other[k]) for k in shared), [
        k for k in shared if not torch.equal(base[k], other[k])
    ]
    # c_attn holds [Q; K; V] with W_Q and [K; V] without it: the K and V rows start alike
    kv = 2 * (SMALL["n_embd"] // SMALL["n_head"]) * arm.get("n_kv_head", SMALL["n_head"])
    a, b = base["transformer.h.1.attn.c_attn.weight"], other["transformer.h.1.attn.c_attn.weight"]
    assert torch.equal(a[-kv:], b[-kv:])
    assert not torch.equal(initial(8, **arm)["transformer.wte.weight"], other["transformer.wte.weight"])


def test_the_initialisation_keeps_gpt2s_scales_and_differs_between_parameters():
    torch.manual_seed(0)
    model = GPT(GPTConfig(n_layer=4, n_head=4, n_embd=128, block_size=64, vocab_size=512, bias=True))
    params = dict(model.named_parameters())
    assert params["transformer.wte.weight"].std().item() == pytest.approx(0.02, rel=0.05)
    assert params["transformer.h.0.mlp.c_proj.weight"].std().item() == pytest.approx(0.02 / 8**0.5, rel=0.05)
    assert (params["transformer.h.0.attn.c_attn.bias"] == 0).all() and (
        params["transformer.h.0.ln_1.weight"] == 1
    ).all()
    # one stream per parameter: the same layer of two blocks does not start alike
    assert not torch.equal(params["transformer.h.0.mlp.c_fc.weight"], params["transformer.h.1.mlp.c_fc.weight"])
    q, k, v = params["transformer.h.0.attn.c_attn.weight"].split(128)
    assert not torch.equal(q, k) and q.std().item() == pytest.approx(0.02, rel=0.1)


def record(name, seed, machines, fingerprints=("a", "b"), data_seed=1337, arm="base"):
    config = {"wandb_run_name": arm, "seed": seed, "data_seed": data_seed, "machine": machines}
    steps = [{"step": i, "loss": 3.0, "fingerprint": f} for i, f in enumerate(fingerprints)]
    return Run(name, config, [*steps, {"step": 2, "val_loss": 3.0}])


def test_runs_trained_with_different_thread_counts_are_said():
    one = [{"step": 0, "threads": 1, "device": "cpu", "dtype": "float32", "torch": "2.13.0"}]
    two = [{**one[0], "threads": 2}]
    same = fingerprint_report([record("a", 1, one), record("b", 1, one, arm="nlq")])
    assert "different machines" not in same
    said = fingerprint_report([record("a", 1, one), record("b", 1, two, arm="nlq")])
    assert "WARNING: the runs trained on different machines (1 threads, cpu, float32: 1 runs" in said
    resumed = [*one, {**two[0], "step": 5}]  # one run that moved machines part-way
    assert "different machines" in fingerprint_report([record("a", 1, resumed), record("b", 1, one)])


def test_a_run_records_its_machine_and_a_resume_on_another_thread_count_adds_it(char_data, tmp_path):
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        train_main(tiny_args(char_data, tmp_path, max_iters=4))
        torch.set_num_threads(2)
        train_main(tiny_args(char_data, tmp_path, max_iters=8, init_from="resume"))
    finally:
        torch.set_num_threads(threads)
    machines = json.loads((tmp_path / "config.json").read_text())["machine"]
    assert [(m["step"], m["threads"], m["device"], m["dtype"]) for m in machines] == [
        (0, 1, "cpu", "float32"),
        (4, 2, "cpu", "float32"),
    ]


def windows_of(part, n_val=1000, block=16, n_eval=64):
    cfg = SimpleNamespace(eval_iters=n_eval // 4, batch_size=4, eval_order="fixed", eval_part=part, data_seed=3)
    val, _ = evaluation_windows(cfg, block, 5000, n_val, "unused")(0)
    return val


def test_each_half_of_the_validation_split_is_evaluated_apart():
    first, second, whole = windows_of("first"), windows_of("second"), windows_of("all")
    assert first.max() + 16 <= 500 and second.min() >= 500 and second.max() + 16 <= 1000
    assert whole.min() < 500 < whole.max() + 16
    with pytest.raises(ValueError, match="that half of val.bin holds 10 tokens"):
        windows_of("first", n_val=20)


def test_the_halves_of_an_examples_test_split(tmp_path):
    from nlq.data import tasks
    from nlq.data.examples import write_examples

    out, vocab, _ = tasks.generate("mqar", dict(vocab_size=16, seq_len=8, num_kv_pairs=2), 8, 9, 1)
    write_examples(tmp_path, out, {"vocab_size": 16})
    cfg = TrainConfig(dataset=str(tmp_path), eval_part="second", batch_size=2, gradient_accumulation_steps=1)
    data = open_data(cfg, 8)
    val, _ = data.eval_windows(0)
    assert list(val) == [4, 5, 6, 7, 8]
    cfg.eval_part = "first"
    assert list(open_data(cfg, 8).eval_windows(0)[0]) == [0, 1, 2, 3]


def fake(arm, stage, seed, lr, value):
    config = {"wandb_run_name": arm, "seed": seed, "learning_rate": lr, "max_iters": 8, "wandb_group": f"x/{stage}"}
    config |= {"block_size": 8, "batch_size": 2, "gradient_accumulation_steps": 1, "n_layer": 1, "n_embd": 16}
    return Run(f"{stage}-{arm}-{lr}-s{seed}", config | {"n_head": 2}, [{"step": 8, "val_loss": value}])


@pytest.mark.parametrize("ahead, said", [(0.01, True), (0.5, False)])
def test_a_choice_within_the_spread_of_its_seeds_is_said_to_be_one(ahead, said):
    """base chose 1e-3 at 3.0 over 3e-3 at 3.0 + ahead; its stage-2 seeds spread 0.1 (3.0, 3.1, 3.2)."""
    runs = [fake("base", "tune", 1, 1e-3, 3.0), fake("base", "tune", 1, 3e-3, 3.0 + ahead)]
    runs += [fake("nlq", "tune", 1, 1e-3, 3.0), fake("nlq", "tune", 1, 3e-3, 3.9)]
    runs += [fake("base", "report", s, 1e-3, 2.9 + 0.1 * s) for s in (2, 3, 4)]
    runs += [fake("nlq", "report", s, 1e-3, 2.9 + 0.1 * s) for s in (2, 3, 4)]
    result = tuning.report(runs, ["learning_rate"], "base")
    m = result["arms"]["base"]["margin"]
    assert m["runner_up"] == {"learning_rate": 3e-3} and m["margin"] == pytest.approx(ahead)
    assert m["noise"] == pytest.approx(0.1) and m["within_noise"] is said
    notes = "\n".join(tuning.markdown(result))
    assert ("note: base: its choice was" in notes) is said and "note: nlq: its choice" not in notes


def test_batches_are_checked_seed_by_seed_when_each_seed_has_its_own_order():
    runs = [record(f"{a}-s{s}", s, [], (f"p{s}", f"q{s}"), 1337 + s, a) for a in ("base", "nlq") for s in (1, 2)]
    assert fingerprint_report(runs).startswith("the runs of each seed trained on identical batches (2 seeds")
    runs[3] = record("nlq-s2", 2, [], ("p2", "other"), 1339, "nlq")
    assert "WARNING: the runs of seed 2 trained on different batches (first at step 1" in fingerprint_report(runs)
