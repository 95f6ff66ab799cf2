"""A causal language model trained with the Hugging Face Trainer: the shape of transformers'
examples/pytorch/language-modeling/run_clm.py (HfArgumentParser over the script's own arguments
and TrainingArguments, a GPT-2 built from its config, text grouped into blocks, Trainer.train()),
self-contained so it runs offline without `datasets` or a tokenizer download: the words of
--train_file are the vocabulary (the --max_vocab most frequent, the rest <unk>).

Part of advise's truth harness (benchmarks/truth), written here because the transformers repo
is too big to mirror on the machine the harness was built on and run_clm.py needs `datasets`.
Every TrainingArguments flag is the Trainer's own (--bf16, --dataloader_num_workers, ...).

Its per-iteration output: with --logging_steps 1, one line a step,
    step N: loss L, time T ms
T the wall time from the end of the previous optimizer step to the end of this one.
"""
import collections
import time
from dataclasses import dataclass, field

import torch
from torch.utils.data import Dataset
from transformers import (GPT2Config, GPT2LMHeadModel, HfArgumentParser, Trainer, TrainerCallback,
                          TrainingArguments, default_data_collator, set_seed)


@dataclass
class ModelArguments:
    n_layer: int = field(default=4)
    n_embd: int = field(default=256)
    n_head: int = field(default=4)


@dataclass
class DataArguments:
    train_file: str = field(metadata={"help": "a plain text file"})
    block_size: int = field(default=128)
    max_vocab: int = field(default=8192)


class Blocks(Dataset):
    """The file's words as ids, grouped into blocks of block_size (run_clm's group_texts)."""

    def __init__(self, path: str, block_size: int, max_vocab: int):
        words = open(path, encoding="utf8").read().replace("\n", " <eos> ").split()
        vocab = ["<unk>"] + [w for w, _ in collections.Counter(words).most_common(max_vocab - 1)]
        index = {w: i for i, w in enumerate(vocab)}
        ids = torch.tensor([index.get(w, 0) for w in words])
        n = len(ids) // block_size
        self.blocks = ids[: n * block_size].view(n, block_size)
        self.vocab_size = len(vocab)

    def __len__(self):
        return len(self.blocks)

    def __getitem__(self, i):
        return {"input_ids": self.blocks[i], "labels": self.blocks[i]}


class StepTime(TrainerCallback):
    """One line a logged step: its loss and the wall time of the iteration that produced it."""

    def __init__(self):
        self.last = self.dt = None

    def on_step_end(self, args, state, control, **kwargs):
        now = time.perf_counter()
        self.dt, self.last = (now - self.last if self.last is not None else None), now

    def on_log(self, args, state, control, logs=None, **kwargs):
        if logs and "loss" in logs and self.dt is not None:
            print(f"step {state.global_step}: loss {logs['loss']:.4f}, time {self.dt * 1e3:.2f} ms", flush=True)


def main():
    model_args, data_args, training_args = HfArgumentParser(
        (ModelArguments, DataArguments, TrainingArguments)).parse_args_into_dataclasses()
    set_seed(training_args.seed)
    train = Blocks(data_args.train_file, data_args.block_size, data_args.max_vocab)
    config = GPT2Config(vocab_size=train.vocab_size, n_positions=data_args.block_size, n_embd=model_args.n_embd,
                        n_layer=model_args.n_layer, n_head=model_args.n_head)
    model = GPT2LMHeadModel(config)
    trainer = Trainer(model=model, args=training_args, train_dataset=train, data_collator=default_data_collator,
                      callbacks=[StepTime()])
    trainer.train()


if __name__ == "__main__":
    main()
