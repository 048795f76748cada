"""The book's model in plain PyTorch, the one definition of it here: the book study's loop (torch_loop.py) trains it,
the benchmark (experiments/bench/torch_adder.py) times it.

Written from the book's description, not translated from miiii: `AdditionTransformer` (token and learned position
embeddings of width 32, two pre-LN blocks [LayerNorm -> one causal head with bias-free Q/K/V/O -> residual]
[LayerNorm -> ReLU FFN 32 -> 64 -> 32 with biases -> residual], a final LayerNorm and a head tied to the token
embedding; vocabulary 14, 13 positions: 17,760 parameters) with PyTorch's default initialisation. `miiii_params`
and `torch_state` convert its parameters to and from miiii's parameter tree, so that both loops can start alike.
PyTorch is an optional extra (`pip install -e .[bench]`); nothing in miiii imports this.
"""

from __future__ import annotations

import math

import numpy as np
import torch
from torch import nn


class Block(nn.Module):
    def __init__(self, d: int, d_ff: int):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.q, self.k, self.v, self.o = (nn.Linear(d, d, bias=False) for _ in range(4))
        self.ffn = nn.Sequential(nn.Linear(d, d_ff), nn.ReLU(), nn.Linear(d_ff, d))

    def forward(self, x):  # x (b, t, d)
        h = self.ln1(x)
        t = x.shape[1]
        scores = self.q(h) @ self.k(h).transpose(1, 2) / math.sqrt(x.shape[-1])  # (b, t, t)
        scores = scores.masked_fill(torch.ones(t, t, dtype=torch.bool, device=x.device).triu(1), float("-inf"))
        x = x + self.o(torch.softmax(scores, -1) @ self.v(h))
        return x + self.ffn(self.ln2(x))


class AdditionTransformer(nn.Module):
    def __init__(self, vocab: int = 14, d: int = 32, d_ff: int = 64, n_layers: int = 2, max_seq_len: int = 13):
        super().__init__()
        self.token_emb, self.pos_emb = nn.Embedding(vocab, d), nn.Embedding(max_seq_len, d)
        self.blocks = nn.ModuleList(Block(d, d_ff) for _ in range(n_layers))
        self.ln_f = nn.LayerNorm(d)

    def forward(self, idx):  # idx (b, t) -> logits (b, t, vocab)
        x = self.token_emb(idx) + self.pos_emb(torch.arange(idx.shape[1], device=idx.device))
        for block in self.blocks:
            x = block(x)
        return self.ln_f(x) @ self.token_emb.weight.T  # the head is tied to the token embedding


# nn.Linear's weight is (out, in), applied as x @ W.T; miiii's are (in, out), attention's with a head axis first
_LINEAR = {"attn/W_Q": "q", "attn/W_K": "k", "attn/W_V": "v", "attn/W_O": "o", "mlp/W_in": "ffn.0",
           "mlp/W_out": "ffn.2"}
_VECTOR = {"mlp/b_in": "ffn.0.bias", "mlp/b_out": "ffn.2.bias", "ln1/scale": "ln1.weight", "ln1/bias": "ln1.bias",
           "ln2/scale": "ln2.weight", "ln2/bias": "ln2.bias"}


def miiii_params(model: AdditionTransformer) -> dict:
    """The model's parameters as miiii's parameter tree (numpy float32), so that both loops start alike."""
    sd = {k: v.detach().numpy().copy() for k, v in model.state_dict().items()}
    tree = dict(W_E=sd["token_emb.weight"], W_pos=sd["pos_emb.weight"],
                ln_final=dict(scale=sd["ln_f.weight"], bias=sd["ln_f.bias"]))
    for i in range(len(model.blocks)):
        block = tree[f"blocks_{i}"] = {"attn": {}, "mlp": {}, "ln1": {}, "ln2": {}}
        for name, mod in _LINEAR.items():
            w = sd[f"blocks.{i}.{mod}.weight"].T
            block[name.split("/")[0]][name.split("/")[1]] = w[None] if name.startswith("attn") else w
        for name, key in _VECTOR.items():
            block[name.split("/")[0]][name.split("/")[1]] = sd[f"blocks.{i}.{key}"]
    return tree


def torch_state(tree: dict) -> dict:
    """miiii's parameter tree -> this model's state_dict (the inverse of miiii_params)."""
    sd = {"token_emb.weight": tree["W_E"], "pos_emb.weight": tree["W_pos"], "ln_f.weight": tree["ln_final"]["scale"],
          "ln_f.bias": tree["ln_final"]["bias"]}
    for i in range(sum(k.startswith("blocks_") for k in tree)):
        block = tree[f"blocks_{i}"]
        for name, mod in _LINEAR.items():
            w = np.asarray(block[name.split("/")[0]][name.split("/")[1]])
            sd[f"blocks.{i}.{mod}.weight"] = (w[0] if name.startswith("attn") else w).T
        for name, key in _VECTOR.items():
            sd[f"blocks.{i}.{key}"] = block[name.split("/")[0]][name.split("/")[1]]
    return {k: torch.as_tensor(np.ascontiguousarray(v, np.float32)) for k, v in sd.items()}
