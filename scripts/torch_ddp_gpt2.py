#!/usr/bin/env python3
"""GPT-2 trained data-parallel in PyTorch eager with DDP: the peer that
examples/gpt2 is measured against (docs/performance.md).

Same configuration as `gpt2 --model=d12` (12 layers, 12 heads, 768 channels,
vocabulary padded to 50304, tied embedding), same micro-batch and sequence,
random tokens; PyTorch's usual fast path: SDPA attention, bf16 autocast,
fused AdamW. One process per GPU under torchrun, or one process alone.

  python3 scripts/torch_ddp_gpt2.py --steps=20
  torchrun --nproc_per_node=2 scripts/torch_ddp_gpt2.py --steps=20

Rank 0 prints one line in the format of gpt2's:
  throughput: tokens_per_s=... per_gpu=... step_ms=... ranks=... dtype=...
"""
import argparse
import os
import time

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel


class Block(nn.Module):
    def __init__(self, channels, heads):
        super().__init__()
        self.heads = heads
        self.ln_1 = nn.LayerNorm(channels)
        self.qkv = nn.Linear(channels, 3 * channels)
        self.proj = nn.Linear(channels, channels)
        self.ln_2 = nn.LayerNorm(channels)
        self.fc = nn.Linear(channels, 4 * channels)
        self.fc_proj = nn.Linear(4 * channels, channels)

    def forward(self, x):
        batch, length, channels = x.shape
        q, k, v = self.qkv(self.ln_1(x)).split(channels, dim=2)
        q, k, v = (t.view(batch, length, self.heads, channels // self.heads).transpose(1, 2)
                   for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(y.transpose(1, 2).contiguous().view(batch, length, channels))
        return x + self.fc_proj(F.gelu(self.fc(self.ln_2(x)), approximate="tanh"))


class Gpt2(nn.Module):
    def __init__(self, layers=12, heads=12, channels=768, vocabulary=50304, max_length=1024):
        super().__init__()
        self.wte = nn.Embedding(vocabulary, channels)
        self.wpe = nn.Embedding(max_length, channels)
        self.blocks = nn.ModuleList(Block(channels, heads) for _ in range(layers))
        self.ln_f = nn.LayerNorm(channels)
        self.lm_head = nn.Linear(channels, vocabulary, bias=False)
        self.lm_head.weight = self.wte.weight  # tied, as GPT-2

    def forward(self, tokens, targets):
        positions = torch.arange(tokens.shape[1], device=tokens.device)
        x = self.wte(tokens) + self.wpe(positions)
        for block in self.blocks:
            x = block(x)
        logits = self.lm_head(self.ln_f(x))
        return F.cross_entropy(logits.float().view(-1, logits.shape[-1]), targets.view(-1))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--batch_size", type=int, default=8)
    parser.add_argument("--sequence_length", type=int, default=1024)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--skip_steps", type=int, default=5, help="not timed (warm-up)")
    parser.add_argument("--dtype", choices=["bfloat16", "float32"], default="bfloat16")
    args = parser.parse_args()
    if args.steps <= args.skip_steps:
        parser.error(f"--steps={args.steps}: expected more than --skip_steps={args.skip_steps}")

    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    torch.cuda.set_device(local_rank)
    device = torch.device("cuda", local_rank)
    if world_size > 1:
        dist.init_process_group("nccl", device_id=device)

    torch.manual_seed(1234)
    model = Gpt2().to(device)
    if world_size > 1:
        model = DistributedDataParallel(model, device_ids=[local_rank])
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.1, fused=True)
    generator = torch.Generator(device=device).manual_seed(rank)
    tokens = torch.randint(0, 50257, (args.batch_size, args.sequence_length + 1),
                           device=device, generator=generator)
    inputs, targets = tokens[:, :-1].contiguous(), tokens[:, 1:].contiguous()

    autocast = torch.autocast("cuda", dtype=torch.bfloat16, enabled=args.dtype == "bfloat16")
    timed_start = None
    for step in range(args.steps):
        if step == args.skip_steps:
            torch.cuda.synchronize()
            timed_start = time.perf_counter()
        with autocast:
            loss = model(inputs, targets)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    torch.cuda.synchronize()
    elapsed = time.perf_counter() - timed_start
    timed_steps = args.steps - args.skip_steps
    step_ms = 1000 * elapsed / timed_steps
    tokens_per_s = world_size * args.batch_size * args.sequence_length * timed_steps / elapsed
    if rank == 0:
        print(f"throughput: tokens_per_s={tokens_per_s:.0f} per_gpu={tokens_per_s / world_size:.0f} "
              f"step_ms={step_ms:.2f} ranks={world_size} dtype={args.dtype} "
              f"loss={loss.item():.4f} torch={torch.__version__}", flush=True)
    if world_size > 1:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
