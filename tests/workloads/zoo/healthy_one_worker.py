"""Healthy control: one persistent worker serving whole batches from memory, one intra-op thread.

Threads plus workers fit the 2 cores; the worker needs well under a millisecond per batch
(one indexing op via a BatchSampler), the model's 41 layers about a hundred milliseconds;
four batches are prefetched, so a worker briefly descheduled on a busy machine is absorbed.
Each matmul is ~67 MFLOP (batch 128, 512 wide), under PR001's 100 MFLOP floor: on a CPU with
native bf16 (AMX) a few wide fp32 matmuls would rightly be told to use bf16, which a control must
not be; and ~770 FLOPs per parameter a step keep SGD's per-tensor loop a few % of it (CPU002).
(Handing a batch over from a worker costs the loop about 2 ms on this 2-core machine even then,
measured without advise: a step of 20 ms would read as 10% data wait, DL001's threshold.)

advise-expect: none
"""
import torch

from _common import train_deep_mlp_from_workers

if __name__ == "__main__":
    torch.set_num_threads(1)
    train_deep_mlp_from_workers(1)
