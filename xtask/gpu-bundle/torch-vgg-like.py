"""PyTorch's step time for the VGG-like CNN of configs/gpu-vgg-like.toml, on this machine's GPU.

The reference the bundle's step-time check compares concord against, measured in the same run:
forward, backward and an SGD step (momentum 0.9) in fp32 with TF32 off and cudnn.benchmark on,
3x32x32 inputs, conv 3-64, 64-64, pool, 64-128, 128-128, pool, 128-256, 256-256, pool (all 3x3,
padding 1, ReLU), dense 4096-512-10. Prints one line per batch: "<batch> <median ms>".
Usage: python3 torch-vgg-like.py 64 256
"""
import statistics
import sys

import torch
from torch import nn


def vgg_like():
    layers, c_in = [], 3
    for c in (64, 128, 256):
        for _ in range(2):
            layers += [nn.Conv2d(c_in, c, 3, padding=1), nn.ReLU()]
            c_in = c
        layers.append(nn.MaxPool2d(2))
    return nn.Sequential(*layers, nn.Flatten(), nn.Linear(4096, 512), nn.ReLU(), nn.Linear(512, 10))


def step_ms(batch, warmup=10, steps=30):
    torch.manual_seed(42)
    model = vgg_like().cuda()
    opt = torch.optim.SGD(model.parameters(), lr=0.002, momentum=0.9)
    x = torch.randn(batch, 3, 32, 32, device="cuda")
    y = torch.randint(0, 10, (batch,), device="cuda")
    loss_fn = nn.CrossEntropyLoss()
    times = []
    for i in range(warmup + steps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        opt.zero_grad(set_to_none=True)
        loss_fn(model(x), y).backward()
        opt.step()
        end.record()
        torch.cuda.synchronize()
        if i >= warmup:
            times.append(start.elapsed_time(end))
    return statistics.median(times)


if __name__ == "__main__":
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cudnn.benchmark = True
    for b in sys.argv[1:]:
        print(b, f"{step_ms(int(b)):.3f}", flush=True)
