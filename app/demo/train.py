"""Supervised training of a causal LM on chat conversations, loss on assistant tokens only."""

from __future__ import annotations

import math
import random
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

import torch
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from app.demo.tiny_model import save_checkpoint
from app.demo.tokenizer import IM_END, IM_START

IGNORE = -100
"""Label of a position that does not count in the loss (torch's cross-entropy default)."""
PAD_MULTIPLE = 16
WARMUP_STEPS = 30
FINAL_LR_FRACTION = 0.1
LOG_EVERY = 50
GROUP_BATCHES = 8

Conversation = Sequence[dict[str, str]]
Example = tuple[list[int], list[int]]


def encode_conversation(
    tokenizer: PreTrainedTokenizerBase, messages: Conversation, max_length: int | None = None
) -> Example:
    """Token ids and labels of a chat; labels are IGNORE everywhere but assistant replies.

    The ids equal the tokenization of the chat template's text. An assistant reply's label span
    is its content and the closing `<|im_end|>`, so the model learns to stop. With `max_length`
    the chat is cut after the last whole message that fits.
    """
    ids: list[int] = []
    labels: list[int] = []
    for number, message in enumerate(messages):
        role, content = message.get("role"), message.get("content")
        if not isinstance(role, str) or not isinstance(content, str):
            raise ValueError(
                f"message {number} needs string 'role' and 'content'; got keys {sorted(message)}"
            )
        head = _encode(tokenizer, f"{IM_START}{role}\n")
        body = _encode(tokenizer, f"{content}{IM_END}")
        tail = _encode(tokenizer, "\n")
        if max_length is not None and len(ids) + len(head) + len(body) > max_length:
            break
        trained = body if role == "assistant" else [IGNORE] * len(body)
        ids += head + body + tail
        labels += [IGNORE] * len(head) + trained + [IGNORE] * len(tail)
    if max_length is not None and len(ids) > max_length:
        ids, labels = ids[:max_length], labels[:max_length]  # only the last newline falls off
    return ids, labels


def train_on_conversations(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    conversations: Sequence[Conversation],
    *,
    steps: int,
    save_at: Sequence[int],
    out_dir: Path,
    batch_size: int = 16,
    lr: float = 3e-3,
    seed: int = 0,
    threads: int | None = None,
    log: Callable[[str], None] | None = None,
) -> list[Path]:
    """Train `model` in place with AdamW; save `out_dir/checkpoint-<step>` at each `save_at`.

    Step 0 saves the untrained model. Returns the checkpoint paths in step order.
    """
    save_steps = sorted(set(save_at))
    if steps < 0 or any(not 0 <= step <= steps for step in save_steps):
        raise ValueError(f"save_at {list(save_at)} must lie within 0..steps ({steps})")
    if batch_size < 1:
        raise ValueError(f"batch_size must be at least 1, got {batch_size}")
    examples = _usable_examples(tokenizer, conversations, model.config.max_position_embeddings)
    say = log or (lambda _line: None)
    say(f"{len(examples)} of {len(conversations)} conversations usable")
    out = Path(out_dir)
    saved: list[Path] = []
    with torch_threads(threads):
        torch.manual_seed(seed)
        optimizer = torch.optim.AdamW(
            model.parameters(), lr=lr, betas=(0.9, 0.95), weight_decay=0.01
        )
        schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: _lr_factor(s, steps))
        batches = _batches(examples, batch_size, random.Random(seed))
        if 0 in save_steps:
            saved.append(save_checkpoint(model, tokenizer, out / "checkpoint-0"))
        model.train()
        window = _Window()
        started = time.perf_counter()
        for step in range(1, steps + 1):
            batch = _collate(next(batches), tokenizer.pad_token_id, model.device)
            window.add(_train_step(model, optimizer, batch), batch[2])
            if step % LOG_EVERY == 0 or step == steps:
                say(f"step {step}/{steps} lr {schedule.get_last_lr()[0]:.2e} {window.report()}")
            schedule.step()
            if step in save_steps:
                model.train(False)
                saved.append(save_checkpoint(model, tokenizer, out / f"checkpoint-{step}"))
                model.train()
        model.train(False)
        say(f"trained {steps} steps in {time.perf_counter() - started:.1f} s")
    return saved


class _Window:
    """Mean loss and token throughput since the last report."""

    def __init__(self) -> None:
        self._reset()

    def _reset(self) -> None:
        self.start = time.perf_counter()
        self.losses: list[float] = []
        self.tokens = self.padded = 0

    def add(self, loss: float, attention: torch.Tensor) -> None:
        self.losses.append(loss)
        self.tokens += int(attention.sum())
        self.padded += attention.numel()

    def report(self) -> str:
        """Describe the window, then start a new one."""
        seconds = time.perf_counter() - self.start
        line = (
            f"loss {sum(self.losses) / len(self.losses):.3f} "
            f"{self.tokens / seconds:,.0f} tokens/s ({self.padded / seconds:,.0f} with padding, "
            f"{seconds / len(self.losses):.2f} s/step)"
        )
        self._reset()
        return line


def _train_step(
    model: PreTrainedModel,
    optimizer: torch.optim.Optimizer,
    batch: tuple[torch.Tensor, torch.Tensor, torch.Tensor],
) -> float:
    """One AdamW step on the batch with gradients clipped to norm 1.0; returns the loss."""
    loss = _assistant_loss(model, batch, "mean")
    loss.backward()  # type: ignore[no-untyped-call]
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    return float(loss.item())


@torch.no_grad()
def conversation_loss(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    conversations: Sequence[Conversation],
    batch_size: int = 16,
) -> float:
    """Mean cross-entropy per assistant token over `conversations`."""
    examples = _usable_examples(tokenizer, conversations, model.config.max_position_embeddings)
    was_training = model.training
    model.train(False)
    total, count = 0.0, 0
    for start in range(0, len(examples), batch_size):
        batch = _collate(examples[start : start + batch_size], tokenizer.pad_token_id, model.device)
        total += _assistant_loss(model, batch, "sum").item()
        count += int((batch[1][:, 1:] != IGNORE).sum())
    model.train(was_training)
    return total / count


def _assistant_loss(
    model: PreTrainedModel,
    batch: tuple[torch.Tensor, torch.Tensor, torch.Tensor],
    reduction: str,
) -> torch.Tensor:
    """Cross-entropy of the labelled positions, the LM head applied to those positions only.

    Assistant tokens are about 13% of a demo chat, so skipping the head elsewhere saves 5-13%
    of a training step; the loss equals `model(labels=...).loss` to float precision.
    """
    input_ids, labels, attention = batch
    hidden = model.base_model(
        input_ids=input_ids, attention_mask=attention, use_cache=False
    ).last_hidden_state
    targets = labels[:, 1:]
    keep = targets != IGNORE
    head = model.get_output_embeddings()  # type: ignore[no-untyped-call]
    logits = head(hidden[:, :-1][keep])
    return torch.nn.functional.cross_entropy(logits.float(), targets[keep], reduction=reduction)


def _encode(tokenizer: PreTrainedTokenizerBase, text: str) -> list[int]:
    """Ids of `text` with no special tokens added around it."""
    ids: list[int] = tokenizer(text, add_special_tokens=False)["input_ids"]
    return ids


def _usable_examples(
    tokenizer: PreTrainedTokenizerBase, conversations: Sequence[Conversation], max_length: int
) -> list[Example]:
    """Encode and cut each conversation to `max_length`; drop those with nothing to learn."""
    if tokenizer.pad_token_id is None:
        raise ValueError("the tokenizer has no pad token; set tokenizer.pad_token first")
    examples = [encode_conversation(tokenizer, c, max_length) for c in conversations]
    usable = [(ids, labels) for ids, labels in examples if any(t != IGNORE for t in labels)]
    if not usable:
        raise ValueError(
            "no conversation has an assistant reply within the model's "
            f"{max_length} positions; pass chats with an 'assistant' message"
        )
    return usable


def _batches(examples: list[Example], size: int, rng: random.Random) -> Iterator[list[Example]]:
    """Endless batches from reshuffled passes, each of similar lengths to waste little padding.

    Pools of GROUP_BATCHES batches are sorted by length, cut into batches and shuffled; with
    300-600-token chats this cut padding from about 27% of the tokens to a few percent.
    """
    order: list[int] = []
    pending: list[list[int]] = []
    while True:
        if not pending:
            while len(order) < size * GROUP_BATCHES:
                epoch = list(range(len(examples)))
                rng.shuffle(epoch)
                order += epoch
            pool, order = order[: size * GROUP_BATCHES], order[size * GROUP_BATCHES :]
            pool.sort(key=lambda index: len(examples[index][0]))
            pending = [pool[start : start + size] for start in range(0, len(pool), size)]
            rng.shuffle(pending)
        yield [examples[index] for index in pending.pop()]


def _collate(
    batch: Sequence[Example], pad_id: int, device: torch.device
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Right-pad to a multiple of PAD_MULTIPLE: ids, labels and attention mask tensors."""
    longest = max(len(ids) for ids, _ in batch)
    width = -(-longest // PAD_MULTIPLE) * PAD_MULTIPLE
    input_ids = torch.full((len(batch), width), pad_id, dtype=torch.long)
    labels = torch.full((len(batch), width), IGNORE, dtype=torch.long)
    attention = torch.zeros((len(batch), width), dtype=torch.long)
    for row, (ids, targets) in enumerate(batch):
        input_ids[row, : len(ids)] = torch.tensor(ids)
        labels[row, : len(ids)] = torch.tensor(targets)
        attention[row, : len(ids)] = 1
    return input_ids.to(device), labels.to(device), attention.to(device)


def _lr_factor(step: int, total: int) -> float:
    """Linear warm-up over WARMUP_STEPS, then cosine decay to FINAL_LR_FRACTION."""
    warmup = min(WARMUP_STEPS, max(total - 1, 1))
    if step < warmup:
        return (step + 1) / warmup
    progress = (step - warmup) / max(total - warmup, 1)
    cosine = 0.5 * (1 + math.cos(math.pi * min(progress, 1.0)))
    return FINAL_LR_FRACTION + (1 - FINAL_LR_FRACTION) * cosine


@contextmanager
def torch_threads(threads: int | None) -> Iterator[None]:
    """Use `threads` intra-op threads inside the block (the CPU is often shared)."""
    previous = torch.get_num_threads()
    if threads is not None:
        if threads < 1:
            raise ValueError(f"threads must be at least 1, got {threads}")
        torch.set_num_threads(threads)
    try:
        yield
    finally:
        torch.set_num_threads(previous)
