"""PyTorch's reference for host-staged all_reduce: gloo on CUDA tensors.

Run under torchrun (one process per rank, every rank on cuda:0 unless
CUDA_VISIBLE_DEVICES says otherwise):
  torchrun --standalone --nproc_per_node=8 scripts/torch_gloo_cuda_bench.py
Prints, on rank 0, one line per size: bytes, time per call in ms, algbw and
busbw in GB/s (nccl-tests' definitions: busbw = algbw * 2 (n - 1) / n), the
same columns scripts/staged_gpu_check.sh reads from ccl_bench.
"""
import os
import time

import torch
import torch.distributed as dist


def main():
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0)) % torch.cuda.device_count())
    torch.cuda.set_device(device)
    sizes = [1 << 20, 4 << 20, 16 << 20, 64 << 20, 256 << 20, 1 << 30]
    warmup, iters = 2, int(os.environ.get("TORCH_BENCH_ITERS", "5"))
    if rank == 0:
        print(f"torch {torch.__version__} gloo all_reduce of cuda float32, {world} ranks", flush=True)
        print(f"{'bytes':>12} {'ms':>10} {'algbw':>8} {'busbw':>8}", flush=True)
    for size in sizes:
        tensor = torch.ones(size // 4, dtype=torch.float32, device=device)
        for _ in range(warmup):
            dist.all_reduce(tensor)
        torch.cuda.synchronize(device)
        dist.barrier()
        start = time.perf_counter()
        for _ in range(iters):
            dist.all_reduce(tensor)
        torch.cuda.synchronize(device)
        seconds = (time.perf_counter() - start) / iters
        algbw = size / seconds / 1e9
        busbw = algbw * 2 * (world - 1) / world
        if rank == 0:
            print(f"{size:>12} {seconds * 1e3:>10.2f} {algbw:>8.2f} {busbw:>8.2f}", flush=True)
        del tensor
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
