"""Trains a small MoE GPT with expert parallelism in plain PyTorch, one process per rank.

Run it under `bitparity run` (see README.md), under torchrun, or alone (WORLD_SIZE 1). The
recipe is a bitparity recipe (TOML) named by $BITPARITY_RECIPE or --recipe. Variants:
eager, checkpoint and overlap must train bit-identically; wrong must not.
"""

import argparse
import datetime
import os
import sys
import time
import tomllib

import torch
import torch.distributed as dist

from comm import ExpertComm
from data import microbatch_tokens, transition_table
from model import ModelConfig, MoEGPT, initialize, model_steps, run_through

try:
    import bitparity
except ImportError:
    sys.path.insert(
        0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python")
    )
    import bitparity

VARIANTS = ("eager", "checkpoint", "overlap", "wrong")
WRONG_LAYER = 1  # the layer whose combine the wrong variant changes

# Recipe keys this program does not implement: (table, key, the only value it accepts).
UNSUPPORTED = (
    ("model", "mtp_layers", 0),
    ("model", "dropout", 0),
    ("model", "attention_dropout", 0),
    ("model", "mhc_streams", 0),
    ("model", "dispatcher", "alltoall"),
    ("parallel", "pp", 1),
    ("parallel", "vpp", 1),
    ("data", "min_length", 0),
    ("train", "warmup_iterations", 0),
    ("train", "lr_schedule", "constant"),
    ("train", "weight_decay", 0),
    ("recompute", "granularity", "none"),
)

TRAIN_DEFAULTS = {
    "micro_batch": 2,
    "global_batch": 8,
    "iterations": 10,
    "seed": 1234,
    "lr": 0.003,
    "adam_beta1": 0.9,
    "adam_beta2": 0.95,
    "adam_eps": 1e-8,
    "clip_grad": 1.0,
}


def parse_arguments():
    """The command line: --variant, --recipe, --save-params."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument(
        "--variant",
        choices=VARIANTS,
        default="eager",
        help="how a step runs (README.md): eager, checkpoint, overlap, or the deliberately "
        "different wrong (default: eager)",
    )
    parser.add_argument(
        "--recipe",
        default=os.environ.get("BITPARITY_RECIPE"),
        help="the recipe (TOML); default: $BITPARITY_RECIPE",
    )
    parser.add_argument(
        "--save-params",
        metavar="PATH",
        help="torch.save the final parameters and the losses; {rank} in PATH is the rank, "
        "else .rank<r> is appended",
    )
    arguments = parser.parse_args()
    if not arguments.recipe:
        parser.error("no recipe: set BITPARITY_RECIPE or pass --recipe PATH")
    os.environ.setdefault("BITPARITY_RECIPE", arguments.recipe)  # the recorder reads it too
    return arguments


def load_recipe(path: str) -> dict:
    """Reads the recipe and refuses the keys this program does not implement."""
    with open(path, "rb") as file:
        recipe = tomllib.load(file)
    for table, key, accepted in UNSUPPORTED:
        value = recipe.get(table, {}).get(key, accepted)
        if value != accepted:
            sys.exit(
                f"{path}: [{table}] {key} = {value!r} is not supported here ({accepted!r} only)"
            )
    precision = recipe.get("precision", {}).get("recipe", "bf16")
    if precision != "fp32":
        sys.exit(f'{path}: this example trains in fp32 only; set [precision] recipe = "fp32"')
    return recipe


def model_config(recipe: dict) -> ModelConfig:
    """The [model] table as a ModelConfig (unknown keys ignored, missing ones defaulted)."""
    fields = ModelConfig.__dataclass_fields__
    return ModelConfig(**{k: v for k, v in recipe.get("model", {}).items() if k in fields})


def train_config(recipe: dict) -> dict:
    """The [train] keys with this program's defaults."""
    table = recipe.get("train", {})
    return {key: table.get(key, default) for key, default in TRAIN_DEFAULTS.items()}


def start_group(parallel: dict):
    """Joins the process group (gloo, or nccl on cuda); returns (rank, world, device)."""
    rank = int(os.environ.get("RANK", "0"))
    world = int(os.environ.get("WORLD_SIZE", "1"))
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    expected = parallel.get("ep", world)
    if expected != world:
        sys.exit(f"WORLD_SIZE {world} differs from the recipe's [parallel] ep = {expected}")
    device = torch.device("cpu")
    if parallel.get("device", "cpu") == "cuda":
        device = torch.device("cuda", local_rank)
        torch.cuda.set_device(device)
    if world > 1:
        timeout = datetime.timedelta(seconds=parallel.get("timeout_s", 300))
        backend = "nccl" if device.type == "cuda" else "gloo"
        dist.init_process_group(backend, rank=rank, world_size=world, timeout=timeout)
    return rank, world, device


def microbatch_data(table, train, rank, iteration, microbatch, config, device):
    """The tokens of one microbatch of this rank, on the device."""
    inputs, targets = microbatch_tokens(
        table, train["seed"], iteration, rank, microbatch, train["micro_batch"], config.seq_len
    )
    return inputs.to(device), targets.to(device)


def train_sequential(context, iteration, batches, checkpoint):
    """Eager, checkpoint and wrong: forward and backward of each microbatch in turn."""
    model, comm, rec = context["model"], context["comm"], context["rec"]
    losses = []
    for m, (inputs, targets) in enumerate(batches):
        with rec.microbatch(iteration, m):
            terms = run_through(model_steps(model, inputs, targets, comm, checkpoint))
            (terms[0] / len(batches)).backward()
        losses.append(tuple(term.detach() for term in terms))
    return losses


def forward_interleaved(context, iteration, pair):
    """Forwards of several microbatches taking turns at each all-to-all.

    A microbatch issues its all-to-all and yields; the next one computes until its own
    all-to-all; only then does the first wait for its rows. pair: [(index, inputs, targets)].
    """
    model, comm, rec = context["model"], context["comm"], context["rec"]
    steps = [model_steps(model, inputs, targets, comm) for _, inputs, targets in pair]
    results = [None] * len(pair)
    pending = list(range(len(pair)))
    while pending:
        for i in list(pending):
            with rec.microbatch(iteration, pair[i][0]):
                try:
                    next(steps[i])
                except StopIteration as stop:
                    results[i] = stop.value
                    pending.remove(i)
    return results


def train_overlap(context, iteration, batches):
    """Overlap: microbatches in pairs, forwards interleaved, backwards in eager's order."""
    rec = context["rec"]
    losses = []
    for first in range(0, len(batches), 2):
        pair = [(m, *batches[m]) for m in range(first, min(first + 2, len(batches)))]
        results = forward_interleaved(context, iteration, pair)
        for (m, _, _), terms in zip(pair, results, strict=True):
            with rec.microbatch(iteration, m):
                (terms[0] / len(batches)).backward()
            losses.append(tuple(term.detach() for term in terms))
    return losses


def reduce_gradients(model: MoEGPT, comm: ExpertComm) -> None:
    """Averages replicated gradients over the ranks (one flat fp32 all-reduce); experts / world."""
    replicated = model.replicated_parameters()
    for parameter in model.parameters():
        if parameter.grad is None:
            parameter.grad = torch.zeros_like(parameter)
    flat = torch.cat([p.grad.reshape(-1) for p in replicated])
    comm.all_reduce_mean(flat)
    offset = 0
    for parameter in replicated:
        count = parameter.numel()
        parameter.grad.copy_(flat[offset : offset + count].view_as(parameter))
        offset += count
    for parameter in model.expert_parameters():
        parameter.grad.div_(comm.world)


def clip_gradients(model: MoEGPT, comm: ExpertComm, max_norm: float) -> torch.Tensor:
    """Clips all gradients by their global norm (replicated once, every rank's experts).

    Returns the norm before clipping, the same on every rank.
    """
    replicated = [p.grad for p in model.replicated_parameters()]
    experts = [p.grad for p in model.expert_parameters()]
    replicated_norm = torch.nn.utils.get_total_norm(replicated, foreach=False)
    expert_square = replicated_norm.new_zeros(1)
    if experts:
        expert_square += torch.nn.utils.get_total_norm(experts, foreach=False).square()
    comm.all_reduce_sum(expert_square)
    total = (replicated_norm.square() + expert_square[0]).sqrt()
    if max_norm > 0:
        torch.nn.utils.clip_grads_with_norm_(model.parameters(), max_norm, total, foreach=False)
    return total


def mean_losses(losses, comm: ExpertComm):
    """The iteration's loss, lm_loss and aux_loss: means over microbatches, then over ranks."""
    sums = torch.stack(losses[0])
    for terms in losses[1:]:
        sums = sums + torch.stack(terms)
    means = sums / len(losses)
    comm.all_reduce_mean(means)
    return means.cpu()


def save_parameters(path: str, model: MoEGPT, rank: int, history) -> None:
    """Writes {"params": name -> tensor, "losses": [per-iteration (loss, lm, aux)]}."""
    target = path.format(rank=rank) if "{rank}" in path else f"{path}.rank{rank}"
    params = {name: p.detach().cpu().clone() for name, p in model.named_parameters()}
    torch.save({"params": params, "losses": history}, target)


def build(recipe: dict, variant: str, rank: int, world: int, device):
    """The model (seeded, on the device) and its Adam optimizer."""
    config, train = model_config(recipe), train_config(recipe)
    if config.experts % world:
        sys.exit(f"[model] experts = {config.experts} is not a multiple of ep = {world}")
    wrong_layer = WRONG_LAYER if variant == "wrong" else -1
    if variant == "wrong" and not config.first_k_dense <= WRONG_LAYER < config.layers:
        sys.exit(f"--variant wrong changes the MoE of layer {WRONG_LAYER}, which this model lacks")
    model = MoEGPT(config, rank, world, wrong_layer)
    initialize(model, train["seed"])
    model.to(device)
    optimizer = torch.optim.Adam(
        model.parameters(),
        lr=train["lr"],
        betas=(train["adam_beta1"], train["adam_beta2"]),
        eps=train["adam_eps"],
        foreach=False,
    )
    return model, optimizer


def main() -> None:
    """Trains the recipe's iterations with the chosen variant and records them."""
    arguments = parse_arguments()
    recipe = load_recipe(arguments.recipe)
    rec = bitparity.Recorder.from_env()
    rank, world, device = start_group(recipe.get("parallel", {}))
    model, optimizer = build(recipe, arguments.variant, rank, world, device)
    config, train = model.config, train_config(recipe)
    per_iteration = train["global_batch"] // (train["micro_batch"] * world)
    if per_iteration < 1 or per_iteration * train["micro_batch"] * world != train["global_batch"]:
        sys.exit("[train] global_batch must be a multiple of micro_batch x ep")
    table = transition_table(
        train["seed"], config.vocab, recipe.get("data", {}).get("branching", 4)
    )
    comm = ExpertComm(rank, world, device)
    context = {"model": model, "comm": comm, "rec": rec}
    rec.probe_modules(model)
    history, started = [], time.perf_counter()
    for iteration in range(1, train["iterations"] + 1):
        batches = [
            microbatch_data(table, train, rank, iteration, m, config, device)
            for m in range(per_iteration)
        ]
        if arguments.variant == "overlap":
            losses = train_overlap(context, iteration, batches)
        else:
            losses = train_sequential(
                context, iteration, batches, arguments.variant == "checkpoint"
            )
        reduce_gradients(model, comm)
        grad_norm = clip_gradients(model, comm, train["clip_grad"])
        means = mean_losses(losses, comm)
        for name, value in zip(("loss", "lm_loss", "aux_loss"), means, strict=True):
            rec.loss(iteration, name, value)
        history.append(means)
        rec.step(iteration, model, optimizer, grad_norm=grad_norm)
        optimizer.zero_grad(set_to_none=True)
        if rec.should_stop(iteration):
            break
    elapsed = time.perf_counter() - started
    print(
        f"rank {rank}: variant {arguments.variant}, {iteration} iterations, "
        f"loss {history[-1][0].item():.6f}, {elapsed:.2f} s",
        flush=True,
    )
    rec.finish()
    if arguments.save_params:
        save_parameters(arguments.save_params, model, rank, history)
    if world > 1:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
