"""A Hugging Face causal LM (GPT-2 architecture, random weights, no download) trained on random
tokens, as a `transformers` user writes the loop by hand. Its activations dominate the peak, and
`gradient_checkpointing_enable()` is the switch a Hugging Face user would flip."""
import argparse

import torch
from torch.utils.data import DataLoader, TensorDataset
from transformers import GPT2Config, GPT2LMHeadModel

parser = argparse.ArgumentParser()
parser.add_argument("--layers", type=int, default=6)
parser.add_argument("--batch", type=int, default=16)
parser.add_argument("--seq", type=int, default=128)
args = parser.parse_args()

torch.manual_seed(0)
torch.set_num_threads(1)
config = GPT2Config(vocab_size=512, n_positions=args.seq, n_embd=64, n_layer=args.layers, n_head=4,
                    resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
model = GPT2LMHeadModel(config)
tokens = torch.randint(0, config.vocab_size, (64 * args.batch, args.seq))
loader = DataLoader(TensorDataset(tokens), batch_size=args.batch, shuffle=True)
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
model.train()
for _ in range(1000):
    for (ids,) in loader:
        loss = model(input_ids=ids, labels=ids).loss
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
