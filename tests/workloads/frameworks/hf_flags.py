"""hf_trainer.py's job with its TrainingArguments built from the command line by HfArgumentParser,
as the Hugging Face examples (run_clm.py) build them: the fix is a flag (`--bf16`), not a line."""
import torch
from hf_trainer import Tokens
from transformers import GPT2Config, GPT2LMHeadModel, HfArgumentParser, Trainer, TrainingArguments

if __name__ == "__main__":
    (args,) = HfArgumentParser((TrainingArguments,)).parse_args_into_dataclasses()
    torch.manual_seed(0)
    config = GPT2Config(vocab_size=512, n_positions=64, n_embd=256, n_layer=2, n_head=4,
                        resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
    Trainer(model=GPT2LMHeadModel(config), args=args, train_dataset=Tokens(2048, 64, config.vocab_size)).train()
