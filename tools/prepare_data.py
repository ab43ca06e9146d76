#!/usr/bin/env python3
"""JSONL -> megac's token file and loss mask, with a model's tokenizer.

Usage: tools/prepare_data.py --tokenizer DIR --out PREFIX INPUT.jsonl [INPUT.jsonl ...]
                             [--format uint16|uint32|llmc] [--max-tokens N]
                             [--chat-template FILE | --no-chat-template] [--eos TOKEN]

DIR holds tokenizer.json and, normally, tokenizer_config.json (a Hugging Face model directory
will do); DIR may also be a tokenizer.json file alone. One JSON object per line (blank lines are
skipped; keys other than these are ignored):

  {"text": "..."}                      pretraining: the text's tokens (with the special tokens the
                                       tokenizer adds, e.g. a BOS), then EOS; every token counted.
  {"prompt": "...", "response": "..."} SFT: with a chat template, the conversation
                                       [user: prompt, assistant: response]; without one, the
                                       prompt's tokens (with the tokenizer's special tokens), the
                                       response's, then EOS. Counted: the response and that EOS.
  {"messages": [{"role": ..., "content": ...}, ...]}
                                       SFT chat, rendered by the chat template (needed). Counted:
                                       each assistant turn's tokens, nothing else.

What an assistant turn counts, with a chat template:
- a template that marks assistant text with {% generation %} ... {% endgeneration %}: the tokens
  transformers' apply_chat_template(return_assistant_tokens_mask=True) marks, those overlapping
  the marked text;
- any other template: the text each assistant turn adds to the rendered conversation. The
  conversation is rendered up to the turn with the generation prompt (P) and through the turn (Q);
  both must be prefixes of the whole rendering (an error otherwise), and the turn is the text
  between them, up to and including the last special token in it (the end-of-turn token:
  what follows it, such as ChatML's newline after <|im_end|>, is scaffolding the model never
  generates). The tokens of the whole rendering that overlap that text are counted.
Offsets are read without the post-processor's trimming, so whitespace tokens inside a response
count. The rows are concatenated in order into one stream of tokens.

Writes PREFIX.bin, the tokens, in one of megac's formats:
  uint16  headerless little-endian uint16 (the default where the vocabulary is <= 65536);
  uint32  headerless little-endian uint32 (the default past 65536; megac reads a headerless file
          as uint32 only for a model whose vocabulary exceeds 65536, so it is refused below that);
  llmc    llm.c's .bin: a 1024-byte header (int32 magic 20240520, version 1 = uint16 tokens or
          2 = uint32 by the vocabulary, token count, zeros), then the tokens.
and PREFIX.mask, megac's --mask: one uint8 per token of PREFIX.bin (no header, whatever the token
format), 1 where the token is a counted target (megac predicts it), 0 where it is not.
mask[i] applies where token i is a target, i.e. in a window starting at s, target position
i - s - 1. When every row is text, every token counts and no mask is written (megac without
--mask counts every target); a PREFIX.mask left from an earlier run is then removed.

Prints one summary line. Errors name the file and line and exit with status 1, leaving no
output file. Needs the `tokenizers` and `transformers` packages (tools/setup.sh; no torch) and
numpy.
"""
import argparse
import json
import os
import re
import sys

os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")  # no "PyTorch was not found" banner
os.environ.setdefault("HF_HUB_OFFLINE", "1")  # a local directory; never the network

import numpy as np  # noqa: E402
import tokenizers  # noqa: E402
import transformers  # noqa: E402

LLMC_MAGIC = 20240520
GENERATION_TAG = re.compile(r"\{%-?\s*generation\s*-?%\}")


class DataError(Exception):
    pass


class Tokenizer:
    """The model's tokenizer: transformers' for special tokens and the chat template, its
    `tokenizers` backend for encoding."""

    def __init__(self, path, chat_template_file, no_chat_template, eos):
        if os.path.isdir(path):
            if not os.path.isfile(os.path.join(path, "tokenizer.json")):
                raise DataError(f"{path}: no tokenizer.json in this directory")
        elif not os.path.isfile(path):
            raise DataError(f"{path}: no such tokenizer directory or file")
        try:
            if os.path.isfile(os.path.join(path, "tokenizer_config.json")):
                hf = transformers.AutoTokenizer.from_pretrained(path)
            else:  # tokenizer.json alone: no chat template, no eos_token unless --eos
                hf = transformers.PreTrainedTokenizerFast(
                    tokenizer_file=os.path.join(path, "tokenizer.json") if os.path.isdir(path) else path)
        except Exception as e:
            raise DataError(f"{path}: transformers cannot load this tokenizer: {type(e).__name__}: {e}")
        if not hasattr(hf, "backend_tokenizer"):
            raise DataError(f"{path}: {type(hf).__name__} is not backed by a tokenizer.json")
        self.hf = hf
        self.backend = hf.backend_tokenizer
        # The same tokenizer without its post-processor: for text already holding its special
        # tokens (add_special_tokens=False) it gives the same ids, and offsets that are not trimmed
        # (GPT-2's ByteLevel post-processor trims a whitespace token's offsets to nothing).
        self.untrimmed = tokenizers.Tokenizer.from_str(self.backend.to_str())
        self.untrimmed.post_processor = None
        self.checked_untrimmed = False
        vocab = self.backend.get_vocab(with_added_tokens=True)
        self.vocab_size = max(self.backend.get_vocab_size(with_added_tokens=True), max(vocab.values()) + 1)

        if eos is not None:
            self.eos_id = self.backend.token_to_id(eos)
            if self.eos_id is None:
                raise DataError(f"--eos {eos}: not a token of {path}")
            self.eos = eos
        else:
            self.eos, self.eos_id = hf.eos_token, hf.eos_token_id

        if no_chat_template:
            self.template = None
        elif chat_template_file is not None:
            try:
                with open(chat_template_file, encoding="utf-8") as f:
                    self.template = f.read()
            except OSError as e:
                raise DataError(f"--chat-template {chat_template_file}: {e.strerror}")
        else:
            self.template = hf.chat_template if isinstance(hf.chat_template, str) else None
            if isinstance(hf.chat_template, dict):  # named templates: the default one
                self.template = hf.chat_template.get("default")
        self.marks_generation = bool(self.template and GENERATION_TAG.search(self.template))
        self.specials = [t.content for t in hf.added_tokens_decoder.values() if t.special]

    def need_eos(self):
        if self.eos_id is None:
            raise DataError("the tokenizer names no eos_token (tokenizer_config.json); pass --eos TOKEN")
        return self.eos_id

    def encode(self, text, special):
        return self.backend.encode(text, add_special_tokens=special).ids

    def render(self, messages, generation_prompt=False):
        return self.hf.apply_chat_template(messages, chat_template=self.template, tokenize=False,
                                           add_generation_prompt=generation_prompt)

    def chat(self, messages):
        """(ids, mask) of one conversation."""
        if self.marks_generation:
            out = self.hf.apply_chat_template(messages, chat_template=self.template, tokenize=True, return_dict=True,
                                              return_assistant_tokens_mask=True)
            return list(out["input_ids"]), list(out["assistant_masks"])
        text = self.render(messages)
        spans = []
        for k, m in enumerate(messages):
            if m["role"] != "assistant":
                continue
            if k == 0:
                raise DataError("the conversation begins with an assistant message: with a chat template "
                                "without {% generation %} marks, a turn is found after the messages before it")
            p = self.render(messages[:k], generation_prompt=True)
            q = self.render(messages[:k + 1])
            if not (text.startswith(p) and text.startswith(q) and len(q) >= len(p)):
                raise DataError(f"the chat template renders the messages up to the assistant message {k} (from 0) "
                                "otherwise than it begins the whole conversation, so that turn's tokens cannot be "
                                "found; "
                                "pass --chat-template FILE with a template that marks assistant text with "
                                "{% generation %} ... {% endgeneration %}")
            turn = text[len(p):len(q)]
            end = len(q)
            last = max(((turn.rfind(s), s) for s in self.specials), default=(-1, ""))
            if last[0] >= 0:
                end = len(p) + last[0] + len(last[1])
            spans.append((len(p), end))
        enc = self.untrimmed.encode(text, add_special_tokens=False)
        if not self.checked_untrimmed:
            if enc.ids != self.encode(text, False):
                raise DataError("internal: the tokenizer without its post-processor encodes a rendered "
                                "conversation differently")
            self.checked_untrimmed = True
        mask = [0] * len(enc.ids)
        for i, (a, b) in enumerate(enc.offsets):
            if any(a < e and b > s for s, e in spans):
                mask[i] = 1
        return enc.ids, mask


def check_messages(messages):
    if not isinstance(messages, list) or not messages:
        raise DataError('"messages" must be a non-empty list of {"role": ..., "content": ...}')
    for j, m in enumerate(messages):
        if not isinstance(m, dict) or not isinstance(m.get("role"), str) or not isinstance(m.get("content"), str):
            raise DataError(f'message {j} must be an object with a string "role" and a string "content"')
    if not any(m["role"] == "assistant" for m in messages):
        raise DataError('no message has the role "assistant": the conversation would count no token')


def tokenize_row(tok, row):
    """(kind, ids, mask) of one row; mask None for text."""
    if not isinstance(row, dict):
        raise DataError(f"a row must be a JSON object, not {type(row).__name__}")
    kinds = [k for k in ("text", "messages", "prompt") if k in row]
    if "response" in row and "prompt" not in row:
        raise DataError('"response" without "prompt"')
    if "prompt" in row and "response" not in row:
        raise DataError('"prompt" without "response"')
    if not kinds:
        keys = ", ".join(json.dumps(k) for k in row) or "none"
        raise DataError(f'a row needs "text", "prompt" and "response", or "messages"; this one has keys: {keys}')
    if len(kinds) > 1:
        raise DataError("a row is one kind of row; this one has " + " and ".join(f'"{k}"' for k in kinds))
    if kinds[0] == "text":
        if not isinstance(row["text"], str):
            raise DataError('"text" must be a string')
        ids = tok.encode(row["text"], True)
        eos = tok.need_eos()
        if not ids or ids[-1] != eos:
            ids.append(eos)
        return "text", ids, None
    if kinds[0] == "prompt":
        if not isinstance(row["prompt"], str) or not isinstance(row["response"], str):
            raise DataError('"prompt" and "response" must be strings')
        if tok.template:
            return "prompt/response", *tok.chat([{"role": "user", "content": row["prompt"]},
                                                 {"role": "assistant", "content": row["response"]}])
        prompt = tok.encode(row["prompt"], True)
        response = tok.encode(row["response"], False) + [tok.need_eos()]
        return "prompt/response", prompt + response, [0] * len(prompt) + [1] * len(response)
    check_messages(row["messages"])
    if not tok.template:
        raise DataError('a "messages" row needs a chat template: the tokenizer has none (--chat-template FILE)')
    return "chat", *tok.chat(row["messages"])


def read_rows(paths):
    for path in paths:
        try:
            f = open(path, "rb")
        except OSError as e:
            raise DataError(f"{path}: {e.strerror}")
        with f:
            for n, raw in enumerate(f, 1):
                try:
                    line = raw.decode("utf-8")
                except UnicodeDecodeError as e:
                    raise DataError(f"{path}:{n}: not UTF-8 ({e.reason} at byte {e.start})")
                if not line.strip():
                    continue
                try:
                    row = json.loads(line)
                except json.JSONDecodeError as e:
                    msg = e.msg[:-3] if e.msg.endswith(" at") else e.msg
                    raise DataError(f"{path}:{n}: bad JSON: {msg} at column {e.colno}")
                yield f"{path}:{n}", row


def main(argv=None):
    ap = argparse.ArgumentParser(description="JSONL -> megac token file (+ loss mask).",
                                 formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    ap.add_argument("inputs", nargs="+", metavar="INPUT.jsonl")
    ap.add_argument("--tokenizer", required=True, metavar="DIR",
                    help="directory holding tokenizer.json (+ tokenizer_config.json), or a tokenizer.json")
    ap.add_argument("--out", required=True, metavar="PREFIX", help="writes PREFIX.bin and PREFIX.mask")
    ap.add_argument("--format", choices=["uint16", "uint32", "llmc"],
                    help="token file format (default: uint16 for a vocabulary <= 65536, else uint32)")
    ap.add_argument("--max-tokens", type=int, metavar="N", help="truncate each row to its first N tokens")
    ap.add_argument("--chat-template", metavar="FILE", help="a Jinja chat template instead of the tokenizer's")
    ap.add_argument("--no-chat-template", action="store_true",
                    help="ignore the tokenizer's chat template: prompt/response rows are concatenated")
    ap.add_argument("--eos", metavar="TOKEN", help="the end-of-text token (default: the tokenizer's eos_token)")
    args = ap.parse_args(argv)
    if args.chat_template and args.no_chat_template:
        ap.error("--chat-template and --no-chat-template exclude each other")
    if args.max_tokens is not None and args.max_tokens < 1:
        ap.error("--max-tokens must be at least 1")

    bin_path, mask_path = args.out + ".bin", args.out + ".mask"
    tmp_bin, tmp_mask = bin_path + ".tmp", mask_path + ".tmp"
    try:
        tok = Tokenizer(args.tokenizer, args.chat_template, args.no_chat_template, args.eos)
        fmt = args.format or ("uint16" if tok.vocab_size <= 65536 else "uint32")
        if fmt == "uint16" and tok.vocab_size > 65536:
            raise DataError(f"--format uint16: the vocabulary has {tok.vocab_size} tokens, past 65536")
        if fmt == "uint32" and tok.vocab_size <= 65536:
            raise DataError(f"--format uint32: megac reads headerless uint32 tokens only for a vocabulary past 65536 "
                            f"(this one has {tok.vocab_size}); use uint16 or llmc")
        width = 2 if fmt == "uint16" or (fmt == "llmc" and tok.vocab_size <= 65536) else 4
        dtype = "<u2" if width == 2 else "<u4"
        header = 1024 if fmt == "llmc" else 0

        os.makedirs(os.path.dirname(os.path.abspath(bin_path)), exist_ok=True)
        kinds = {"text": 0, "prompt/response": 0, "chat": 0}
        tokens = counted = truncated = emptied = 0
        first = []  # the first tokens, for the header check of headerless files
        mask0 = None  # the first token's mask byte: never a target in any window
        with open(tmp_bin, "wb") as fb, open(tmp_mask, "wb") as fm:
            fb.write(bytes(header))
            for where, row in read_rows(args.inputs):
                try:
                    kind, ids, mask = tokenize_row(tok, row)
                except DataError as e:
                    raise DataError(f"{where}: {e}")
                except Exception as e:  # the template's own errors (raise_exception), jinja's
                    raise DataError(f"{where}: {type(e).__name__}: {e}")
                if mask is None:
                    mask = [1] * len(ids)
                if args.max_tokens is not None and len(ids) > args.max_tokens:
                    ids, mask = ids[:args.max_tokens], mask[:args.max_tokens]
                    truncated += 1
                    emptied += kind != "text" and not any(mask)
                kinds[kind] += 1
                tokens += len(ids)
                counted += sum(mask)
                if len(first) < 4:
                    first += ids[:4]
                if mask0 is None and mask:
                    mask0 = mask[0]
                fb.write(np.asarray(ids, dtype=dtype).tobytes())
                fm.write(np.asarray(mask, dtype=np.uint8).tobytes())
            if tokens == 0:
                raise DataError(", ".join(args.inputs) + ": no rows")
            if fmt == "llmc":
                if tokens > 2**31 - 1:
                    raise DataError(f"{tokens} tokens: past the llm.c header's int32 count; write uint16/uint32")
                fb.seek(0)
                fb.write(np.array([LLMC_MAGIC, 1 if width == 2 else 2, tokens] + [0] * 253, dtype="<i4").tobytes())
            elif tokens * width >= 1024 and np.asarray(first, dtype=dtype).tobytes()[:4] == \
                    np.array([LLMC_MAGIC], dtype="<i4").tobytes():
                raise DataError("the first tokens spell llm.c's header magic, which megac would read as a header; "
                                "use --format llmc")
        with_mask = kinds["prompt/response"] + kinds["chat"] > 0
        if with_mask and counted - mask0 == 0:
            raise DataError("no token is counted as a target (megac refuses such a mask)")
        os.replace(tmp_bin, bin_path)
        removed = ""
        if with_mask:
            os.replace(tmp_mask, mask_path)
        else:
            os.unlink(tmp_mask)
            if os.path.exists(mask_path):
                os.unlink(mask_path)
                removed = f" (removed the earlier {mask_path})"
    except DataError as e:
        for p in (tmp_bin, tmp_mask):
            if os.path.exists(p):
                os.unlink(p)
        print(f"prepare_data.py: error: {e}", file=sys.stderr)
        return 1

    desc = {"uint16": "uint16, headerless", "uint32": "uint32, headerless",
            "llmc": f"llm.c v{1 if width == 2 else 2}, {'uint16' if width == 2 else 'uint32'}"}[fmt]
    rows = sum(kinds.values())
    parts = ", ".join(f"{n} {k}" for k, n in kinds.items() if n)
    out = f"{bin_path} ({desc})"
    out += f", {mask_path}" if with_mask else f"; no mask: every token counts{removed}"
    cut = f"{truncated} truncated" + (f" ({emptied} of them now without a counted token)" if emptied else "")
    print(f"prepare_data: {rows} rows ({parts}), {tokens} tokens, {counted} counted, {cut} -> {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
