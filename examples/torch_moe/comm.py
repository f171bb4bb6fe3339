"""Expert-parallel communication: the all-to-all of token rows, with and without a process group.

Every all-to-all is issued asynchronously and returns a `Ticket`; the caller waits on the ticket
before it reads the rows. The eager variant waits at once, the overlap variant computes the
other microbatch first. The backward of a dispatch is the reverse all-to-all (synchronous).
"""

import torch
import torch.distributed as dist


class Ticket:
    """An all-to-all in flight: its output tensor, its work handle and the input it reads."""

    def __init__(self) -> None:
        self.output = None
        self.work = None
        self.source = None

    def wait(self) -> torch.Tensor:
        """Blocks until the rows have arrived and returns them."""
        if self.work is not None:
            self.work.wait()
            self.work = None
        self.source = None
        return self.output


class _AsyncAllToAll(torch.autograd.Function):
    """all_to_all_single issued with async_op=True; its backward sends the gradients back."""

    @staticmethod
    def forward(ctx, rows, output_splits, input_splits, ticket):
        ctx.output_splits, ctx.input_splits = output_splits, input_splits
        rows = rows.contiguous()
        output = rows.new_empty((sum(output_splits),) + tuple(rows.shape[1:]))
        ticket.work = dist.all_to_all_single(
            output, rows, output_splits, input_splits, async_op=True
        )
        ticket.source = rows  # kept alive until the rows have left
        return output

    @staticmethod
    def backward(ctx, grad_output):
        grad_output = grad_output.contiguous()
        grad_rows = grad_output.new_empty((sum(ctx.input_splits),) + tuple(grad_output.shape[1:]))
        dist.all_to_all_single(grad_rows, grad_output, ctx.input_splits, ctx.output_splits)
        return grad_rows, None, None, None


class ExpertComm:
    """The EP group of this rank: world size 1 needs no process group (all-to-alls are copies)."""

    def __init__(self, rank: int, world: int, device: torch.device) -> None:
        self.rank, self.world, self.device = rank, world, device

    def exchange_counts(self, counts: torch.Tensor) -> torch.Tensor:
        """Sends this rank's per-expert row counts (E,) to the experts' owners.

        Returns a (world, E / world) tensor: row s holds how many rows rank s sends to each of
        this rank's experts.
        """
        if self.world == 1:
            return counts.view(1, -1).clone()
        received = torch.empty_like(counts)
        dist.all_to_all_single(received, counts.contiguous())
        return received.view(self.world, -1)

    def all_to_all(self, rows: torch.Tensor, output_splits: list, input_splits: list) -> Ticket:
        """Starts sending input_splits[r] rows to rank r and receiving output_splits[r] from it."""
        ticket = Ticket()
        if self.world == 1:
            ticket.output = rows.view_as(rows)
            return ticket
        ticket.output = _AsyncAllToAll.apply(rows, output_splits, input_splits, ticket)
        return ticket

    def all_reduce_mean(self, flat: torch.Tensor) -> None:
        """Sums `flat` over the ranks and divides by the world size, in place."""
        if self.world > 1:
            dist.all_reduce(flat)
            flat.div_(self.world)

    def all_reduce_sum(self, flat: torch.Tensor) -> None:
        """Sums `flat` over the ranks, in place."""
        if self.world > 1:
            dist.all_reduce(flat)
