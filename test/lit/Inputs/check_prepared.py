"""Prints what tools/prepare_data.py wrote, and checks it against the JSONL independently.

Usage: check_prepared.py TOKENIZER_DIR INPUT.jsonl PREFIX [--plain]

Reads PREFIX.bin (llm.c header or headerless uint16) and PREFIX.mask when it exists, and prints
  tokens N (FORMAT), mask M bytes | no mask
then the tokens in runs of equal mask bytes, one run a line: the byte, the ids, the decoded text.

Then, with only the `tokenizers` package and a ChatML rendering written out here (not
transformers, not the template in tokenizer_config.json), it rebuilds what each row should give:
  text:            the text, then <|endoftext|>, every token counted;
  prompt/response: ChatML [user: prompt, assistant: response]; --plain: prompt, response,
                   <|endoftext|>, the prompt encoded alone;
  messages:        ChatML of the messages,
and prints whether
  encode:  the token file equals those texts encoded (ids exactly);
  counted: the counted tokens, run by run, decode to exactly the texts that should count (each
           response, or assistant content, with its <|im_end|> (ChatML) or <|endoftext|> (plain));
           the rest is scaffolding and prompts."""
import json
import os
import sys

import numpy as np
from tokenizers import Tokenizer

tok_dir, jsonl, prefix = sys.argv[1:4]
plain = "--plain" in sys.argv[4:]
tok = Tokenizer.from_file(os.path.join(tok_dir, "tokenizer.json"))
EOS, END = "<|endoftext|>", "<|im_end|>"

raw = open(prefix + ".bin", "rb").read()
header = np.frombuffer(raw[:12], "<i4") if len(raw) >= 1024 else None
if header is not None and header[0] == 20240520:
    ids = np.frombuffer(raw[1024:], "<u2" if header[1] == 1 else "<u4")
    assert len(ids) == header[2], (len(ids), header)
    fmt = f"llm.c v{header[1]}"
else:
    ids = np.frombuffer(raw, "<u2")
    fmt = "uint16, headerless"
ids = [int(i) for i in ids]
has_mask = os.path.exists(prefix + ".mask")
mask = list(open(prefix + ".mask", "rb").read()) if has_mask else [1] * len(ids)
print(f"tokens {len(ids)} ({fmt}), " + (f"mask {len(mask)} bytes" if has_mask else "no mask"))
assert len(mask) == len(ids) and set(mask) <= {0, 1}, "the mask is not one 0/1 byte per token"

runs = []
for i, m in zip(ids, mask):
    if runs and runs[-1][0] == m:
        runs[-1][1].append(i)
    else:
        runs.append((m, [i]))
for m, r in runs:
    print(m, r, repr(tok.decode(r, skip_special_tokens=False)))


def chatml(messages):
    """(pieces): (text, counted) in order."""
    out = []
    for m in messages:
        out.append((f"<|im_start|>{m['role']}\n", False))
        if m["role"] == "assistant":
            out += [(m["content"] + END, True), ("\n", False)]
        else:
            out.append((m["content"] + END + "\n", False))
    return out


expect_ids, expect_counted = [], []
for line in open(jsonl, encoding="utf-8"):
    if not line.strip():
        continue
    row = json.loads(line)
    if "text" in row:
        expect_ids += tok.encode(row["text"]).ids + [tok.token_to_id(EOS)]
        expect_counted.append(row["text"] + EOS)
        continue
    if "prompt" in row and plain:
        expect_ids += tok.encode(row["prompt"]).ids + tok.encode(row["response"]).ids + [tok.token_to_id(EOS)]
        expect_counted.append(row["response"] + EOS)
        continue
    messages = row.get("messages") or [{"role": "user", "content": row["prompt"]},
                                       {"role": "assistant", "content": row["response"]}]
    pieces = chatml(messages)
    expect_ids += tok.encode("".join(t for t, _ in pieces), add_special_tokens=False).ids
    expect_counted += [t for t, c in pieces if c]

print("encode:", "OK" if ids == expect_ids else f"DIFFERENT: expected {expect_ids}")
counted = [tok.decode(r, skip_special_tokens=False) for m, r in runs if m == 1]
if not has_mask:  # text only: one run holding everything
    counted, expect_counted = ["".join(counted)], ["".join(expect_counted)]
print("counted:", f"OK, {len(counted)} runs" if counted == expect_counted
      else f"DIFFERENT: {counted} instead of {expect_counted}")
