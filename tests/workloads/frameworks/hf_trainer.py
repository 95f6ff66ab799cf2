"""A Hugging Face Trainer job: a small GPT-2 built from its config (random weights, no download),
random tokens, the Trainer's defaults on the CPU. `--bf16`: TrainingArguments(bf16=True), as a
user who already took the advice has it."""
import argparse
import tempfile

import torch
from torch.utils.data import Dataset
from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainingArguments


class Tokens(Dataset):
    def __init__(self, n, seq, vocab):
        self.data = torch.randint(0, vocab, (n, seq))

    def __len__(self):
        return len(self.data)

    def __getitem__(self, i):
        return {"input_ids": self.data[i], "labels": self.data[i]}


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--bf16", action="store_true")
    parser.add_argument("--steps", type=int, default=400)
    cli = parser.parse_args()
    torch.manual_seed(0)
    config = GPT2Config(vocab_size=512, n_positions=64, n_embd=256, n_layer=2, n_head=4,
                        resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
    model = GPT2LMHeadModel(config)
    args = TrainingArguments(
        output_dir=tempfile.mkdtemp(), max_steps=cli.steps, per_device_train_batch_size=16, use_cpu=True,
        bf16=cli.bf16, report_to=[], save_strategy="no", logging_strategy="no", disable_tqdm=True)
    Trainer(model=model, args=args, train_dataset=Tokens(2048, 64, config.vocab_size)).train()
