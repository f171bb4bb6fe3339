"""Deterministic synthetic token data: samples of a random Markov chain.

The chain's transition table depends only on the seed; each microbatch's samples depend only on
(seed, iteration, rank, microbatch), so every rank draws its own data-parallel shard and every
variant of the program sees the same tokens.
"""

import torch

_MASK64 = (1 << 64) - 1


def mix_seed(*parts: int) -> int:
    """Combines integers into one 63-bit seed with SplitMix64 steps (no collisions in practice)."""
    state = 0x9E3779B97F4A7C15
    for part in parts:
        state = (state + (part & _MASK64) + 0x9E3779B97F4A7C15) & _MASK64
        z = state
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _MASK64
        state = z ^ (z >> 31)
    return state >> 1


def transition_table(seed: int, vocab: int, branching: int) -> torch.Tensor:
    """The chain's successors: row t lists the `branching` tokens that may follow token t."""
    generator = torch.Generator().manual_seed(mix_seed(seed, 0xDA7A))
    return torch.randint(0, vocab, (vocab, branching), generator=generator)


def microbatch_tokens(
    table: torch.Tensor,
    seed: int,
    iteration: int,
    rank: int,
    microbatch: int,
    samples: int,
    seq_len: int,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The (inputs, targets) of one microbatch, each of shape (samples, seq_len), int64."""
    generator = torch.Generator().manual_seed(mix_seed(seed, iteration, rank, microbatch))
    vocab, branching = table.shape
    token = torch.randint(0, vocab, (samples,), generator=generator)
    choices = torch.randint(0, branching, (samples, seq_len), generator=generator)
    sequence = [token]
    for position in range(seq_len):
        token = table[token, choices[:, position]]
        sequence.append(token)
    tokens = torch.stack(sequence, dim=1)
    return tokens[:, :-1].contiguous(), tokens[:, 1:].contiguous()
