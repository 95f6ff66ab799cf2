"""A causal language model trained in a loop written with Hugging Face Accelerate: the shape of
transformers' examples/pytorch/language-modeling/run_clm_no_trainer.py and accelerate's
examples/nlp_example.py (argparse with --mixed_precision and --cpu, Accelerator(...),
accelerator.prepare, accelerator.backward, a linear schedule), the model and data of hf_clm.py
(a GPT-2 from its config, the file's words as the vocabulary), self-contained so it runs offline.

Its per-iteration output: one line a step,
    step N: loss L, time T ms
T the wall time from the end of the previous optimizer step to the end of this one.
"""
import argparse
import time

import torch
from accelerate import Accelerator
from torch.utils.data import DataLoader
from transformers import GPT2Config, GPT2LMHeadModel, default_data_collator, get_scheduler, set_seed

from hf_clm import Blocks


def main():
    parser = argparse.ArgumentParser(description="Train a causal language model with Accelerate")
    parser.add_argument("--train_file", required=True)
    parser.add_argument("--block_size", type=int, default=128)
    parser.add_argument("--max_vocab", type=int, default=8192)
    parser.add_argument("--per_device_train_batch_size", type=int, default=8)
    parser.add_argument("--learning_rate", type=float, default=5e-5)
    parser.add_argument("--weight_decay", type=float, default=0.0)
    parser.add_argument("--max_train_steps", type=int, default=2000)
    parser.add_argument("--n_layer", type=int, default=4)
    parser.add_argument("--n_embd", type=int, default=256)
    parser.add_argument("--n_head", type=int, default=4)
    parser.add_argument("--mixed_precision", choices=["no", "fp16", "bf16"], default="no")
    parser.add_argument("--cpu", action="store_true", help="train on the CPU even where an accelerator is present")
    parser.add_argument("--seed", type=int, default=42)
    args = parser.parse_args()

    accelerator = Accelerator(cpu=args.cpu, mixed_precision=args.mixed_precision)
    set_seed(args.seed)
    train = Blocks(args.train_file, args.block_size, args.max_vocab)
    config = GPT2Config(vocab_size=train.vocab_size, n_positions=args.block_size, n_embd=args.n_embd,
                        n_layer=args.n_layer, n_head=args.n_head)
    model = GPT2LMHeadModel(config)
    no_decay = ["bias", "layer_norm.weight"]
    groups = [
        {"params": [p for n, p in model.named_parameters() if not any(nd in n for nd in no_decay)],
         "weight_decay": args.weight_decay},
        {"params": [p for n, p in model.named_parameters() if any(nd in n for nd in no_decay)], "weight_decay": 0.0},
    ]
    optimizer = torch.optim.AdamW(groups, lr=args.learning_rate)
    train_dataloader = DataLoader(train, shuffle=True, collate_fn=default_data_collator,
                                  batch_size=args.per_device_train_batch_size)
    lr_scheduler = get_scheduler("linear", optimizer=optimizer, num_warmup_steps=0,
                                 num_training_steps=args.max_train_steps)
    model, optimizer, train_dataloader, lr_scheduler = accelerator.prepare(model, optimizer, train_dataloader,
                                                                           lr_scheduler)
    step, last = 0, None
    while step < args.max_train_steps:
        model.train()
        for batch in train_dataloader:
            outputs = model(**batch)
            loss = outputs.loss
            accelerator.backward(loss)
            optimizer.step()
            lr_scheduler.step()
            optimizer.zero_grad()
            now = time.perf_counter()
            if last is not None:
                print(f"step {step}: loss {loss.item():.4f}, time {(now - last) * 1e3:.2f} ms", flush=True)
            step, last = step + 1, now
            if step >= args.max_train_steps:
                break


if __name__ == "__main__":
    main()
