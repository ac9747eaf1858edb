"""Decoding that is not launch-bound: a static KV cache whose one-token step is captured once as a CUDA graph
and replayed, so a token costs the kernels' time, not Python's launching of them one by one. The 'compiled'
path also fuses the step's kernels (torch.compile) before capturing it: a replayed graph still pays a few
microseconds per kernel, and a query MLP adds some six small kernels a layer to linear's thirteen.

GPT.generate's growing KVCache is the other path: on a CPU, where nothing is captured and a static cache would
attend to every slot, the Decoder uses it; on a GPU it captures; where capture fails it decodes the static
cache eagerly, and where compiling fails it captures the eager step, and says so (Decoder.why). For a given
model, dtype and tokens, every path computes the same function: greedy decoding gives the same tokens
(tests/test_decoding.py, through the static cache and the compiled step on a CPU).
"""

import time

import torch

from model import GPT, KVCache, StaticKVCache, check_sampling, next_token

PATHS = ("auto", "compiled", "graph", "static", "cache")  # auto: graph on CUDA, cache elsewhere


class Decoder:
    """A model's decoding of `batch` streams. path: 'graph' (static cache, one-token step and each prompt length
    seen before replayed as CUDA graphs), 'compiled' (graph's, the one-token step compiled first; on a CPU,
    compiled and run as it is), 'static' (the static cache, eager: what a graph replays), 'cache'
    (GPT.generate's growing cache), or 'auto'. self.path is the one in use, self.why why it differs from what
    was asked."""

    def __init__(self, model: GPT, batch: int = 1, path: str = "auto"):
        if path not in PATHS:
            raise ValueError(f"path={path!r}: one of {', '.join(PATHS)}")
        self.model, self.batch = model, batch
        self.device = model.lm_head.weight.device
        cuda = self.device.type == "cuda"
        self.path, self.why = ("graph" if cuda else "cache") if path == "auto" else path, None
        if self.path == "graph" and not cuda:
            self.path, self.why = "static", f"CUDA graphs need a GPU, not {self.device.type}: the static cache, eager"
        self.cache = None
        # Prompts of every length are prefilled eagerly (or as graphs): compiling each length would cost more
        # than it saves once per generate. dynamic=False: one step shape. Decoders of models of one structure
        # share a compiled step (the weights and the cache are its inputs).
        self.one_token = self.forward
        if self.path == "compiled":
            self.one_token = torch.compile(self.forward, fullgraph=True, dynamic=False)
        self.tried_compile = False
        self.graphs = {}  # T -> (graph, input ids buffer, logits buffer): T = 1 is the decode step
        self.seen = set()  # prompt lengths prefilled once: a second one is captured
        self.setup_s = 0.0  # seconds spent compiling the step and capturing graphs (a rate leaves them out)

    @property
    def graphed(self) -> bool:
        return self.path == "graph" or self.path == "compiled" and self.device.type == "cuda"

    @property
    def label(self) -> str:
        """The path in words, as bench.py and the latency table print it."""
        if self.path == "compiled":
            return "static KV cache, compiled step" + (", CUDA graphs" if self.graphed else "")
        return {"graph": "static KV cache, CUDA graphs", "static": "static KV cache, eager", "cache": "KV cache"}[
            self.path
        ]

    @property
    def setup_words(self) -> str:
        """What setup_s timed, in words."""
        parts = ["compiling the step"] * self.tried_compile + ["capturing CUDA graphs"] * bool(self.graphs)
        return " and ".join(parts) or "nothing"

    def generate(self, idx, max_new_tokens: int, temperature=1.0, top_k=None, generator=None, vocab_limit=None):
        """GPT.generate's contract: idx (batch, T) continued by max_new_tokens tokens; when the context is
        full, the last block_size tokens are prefilled again (recomputation on the cropped context)."""
        check_sampling(temperature, top_k)
        if max_new_tokens == 0:
            return idx
        bs = self.model.config.block_size
        with torch.no_grad():
            logits, pos = self.prefill(idx[:, -bs:]), min(idx.size(1), bs)
            for n in range(max_new_tokens):
                nxt = next_token(logits, temperature, top_k, generator, vocab_limit)
                idx = torch.cat((idx, nxt), dim=1)
                if n == max_new_tokens - 1:
                    break
                if pos == bs:  # every slot holds a position: the last block_size tokens, prefilled again
                    logits = self.prefill(idx[:, -bs:])
                else:
                    logits, pos = self.step(nxt), pos + 1
        return idx

    def prefill(self, idx) -> torch.Tensor:
        """Logits (batch, 1, vocab) of idx's last position, the cache holding idx from position 0."""
        if self.cache is None:
            kind = KVCache if self.path == "cache" else StaticKVCache
            self.cache = kind(self.model.config, self.batch, self.device, self.model.lm_head.weight.dtype)
        self.cache.reset()
        T = idx.size(1)
        if T == 1:  # a one-token prompt at position 0 is a step: its graph (and compiled step) serve both
            return self.step(idx)
        if self.graphed and (T in self.graphs or T in self.seen):
            return self.replay(T, idx)
        self.seen.add(T)
        return self.forward(idx)

    def step(self, ids) -> torch.Tensor:
        """Logits (batch, 1, vocab) of one new token per stream, at the cache's position."""
        if self.path == "compiled" and not self.tried_compile:
            self.compile(ids)
        if self.graphed:
            return self.replay(1, ids)
        return self.one_token(ids)

    def forward(self, ids) -> torch.Tensor:
        """The model's logits at the last of ids, continuing the cache (the step a graph captures)."""
        return self.model(ids, cache=self.cache, last_only=True)[0]

    def compile(self, ids) -> None:
        """Compile the one-token step by running it once, the cache's position put back after; where compiling
        fails, the eager step takes its place (captured on a GPU) and self.why says why."""
        start, t0 = self.cache.pos.clone(), time.perf_counter()
        try:  # past dynamo's limit of recompilations it would run the step eagerly, and this label would lie
            with torch._dynamo.config.patch(fail_on_recompile_limit_hit=True):
                self.one_token(ids)
        except Exception as e:  # noqa: BLE001 (no C compiler, no Triton, an op inductor refuses: any is a fallback)
            self.one_token = self.forward
            self.path = "graph" if self.device.type == "cuda" else "static"
            self.why = f"torch.compile failed ({type(e).__name__}: {first_line(e)}): {self.label}"
        self.cache.pos.copy_(start)
        self.tried_compile = True
        self.setup_s += self.elapsed(t0)

    def elapsed(self, t0: float) -> float:
        """Seconds since t0, the device's queued work included."""
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        return time.perf_counter() - t0

    def replay(self, T: int, ids) -> torch.Tensor:
        if T not in self.graphs:
            t0 = time.perf_counter()
            try:
                self.graphs[T] = self.capture(T)
            except RuntimeError as e:  # capture refused (an op that syncs, an allocator limit): eager from here
                self.path, self.why = "static", f"CUDA graph capture failed ({first_line(e)}): eager"
                self.one_token = self.forward
                return self.forward(ids)
            finally:
                self.setup_s += self.elapsed(t0)
        graph, inputs, logits = self.graphs[T]
        inputs.copy_(ids)
        graph.replay()
        return logits

    def capture(self, T: int):
        """A CUDA graph of the model's step on T tokens at the cache's position (which it advances by T), the
        compiled step for T = 1 on the compiled path: warmed up on a side stream first, the cache's position put
        back after, as capture runs nothing."""
        inputs = torch.zeros(self.batch, T, dtype=torch.long, device=self.device)
        run = self.one_token if T == 1 else self.forward
        start = self.cache.pos.clone()
        stream = torch.cuda.Stream(self.device)
        stream.wait_stream(torch.cuda.current_stream(self.device))
        with torch.cuda.stream(stream):
            for _ in range(2):
                run(inputs)
                self.cache.pos.copy_(start)
        torch.cuda.current_stream(self.device).wait_stream(stream)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            logits = run(inputs)
        return graph, inputs, logits


def first_line(e: Exception) -> str:
    return (str(e).strip().splitlines() or [""])[0][:300]
