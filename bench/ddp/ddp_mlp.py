#!/usr/bin/env python3
"""PyTorch DistributedDataParallel reference for concord's `--runtime process`.

Measures the wall time of one data-parallel training iteration of a small MLP (Linear 32->64,
ReLU, Linear 64->10, cross-entropy, SGD, batch 32 per worker) under PyTorch DDP with the gloo
backend: one OS process per worker, one thread each, all on this machine over loopback TCP.
That is the setup a user would otherwise pick for multi-process data-parallel training on CPUs,
so its milliseconds per iteration are the yardstick for concord's allreduce when each worker is
its own process (`--runtime process`) with the same model and batch.

Usage:
    python3 bench/ddp/ddp_mlp.py --procs 2,4,8 [--iters 200] [--warmup 20] [--json out.json]

Prints one line per process count, `ddp gloo  procs=N  ms_per_iter=X.XX`, and with `--json`
writes `[{"procs": N, "ms_per_iter": X}, ...]`. Exits with code 3 when PyTorch is not
installed, so a caller can tell an absent PyTorch from a failed run (code 1).
"""

import argparse
import json
import os
import socket
import sys
import time
import warnings

# A PyTorch wheel without NumPy beside it warns on import; nothing here uses NumPy.
warnings.filterwarnings("ignore", message="Failed to initialize NumPy")

try:
    import torch
    import torch.distributed as dist
    import torch.multiprocessing as mp
    from torch import nn
    from torch.nn.parallel import DistributedDataParallel
except ImportError:
    torch = None

EXIT_NO_TORCH = 3
SEED = 1234
IN_FEATURES = 32
HIDDEN = 64
CLASSES = 10
BATCH = 32
# Distinct batches each worker cycles through; fixed by the seed, so every run sees the same data.
BATCHES_PER_WORKER = 16
LEARNING_RATE = 0.05


def parse_procs(text):
    """Parse a comma-separated list of process counts, each at least 1."""
    counts = []
    for part in text.split(","):
        part = part.strip()
        try:
            n = int(part)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{part!r} is not an integer") from None
        if n < 1:
            raise argparse.ArgumentTypeError(f"{n} is not a positive process count")
        counts.append(n)
    return counts


def positive_int(text):
    """An integer of at least 1 (for --iters)."""
    n = int(text)
    if n < 1:
        raise argparse.ArgumentTypeError(f"{n} is not at least 1")
    return n


def non_negative_int(text):
    """An integer of at least 0 (for --warmup)."""
    n = int(text)
    if n < 0:
        raise argparse.ArgumentTypeError(f"{n} is negative")
    return n


def parse_args(argv):
    """Command-line options of the bench."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--procs", type=parse_procs, default=[2, 4, 8],
                   help="comma-separated process counts to measure (default 2,4,8)")
    p.add_argument("--iters", type=positive_int, default=200,
                   help="timed iterations per process count (default 200)")
    p.add_argument("--warmup", type=non_negative_int, default=20,
                   help="untimed iterations before the timed ones (default 20)")
    p.add_argument("--json", metavar="FILE", help="also write the results as JSON to FILE")
    return p.parse_args(argv)


def free_port():
    """A TCP port on loopback that was free a moment ago (the OS picks it for port 0)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def make_model():
    """The MLP 32-64-10, initialised from the fixed seed."""
    torch.manual_seed(SEED)
    return nn.Sequential(nn.Linear(IN_FEATURES, HIDDEN), nn.ReLU(), nn.Linear(HIDDEN, CLASSES))


def make_batches(rank):
    """This worker's synthetic batches: random inputs and labels, the same on every run."""
    gen = torch.Generator().manual_seed(SEED * 1000 + rank)
    return [
        (
            torch.randn(BATCH, IN_FEATURES, generator=gen),
            torch.randint(0, CLASSES, (BATCH,), generator=gen),
        )
        for _ in range(BATCHES_PER_WORKER)
    ]


def worker(rank, world, port, iters, warmup, results):
    """One DDP worker: train `warmup + iters` steps, rank 0 puts the timed mean on `results`."""
    torch.set_num_threads(1)
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    try:
        model = DistributedDataParallel(make_model())
        opt = torch.optim.SGD(model.parameters(), lr=LEARNING_RATE)
        loss_fn = nn.CrossEntropyLoss()
        batches = make_batches(rank)

        def step(i):
            x, y = batches[i % len(batches)]
            opt.zero_grad(set_to_none=True)
            loss = loss_fn(model(x), y)
            loss.backward()  # DDP allreduces the gradients here
            opt.step()

        for i in range(warmup):
            step(i)
        dist.barrier()
        start = time.perf_counter()
        for i in range(warmup, warmup + iters):
            step(i)
        dist.barrier()
        elapsed = time.perf_counter() - start
        if rank == 0:
            results.put(elapsed / iters * 1000.0)
    finally:
        dist.destroy_process_group()


def measure(procs, iters, warmup):
    """Mean milliseconds per iteration of DDP with `procs` worker processes."""
    ctx = mp.get_context("spawn")
    results = ctx.SimpleQueue()
    mp.spawn(worker, args=(procs, free_port(), iters, warmup, results), nprocs=procs, join=True)
    if results.empty():
        raise RuntimeError(f"rank 0 of {procs} processes reported no time")
    return results.get()


def main(argv=None):
    """Run the bench for each process count and report; returns the exit code."""
    args = parse_args(sys.argv[1:] if argv is None else argv)
    if torch is None:
        print("PyTorch is not installed; install it with `pip install torch` to run this bench.",
              file=sys.stderr)
        return EXIT_NO_TORCH
    if not dist.is_available() or not dist.is_gloo_available():
        print("this PyTorch build has no gloo backend for torch.distributed", file=sys.stderr)
        return 1
    rows = []
    for n in args.procs:
        try:
            ms = measure(n, args.iters, args.warmup)
        except Exception as err:  # a worker's failure arrives wrapped by mp.spawn
            print(f"ddp gloo  procs={n}  failed: {err}", file=sys.stderr)
            return 1
        print(f"ddp gloo  procs={n}  ms_per_iter={ms:.2f}", flush=True)
        rows.append({"procs": n, "ms_per_iter": round(ms, 4)})
    if args.json:
        try:
            with open(args.json, "w") as f:
                json.dump(rows, f, indent=2)
                f.write("\n")
        except OSError as err:
            print(f"cannot write {args.json}: {err}", file=sys.stderr)
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
