"""A tiny Qwen-style tokenizer written locally for the tiny FLUX.2 [klein] pipeline.

Byte-level BPE as Qwen2/Qwen3 use (every byte is a token, so any text encodes), merges
trained on the demo captions' words so they become short token runs, the Qwen special
tokens, and a chat template shaped like Qwen3's (one user turn, the generation prompt,
thinking switched off with an empty <think></think>), which is what
`Flux2KleinPipeline._get_qwen3_prompt_embeds` asks the tokenizer to apply.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

PAD = "<|endoftext|>"
SPECIAL = (PAD, "<|im_start|>", "<|im_end|>", "<think>", "</think>")
CHAT_TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n{{ message['content'] }}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n"
    "{% if enable_thinking is defined and enable_thinking is false %}<think>\n\n</think>\n\n{% endif %}"
    "{% endif %}"
)


def write_qwen_tokenizer(folder: Path, words: Iterable[str], max_length: int) -> Any:
    """Train and save the tokenizer into `folder`; return it loaded back (transformers 5's one Qwen2Tokenizer)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import Qwen2Tokenizer

    words = sorted({w.lower() for w in words if w.strip()})
    core = Tokenizer(models.BPE(unk_token=None))
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    core.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=256 + len(SPECIAL) + 4 * len(words), special_tokens=list(SPECIAL),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False,
    )
    corpus = [" ".join(words), *(f" {w}" for w in words), "user assistant", "\n\n"]
    core.train_from_iterator(corpus, trainer=trainer)
    # Byte-level: every text encodes, so the unknown token (Qwen's default, <|endoftext|>) never appears.
    tokenizer = Qwen2Tokenizer(tokenizer_object=core, pad_token=PAD, eos_token="<|im_end|>",
                               model_max_length=max_length, chat_template=CHAT_TEMPLATE)
    folder.mkdir(parents=True, exist_ok=True)
    tokenizer.save_pretrained(folder)
    return Qwen2Tokenizer.from_pretrained(folder)
