"""Token choice inside `generate`: per-episode seeded sampling, with each token's log-probability.

A global random generator makes a row's samples depend on every other row drawn before it, so
the same episode came out differently at another batch size, after an out-of-memory halving or
on resume. Here each row draws its own noise, seeded by (episode seed, step, position), and picks
its token by the Gumbel-max trick: the argmax of the log-probabilities plus Gumbel noise is a
draw from the (top-p truncated) distribution. The processor then leaves only that token
possible, so `generate` runs greedy (`do_sample=False`) and never touches torch's global RNG.

The same pass records the log-probability of the chosen token and the entropy of the
distribution it was drawn from (logits / temperature, before top-p truncation).
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

import torch


def noise_seed(episode_seed: int, step_no: int, position: int) -> int:
    """A 63-bit seed for one row's noise at one generated position (stable across processes)."""
    digest = hashlib.blake2b(f"{episode_seed}:{step_no}:{position}".encode(), digest_size=8)
    return int.from_bytes(digest.digest(), "little") & 0x7FFF_FFFF_FFFF_FFFF


class TokenChooser:
    """A logits processor for one `generate` call: chooses each row's token and records it.

    `seeds` holds each row's (episode seed, step) when sampling; None means greedy decoding.
    """

    def __init__(
        self,
        prompt_width: int,
        *,
        temperature: float,
        top_p: float,
        seeds: Sequence[tuple[int, int]] | None,
    ) -> None:
        self.prompt_width = prompt_width
        self.temperature = temperature
        self.top_p = top_p
        self.seeds = seeds
        self._logprobs: list[torch.Tensor] = []
        self._entropies: list[torch.Tensor] = []
        self._generator: torch.Generator | None = None

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.Tensor:
        position = input_ids.shape[1] - self.prompt_width
        scaled = scores / self.temperature if self.seeds is not None else scores
        logp = torch.log_softmax(scaled, dim=-1)
        # entr(0) is 0, where p * log p would give nan for tokens masked to -inf upstream.
        self._entropies.append(torch.special.entr(logp.exp()).sum(dim=-1))
        if self.seeds is None:
            choice = scores.argmax(dim=-1)  # what greedy `generate` picks from these scores
            self._record(logp, choice, position)
            return scores
        candidates = self._top_p(logp) if self.top_p < 1.0 else logp
        choice = (candidates + self._gumbel(scores, position)).argmax(dim=-1)
        self._record(logp, choice, position)
        forced = torch.full_like(scores, float("-inf"))
        return forced.scatter_(1, choice.unsqueeze(1), 0.0)

    def _record(self, logp: torch.Tensor, choice: torch.Tensor, position: int) -> None:
        if position != len(self._logprobs):
            raise RuntimeError(f"token chooser called at position {position} out of order")
        self._logprobs.append(logp.gather(1, choice.unsqueeze(1)).squeeze(1))

    def _top_p(self, logp: torch.Tensor) -> torch.Tensor:
        """Mask all but the smallest set of most likely tokens whose probability reaches top_p."""
        sorted_logp, order = logp.sort(dim=-1, descending=True)
        probs = sorted_logp.exp()
        before = probs.cumsum(dim=-1) - probs  # probability of the tokens ranked above each one
        drop_sorted = before >= self.top_p
        drop_sorted[:, 0] = False
        drop = torch.empty_like(drop_sorted).scatter_(1, order, drop_sorted)
        return logp.masked_fill(drop, float("-inf"))

    def _gumbel(self, scores: torch.Tensor, position: int) -> torch.Tensor:
        """Gumbel noise, each row drawn from its own seed: independent of the other rows."""
        assert self.seeds is not None
        if self._generator is None:
            self._generator = torch.Generator(device=scores.device)
        noise = torch.empty_like(scores)
        for row, (seed, step) in enumerate(self.seeds):
            self._generator.manual_seed(noise_seed(seed, step, position))
            noise[row].uniform_(generator=self._generator)
        # -log(-log(u)); u == 0 gives -inf, a token never chosen.
        return noise.log_().neg_().log_().neg_()

    def traces(self, rows: int, width: int) -> tuple[list[list[float]], list[list[float]]]:
        """Per row, the log-probabilities and entropies of the first `width` generated tokens."""
        width = min(width, len(self._logprobs))
        if width == 0:
            return [[] for _ in range(rows)], [[] for _ in range(rows)]
        # One stack and one copy to Python per call, not one per token.
        logprobs = torch.stack(self._logprobs[:width], dim=1).tolist()
        entropies = torch.stack(self._entropies[:width], dim=1).tolist()
        return logprobs, entropies
