"""The instruction-tuning reference for llama/ (run from the repo root with torch and
transformers: `python test/data/hf_tiny/make_sft_reference.py`): two micro-batches of
llama/ref/input_ids.pb's shape whose targets ignore different numbers of positions
(-100, the prompt's tokens in instruction data), and PyTorch's loss and gradients for the
step megac takes over them: the mean cross-entropy over every counted target of the step,
however the micro-batches split them (not the mean of the micro-batches' means).

Writes llama/ref_sft/: mb{0,1}_input_ids.pb, mb{0,1}_targets.pb (int64 [2, 16]), loss.pb
(float32 scalar), grad/<parameter>.pb (float32, Hugging Face names), as llama/ref does."""
import os

import torch
import transformers as tf
from onnx import numpy_helper

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "llama", "ref_sft")


def save(t, name):
    path = os.path.join(OUT, name)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(numpy_helper.from_array(t.detach().cpu().numpy(), os.path.basename(name)[:-3]).SerializeToString())


torch.manual_seed(0)
model = tf.AutoModelForCausalLM.from_pretrained(os.path.join(HERE, "llama", "f32"), dtype=torch.float32,
                                                attn_implementation="eager").eval()
vocab = model.config.vocab_size
g = torch.Generator().manual_seed(7)
batches = []
for k, ignored in enumerate((5, 22)):  # positions ignored of 32: the micro-batches count 27 and 10 targets
    ids = torch.randint(0, vocab, (2, 16), generator=g)
    tgt = torch.randint(0, vocab, (2, 16), generator=g)
    flat = tgt.view(-1)
    flat[torch.randperm(32, generator=g)[:ignored]] = -100
    batches.append((ids, tgt))
    save(ids, f"mb{k}_input_ids.pb")
    save(tgt, f"mb{k}_targets.pb")

model.zero_grad(set_to_none=True)
total = sum(int((t != -100).sum()) for _, t in batches)
loss = 0
for ids, tgt in batches:
    logits = model(input_ids=ids, use_cache=False).logits
    # the sum over this micro-batch's counted targets, over the step's count
    loss = loss + torch.nn.functional.cross_entropy(logits.reshape(-1, vocab), tgt.reshape(-1), ignore_index=-100,
                                                    reduction="sum") / total
loss.backward()
save(loss, "loss.pb")
for n, p in model.named_parameters():
    save(p.grad, f"grad/{n}.pb")
print(f"{OUT}: loss {loss.item():.6f} over {total} counted targets "
      f"({', '.join(str(int((t != -100).sum())) for _, t in batches)} by micro-batch)")
