"""A small MoE GPT in plain PyTorch whose layers run as generators.

A decoder layer's forward is a generator (`layer_steps`) that yields a `Ticket` each time it has
issued an all-to-all and waits on it when resumed. Driving one generator straight through is
the eager forward; driving two in turn overlaps one microbatch's all-to-all with the other's
compute. Either way the same modules are called on the same tensors, so forward hooks (probes)
see the same records.
"""

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from comm import ExpertComm
from data import mix_seed


@dataclass
class ModelConfig:
    """The [model] keys this program uses: names and defaults as in docs/recipe-keys.md."""

    layers: int = 3
    first_k_dense: int = 1
    hidden: int = 64
    heads: int = 4
    experts: int = 4
    topk: int = 2
    moe_ffn: int = 64
    ffn: int = 128
    vocab: int = 256
    seq_len: int = 64
    aux_loss_coeff: float = 0.01
    init_std: float = 0.02
    norm_eps: float = 1e-6
    rope_theta: float = 10000.0


class RMSNorm(nn.Module):
    """Root-mean-square norm with a learned scale."""

    def __init__(self, hidden: int, eps: float) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(hidden))

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def rotate(x, cos, sin):
    """Applies rotary position embedding to (batch, heads, seq, head_dim)."""
    half = x.shape[-1] // 2
    first, second = x[..., :half], x[..., half:]
    return torch.cat((first * cos - second * sin, second * cos + first * sin), dim=-1)


class Attention(nn.Module):
    """Causal self-attention with plain matmul and softmax (no fused kernels)."""

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.heads = config.heads
        self.qkv = nn.Linear(config.hidden, 3 * config.hidden, bias=False)
        self.out = nn.Linear(config.hidden, config.hidden, bias=False)
        head_dim = config.hidden // config.heads
        inverse = 1.0 / config.rope_theta ** (torch.arange(0, head_dim, 2).double() / head_dim)
        angles = torch.outer(torch.arange(config.seq_len).double(), inverse)
        self.register_buffer("cos", angles.cos().float(), persistent=False)
        self.register_buffer("sin", angles.sin().float(), persistent=False)
        mask = torch.ones(config.seq_len, config.seq_len, dtype=torch.bool).triu(1)
        self.register_buffer("mask", mask, persistent=False)

    def forward(self, x):
        batch, seq, hidden = x.shape
        q, k, v = self.qkv(x).view(batch, seq, 3, self.heads, -1).permute(2, 0, 3, 1, 4)
        cos, sin = self.cos[:seq], self.sin[:seq]
        q, k = rotate(q, cos, sin), rotate(k, cos, sin)
        scores = (q @ k.transpose(-2, -1)) / math.sqrt(q.shape[-1])
        scores = scores.masked_fill(self.mask[:seq, :seq], float("-inf"))
        context = torch.softmax(scores, dim=-1) @ v
        return self.out(context.transpose(1, 2).reshape(batch, seq, hidden))


class SwiGLU(nn.Module):
    """A SwiGLU MLP: the dense layers' MLP and each expert."""

    def __init__(self, hidden: int, ffn: int) -> None:
        super().__init__()
        self.gate_up = nn.Linear(hidden, 2 * ffn, bias=False)
        self.down = nn.Linear(ffn, hidden, bias=False)

    def forward(self, x):
        gate, up = self.gate_up(x).chunk(2, dim=-1)
        return self.down(F.silu(gate) * up)


class Router(nn.Module):
    """Top-k softmax router over all experts; returns (probs, top indices, top probs)."""

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.topk = config.topk
        self.weight = nn.Parameter(torch.empty(config.experts, config.hidden))

    def forward(self, x):
        probs = torch.softmax(F.linear(x, self.weight), dim=-1)
        top_probs, top_indices = torch.topk(probs, self.topk, dim=-1)
        return probs, top_indices, top_probs


class Combine(nn.Module):
    """The weighted sum of a token's k expert outputs, weights normalized over the top k.

    `wrong` normalizes after the sum instead of before: the same math, other rounding (a
    deliberate bit-parity bug; reversing the sum's order would change nothing for k = 2, since
    floating-point addition is commutative).
    """

    def __init__(self, wrong: bool = False) -> None:
        super().__init__()
        self.wrong = wrong

    def forward(self, expert_outputs, top_probs):
        total = top_probs.sum(-1, keepdim=True)
        if self.wrong:
            mixed = expert_outputs[:, 0] * top_probs[:, 0:1]
            for j in range(1, expert_outputs.shape[1]):
                mixed = mixed + expert_outputs[:, j] * top_probs[:, j : j + 1]
            return mixed / total
        weights = top_probs / total
        mixed = expert_outputs[:, 0] * weights[:, 0:1]
        for j in range(1, expert_outputs.shape[1]):
            mixed = mixed + expert_outputs[:, j] * weights[:, j : j + 1]
        return mixed


class MoE(nn.Module):
    """Router, this rank's experts (global indices [first, first + local)) and the combine."""

    def __init__(self, config: ModelConfig, ep_rank: int, ep: int, wrong: bool) -> None:
        super().__init__()
        self.experts_total, self.topk = config.experts, config.topk
        self.local = config.experts // ep
        self.first = ep_rank * self.local
        self.router = Router(config)
        self.experts = nn.ModuleList(
            SwiGLU(config.hidden, config.moe_ffn) for _ in range(self.local)
        )
        self.combine = Combine(wrong)


class DecoderLayer(nn.Module):
    """Pre-norm attention and MLP (dense SwiGLU or MoE), both with residuals."""

    def __init__(self, config, index: int, ep_rank: int, ep: int, wrong: bool) -> None:
        super().__init__()
        self.attn_norm = RMSNorm(config.hidden, config.norm_eps)
        self.attention = Attention(config)
        self.mlp_norm = RMSNorm(config.hidden, config.norm_eps)
        if index < config.first_k_dense:
            self.mlp, self.moe = SwiGLU(config.hidden, config.ffn), None
        else:
            self.mlp, self.moe = None, MoE(config, ep_rank, ep, wrong)


class MoEGPT(nn.Module):
    """Embedding, decoder layers, final norm and LM head; the experts sharded over EP ranks."""

    def __init__(self, config: ModelConfig, ep_rank: int, ep: int, wrong_layer: int = -1):
        super().__init__()
        self.config = config
        self.embedding = nn.Embedding(config.vocab, config.hidden)
        self.layers = nn.ModuleList(
            DecoderLayer(config, i, ep_rank, ep, wrong=(i == wrong_layer))
            for i in range(config.layers)
        )
        self.final_norm = RMSNorm(config.hidden, config.norm_eps)
        self.lm_head = nn.Linear(config.hidden, config.vocab, bias=False)

    def expert_parameters(self):
        """The parameters this rank alone holds (its experts), in module order."""
        return [p for n, p in self.named_parameters() if ".experts." in n]

    def replicated_parameters(self):
        """The parameters every rank holds (all but the experts), in module order."""
        return [p for n, p in self.named_parameters() if ".experts." not in n]


def initialize(model: MoEGPT, seed: int) -> None:
    """Seeded weights: one generator for the replicated ones, one per (layer, global expert)."""
    config = model.config
    std, out_std = config.init_std, config.init_std / math.sqrt(2 * config.layers)
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if ".experts." in name or name.endswith("norm.weight"):
                continue
            scale = out_std if name.endswith(("out.weight", "down.weight")) else std
            parameter.copy_(torch.randn(parameter.shape, generator=generator) * scale)
        for index, layer in enumerate(model.layers):
            if layer.moe is None:
                continue
            for local, expert in enumerate(layer.moe.experts):
                expert_seed = mix_seed(seed, index, layer.moe.first + local)
                expert_generator = torch.Generator().manual_seed(expert_seed)
                for name, parameter in expert.named_parameters():
                    scale = out_std if name.startswith("down") else std
                    noise = torch.randn(parameter.shape, generator=expert_generator)
                    parameter.copy_(noise * scale)


def load_balancing_loss(probs, top_indices, experts: int):
    """Switch-style aux loss: experts * sum_e (share of assignments to e) * (mean prob of e)."""
    counts = torch.bincount(top_indices.reshape(-1), minlength=experts)
    share = counts.to(probs.dtype) / top_indices.numel()
    return experts * (share * probs.mean(0)).sum()


def run_local_experts(moe: MoE, received, received_counts):
    """Runs this rank's experts on the received rows (source-rank-major, expert-minor order).

    Rows are grouped per expert (sources in rank order), each expert runs once, and the outputs
    are put back in the received order for the return all-to-all.
    """
    counts = received_counts.tolist()
    starts, offset = [], 0
    for source_counts in counts:
        starts.append([])
        for count in source_counts:
            starts[-1].append(offset)
            offset += count
    groups, sizes = [], []
    for local in range(moe.local):
        pieces = [
            torch.arange(starts[s][local], starts[s][local] + counts[s][local])
            for s in range(len(counts))
        ]
        groups.append(torch.cat(pieces))
        sizes.append(int(groups[-1].numel()))
    permutation = torch.cat(groups).to(received.device)
    grouped = received.index_select(0, permutation).split(sizes)
    outputs = torch.cat([expert(rows) for expert, rows in zip(moe.experts, grouped, strict=True)])
    inverse = torch.empty_like(permutation)
    inverse[permutation] = torch.arange(permutation.numel(), device=permutation.device)
    return outputs.index_select(0, inverse)


def moe_steps(moe: MoE, x, comm: ExpertComm):
    """Generator: the MoE block on (tokens, hidden); yields at each all-to-all.

    Returns (output, aux loss). Rows are sent sorted by global expert (stable), so each rank's
    chunk is contiguous; the combine sums each token's k outputs in top-k order.
    """
    tokens, hidden = x.shape
    probs, top_indices, top_probs = moe.router(x)
    aux = load_balancing_loss(probs, top_indices, moe.experts_total)
    flat_experts = top_indices.reshape(-1)
    order = torch.argsort(flat_experts, stable=True)
    copies = x.unsqueeze(1).expand(tokens, moe.topk, hidden).reshape(tokens * moe.topk, hidden)
    rows = copies.index_select(0, order)  # a permutation: no duplicate indices in its backward
    counts = torch.bincount(flat_experts, minlength=moe.experts_total)
    received_counts = comm.exchange_counts(counts)
    send_splits = counts.view(comm.world, -1).sum(1).tolist()
    receive_splits = received_counts.sum(1).tolist()
    ticket = comm.all_to_all(rows, receive_splits, send_splits)
    yield ticket
    expert_outputs = run_local_experts(moe, ticket.wait(), received_counts)
    ticket = comm.all_to_all(expert_outputs, send_splits, receive_splits)
    yield ticket
    returned = ticket.wait()
    inverse = torch.empty_like(order)
    inverse[order] = torch.arange(order.numel(), device=order.device)
    per_token = returned.index_select(0, inverse).view(tokens, moe.topk, hidden)
    return moe.combine(per_token, top_probs), aux


def layer_steps(layer: DecoderLayer, x, comm: ExpertComm):
    """Generator: one decoder layer on (batch, seq, hidden); returns (output, aux loss)."""
    x = x + layer.attention(layer.attn_norm(x))
    normed = layer.mlp_norm(x)
    if layer.moe is None:
        return x + layer.mlp(normed), x.new_zeros(())
    batch, seq, hidden = normed.shape
    mixed, aux = yield from moe_steps(layer.moe, normed.reshape(batch * seq, hidden), comm)
    return x + mixed.view(batch, seq, hidden), aux


def run_through(steps):
    """Drives a generator to its end, waiting on every all-to-all at once; returns its value."""
    try:
        while True:
            next(steps)
    except StopIteration as stop:
        return stop.value


def layer_sync(layer: DecoderLayer, x, comm: ExpertComm):
    """One decoder layer without overlap (what the checkpoint variant recomputes)."""
    return run_through(layer_steps(layer, x, comm))


def model_steps(model: MoEGPT, inputs, targets, comm: ExpertComm, checkpoint: bool = False):
    """Generator: the whole forward and loss; returns (loss, lm loss, aux loss).

    With checkpoint, each layer runs under torch.utils.checkpoint (non-reentrant) and yields
    nothing: its all-to-alls are waited on at once.
    """
    x = model.embedding(inputs)
    aux_total = x.new_zeros(())
    for layer in model.layers:
        if checkpoint:
            x, aux = torch.utils.checkpoint.checkpoint(
                layer_sync, layer, x, comm, use_reentrant=False
            )
        else:
            x, aux = yield from layer_steps(layer, x, comm)
        aux_total = aux_total + aux
    logits = model.lm_head(model.final_norm(x))
    lm_loss = F.cross_entropy(logits.view(-1, logits.shape[-1]), targets.reshape(-1))
    aux_loss = model.config.aux_loss_coeff * aux_total
    return lm_loss + aux_loss, lm_loss, aux_loss
