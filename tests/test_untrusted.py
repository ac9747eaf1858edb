"""Files a run or a colleague left behind: nothing loaded runs code, and every state an out_dir can be left
in has one command that continues it (--init_from=auto), losing nothing."""

import io
import json
import pickle
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from helpers import (
    HANG_S,
    analyze_skip_main,
    compare_main,
    error_of,
    export_main,
    sample_main,
    snapshot,
    tiny_args,
    train_main,
    zeroshot_main,
)

from nlq.common.errors import UserError
from nlq.common.safe_load import UnsafeFile, dcp_planner, numpy_array, torch_load
from nlq.interop.importers import from_pretrained
from nlq.run import checkpoint
from nlq.run.trainer import Diverged

ROOT = Path(__file__).resolve().parents[1]


class Payload:
    """Unpickling this creates a marker file: the proof that loading ran code."""

    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return (open, (self.marker, "w"))


def losses(out_dir):
    lines = (Path(out_dir) / "metrics.jsonl").read_text().splitlines()
    return {r["step"]: r["loss"] for r in map(json.loads, lines) if "loss" in r}


@pytest.fixture
def sharded_run(char_data, tmp_path):
    """A one-process FSDP-format run: sharded steps 4 (kept) and 8."""
    out = tmp_path / "run"
    train_main(tiny_args(char_data, out, parallelism="fsdp", keep_checkpoints=(4,)))
    return out


def tools(out_dir, tmp_path):
    """Every entry point that reads a run's checkpoint, as (name, argv, main)."""
    return [
        ("sample", [f"--out_dir={out_dir}", "--device=cpu", "--max_new_tokens=2"], sample_main),
        ("zeroshot", [f"--out_dir={out_dir}", "--device=cpu", f"--out={tmp_path / 'e.json'}"], zeroshot_main),
        (
            "harness",
            [f"--out_dir={out_dir}", "--device=cpu", f"--out={tmp_path / 'h.json'}", "--harness=x"],
            zeroshot_main,
        ),
        ("export", [f"--out_dir={out_dir}", f"--out={tmp_path / 'x.pt'}"], export_main),
        ("analyze_skip", [f"--out_dir={out_dir}", "--png="], analyze_skip_main),
    ]


def test_a_crafted_dcp_metadata_runs_no_code_in_any_tool(sharded_run, char_data, tmp_path):
    marker = tmp_path / "ran"
    for step in ("step_000004", "step_000008"):
        path = sharded_run / checkpoint.SHARDED / step / ".metadata"
        crafted = pickle.dumps(Payload(marker))  # padded to the recorded size: pickle ignores what follows
        path.write_bytes(crafted + b"\0" * (path.stat().st_size - len(crafted)))
    for name, argv, main in tools(sharded_run, tmp_path):
        message = error_of(argv, main=main)
        assert "io.open, which DCP metadata never holds" in message and "no intact checkpoint" in message, (
            name,
            message,
        )
    assert "no intact checkpoint" in error_of(tiny_args(char_data, sharded_run, init_from="resume"))
    train_main(tiny_args(char_data, sharded_run, parallelism="fsdp", init_from="auto"))  # starts anew
    (aside,) = sharded_run.glob("stale-*")
    assert (
        (aside / checkpoint.SHARDED / "step_000008" / ".metadata")
        .read_bytes()
        .startswith(pickle.dumps(Payload(marker)))
    )
    assert not marker.exists()


def test_a_crafted_run_pt_or_ckpt_pt_runs_no_code(sharded_run, char_data, tmp_path):
    marker = tmp_path / "ran"
    for step in ("step_000004", "step_000008"):
        torch.save({"iter_num": 8, "model_args": Payload(marker)}, sharded_run / checkpoint.SHARDED / step / "run.pt")
    single = tmp_path / "single"
    single.mkdir()
    torch.save({"iter_num": 8, "model": Payload(marker)}, single / "ckpt.pt")
    for run in (sharded_run, single):
        for name, argv, main in tools(run, tmp_path):
            if not (name == "export" and run == single):  # export reads sharded checkpoints only
                assert "no intact checkpoint" in error_of(argv, main=main), name
    assert not marker.exists()


@pytest.mark.parametrize("force_unsafe", [False, True])
def test_dcp_values_are_loaded_without_running_code(tmp_path, monkeypatch, force_unsafe):
    """The optimizer's param_groups are non-tensor values in DCP's files, which DCP itself would unpickle
    with weights_only=False: the project's planner refuses a crafted one and still loads a plain one. Also
    where TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD is set (torch then unpickles freely unless told weights_only=True),
    and for torch_load, which every other checkpoint read goes through."""
    if force_unsafe:
        monkeypatch.setenv("TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD", "1")
    marker = tmp_path / "ran"
    torch.save(Payload(marker), tmp_path / "crafted.pt")
    with pytest.raises(pickle.UnpicklingError):
        torch_load(tmp_path / "crafted.pt")
    planner = dcp_planner()
    planner.set_up_planner({"lr": 0.0}, metadata=None, is_coordinator=True)
    item = type("ReadItem", (), {"dest_index": type("Index", (), {"fqn": "lr"})()})()
    crafted = io.BytesIO()
    torch.save(Payload(marker), crafted)
    crafted.seek(0)
    with pytest.raises(UnsafeFile, match="^the checkpoint's value lr cannot be loaded safely"):
        planner.load_bytes(item, crafted)
    assert not marker.exists()
    plain = io.BytesIO()
    torch.save(3e-4, plain)
    plain.seek(0)
    planner.load_bytes(item, plain)
    assert planner.original_state_dict["lr"] == 3e-4


def as_if_saved_on_a_gpu(path: Path) -> None:
    """Rewrite a torch.save file so that its tensors say they were saved on cuda:0, as a GPU run's are."""
    import zipfile

    saved = path.with_suffix(".cpu")
    path.rename(saved)
    with zipfile.ZipFile(saved) as z, zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as out:
        for info in z.infolist():
            data = z.read(info)
            if info.filename.endswith("/data.pkl"):  # each storage's location, a pickled string
                data = data.replace(b"X\x03\x00\x00\x00cpu", b"X\x06\x00\x00\x00cuda:0")
            out.writestr(info, data)
    saved.unlink()


@pytest.mark.skipif(torch.cuda.is_available(), reason="the point is a machine without CUDA")
def test_a_checkpoint_saved_on_a_gpu_samples_on_a_machine_without_one(char_data, tmp_path, capsys):
    """Runs train on GPUs and are sampled on laptops: every load maps tensors to the CPU."""
    train_main(tiny_args(char_data, tmp_path / "run"))
    ckpt = tmp_path / "run" / "ckpt.pt"
    as_if_saved_on_a_gpu(ckpt)
    with pytest.raises(RuntimeError, match="CUDA"):  # the rewrite took: torch alone refuses it here
        torch.load(ckpt, weights_only=True)
    capsys.readouterr()
    sample_main([f"--init_from={ckpt}", "--device=cpu", "--max_new_tokens=3", "--num_samples=1", "--seed=1"])
    assert capsys.readouterr().out.strip()


def test_an_npy_file_is_memory_mapped_read_only(tmp_path):
    """The official train_indices.npy is 2.3 GB: read through a memory map, never into memory, never written."""
    np.save(tmp_path / "t.npy", np.arange(12, dtype=np.int64).reshape(3, 4))
    table = numpy_array(tmp_path / "t.npy")
    assert isinstance(table, np.memmap) and not table.flags.writeable and table[2, 3] == 11


def test_every_load_goes_through_safe_load():
    """No other module unpickles: a new torch.load, pickle.load or plain dcp.load would bypass safe_load."""
    loads = re.compile(r"\btorch\.load\(|\bpickle\.|\bdcp\.load\((?!state, storage_reader=dcp_reader)|allow_pickle")
    offenders = [
        f"{p.relative_to(ROOT)}:{n}"
        for p in ROOT.rglob("*.py")
        if "tests" not in p.parts and p.name != "safe_load.py"
        for n, line in enumerate(p.read_text().splitlines(), 1)
        if loads.search(line)
    ]
    assert offenders == []


def flip_bytes(path: Path) -> None:
    """The same size, other bytes in the middle (a bad sector, a bit flip in a copy)."""
    data = bytearray(path.read_bytes())
    middle = len(data) // 2
    data[middle : middle + 64] = bytes(b ^ 0xFF for b in data[middle : middle + 64])
    path.write_bytes(bytes(data))


@pytest.mark.parametrize(
    "damage, words",
    [
        (lambda p: p.write_bytes(p.read_bytes()[:100]), "has 100 bytes"),
        (flip_bytes, "has other bytes than the save wrote (its CRC32 differs)"),
    ],
)
def test_a_damaged_latest_shard_falls_back_to_the_kept_step(sharded_run, char_data, tmp_path, capsys, damage, words):
    shard = next((sharded_run / checkpoint.SHARDED / "step_000008").glob("*.distcp"))
    size = shard.stat().st_size
    damage(shard)
    assert checkpoint.latest(sharded_run).name == "step_000004"
    assert f"{shard.name} {words}" in capsys.readouterr().err
    message = error_of([f"--out_dir={sharded_run}", "--format=hf", f"--dest={tmp_path / 'hf'}"], export_main)
    assert "character-level run" in message  # the export reads the kept step (and stops at the char tokenizer)
    train_main(tiny_args(char_data, sharded_run, parallelism="fsdp", init_from="auto"))
    assert re.search(r"resuming from \S+ at step 4", capsys.readouterr().out)
    plain = tmp_path / "plain"
    train_main(tiny_args(char_data, plain, parallelism="fsdp"))
    assert losses(sharded_run) == pytest.approx(losses(plain), abs=1e-6)
    (aside,) = sharded_run.glob("stale-*")  # the damaged step is kept, not pruned
    assert (aside / "step_000008" / shard.name).stat().st_size in (100, size)


def test_a_step_saved_before_checksums_were_recorded_is_checked_for_its_sizes(sharded_run, capsys):
    """Older saves recorded each file's size alone (an int, not [size, crc]): such a step still loads, and
    a shard of another size is still caught."""
    step = sharded_run / checkpoint.SHARDED / "step_000008"
    run = torch.load(step / checkpoint.RUN, weights_only=True)
    torch.save({**run, "files": {name: size for name, (size, _) in run["files"].items()}}, step / checkpoint.RUN)
    assert checkpoint.latest(sharded_run) == step
    sample_main([f"--out_dir={sharded_run}", "--device=cpu", "--max_new_tokens=2"])
    shard = next(step.glob("*.distcp"))
    shard.write_bytes(shard.read_bytes()[:100])
    capsys.readouterr()
    assert checkpoint.latest(sharded_run).name == "step_000004"  # the kept step, said
    assert f"{shard.name} has 100 bytes, the save wrote" in capsys.readouterr().err


def test_a_deleted_shard_is_one_line_everywhere(sharded_run, char_data, tmp_path):
    for step in ("step_000004", "step_000008"):
        next((sharded_run / checkpoint.SHARDED / step).glob("*.distcp")).unlink()
    for name, argv, main in tools(sharded_run, tmp_path):
        assert "is missing" in error_of(argv, main=main), name
    assert "--init_from=auto" in error_of(tiny_args(char_data, sharded_run, parallelism="fsdp", init_from="resume"))


def test_a_run_stopped_before_its_first_checkpoint_continues_with_auto(char_data, tmp_path, capsys):
    out = tmp_path / "run"
    diverging = tiny_args(char_data, out, learning_rate=1e30, warmup_iters=0, grad_clip=0.0)
    assert "no checkpoint was saved yet" in error_of(diverging, status=Diverged.exit_code)
    before = snapshot(out)
    assert "metrics.jsonl" in before and not checkpoint.candidates(out)
    for init_from in ("resume", "scratch"):  # both name the command that continues
        assert "--init_from=auto" in error_of(tiny_args(char_data, out, init_from=init_from))
    assert snapshot(out) == before
    train_main(tiny_args(char_data, out, init_from="auto"))  # a fixed learning rate, same out_dir
    (aside,) = out.glob("stale-*")
    assert f"set aside in {aside}" in capsys.readouterr().out
    assert {k: v for k, v in snapshot(aside).items()} == {k: before[k] for k in snapshot(aside)}
    assert {"metrics.jsonl", "config.json"} <= set(snapshot(aside))
    train_main(tiny_args(char_data, tmp_path / "plain"))
    assert losses(out) == losses(tmp_path / "plain")


def test_a_truncated_ckpt_pt_is_kept_aside_and_auto_continues(char_data, tmp_path, capsys):
    out = tmp_path / "run"
    train_main(tiny_args(char_data, out, keep_checkpoints=(4,)))
    data = (out / "ckpt.pt").read_bytes()
    (out / "ckpt.pt").write_bytes(data[: len(data) // 2])
    assert "--init_from=resume" in error_of(tiny_args(char_data, out, max_iters=12, lr_decay_iters=12))
    train_main(tiny_args(char_data, out, init_from="auto"))  # from the kept step 4 to step 8
    assert re.search(r"resuming from \S+ at step 4", capsys.readouterr().out)
    (aside,) = out.glob("stale-*")
    assert (aside / "ckpt.pt").read_bytes() == data[: len(data) // 2]
    assert checkpoint.load(out / "ckpt.pt")["iter_num"] == 8
    # With nothing intact left, auto starts anew and keeps the damaged file.
    only = tmp_path / "only"
    train_main(tiny_args(char_data, only))
    (only / "ckpt.pt").write_bytes(b"PK\x03\x04 not a checkpoint")
    message = error_of(tiny_args(char_data, only, init_from="resume"))
    assert "cannot be read" in message and "--init_from=auto" in message
    train_main(tiny_args(char_data, only, init_from="auto"))
    (aside,) = only.glob("stale-*")
    assert (aside / "ckpt.pt").read_bytes() == b"PK\x03\x04 not a checkpoint"
    assert checkpoint.load(only / "ckpt.pt")["iter_num"] == 8


def test_a_pointer_outside_the_checkpoint_folder_is_refused(sharded_run, tmp_path):
    shutil.copytree(sharded_run / checkpoint.SHARDED / "step_000008", tmp_path / "elsewhere")
    (sharded_run / checkpoint.SHARDED / checkpoint.LATEST).write_text('{"dir": "../../elsewhere"}')
    with pytest.raises(checkpoint.CheckpointError, match="latest.json is damaged"):
        checkpoint.sharded_latest(sharded_run)
    assert checkpoint.latest(sharded_run).name == "step_000008"  # found by itself, inside the folder


def test_crafted_official_artifacts_run_no_code(char_data, tmp_path):
    """The paper's released files: a checkpoint given by path, its loss logs, its .npy index files."""

    marker = tmp_path / "ran"
    official = tmp_path / "official"
    official.mkdir()
    torch.save({"model_args": {"num_heads": 2}, "model": Payload(marker)}, official / "ckpt.pt")
    for name in ("tensor.pt", "eval_train_tensor.pt", "eval_val_tensor.pt"):
        torch.save(Payload(marker), official / name)
    assert "cannot be read" in error_of([f"--init_from={official / 'ckpt.pt'}"], main=sample_main)
    assert "tensor.pt cannot be read" in error_of([f"--reference={official}", "--png="], main=compare_main)
    data = tmp_path / "data"
    shutil.copytree(char_data, data)
    np.save(data / "train_indices.npy", np.array([Payload(marker)], dtype=object), allow_pickle=True)
    argv = tiny_args(data, tmp_path / "run", sampling="official", batch_size=12, gradient_accumulation_steps=40)
    assert "is not a readable .npy array" in error_of(argv)
    assert not marker.exists()


def hf_gpt2(directory: Path) -> Path:
    """A tiny GPT-2 saved by transformers (config.json + model.safetensors), GPT-2's vocabulary."""
    transformers = pytest.importorskip("transformers")
    hf_config = transformers.GPT2Config(n_layer=1, n_head=2, n_embd=16, n_positions=32, vocab_size=50257)
    transformers.GPT2LMHeadModel(hf_config).save_pretrained(directory)
    return directory


def edit_json(path: Path, **changes) -> None:
    path.write_text(json.dumps({**json.loads(path.read_text()), **changes}))


@pytest.mark.parametrize("model_type", ["gpt2", "its_own"])
def test_an_hf_directory_naming_code_of_its_own_is_refused_by_every_tool_and_runs_nothing(
    tmp_path, char_data, model_type
):
    """config.json's auto_map points at the directory's own module, which would leave a marker; asked on
    the terminal, a 'y' would run it. Every tool that reads an HF directory (sample, zeroshot and its
    harness, train) refuses in one line before transformers sees it."""
    d, marker = hf_gpt2(tmp_path / "hf"), tmp_path / "RAN"
    auto_map = {"AutoConfig": "own.Config", "AutoModelForCausalLM": "own.Model"}
    edit_json(d / "config.json", model_type=model_type, auto_map=auto_map)
    (d / "own.py").write_text(f"open({str(marker)!r}, 'w')\nfrom transformers import GPT2Config as Config\n")
    said = subprocess.run(
        [sys.executable, ROOT / "sample.py", f"--init_from={d}", "--start=a", "--max_new_tokens=2"],
        input="y\ny\n",
        capture_output=True,
        text=True,
        timeout=HANG_S,
    )
    assert said.returncode == 1 and "never runs its code" in said.stderr and "[y/N]" not in said.stdout + said.stderr
    out = tmp_path / "out"
    for argv, main in [
        ([f"--init_from={d}", "--start=a"], sample_main),
        ([f"--init_from={d}", "--tasks=wikitext", f"--out={tmp_path / 'e.json'}"], zeroshot_main),
        (tiny_args(char_data, out, init_from=d, max_iters=1), train_main),
    ]:
        assert "never runs its code" in error_of(argv, main)
    assert not marker.exists() and not out.exists()


def test_a_pickled_pytorch_model_bin_is_refused_unread(tmp_path):
    d, marker = hf_gpt2(tmp_path / "hf"), tmp_path / "RAN"
    (d / "model.safetensors").unlink()
    with open(d / "pytorch_model.bin", "wb") as f:
        pickle.dump(Payload(marker), f)
    message = error_of([f"--init_from={d}", "--start=a"], sample_main)
    assert "holds no model.safetensors (it holds pytorch_model.bin: pickles)" in message and not marker.exists()


def test_a_tokenizer_directory_naming_code_of_its_own_is_refused(tmp_path):
    from nlq.data.tokenizer import hf_tokenizer

    (tmp_path / "tokenizer_config.json").write_text(json.dumps({"auto_map": {"AutoTokenizer": ["own.Tok", None]}}))
    with pytest.raises(UserError, match="never runs a directory's code"):
        hf_tokenizer(str(tmp_path))


@pytest.mark.parametrize(
    "replace, message",
    [
        (lambda t: t.flatten()[:1].clone(), r"is \(1,\) torch.float32, the model needs \(16,\) floating point"),
        (lambda t: t.long(), r"is \(16,\) torch.int64, the model needs \(16,\) floating point"),
    ],
)
def test_safetensors_weights_must_have_the_models_exact_shape_and_a_float_dtype(tmp_path, replace, message):
    """A [1] tensor would broadcast over the whole weight through copy_, integers would cast silently."""
    from safetensors.torch import load_file, save_file

    from model import GPT, GPTConfig
    from nlq.interop import hf_export

    model = GPT(GPTConfig(n_layer=1, n_head=2, n_embd=16, block_size=32, vocab_size=50304))
    d = hf_export.export(model, {"tokenizer": "gpt2", "vocab_size": 50257}, tmp_path / "hf")
    state = load_file(d / "model.safetensors")
    state["transformer.ln_f.weight"] = replace(state["transformer.ln_f.weight"])
    save_file(state, d / "model.safetensors")
    with pytest.raises(ValueError, match=message):
        from_pretrained(str(d))


def test_an_hf_config_describing_a_model_too_large_for_memory_is_refused_before_any_weight_is_read(tmp_path):
    d = hf_gpt2(tmp_path / "hf")
    edit_json(d / "config.json", n_layer=4096, n_embd=8192)  # 3.3 T parameters
    (d / "model.safetensors").write_bytes(b"never read")
    message = error_of([f"--init_from={d}", "--start=a"], sample_main)
    assert "float32 weights, held twice while they are copied" in message and "GiB free on cpu" in message


@pytest.mark.parametrize(
    "changes, message",
    [({"n_embd": "16"}, "Field 'n_embd' expected int, got str"), ({"n_embd": 32}, "cannot load pretrained weights")],
)
def test_an_hf_config_of_the_wrong_type_or_size_is_one_line(tmp_path, changes, message):
    d = hf_gpt2(tmp_path / "hf")
    edit_json(d / "config.json", **changes)
    assert message in error_of([f"--init_from={d}", "--start=a"], sample_main)


@pytest.mark.parametrize(
    "pointer",
    ["step_000008/../../elsewhere", "step_000008/../../../tmp", "step_000008\n", "step_000008/", "/abs/step_000008"],
)
def test_a_pointer_that_starts_like_a_step_but_escapes_is_refused(sharded_run, tmp_path, pointer):
    """A value that passes a prefix match (step_N...) names the step itself or nothing."""
    shutil.copytree(sharded_run / checkpoint.SHARDED / "step_000008", tmp_path / "elsewhere")
    (sharded_run / checkpoint.SHARDED / checkpoint.LATEST).write_text(json.dumps({"dir": pointer}))
    with pytest.raises(checkpoint.CheckpointError, match="latest.json is damaged"):
        checkpoint.sharded_latest(sharded_run)


def calling(module: str, name: str, *args) -> bytes:
    """A pickle that calls module.name(*args) when loaded, written opcode by opcode (protocol 2)."""
    body = pickle.dumps(args, protocol=2)[2:-1]  # the args tuple, without its header and STOP
    return b"\x80\x02c" + f"{module}\n{name}\n".encode() + body + b"R."


@pytest.mark.parametrize(
    "global_",
    [("torch", "save"), ("torch", "load"), ("torch", "from_file"), ("torch.serialization", "save"),
     ("torch", "ops"), ("torch", "_C"), ("builtins", "getattr"), ("torch.serialization", "_get_restore_location")],
)  # fmt: skip
def test_dcp_metadata_naming_a_torch_function_is_refused_and_runs_nothing(tmp_path, global_):
    """Inside the allowed torch namespace only dtypes and torch.Size are rebuilt: torch.save, torch.load,
    torch.from_file (which can create a file), torch.ops, and torch.serialization's other names are
    refused before anything runs."""
    from nlq.common.safe_load import read_dcp_metadata

    marker = tmp_path / "ran"
    torch.save({"x": 1}, tmp_path / "real.pt")  # what torch.load would read, were it called
    crafted = tmp_path / ".metadata"
    args = {"save": ({"x": 1}, str(marker)), "from_file": (str(marker), True, 8)}.get(
        global_[1], (str(tmp_path / "real.pt"),)
    )
    crafted.write_bytes(calling(*global_, *args))
    with pytest.raises(UnsafeFile, match=f"refers to {re.escape('.'.join(global_))}"):
        read_dcp_metadata(crafted)
    assert not marker.exists()


def test_dcp_metadata_that_is_no_metadata_or_cannot_be_read_is_one_line(tmp_path):
    """Plain allowed values (a dict, a list) are not checkpoint metadata; a .metadata that is a directory
    cannot be read; neither is loaded."""
    from nlq.common.safe_load import read_dcp_metadata

    for value, kind in [({"state_dict_metadata": {}}, "dict"), ([1, 2], "list")]:
        (tmp_path / ".metadata").write_bytes(pickle.dumps(value, protocol=2))
        words = rf"\.metadata holds a {kind}, not checkpoint metadata; nothing was loaded"
        with pytest.raises(UnsafeFile, match=words):
            read_dcp_metadata(tmp_path / ".metadata")
    (tmp_path / "dir.metadata").mkdir()
    with pytest.raises(UnsafeFile, match=r"dir\.metadata cannot be read \(Is a directory\)"):
        read_dcp_metadata(tmp_path / "dir.metadata")
