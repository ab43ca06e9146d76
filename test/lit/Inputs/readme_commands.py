"""Runs README.md's command blocks on the tiny fixtures, so that the README cannot drift from the
tool (issue 25): the opening block (compile, run, plan) and the "Fine-tune your model" block, each
command as the README writes it, with only these stand-ins:

- the model directory ~/models/Llama-3.1-8B: the tiny Hugging Face Llama (test/data/hf_tiny/llama/f32,
  vocabulary 256) with a byte tokenizer of 256 ids made here (253 bytes and the 3 special tokens);
- the export's line (it needs torch, which CI does not install): the tiny model's own export copied
  to the name the README gives; the line must still be there, word for word;
- sizes and counts: --batch 8 --seq 2048 -> --batch 2 --seq 16, --grad-accum 8 -> 2,
  --steps 1000 -> 4, --warmup 50 -> 1, --checkpoint-every 100 -> 2;
- the data: tokens.bin (bytes as uint16) and train.jsonl (prompt/response rows), made here;
- `megac` and `tools/`: the build's binary and the repo's scripts.

A line the table expects and the README no longer has is an error: the stand-ins must change with it.

Usage: readme_commands.py README.md MEGAC DATA_DIR TOOLS_DIR WORK_DIR
Prints each command, then its output; exits nonzero at the first command that fails.
"""
import json
import os
import re
import shlex
import shutil
import subprocess
import sys

EXPORT_LINE = "tools/export_shapes_only.py ~/models/Llama-3.1-8B llama8b.onnx"
SIZES = [("--batch 8 --seq 2048", "--batch 2 --seq 16"), ("--grad-accum 8", "--grad-accum 2"),
         ("--steps 1000", "--steps 4"), ("--warmup 50", "--warmup 1"), ("--checkpoint-every 100", "--checkpoint-every 2")]


def blocks(readme):
    """The opening block (indented by four spaces, first in the file) and the ```sh block under
    '## Fine-tune your model', each as a list of commands (continuations joined, comments dropped)."""
    text = open(readme).read()
    opening = []
    for line in text.split("\n## ")[0].splitlines():
        if line.startswith("    megac "):
            opening.append(line.strip())
    section = text.split("\n## Fine-tune your model\n", 1)
    if len(section) != 2:
        sys.exit("readme_commands: README.md has no '## Fine-tune your model' section")
    m = re.search(r"```sh\n(.*?)```", section[1], re.S)
    if not m:
        sys.exit("readme_commands: the fine-tune section has no ```sh block")
    finetune = []
    for line in m.group(1).replace("\\\n", " ").splitlines():
        line = line.strip()
        if line:
            finetune.append(line)
    if not opening or not finetune:
        sys.exit("readme_commands: a command block is empty")
    return opening, finetune


def strip_comment(cmd):
    # shlex keeps a '#' inside quotes; the README's comments follow two or more spaces
    return re.split(r"\s{2,}#", cmd)[0].strip()


def byte_tokenizer(out_dir):
    """A byte-level BPE without merges whose 256 ids are the 3 special tokens and the bytes 0-252
    (the test's text uses no others), for a model of vocabulary 256; eos <|endoftext|>."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    # GPT-2's byte-to-character table, which the ByteLevel pre-tokenizer uses.
    shown = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    char, extra = {}, 0
    for b in range(256):
        if b in shown:
            char[b] = chr(b)
        else:
            char[b] = chr(256 + extra)
            extra += 1
    special = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    vocab = {s: i for i, s in enumerate(special)}
    for b in range(253):
        vocab[char[b]] = len(vocab)
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens(special)
    tok.save(os.path.join(out_dir, "tokenizer.json"))
    with open(os.path.join(out_dir, "tokenizer_config.json"), "w") as f:
        json.dump({"tokenizer_class": "PreTrainedTokenizerFast", "eos_token": "<|endoftext|>",
                   "model_max_length": 4096}, f)


def run(cmd, work, env):
    print("$ " + cmd, flush=True)
    r = subprocess.run(cmd, shell=True, cwd=work, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    print(r.stdout, end="", flush=True)
    if r.returncode != 0:
        sys.exit(f"readme_commands: exit {r.returncode}: {cmd}")


def main():
    readme, megac, data, tools, work = (os.path.abspath(a) for a in sys.argv[1:6])
    os.makedirs(work, exist_ok=True)
    opening, finetune = blocks(readme)
    model_dir = os.path.join(work, "Llama-3.1-8B")
    shutil.copytree(os.path.join(data, "hf_tiny", "llama", "f32"), model_dir, dirs_exist_ok=True)
    byte_tokenizer(model_dir)
    with open(os.path.join(work, "tokens.bin"), "wb") as f:
        text = open(readme, "rb").read()
        f.write(b"".join(bytes([b, 0]) for b in text if b < 253))
    with open(os.path.join(work, "train.jsonl"), "w") as f:
        for i in range(40):
            f.write(json.dumps({"prompt": f"What is {i} plus {i}? ", "response": f"It is {2 * i}."}) + "\n")
    shutil.copy(os.path.join(data, "llama", "model.onnx"), os.path.join(work, "model.onnx"))
    env = dict(os.environ)
    bindir = os.path.join(work, "bin")
    os.makedirs(bindir, exist_ok=True)
    link = os.path.join(bindir, "megac")
    if not os.path.exists(link):
        os.symlink(os.path.abspath(megac), link)
    env["PATH"] = bindir + os.pathsep + env["PATH"]

    def stand_ins(cmd):
        cmd = strip_comment(cmd)
        for a, b in SIZES:
            cmd = cmd.replace(a, b)
        cmd = cmd.replace("~/models/Llama-3.1-8B", shlex.quote(model_dir))
        if cmd.startswith("tools/"):
            cmd = os.path.join(tools, cmd[len("tools/"):])
        return cmd

    print("== the opening block")
    for cmd in opening:
        run(stand_ins(cmd), work, env)
    print("== fine-tune your model")
    if strip_comment(finetune[0]) != EXPORT_LINE:
        sys.exit(f"readme_commands: the fine-tune block's first line is not '{EXPORT_LINE}' any more: "
                 "change the stand-in in test/lit/Inputs/readme_commands.py with it")
    print("$ " + EXPORT_LINE + "   (stand-in: the tiny model's export, copied; CI has no torch)")
    shutil.copy(os.path.join(data, "hf_tiny", "llama", "model.onnx"), os.path.join(work, "llama8b.onnx"))
    for cmd in finetune[1:]:
        run(stand_ins(cmd), work, env)


if __name__ == "__main__":
    main()
