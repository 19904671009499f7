"""BERT's masked-LM pretraining recipe on one input (Devlin et al. 2019, section 3.1, and
``create_pretraining_data.py`` of google-research/bert), by the rule of ``heads.masking``.

Of the non-special tokens, ``round(n x select_rate)`` (at least one) are chosen at random;
each chosen token becomes [MASK] with probability ``mask_rate``, a random ordinary token
with ``random_rate``, and stays unchanged otherwise (80/10/10 by default). The loss is the
cross-entropy at the chosen positions only: labels are -100 (ignored) everywhere else.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F

from bertscope.core.forward import inspect, inspect_ids
from bertscope.core.hooked_pass import check_text
from bertscope.core.inspection import Inspection
from bertscope.core.models import LoadedModel
from bertscope.core.tokens import readable_tokens
from bertscope.errors import BertScopeError
from bertscope.mlm.fill_mask import Prediction, require_mlm, top_predictions
from bertscope.mlm.masking import IGNORE_INDEX, check_rates, replacement_ids, selection_count

ACTIONS = ("mask", "random", "keep")


@dataclass(frozen=True)
class Corruption:
    input_ids: list[int]  # the corrupted input
    labels: list[int]  # original id at chosen positions, -100 elsewhere
    actions: dict[int, str]  # chosen position -> mask | random | keep


@dataclass(frozen=True)
class RecipePosition:
    position: int
    original: str
    shown: str  # what the model saw there
    action: str
    top: list[Prediction]
    loss: float  # cross-entropy (nats) of the original token
    recovered: bool  # the top prediction is the original token


@dataclass(frozen=True)
class RecipeResult:
    original: Inspection
    corrupted: Inspection
    positions: list[RecipePosition]
    mean_loss: float  # over chosen positions only, as F.cross_entropy(ignore_index=-100)
    accuracy: float  # share of chosen positions whose top prediction is the original token

    def to_json(self) -> dict:
        return {
            "tokens": self.original.tokens,
            "corrupted_tokens": self.corrupted.tokens,
            "positions": [
                {"position": p.position, "original": p.original, "shown": p.shown, "action": p.action,
                 "loss": p.loss, "recovered": p.recovered, "top": [t.to_json() for t in p.top]}
                for p in self.positions
            ],
            "mean_loss": self.mean_loss,
            "accuracy": self.accuracy,
        }


def corrupt(
    input_ids: list[int],
    special: list[bool],
    vocab_ids: np.ndarray,
    mask_id: int,
    seed: int = 0,
    select_rate: float = 0.15,
    mask_rate: float = 0.8,
    random_rate: float = 0.1,
) -> Corruption:
    """Choose and corrupt positions as BERT's data generator does (``heads.masking``'s rule)."""
    check_rates(select_rate, mask_rate, random_rate)
    rng = np.random.default_rng(seed)
    candidates = [i for i, s in enumerate(special) if not s]
    if not candidates:
        raise BertScopeError("The text has no ordinary tokens to mask.")
    count = selection_count(len(candidates), select_rate)
    chosen = sorted(rng.choice(candidates, size=count, replace=False).tolist())
    ids = list(input_ids)
    labels = [IGNORE_INDEX] * len(ids)
    actions = {}
    for i in chosen:
        labels[i] = ids[i]
        u = rng.random()
        if u < mask_rate:
            ids[i], actions[i] = mask_id, "mask"
        elif u < mask_rate + random_rate:
            ids[i], actions[i] = int(rng.choice(vocab_ids)), "random"
        else:
            actions[i] = "keep"
    return Corruption(ids, labels, actions)


def ordinary_vocab(lm: LoadedModel) -> np.ndarray:
    """Ids a random replacement may take (``heads.masking.replacement_ids``)."""
    return replacement_ids(lm.tokenizer, lm.vocab_size)


@dataclass(frozen=True)
class CorruptionView:
    """The recipe's corruption of one text, without a model pass: what BERT's data generator
    would feed the model and where the loss would look (works on any tokenizer)."""

    tokens: list[str]  # readable, the original input
    corrupted_tokens: list[str]  # readable, what the model would see
    corruption: Corruption

    def rows(self) -> list[dict]:
        return [{"position": i, "original": self.tokens[i], "model would see": self.corrupted_tokens[i],
                 "action": action} for i, action in sorted(self.corruption.actions.items())]


def recipe_corruption(
    lm: LoadedModel, text: str, seed: int = 0, select_rate: float = 0.15,
    mask_rate: float = 0.8, random_rate: float = 0.1,
) -> CorruptionView:
    """``corrupt`` on ``text`` with ``lm``'s tokenizer alone: no forward pass, no head needed."""
    check_text(text)
    tok = lm.tokenizer
    if tok.mask_token_id is None:
        raise BertScopeError(f"{lm.name}'s tokenizer has no mask token: the recipe cannot be shown.")
    enc = tok(text, truncation=True, max_length=lm.max_length, return_special_tokens_mask=True)
    ids, special, words = enc["input_ids"], [bool(s) for s in enc["special_tokens_mask"]], enc.word_ids()
    c = corrupt(ids, special, ordinary_vocab(lm), tok.mask_token_id, seed, select_rate, mask_rate, random_rate)
    return CorruptionView(readable_tokens(tok, ids, words, special), readable_tokens(tok, c.input_ids, words, special), c)


def mlm_recipe(
    lm: LoadedModel, text: str, seed: int = 0, select_rate: float = 0.15,
    mask_rate: float = 0.8, random_rate: float = 0.1, top_k: int = 5,
) -> RecipeResult:
    require_mlm(lm)
    original = inspect(lm, text, with_logits=False, with_attentions=False, with_hidden_states=False)
    c = corrupt(original.input_ids.tolist(), original.special_mask.tolist(), ordinary_vocab(lm),
                lm.tokenizer.mask_token_id, seed, select_rate, mask_rate, random_rate)
    chosen = sorted(c.actions)  # the loss counts these positions only: keep logits there alone
    corrupted = inspect_ids(lm, original, c.input_ids, with_attentions=False, with_hidden_states=False,
                            logit_positions=chosen)
    logits = torch.from_numpy(corrupted.mlm_logits)  # [chosen, vocab]
    labels = torch.tensor([c.labels[i] for i in chosen])  # [chosen]
    mean_loss = float(F.cross_entropy(logits, labels, ignore_index=IGNORE_INDEX))
    per_token = dict(zip(chosen, F.cross_entropy(logits, labels, ignore_index=IGNORE_INDEX,
                                                   reduction="none").tolist()))  # position -> loss
    positions = []
    for i, action in c.actions.items():
        top = top_predictions(corrupted.logits_at(i), top_k, lm.tokenizer)
        positions.append(RecipePosition(
            i, original.tokens[i], corrupted.tokens[i], action, top, float(per_token[i]),
            top[0].token_id == c.labels[i],
        ))
    accuracy = sum(p.recovered for p in positions) / len(positions)
    return RecipeResult(original, corrupted, positions, mean_loss, accuracy)
