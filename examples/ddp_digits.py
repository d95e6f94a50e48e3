"""Train the digits CNN data-parallel on several processes with corenn.distributed (MPI).

Each rank holds a replica of the network from examples/train_digits.py, reads its own
share of every epoch through a DistributedSampler, and DistributedDataParallel averages
the gradients during backward, so the replicas stay identical. Rank 0 shows the progress
bar; the test accuracy is counted over the ranks (an evaluation sampler with pad=False,
so no image is counted twice) and agrees on every rank.

Run (from the repository root)::

    pip install -e ".[examples]" -e "plugins/distributed[mpi]"
    python -m corenn.distributed.run --nproc-per-node 2 examples/ddp_digits.py
    python -m corenn.distributed.run --nproc-per-node 2 examples/ddp_digits.py --epochs 3
    mpiexec -n 2 python examples/ddp_digits.py            # mpiexec directly works too
"""
from __future__ import annotations

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import corenn  # noqa: E402
import corenn.distributed as dist  # noqa: E402
import corenn.nn.functional as F  # noqa: E402
from corenn.nn.parallel import DistributedDataParallel as DDP  # noqa: E402
from corenn.utils.data import DataLoader, DistributedSampler, TensorDataset  # noqa: E402
from train_digits import build_model, load_digits_split  # noqa: E402


@corenn.no_grad()
def accuracy_over_ranks(model, loader) -> float:
    """Correct / total over every rank's share of the test set (each image counted once)."""
    model.eval()
    counts = corenn.zeros(2, dtype=corenn.float64)
    for images, labels in loader:
        counts[0] += (model(images).argmax(dim=1) == labels).sum().item()
        counts[1] += labels.shape[0]
    dist.all_reduce(counts)
    return (counts[0] / counts[1]).item()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--epochs", type=int, default=8)
    parser.add_argument("--batch-size", type=int, default=32, help="per rank")
    parser.add_argument("--lr", type=float, default=1e-2)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    if args.epochs < 1:
        parser.error(f"--epochs must be at least 1, got {args.epochs}")

    dist.init_process_group("mpi")
    rank, world = dist.get_rank(), dist.get_world_size()
    from tqdm import tqdm

    x_train, x_test, y_train, y_test = load_digits_split(args.seed)
    train_set = TensorDataset(corenn.from_numpy(x_train), corenn.from_numpy(y_train))
    test_set = TensorDataset(corenn.from_numpy(x_test), corenn.from_numpy(y_test))
    train_sampler = DistributedSampler(train_set, shuffle=True, seed=args.seed)
    train_loader = DataLoader(train_set, batch_size=args.batch_size, sampler=train_sampler)
    test_loader = DataLoader(test_set, batch_size=256, sampler=DistributedSampler(test_set, shuffle=False, pad=False))

    corenn.manual_seed(args.seed + rank)   # DDP broadcasts rank 0's weights, whatever each rank drew
    model = DDP(build_model())
    optimizer = corenn.optim.Adam(model.parameters(), lr=args.lr)
    if rank == 0:
        print(f"digits on {world} ranks: {len(train_sampler)} training images per rank per epoch, "
              f"batch {args.batch_size} per rank ({args.batch_size * world} in all)", flush=True)
    start = time.perf_counter()
    for epoch in range(1, args.epochs + 1):
        train_sampler.set_epoch(epoch)
        model.train()
        running, seen = 0.0, 0
        bar = tqdm(train_loader, desc=f"epoch {epoch:>2}/{args.epochs}", unit="batch", leave=False,
                   disable=rank != 0, file=sys.stdout)
        for images, labels in bar:
            loss = F.cross_entropy(model(images), labels)
            optimizer.zero_grad()
            loss.backward()                      # gradients averaged over the ranks here
            optimizer.step()
            running += loss.item() * labels.shape[0]
            seen += labels.shape[0]
            bar.set_postfix(loss=f"{running / seen:.4f}", refresh=False)
        test_accuracy = accuracy_over_ranks(model.module, test_loader)
        if rank == 0:
            print(f"epoch {epoch:>2}/{args.epochs}  loss {running / seen:.4f} (rank 0's share)  "
                  f"test accuracy {100 * test_accuracy:.2f}%", flush=True)
    # The replicas never drifted apart: every rank holds rank 0's weights.
    weights = [None] * world
    dist.all_gather_object(weights, [p.detach().numpy() for p in model.parameters()])
    same = all(all((a == b).all() for a, b in zip(weights[0], other)) for other in weights)
    if rank == 0:
        print(f"trained in {time.perf_counter() - start:.1f} s on {world} ranks; replicas identical: {same}",
              flush=True)
    dist.destroy_process_group()
    if not same:
        raise SystemExit("the replicas differ")


if __name__ == "__main__":
    main()
