"""The configuration of a GPT exported from github.com nonlinear-queries (export.py --format=hf): its model's
fields, resolved (the softmax scale, MLP width, rotary dims and pre-projection width as numbers)."""

from transformers import PretrainedConfig


class NLQConfig(PretrainedConfig):
    model_type = "nlq_gpt"

    def __init__(
        self,
        vocab_size=50304,
        block_size=1024,
        n_layer=12,
        n_head=12,
        n_embd=768,
        n_kv_head=12,
        bias=False,
        query_mode="linear",
        query_hidden=384,
        scale=0.125,
        mlp_hidden=3072,
        activation="gelu",
        pos_embedding="learned",
        rotary_dims=0,
        rope_base=10000.0,
        parallel_residual=False,
        norm_eps=1e-5,
        preproj_hidden=0,
        content_skip=False,
        tie_word_embeddings=True,
        use_cache=True,
        **kwargs,
    ):
        self.vocab_size, self.block_size, self.n_layer, self.n_head, self.n_embd = (
            vocab_size, block_size, n_layer, n_head, n_embd,
        )  # fmt: skip
        self.n_kv_head, self.bias, self.query_mode, self.query_hidden, self.scale = (
            n_kv_head, bias, query_mode, query_hidden, scale,
        )  # fmt: skip
        self.mlp_hidden, self.activation, self.pos_embedding, self.rotary_dims, self.rope_base = (
            mlp_hidden, activation, pos_embedding, rotary_dims, rope_base,
        )  # fmt: skip
        self.parallel_residual, self.norm_eps, self.preproj_hidden, self.content_skip = (
            parallel_residual, norm_eps, preproj_hidden, content_skip,
        )  # fmt: skip
        self.use_cache = use_cache  # keys and values kept between generation steps
        # The names tools look for (lm-eval's context length, generation's vocabulary, ...).
        self.max_position_embeddings, self.hidden_size = block_size, n_embd
        self.num_attention_heads, self.num_hidden_layers = n_head, n_layer
        self.num_key_value_heads, self.head_dim = n_kv_head, n_embd // n_head
        super().__init__(tie_word_embeddings=tie_word_embeddings, **kwargs)
