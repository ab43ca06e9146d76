"""Makes the test tokenizer (run from the repo root: `python3 test/data/tokenizer/make_tokenizer.py
[OUT_DIR]`, OUT_DIR defaulting to this directory; deterministic: a second run rewrites both files
byte for byte, with tokenizers 0.23.3 as tools/setup.sh pins it; lit prepare-data checks that).

A byte-level BPE of 512 tokens trained with the `tokenizers` package on the GPL-3 text
(/usr/share/common-licenses/GPL-3, Debian's base-files): ids 0-2 are the special tokens
<|endoftext|> (eos, the separator of text documents), <|im_start|> and <|im_end|> (ChatML turns),
3-258 the 256 bytes, the rest merges. tokenizer_config.json carries a ChatML chat template whose
assistant turns are marked with {% generation %} (what `return_assistant_tokens_mask` reads);
test/lit/Inputs/prepare-data/chatml-plain.jinja is the same template without the marks."""
import json
import os
import sys

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

HERE = os.path.dirname(os.path.abspath(__file__))
SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]

# ChatML. The assistant's content and its <|im_end|> are what a model generates, so they are
# the counted tokens; the "<|im_start|>assistant\n" header and the newline after <|im_end|> are not.
CHAT_TEMPLATE = (
    "{%- for message in messages %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' }}"
    "{%- if message['role'] == 'assistant' %}"
    "{%- generation %}{{- message['content'] + '<|im_end|>' }}{%- endgeneration %}"
    "{{- '\\n' }}"
    "{%- else %}"
    "{{- message['content'] + '<|im_end|>\\n' }}"
    "{%- endif %}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else HERE
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    # GPT-2's post-processor: it trims the offsets of whitespace tokens to nothing, which
    # prepare_data.py must not be misled by (a test's response holds such tokens).
    tok.post_processor = processors.ByteLevel(trim_offsets=True)
    trainer = trainers.BpeTrainer(vocab_size=512, special_tokens=SPECIAL, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train(["/usr/share/common-licenses/GPL-3"], trainer)
    assert tok.get_vocab_size(with_added_tokens=True) == 512
    tok.save(os.path.join(out, "tokenizer.json"))

    config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "model_max_length": 1024,
        "bos_token": None,
        "eos_token": "<|endoftext|>",
        "pad_token": "<|endoftext|>",
        "clean_up_tokenization_spaces": False,
        "added_tokens_decoder": {
            str(tok.token_to_id(t)): {"content": t, "lstrip": False, "normalized": False, "rstrip": False,
                                      "single_word": False, "special": True} for t in SPECIAL},
        "chat_template": CHAT_TEMPLATE,
    }
    with open(os.path.join(out, "tokenizer_config.json"), "w") as f:
        json.dump(config, f, indent=2)
        f.write("\n")
    print(f"tokenizer: {tok.get_vocab_size(True)} tokens, "
          f"specials {[(t, tok.token_to_id(t)) for t in SPECIAL]}")


if __name__ == "__main__":
    main()
