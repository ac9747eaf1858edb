"""The export (export.py --format=hf) as a transformers model in everyday use: padded batches, the KV cache,
Trainer's gradient accumulation, the outputs transformers' own model tests ask for, and refusals. The tests
named after a test of transformers' ModelTesterMixin or GenerationTesterMixin (tests/test_modeling_common.py,
tests/generation/test_utils.py of the transformers repository) check what it checks, written here: those
mixins are not in transformers' wheel and this suite runs offline."""

from unittest import mock

import pytest
import torch
from helpers import EXPORT_SHAPES, export_model

from model import QUERY_MODES
from nlq.data.tokenizer import gpt2_encoding
from nlq.interop import hf_export

transformers = pytest.importorskip("transformers")

TEXTS = ["The queries need not be linear, said", "Hello", "The cat sat on", "I am a day."]
PROMPTS = [gpt2_encoding().encode_ordinary(t) for t in TEXTS]  # of 8, 1, 4 and 5 tokens
PAD = 50256  # <|endoftext|>, GPT-2's BPE having no pad token


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """exported(shape) -> (the project's model, the export loaded by transformers), made once per shape."""
    made = {}

    def get(shape, **load):
        if shape not in made:
            model = export_model(**EXPORT_SHAPES[shape])
            path = tmp_path_factory.mktemp(shape) / "hf"
            hf_export.export(model, {"tokenizer": "gpt2"}, path)
            made[shape] = (model, path)
        model, path = made[shape]
        hf = transformers.AutoModelForCausalLM.from_pretrained(path, trust_remote_code=True, **load).eval()
        return model, hf

    return get


def padded(prompts, side="left"):
    """(input_ids, attention_mask) of prompts padded with PAD to the longest, on the given side."""
    width = max(map(len, prompts))
    rows, masks = [], []
    for p in prompts:
        pad = [PAD] * (width - len(p))
        rows.append(pad + p if side == "left" else p + pad)
        masks.append([0] * len(pad) + [1] * len(p) if side == "left" else [1] * len(p) + [0] * len(pad))
    return torch.tensor(rows), torch.tensor(masks)


def greedy(hf, ids, mask, n, **kw):
    out = hf.generate(
        input_ids=ids, attention_mask=mask, max_new_tokens=n, do_sample=False, return_dict_in_generate=True,
        output_scores=True, **kw,
    )  # fmt: skip
    return out.sequences[:, ids.size(1) :], torch.stack(out.scores, 1)


SHAPES_AND_MIXES = [*QUERY_MODES, "rotary_gqa_parallel_untied_bias", "nlq_probe_lora_rotary"]


@pytest.mark.parametrize("shape", SHAPES_AND_MIXES)
def test_left_padded_batched_generation_equals_one_prompt_at_a_time(exported, shape):
    """Mirrors GenerationTesterMixin.test_left_padding_compatibility, through generate with the KV cache: each
    row's tokens and scores equal those of its prompt alone, which equal the project's own generate."""
    model, hf = exported(shape)
    ids, mask = padded(PROMPTS)
    with torch.no_grad():
        tokens, scores = greedy(hf, ids, mask, 8)
        for i, p in enumerate(PROMPTS):
            alone_tokens, alone_scores = greedy(hf, torch.tensor([p]), torch.ones(1, len(p), dtype=torch.long), 8)
            assert torch.equal(tokens[i], alone_tokens[0]), (shape, i)
            torch.testing.assert_close(scores[i], alone_scores[0], rtol=0, atol=1e-4 * float(scores.abs().max()))
            assert torch.equal(alone_tokens[0], model.generate(torch.tensor([p]), 8, temperature=0)[0, len(p) :])


@pytest.mark.parametrize("shape", ["residual_gelu", "rotary_gqa_parallel_untied_bias"])
def test_right_padding_and_explicit_positions_leave_every_token_as_it_was(exported, shape):
    """Right padding changes no real token's logits; left padding with the positions given explicitly (as
    GenerationTesterMixin.test_generate_with_and_without_position_ids does) equals the mask's own positions."""
    _, hf = exported(shape)
    with torch.no_grad():
        ids, mask = padded(PROMPTS, side="right")
        logits = hf(ids, attention_mask=mask).logits
        for i, p in enumerate(PROMPTS):
            alone = hf(torch.tensor([p])).logits[0]
            torch.testing.assert_close(logits[i, : len(p)], alone, rtol=0, atol=1e-4 * float(alone.abs().max()))
        ids, mask = padded(PROMPTS)
        positions = (mask.cumsum(-1) - 1).clamp(min=0)
        torch.testing.assert_close(
            hf(ids, attention_mask=mask, position_ids=positions).logits, hf(ids, attention_mask=mask).logits
        )


def test_the_kv_cache_gives_the_tokens_of_recomputation_and_its_format(exported):
    """Mirrors test_greedy_generate_dict_outputs_use_cache and test_past_key_values_format: with and without
    the cache the same tokens; the cache holds (batch, n_kv_head, length, head_dim) keys and values per layer."""
    model, hf = exported("rotary_gqa_parallel_untied_bias")
    ids, mask = padded(PROMPTS)
    with torch.no_grad():
        cached, _ = greedy(hf, ids, mask, 6)
        recomputed, _ = greedy(hf, ids, mask, 6, use_cache=False)
        assert torch.equal(cached, recomputed)
        out = hf(ids, attention_mask=mask, use_cache=True)
    cache = out[hf_export_cache_field(out)]
    c = model.config
    for layer in range(c.n_layer):
        k, v = cache.layers[layer].keys, cache.layers[layer].values
        assert k.shape == v.shape == (len(PROMPTS), c.kv_heads, ids.size(1), c.head_dim)


def hf_export_cache_field(output) -> str:
    return "cache" if "cache" in output else "past_key_values"


def test_generation_continues_from_its_cache(exported):
    """Mirrors test_generate_continue_from_past_key_values: 3 tokens, then 3 more from the returned cache,
    equal 6 at once."""
    _, hf = exported("residual_gelu")
    ids, mask = padded(PROMPTS)
    with torch.no_grad():
        six = hf.generate(input_ids=ids, attention_mask=mask, max_new_tokens=6, do_sample=False)
        first = hf.generate(
            input_ids=ids, attention_mask=mask, max_new_tokens=3, do_sample=False, return_dict_in_generate=True
        )
        cache = first[hf_export_cache_field(first)]
        mask = torch.cat([mask, torch.ones(len(PROMPTS), 3, dtype=torch.long)], dim=1)
        more = hf.generate(
            input_ids=first.sequences, attention_mask=mask, max_new_tokens=3, do_sample=False,
            **{hf_export_cache_field(first): cache},
        )  # fmt: skip
    assert torch.equal(more, six)


@pytest.mark.parametrize("shape", ["linear", "rotary_gqa_parallel_untied_bias"])
def test_a_forward_on_the_cache_continues_the_positions(exported, shape):
    """Without a mask or positions, tokens fed after a cache of P tokens take positions P, P + 1, ...: their
    logits equal those of the whole sequence at once (learned positions and rotary angles alike)."""
    _, hf = exported(shape)
    ids = torch.tensor([PROMPTS[0]])
    with torch.no_grad():
        whole = hf(ids).logits
        first = hf(ids[:, :5], use_cache=True)
        rest = hf(ids[:, 5:], past_key_values=first[hf_export_cache_field(first)]).logits
    torch.testing.assert_close(rest, whole[:, 5:], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("how", ["beam", "assisted", "sample"])
def test_beam_search_assisted_decoding_and_sampling_on_a_padded_batch(exported, how):
    """Mirrors test_beam_search_generate, test_assisted_decoding_matches_greedy_search and
    test_sample_generate: the batch gives each prompt's own result (beam search reorders the cache, assisted
    decoding crops it), and a seeded sample is repeatable."""
    _, hf = exported("identity")
    ids, mask = padded(PROMPTS)
    kw = {
        "beam": dict(num_beams=3, do_sample=False),
        "assisted": dict(assistant_model=hf, do_sample=False),
        "sample": dict(do_sample=True, top_k=20),
    }[how]

    def run(i, m, **extra):
        torch.manual_seed(0)
        return hf.generate(input_ids=i, attention_mask=m, max_new_tokens=6, **kw, **extra)[:, -6:]

    with torch.no_grad():
        if how == "assisted":  # transformers' assisted decoding takes one prompt at a time
            for p in PROMPTS:
                one = torch.tensor([p])
                assert torch.equal(run(one, torch.ones_like(one)), greedy(hf, one, torch.ones_like(one), 6)[0])
        elif how == "beam":
            batch = run(ids, mask)
            for i, p in enumerate(PROMPTS):
                assert torch.equal(batch[i], run(torch.tensor([p]), torch.ones(1, len(p), dtype=torch.long))[0])
        else:
            assert torch.equal(run(ids, mask), run(ids, mask))


def test_packed_sequences_equal_the_padded_batch(exported):
    """Mirrors test_sdpa_padding_matches_padding_free_with_position_ids: sequences packed in one row, their
    positions restarting, give each sequence's logits (no token attends across)."""
    _, hf = exported("residual_gelu")
    packed = torch.tensor([sum(PROMPTS, [])])
    positions = torch.tensor([sum((list(range(len(p))) for p in PROMPTS), [])])
    with torch.no_grad():
        logits = hf(packed, position_ids=positions).logits[0]
        start = 0
        for p in PROMPTS:
            alone = hf(torch.tensor([p])).logits[0]
            got = logits[start : start + len(p)]
            torch.testing.assert_close(got, alone, rtol=0, atol=1e-4 * float(alone.abs().max()))
            start += len(p)


@pytest.mark.parametrize("shape", ["residual_gelu", "rotary_gqa_parallel_untied_bias"])
def test_eager_matches_sdpa_and_its_attentions_are_causal_distributions(exported, shape):
    """Mirrors test_eager_matches_sdpa_inference and test_attention_outputs: attn_implementation='eager'
    (the explicit softmax) gives the logits of 'sdpa' on a left-padded batch; its attention weights are
    (batch, heads, T, T), rows summing to 1, a token's nothing on a later token or on padding."""
    _, sdpa = exported(shape, attn_implementation="sdpa")
    _, eager = exported(shape, attn_implementation="eager")
    assert (sdpa.config._attn_implementation, eager.config._attn_implementation) == ("sdpa", "eager")
    ids, mask = padded(PROMPTS)
    with torch.no_grad():
        a = sdpa(ids, attention_mask=mask).logits
        out = eager(ids, attention_mask=mask, output_attentions=True)
    no_sdpa = AssertionError("scaled_dot_product_attention called by a model loaded with attn_implementation='eager'")
    with torch.no_grad(), mock.patch.object(torch.nn.functional, "scaled_dot_product_attention", side_effect=no_sdpa):
        chosen = eager(ids, attention_mask=mask).logits  # eager by its config alone, not by output_attentions
    real = mask.bool()
    torch.testing.assert_close(out.logits[real], a[real], rtol=0, atol=1e-4 * float(a.abs().max()))
    torch.testing.assert_close(chosen, out.logits, rtol=0, atol=0)
    T = ids.size(1)
    assert len(out.attentions) == eager.config.n_layer
    for w in out.attentions:
        assert w.shape == (len(PROMPTS), eager.config.n_head, T, T)
        torch.testing.assert_close(w.sum(-1), torch.ones(len(PROMPTS), eager.config.n_head, T))
        later = torch.ones(T, T, dtype=torch.bool).triu(1)
        unseen = real[:, None, :, None] & (later | ~real[:, None, None, :])  # a real token's on a later one or a pad
        assert w.masked_select(unseen.expand_as(w)).abs().max() == 0


def test_hidden_states_outputs_and_return_dict(exported):
    """Mirrors test_hidden_states_output and test_model_outputs_equivalence: n_layer + 1 hidden states (the
    embeddings first, the final norm's output last: GPT-2's convention), and return_dict=False gives the same
    tensors as a tuple."""
    model, hf = exported("linear")
    ids = torch.tensor([PROMPTS[0]])
    with torch.no_grad():
        out = hf(ids, output_hidden_states=True, use_cache=False)
        embeddings = model.transformer.wte(ids) + model.transformer.wpe(torch.arange(ids.size(1)))
        as_tuple = hf(ids, output_hidden_states=True, use_cache=False, return_dict=False)
    assert len(out.hidden_states) == model.config.n_layer + 1
    torch.testing.assert_close(out.hidden_states[0], embeddings)
    torch.testing.assert_close(hf.lm_head(out.hidden_states[-1]), out.logits)
    assert isinstance(as_tuple, tuple) and len(as_tuple) == 2
    torch.testing.assert_close(as_tuple[0], out.logits)
    assert all(torch.equal(a, b) for a, b in zip(as_tuple[1], out.hidden_states))


def test_inputs_embeds_match_input_ids_in_forward_and_generate(exported):
    """Mirrors test_inputs_embeds_matches_input_ids and test_generate_from_inputs_embeds."""
    _, hf = exported("nlq_probe_lora_rotary")
    ids, mask = padded(PROMPTS)
    embeds = hf.get_input_embeddings()(ids)
    with torch.no_grad():
        torch.testing.assert_close(
            hf(inputs_embeds=embeds, attention_mask=mask).logits, hf(ids, attention_mask=mask).logits
        )
        from_embeds = hf.generate(inputs_embeds=embeds, attention_mask=mask, max_new_tokens=5, do_sample=False)
        assert torch.equal(from_embeds[:, -5:], greedy(hf, ids, mask, 5)[0])


@pytest.mark.parametrize("reentrant", [True, False])
def test_gradient_checkpointing_gives_the_same_gradients(exported, reentrant):
    """Mirrors test_training_gradient_checkpointing(_use_reentrant_*): gradient_checkpointing_enable() is
    accepted and every gradient equals the one computed without it."""
    _, hf = exported("rotary_gqa_parallel_untied_bias")
    ids, mask = padded(PROMPTS)
    labels = ids.masked_fill(mask == 0, -100)

    def grads():
        hf.zero_grad()
        hf(ids, attention_mask=mask, labels=labels).loss.backward()
        return {n: p.grad.clone() for n, p in hf.named_parameters()}

    hf.train()
    plain = grads()
    hf.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": reentrant})
    assert hf.is_gradient_checkpointing
    checkpointed = grads()
    assert plain.keys() == checkpointed.keys()
    for name in plain:
        torch.testing.assert_close(checkpointed[name], plain[name], msg=name)


def test_the_loss_is_the_mean_over_labels_or_divided_by_num_items_in_batch(exported):
    """labels are shifted here and -100 ignored; num_items_in_batch (Trainer's count over an accumulated
    step) divides the sum instead of the count."""
    _, hf = exported("linear")
    ids, mask = padded(PROMPTS, side="right")
    labels = ids.masked_fill(mask == 0, -100)
    with torch.no_grad():
        logits = hf(ids, attention_mask=mask).logits
        logp = logits[:, :-1].log_softmax(-1).gather(-1, labels[:, 1:].clamp(min=0)[..., None])[..., 0]
        real = labels[:, 1:] != -100
        total = -(logp * real).sum()
        torch.testing.assert_close(hf(ids, attention_mask=mask, labels=labels).loss, total / real.sum())
        torch.testing.assert_close(hf(ids, attention_mask=mask, labels=labels, num_items_in_batch=40).loss, total / 40)


def test_trainer_with_gradient_accumulation_takes_the_step_of_the_whole_batch(exported, tmp_path):
    """transformers' Trainer, 4 sequences a step: one micro-batch of 4 and two of 2 give the same logged loss
    and the same weights after one SGD step, with the sequences' label counts unequal (a mean per micro-batch
    would differ, and a loss that ignored num_items_in_batch would be counted twice)."""
    pytest.importorskip("accelerate")
    from torch.utils.data import Dataset

    class Rows(Dataset):
        def __init__(self):
            ids, mask = padded(PROMPTS, side="right")
            self.rows = [
                {"input_ids": i, "attention_mask": m, "labels": i.masked_fill(m == 0, -100)} for i, m in zip(ids, mask)
            ]

        def __len__(self):
            return len(self.rows)

        def __getitem__(self, i):
            return self.rows[i]

    def trained(batch, accumulation):
        _, hf = exported("residual_gelu")
        args = transformers.TrainingArguments(
            output_dir=str(tmp_path / f"{batch}x{accumulation}"), per_device_train_batch_size=batch,
            gradient_accumulation_steps=accumulation, max_steps=1, learning_rate=0.5, optim="sgd",
            lr_scheduler_type="constant", logging_steps=1, report_to=[], use_cpu=True, save_strategy="no",
            seed=0, data_seed=0,
        )  # fmt: skip
        trainer = transformers.Trainer(model=hf.train(), args=args, train_dataset=Rows())
        trainer.train()
        return hf, trainer.state.log_history[0]["loss"]

    whole, whole_loss = trained(4, 1)
    split, split_loss = trained(2, 2)
    assert split_loss == pytest.approx(whole_loss, rel=1e-5)
    for (name, a), b in zip(whole.named_parameters(), split.parameters()):
        torch.testing.assert_close(b, a, msg=name)


def test_generation_never_draws_the_vocabularys_padding_ids(exported):
    """The embedding's rows past the tokenizer (50257-50303 of GPT-2's padded 50304) decode to nothing:
    generate never draws them, even from a model that favours them."""
    _, hf = exported("linear")
    with torch.no_grad():
        hf.lm_head.weight[50257:] = hf.lm_head.weight[:47] * 50  # far the likeliest ids, were they allowed
        ids, mask = padded(PROMPTS)
        out = hf.generate(input_ids=ids, attention_mask=mask, max_new_tokens=12, do_sample=True, temperature=2.0)
    assert int(out.max()) < 50257
    assert hf.generation_config.pad_token_id == PAD


def test_the_tokenizer_is_gpt2s_own_class_and_runs_no_code(exported, tmp_path):
    """The exported tokenizer names a standard class and no code of its own, loads without any, and pads
    on the left with <|endoftext|>."""
    import json

    model = export_model(query_mode="linear")
    hf_export.export(model, {"tokenizer": "gpt2"}, tmp_path / "hf")
    config = json.loads((tmp_path / "hf" / "tokenizer_config.json").read_text())
    assert config["tokenizer_class"] == "GPT2Tokenizer" and "auto_map" not in config
    tok = transformers.AutoTokenizer.from_pretrained(tmp_path / "hf", trust_remote_code=False)
    assert isinstance(tok, transformers.GPT2Tokenizer)
    assert [tok(t)["input_ids"] for t in TEXTS] == PROMPTS
    batch = tok(TEXTS, padding=True, return_tensors="pt")  # padded as generation needs it
    ids, mask = padded(PROMPTS)
    assert torch.equal(batch["input_ids"], ids) and torch.equal(batch["attention_mask"], mask)


def test_a_text_generation_pipeline_batches_as_it_generates_one_prompt(tmp_path):
    """transformers.pipeline('text-generation') on the export directory, 4 prompts at once and one by one."""
    hf_export.export(export_model(query_mode="residual_gelu"), {"tokenizer": "gpt2"}, tmp_path / "hf")
    tok = transformers.AutoTokenizer.from_pretrained(tmp_path / "hf", trust_remote_code=False)
    generate = transformers.pipeline(
        "text-generation", model=str(tmp_path / "hf"), tokenizer=tok, trust_remote_code=True, device="cpu"
    )
    batched = generate(TEXTS, batch_size=4, max_new_tokens=6, do_sample=False)
    alone = [generate(t, max_new_tokens=6, do_sample=False) for t in TEXTS]
    assert [b[0]["generated_text"] for b in batched] == [a[0]["generated_text"] for a in alone]
    assert all(len(a[0]["generated_text"]) > len(t) for a, t in zip(alone, TEXTS))


def test_what_the_model_cannot_honour_is_refused(exported):
    """A 4-D mask, a static cache, a mask of the wrong length, positions past block_size, an unknown keyword:
    an error naming it, never a wrong number."""
    _, hf = exported("residual_gelu")
    ids, mask = padded(PROMPTS)
    cases = [
        (dict(attention_mask=mask[:, None, None, :]), ValueError, "2-D mask"),
        (dict(attention_mask=mask[:, 1:]), ValueError, "2-D mask"),
        (dict(position_ids=torch.full_like(ids, 64)), ValueError, "past block_size=64"),
        (dict(attention_maks=mask), TypeError, "attention_maks"),
        (dict(attention_mask=mask * 0.5), ValueError, "values other than 0 and 1 .0, 0.5"),
        (dict(attention_mask=(1 - mask.float()) * -torch.inf), ValueError, "not an additive mask"),
        (dict(attention_mask=mask * 2), ValueError, "values other than 0 and 1"),
        (dict(position_ids=torch.arange(ids.size(1)).float()[None]), ValueError, "give integer positions"),
        (dict(position_ids=torch.arange(ids.size(1))[None] - 1), ValueError, "holds -1: positions count from 0"),
        (
            dict(past_key_values=transformers.StaticCache(config=hf.config, max_cache_len=64)),
            ValueError,
            "DynamicCache",
        ),
    ]
    for kw, error, words in cases:
        with pytest.raises(error, match=words):
            hf(ids, **kw)
    with torch.no_grad():
        assert hf(ids, position_ids=torch.full_like(ids, 63)).logits.isfinite().all()  # the last position: in
    with pytest.raises(ValueError, match="past block_size=64"):
        hf.generate(input_ids=ids, attention_mask=mask, max_new_tokens=60, do_sample=False)


LM_EVAL_TASKS = {  # name: (output_type, the YAML's fields, its metric)
    "x_gen": ("generate_until", "doc_to_text: context\ndoc_to_target: target\n"
              "generation_kwargs:\n  until: ['.']\n  max_gen_toks: 6\n  do_sample: false\n", "exact_match"),
    "x_ll": ("loglikelihood", "doc_to_text: context\ndoc_to_target: target\n", "perplexity"),
    "x_roll": ("loglikelihood_rolling", 'doc_to_text: ""\ndoc_to_target: text\n', "word_perplexity"),
    "x_mc": ("multiple_choice", "doc_to_text: context\ndoc_to_choice: endings\ndoc_to_target: label\n", "acc"),
}  # fmt: skip


def test_lm_eval_gives_the_same_results_at_batch_size_1_and_8(exported, tmp_path):
    """lm-eval's own 'hf' model on the export, its four request types on local task files of prompts of
    unequal length: every sample's response (generations padded on the left, scores padded on the right) is
    the same in batches of 8 as one at a time."""
    pytest.importorskip("accelerate")
    import json

    import lm_eval
    from lm_eval.tasks import TaskManager

    model = export_model(query_mode="residual_gelu")
    hf_export.export(model, {"tokenizer": "gpt2"}, tmp_path / "hf")
    words = "the cat sat on a mat and looked at an owl who said that queries need not be linear".split()
    docs = [
        {"context": " ".join(words[i : i + 2 + i % 7]), "target": " " + words[(i + 5) % len(words)],
         "text": " ".join(words[i:]), "endings": [" mat", " owl", " queries"], "label": i % 3}
        for i in range(10)
    ]  # fmt: skip
    (tmp_path / "docs.jsonl").write_text("".join(json.dumps(d) + "\n" for d in docs))
    for name, (kind, fields, metric) in LM_EVAL_TASKS.items():
        (tmp_path / f"{name}.yaml").write_text(
            f"task: {name}\ndataset_path: json\ndataset_kwargs:\n  data_files:\n    test: {tmp_path / 'docs.jsonl'}\n"
            f"test_split: test\noutput_type: {kind}\n{fields}metric_list:\n  - metric: {metric}\n"
        )

    def responses(batch_size):
        out = lm_eval.simple_evaluate(
            model="hf", model_args=f"pretrained={tmp_path / 'hf'},trust_remote_code=True", tasks=list(LM_EVAL_TASKS),
            task_manager=TaskManager(include_path=str(tmp_path)), device="cpu", batch_size=batch_size,
            log_samples=True,
        )  # fmt: skip
        return {t: [s["resps"] for s in sorted(out["samples"][t], key=lambda s: s["doc_id"])] for t in LM_EVAL_TASKS}

    one, eight = responses(1), responses(8)
    assert one["x_gen"] == eight["x_gen"] and any(r[0][0] for r in one["x_gen"])  # some text was generated
    for task in ("x_ll", "x_roll", "x_mc"):  # log-likelihoods, and whether each target is the greedy one
        assert numbers(eight[task]) == pytest.approx(numbers(one[task]), rel=1e-4), task


def numbers(nested) -> list[float]:
    """The numbers of nested lists and tuples, in order."""
    if isinstance(nested, (list, tuple)):
        return [x for item in nested for x in numbers(item)]
    return [float(nested)]
