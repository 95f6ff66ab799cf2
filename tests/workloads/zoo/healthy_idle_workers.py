"""Healthy control: 4 DataLoader workers that exist but sit idle, beside 1 intra-op thread.

The workers serve whole in-memory batches (one indexing op each via a BatchSampler) and have
prefetched far ahead of a ~100 ms step: they wait, they do not compete. Counted as they exist,
1 thread + 4 workers would read as 5 threads on 2 cores; that counting read "6 busy threads
compete for 2 cores" on minGPT's chargpt at 2% data wait; its fix (1 thread, 1 worker) was 0.62x by hand. The model is
healthy_one_worker's: matmuls under PR001's 100 MFLOP floor, SGD's loop a few % of the step.

advise-expect: none
"""
import torch

from _common import train_deep_mlp_from_workers

if __name__ == "__main__":
    torch.set_num_threads(1)
    train_deep_mlp_from_workers(4)
