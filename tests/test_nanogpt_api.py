"""nanoGPT's model API on model.GPT, used as nanoGPT's README, sample.py and train.py use it (the calls are
written here from nanoGPT's documentation; the expected numbers are derived in each test)."""

import pytest
import torch
import torch.nn.functional as F

from model import GPT, GPTConfig
from nlq.interop.importers import from_pretrained

transformers = pytest.importorskip("transformers")


@pytest.fixture(scope="module")
def gpt2_dir(tmp_path_factory):
    """A small GPT-2 as transformers saves one (safetensors), with random biases and norms, and its model."""
    path = tmp_path_factory.mktemp("gpt2")
    torch.manual_seed(0)
    hf = transformers.GPT2LMHeadModel(
        transformers.GPT2Config(n_layer=2, n_head=4, n_embd=32, n_positions=48, vocab_size=101)
    ).eval()
    with torch.no_grad():
        for name, p in hf.named_parameters():
            if p.dim() == 1:
                p.normal_(1.0 if ".ln_" in name and name.endswith("weight") else 0.0, 0.1)
    hf.save_pretrained(path)
    return path, hf


def test_from_pretrained_and_generate_as_nanogpts_sample_py_calls_them(gpt2_dir):
    """sample.py: from_pretrained(init_from, dict(dropout=0.0)), then model.generate(x, max_new_tokens,
    temperature=temperature, top_k=top_k)."""
    path, hf = gpt2_dir
    model = GPT.from_pretrained(str(path), dict(dropout=0.0))
    model.eval()
    x = torch.randint(0, 101, (2, 10), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        expected = hf(x).logits
        torch.testing.assert_close(model(x)[0], expected, rtol=0, atol=1e-5 * float(expected.abs().max()))
        torch.manual_seed(0)
        y = model.generate(x, 12, temperature=0.8, top_k=5)
        assert y.shape == (2, 22) and torch.equal(y[:, :10], x) and int(y.max()) < 101
        # top_k=1 leaves one token to draw: the argmax of each step, worked here by recomputation
        greedy = x
        for _ in range(12):
            greedy = torch.cat([greedy, hf(greedy).logits[:, -1:].argmax(-1)], dim=1)
        assert torch.equal(model.generate(x, 12, temperature=1.0, top_k=1), greedy)


def test_gpt_from_pretrained_is_the_importers_model(gpt2_dir):
    """nanoGPT's classmethod gives the model nlq.interop.importers.from_pretrained builds: same config, same
    tensors, override_args applied; and its refusals are the importer's."""
    path, _ = gpt2_dir
    ours, theirs = GPT.from_pretrained(str(path), dict(dropout=0.1)), from_pretrained(str(path), dict(dropout=0.1))
    assert type(ours) is GPT and ours.config == theirs.config and ours.config.dropout == 0.1
    a, b = ours.state_dict(), theirs.state_dict()
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    with pytest.raises(ValueError, match="pretrained weights are linear-query only"):
        GPT.from_pretrained(str(path), dict(query_mode="identity"))


def test_logits_and_loss_from_targets_as_nanogpts_train_py_takes_them():
    """train.py: logits, loss = model(X, Y). The loss is the mean cross-entropy over targets (-1 ignored);
    logits are None unless asked for (return_logits=True): train.py's loop never reads them."""
    torch.manual_seed(0)
    model = GPT(GPTConfig(n_layer=2, n_head=2, n_embd=32, block_size=16, vocab_size=50)).eval()
    X = torch.randint(0, 50, (3, 16))
    Y = torch.randint(0, 50, (3, 16))
    Y[0, :5] = -1
    logits, loss = model(X, Y)
    assert logits is None
    logits, loss_too = model(X, Y, return_logits=True)
    expected = F.cross_entropy(logits.view(-1, 50), Y.view(-1), ignore_index=-1)
    torch.testing.assert_close(loss, expected)
    torch.testing.assert_close(loss_too, expected)
    torch.testing.assert_close(logits, model(X)[0])
    loss.backward()  # the memory-saving path trains as before
    assert model.lm_head.weight.grad is not None


def test_get_num_params_counts_as_nanogpt_does():
    """nanoGPT prints 'number of parameters: 123.65M' for GPT-2 small: GPT-2's 124,439,808 parameters less
    its 1024 x 768 position table (the tied token table stays: it is also the head)."""
    with torch.device("meta"):
        model = GPT(GPTConfig(n_layer=12, n_head=12, n_embd=768, block_size=1024, vocab_size=50257, bias=True))
    assert model.get_num_params() == 124_439_808 - 1024 * 768 == 123_653_376
    assert model.get_num_params(non_embedding=False) == 124_439_808
    assert model.num_params() == 124_439_808 - 1024 * 768 - 50257 * 768  # the paper's count drops both tables


@pytest.mark.parametrize("pos", ["learned", "rotary"])
def test_crop_block_size_keeps_the_first_positions(pos):
    """train.py: model.crop_block_size(block_size) when the pretrained context is longer than wanted."""
    torch.manual_seed(0)
    model = GPT(GPTConfig(n_layer=2, n_head=2, n_embd=32, block_size=32, vocab_size=50, pos_embedding=pos)).eval()
    x = torch.randint(0, 50, (2, 16))
    with torch.no_grad():
        before = model(x)[0]
        model.crop_block_size(16)
        assert model.config.block_size == 16
        torch.testing.assert_close(model(x)[0], before)
        torch.testing.assert_close(model(x, last_only=True)[0], before[:, -1:])  # generate's one position
    # what it saves is a 16-position model's state, whatever the position embedding
    GPT(GPTConfig(n_layer=2, n_head=2, n_embd=32, block_size=16, vocab_size=50, pos_embedding=pos)).load_state_dict(
        model.state_dict()
    )
    with torch.no_grad():
        assert torch.equal(model.generate(x[:, :4], 20, temperature=0)[:, :4], x[:, :4])  # crops its context
    with pytest.raises(ValueError, match="exceeds block_size=16"):
        model(torch.zeros(1, 17, dtype=torch.long))
    with pytest.raises(ValueError, match="give 1 to 16"):
        model.crop_block_size(17)


def test_configure_optimizers_decays_matrices_and_embeddings_only():
    """train.py: model.configure_optimizers(weight_decay, learning_rate, (beta1, beta2), device_type)."""
    model = GPT(GPTConfig(n_layer=2, n_head=2, n_embd=32, block_size=16, vocab_size=50, bias=True))
    optimizer = model.configure_optimizers(0.1, 6e-4, (0.9, 0.95), "cpu")
    decay, no_decay = optimizer.param_groups
    assert (decay["weight_decay"], no_decay["weight_decay"]) == (0.1, 0.0)
    assert optimizer.defaults["lr"] == 6e-4 and optimizer.defaults["betas"] == (0.9, 0.95)
    names = {id(p): n for n, p in model.named_parameters()}
    assert sorted(names[id(p)] for p in decay["params"]) == sorted(
        n for n, p in model.named_parameters() if p.dim() >= 2
    )
    assert all(p.dim() == 1 for p in no_decay["params"])
    assert len(decay["params"]) + len(no_decay["params"]) == len(names)


def test_estimate_mfu_is_nanogpts_formula_against_the_given_peak():
    """train.py: raw_model.estimate_mfu(batch_size * gradient_accumulation_steps, dt): (6N + 12 L H Q T)
    FLOPs per token, T tokens per sequence, over dt seconds, as a fraction of the peak; N counted here as the
    weights of every matrix multiply (the position table is a lookup)."""
    L, H, Q, T = 2, 2, 16, 16
    model = GPT(GPTConfig(n_layer=L, n_head=H, n_embd=H * Q, block_size=T, vocab_size=50, query_mode="residual_gelu"))
    N = sum(p.numel() for n, p in model.named_parameters() if p.dim() == 2 and "wpe" not in n)
    per_token = 6 * N + 12 * L * H * Q * T
    assert model.estimate_mfu(8, 0.5, peak_flops=1e9) == pytest.approx(per_token * T * 8 / 0.5 / 1e9)


def test_crop_block_size_and_generate_refuse_what_they_cannot_do():
    """crop_block_size(True) would crop to 1 (True == 1) and a tensor would be compared element-wise;
    generate with a negative temperature would sample from inverted logits."""
    model = GPT(GPTConfig(n_layer=1, n_head=2, n_embd=16, block_size=16, vocab_size=32))
    for bad in (True, torch.tensor(8), 8.0):
        with pytest.raises(TypeError, match="give an int"):
            model.crop_block_size(bad)
    assert model.config.block_size == 16
    x = torch.zeros(1, 3, dtype=torch.long)
    for kw, words in ((dict(temperature=-0.5), "temperature=-0.5"), (dict(temperature=float("nan")), "temperature=nan"),
                      (dict(top_k=0), "top_k=0"), (dict(top_k=True), "top_k=True")):  # fmt: skip
        with pytest.raises(ValueError, match=words):
            model.generate(x, 2, **kw)
