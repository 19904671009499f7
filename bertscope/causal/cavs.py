"""Concept activation vectors and their significance test (Kim, Wattenberg, Gilmer, Cai, Wexler,
Viégas & Sayres, "Interpretability Beyond Feature Attribution: Quantitative Testing with Concept
Activation Vectors (TCAV)", ICML 2018), for an encoder's own decisions: a masked token, a class, or a
tagger's tag (at the first word of each input it tags so).

At each hidden state (``embeddings``, then layer 0 to L−1):

1. **The CAV.** Each text is its content tokens' mean state (as the probes pool sentences). A logistic
   regression (the paper's code offers it beside a linear SVM by SGD; it does not depend on the
   examples' order) tells the concept's examples from a random set's; its normal, pointing to the
   concept, is the CAV; a classifier fit on two thirds is scored on the third held out (captum's split).
2. **The directional derivative.** For an input, ``S = Σ_t ∂f/∂h_t · v`` over every position: how
   ``f`` (the decision's log-probability, as ``attribution.gradients`` defines it) changes when every
   token's state moves along the CAV ([CLS] too: at the last layer a classifier reads it alone). It is
   read by one named hook point a state (``core.hook_points.state_hook``) adding a zero vector at every
   position, one backward an input for every layer at once.
3. **The score.** TCAV = the share of inputs with ``S > 0``.
4. **The test.** ``runs`` CAVs against ``runs`` different random sets give ``runs`` scores; as many
   random-against-random CAVs give the scores of no concept, each between a different pair of random
   sets (set r − 1 against set r), so that the null spans what one fixed set of sentences can score by
   chance, as the paper's code pairs its random500_i (a fixed random set against the others would only
   measure that set). Student's two-sided t-test between the two (``scipy.stats.ttest_ind``, as the
   paper's code runs it); a layer's verdict is significant when p < α / (the number of states tested)
   (Bonferroni). A TCAV score means something only where the CAV does (Kim et al. report each CAV's
   accuracy for that reason): the verdict also asks that the CAVs tell the concept from random text
   on held-out examples better than chance — a one-sided binomial test of their held-out predictions
   over the runs at the same corrected level. Without it a fixed set of ordinary sentences, which no
   layer can tell from random ones (held-out accuracy ~0.5), still scored "significant" at five of
   bundled-mlm's seven states (``benchmarks/tcav.py``): one fixed set's noise direction is consistent
   across runs, so its scores cluster away from the null's.

captum's ``TCAV`` computes the same scores on a model wrapped so that its layer is the pooled state
(``tests/causal/test_tcav.py`` holds the two to each other); it is not used here because it writes
its CAVs and activations to disk with ``torch.save`` (pickle) under the working folder.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

import numpy as np
import torch
from scipy import stats

from bertscope.analysis.hidden_cache import pooled_rows
from bertscope.attribution.gradients import Target, input_embeddings, score_function, token_id
from bertscope.core.forward import inspect
from bertscope.core.hook_points import state_hook
from bertscope.core.hooked_pass import feed_of, hooks_on, turn
from bertscope.core.inspection import Inspection
from bertscope.core.layers import Layer, hidden_index, hidden_label
from bertscope.core.models import LoadedModel
from bertscope.core.task_head import TOKEN
from bertscope.corpora.sentences import read_lines_file
from bertscope.errors import BertScopeError

MIN_CONCEPT = 10  # examples a concept needs: a third is held out, and the CAV must be fit on the rest
MAX_CONCEPT = 500
MIN_RUNS = 20  # random CAVs the test needs (the paper's figures use 500 runs at most, its code's examples 20+)
MAX_RUNS = 200
MAX_INPUTS = 500
ALPHA = 0.05
RANDOM_SOURCES = ("brown", "ewt", "topics")
# example concepts, each for the decision it is tried on (the Probes page's defaults, the benchmark's cases)
EXAMPLES: dict[str, tuple[str, tuple[str, ...]]] = {
    "praise": ("a sequence classifier's positive class", (
        "What a wonderful, moving film.", "I loved every minute of it.", "A brilliant and delightful story.",
        "The acting was superb.", "An excellent, beautiful piece of work.", "Truly a joy to watch.",
        "The best meal I have had in years.", "Fantastic service and a lovely room.", "A masterpiece, warm and funny.",
        "I would happily see it again.", "Charming, clever and great fun.", "The music was gorgeous.",
        "She gave an outstanding performance.", "It was a perfect evening.", "Highly recommended to everyone.")),
    "action": ("a tagger's VERB", (
        "She ran across the field and jumped the fence.", "They swam, climbed and cycled all day.",
        "He grabbed the rope and pulled hard.", "The children danced and sang in the hall.",
        "We hiked up the hill and camped there.", "The dog chased the ball and caught it.",
        "I cooked dinner and washed the dishes.", "They built a boat and sailed it.",
        "She painted the wall and fixed the door.", "He kicked the ball and scored.",
        "The crowd cheered and clapped loudly.", "We packed our bags and drove off.",
        "The workers dug a trench and laid pipes.", "She wrote a letter and mailed it.",
        "They planted trees and watered them.")),
    "water": ("a masked LM's 'river'", (
        "The water ran cold over the stones.", "Fish swam in the shallow stream.", "Boats drifted down the current.",
        "The lake was calm at dawn.", "Rain filled the creek to its banks.", "We paddled a canoe through the rapids.",
        "The waterfall roared in the valley.", "Ducks floated on the pond.", "The tide carried the raft downstream.",
        "A bridge crossed the flowing water.", "Reeds grew along the muddy shore.", "The flood waters rose overnight.",
        "Salmon leapt up the falls.", "The ferry crossed to the far bank.", "Willows leaned over the brook.")),
}


@dataclass(frozen=True)
class LayerVerdict:
    state: int  # hidden state: 0 is the embeddings, l + 1 is layer l's output
    layer: str | int  # "embeddings", or the layer, from 0
    scores: list[float]  # [run] TCAV of the concept against each random set
    random_scores: list[float]  # [run] TCAV of random set r - 1 against random set r
    cav_accuracy: float  # the concept's CAVs' mean held-out accuracy
    p_value: float  # the t-test of the scores against the random CAVs'
    cav_p_value: float  # the binomial test of the CAVs' held-out predictions against chance (one-sided)
    significant: bool  # both below alpha / the number of states

    @property
    def tcav(self) -> float:
        return float(np.mean(self.scores))

    def to_json(self) -> dict:
        return {"layer": self.layer, "tcav": self.tcav, "tcav_std": float(np.std(self.scores)),
                "random_tcav": float(np.mean(self.random_scores)), "cav_accuracy": self.cav_accuracy,
                "p_value": self.p_value, "cav_p_value": self.cav_p_value, "significant": self.significant}


@dataclass(frozen=True)
class TcavResult:
    model: str
    concept: str
    target: str
    runs: int
    inputs: int
    alpha: float  # before the correction; each layer is tested at alpha / len(layers)
    layers: list[LayerVerdict] = field(default_factory=list)

    def to_json(self) -> dict:
        return {"model": self.model, "concept": self.concept, "target": self.target, "runs": self.runs,
                "inputs": self.inputs, "alpha": self.alpha, "corrected_alpha": self.alpha / max(1, len(self.layers)),
                "layers": [v.to_json() for v in self.layers]}


def read_examples(path: str | Path, what: str = "concept", least: int = MIN_CONCEPT) -> list[str]:
    """A file's distinct non-empty lines (UTF-8), at least ``least`` and at most ``MAX_CONCEPT``."""
    lines = read_lines_file(path, f"No {what} file {str(path)!r}: give a UTF-8 text file, one example a line.")
    return check_examples(lines, what, least)


def check_examples(texts: Sequence[str], what: str = "concept", least: int = MIN_CONCEPT) -> list[str]:
    texts = list(dict.fromkeys(t.strip() for t in texts if t and t.strip()))
    if len(texts) < least:
        why = " (a third is held out to check its CAV)" if what == "concept" else ""
        raise BertScopeError(f"The {what} has {len(texts)} distinct examples; the test needs at least {least}{why}.")
    if len(texts) > MAX_CONCEPT:
        raise BertScopeError(f"The {what} has {len(texts):,} examples; the limit is {MAX_CONCEPT}.")
    return texts


@lru_cache(maxsize=4)  # the app counts a test's pieces, then runs it: one read of the corpus for both
def _corpus_texts(source: str, size: int, seed: int) -> tuple[str, ...]:
    """An installed corpus's texts (``RANDOM_SOURCES``), enough for ``size`` (Brown's drawn by ``seed``)."""
    if source == "brown":
        from bertscope.corpora.brown_tasks import brown_texts

        return tuple(brown_texts(max(2 * size, 500), seed))
    if source == "ewt":
        from bertscope.corpora.ewt import read_ewt

        return tuple(" ".join(s.tokens) for s in read_ewt("train"))
    from bertscope.corpora.topics import read_topics

    return tuple(t[:600] for t in read_topics().texts)


def random_pool(source: str, size: int, seed: int = 0, exclude: Sequence[str] = ()) -> list[str]:
    """``size`` texts from an installed corpus (``RANDOM_SOURCES``) or a file, none of ``exclude``."""
    if source in RANDOM_SOURCES:
        texts: Sequence[str] = _corpus_texts(source, size, seed)
    elif Path(source).is_file():
        texts = read_examples(source, "random set")
    else:
        raise BertScopeError(f"No random source {source!r}: give {', '.join(RANDOM_SOURCES)}, or a text file.")
    skip = set(exclude)
    texts = [t for t in dict.fromkeys(texts) if t not in skip and t.strip()]
    order = np.random.default_rng(seed).permutation(len(texts))
    if len(texts) < size:
        raise BertScopeError(f"{source} has {len(texts)} usable texts; the random sets need {size}.")
    return [texts[i] for i in order[:size]]


def pooled_states(lm: LoadedModel, texts: Sequence[str],
                  progress: Callable[[int, int], None] | None = None) -> np.ndarray:
    """[text, state, dim] each text's content tokens' mean hidden state, at every state; ``progress(done, total)``
    texts, a batch at a time."""
    out = np.zeros((len(texts), lm.num_layers + 1, lm.hidden_size), np.float32)
    done = 0
    for _, rows, vectors in pooled_rows(lm, list(texts), None, "mean"):
        out[rows] = np.asarray(vectors, dtype=np.float32)  # [example, state, dim]
        done += len(rows)
        if progress:
            progress(done, len(texts))
    return out


def train_cav(concept: np.ndarray, other: np.ndarray, seed: int = 0) -> tuple[np.ndarray, float]:
    """(the unit CAV [dim] pointing to ``concept``, the accuracy on a held-out third of a classifier fit on
    the rest), from [n, dim] each. The CAV is fit on every example (logistic regression: the same CAV
    whatever the examples' order). ``held_out_size(n)`` examples are held out."""
    from sklearn.linear_model import LogisticRegression

    x = np.concatenate([concept, other]).astype(np.float64)  # [n, dim]
    y = np.concatenate([np.ones(len(concept)), np.zeros(len(other))])
    order = np.random.default_rng(seed).permutation(len(x))
    held, train = order[: held_out_size(len(x))], order[held_out_size(len(x)):]
    accuracy = float(LogisticRegression(max_iter=1000).fit(x[train], y[train]).score(x[held], y[held])) \
        if len(set(y[train])) == 2 else float("nan")
    v = LogisticRegression(max_iter=1000).fit(x, y).coef_[0]
    norm = float(np.linalg.norm(v))
    return (v / norm if norm > 0 else v), accuracy


def held_out_size(n: int) -> int:
    """Examples a CAV's check holds out of ``n`` (captum's third, at least two)."""
    return max(2, round(n * 0.33))


@dataclass(frozen=True)
class Decision:
    """One input and the decision explained on it."""

    inspection: Inspection
    target: Target


def decisions(lm: LoadedModel, target: str, texts: Sequence[str] | None = None, n: int = 50, seed: int = 0
              ) -> tuple[list[Decision], str]:
    """(the inputs, the decision's name): a class of a sequence classifier on ``texts`` (by default
    Brown sentences), a tagger's tag at the first word of each text it tags so, or a masked token —
    ``texts`` with [MASK] each, or Brown sentences where the word stands, masked there."""
    if not 1 <= n <= MAX_INPUTS:
        raise BertScopeError(f"Give 1 to {MAX_INPUTS} inputs (N = {n}).")
    task = lm.task
    if task is not None and task.kind == "sequence-classification" and task.scoring != "none":
        if target not in task.labels:
            raise BertScopeError(f"{lm.name} has no class {target!r}: its classes are {', '.join(task.labels)}.")
        if texts is None:
            from bertscope.corpora.brown_tasks import brown_split_texts

            texts = brown_split_texts(n, held_out=True, seed=seed)
        chosen = list(texts)[:n]
        return [Decision(_inspect(lm, t), Target("class", label=target)) for t in chosen], f"class {target}"
    if task is not None and task.kind == TOKEN:
        return _tag_decisions(lm, target, texts, n, seed), f"tag {target}"
    if "mlm" not in lm.outputs:
        raise BertScopeError(f"{lm.name} has neither a masked-LM head, a sequence-classification head nor a tagger's: "
                             "TCAV explains one of their decisions (try bundled-mlm, bundled-sentiment or "
                             "bundled-upos).")
    item = token_id(lm, target)
    if texts is None:
        texts = _brown_with_word(lm, target, n, seed)
    chosen = check_masks(lm, list(texts)[:n])
    out = []
    for text in chosen:
        ins = _inspect(lm, text)
        where = np.flatnonzero(ins.input_ids == lm.tokenizer.mask_token_id)
        out.append(Decision(ins, Target("token", int(where[0]), target, item)))
    if not out:
        raise BertScopeError("No inputs to explain.")
    return out, f"token {target!r}"


def check_masks(lm: LoadedModel, texts: Sequence[str]) -> list[str]:
    """The inputs of a masked LM's decision, "[MASK]" written as the model's own mask token; one line for an input
    without exactly one (read before a job starts: tokenising is cheap)."""
    mask = lm.tokenizer.mask_token
    out = []
    for text in texts:
        text = text.replace("[MASK]", mask)
        ids = lm.tokenizer(text, truncation=True, max_length=lm.max_length, verbose=False)["input_ids"]
        found = sum(1 for i in ids if i == lm.tokenizer.mask_token_id)
        if found != 1:
            raise BertScopeError(f"Each input needs exactly one {mask} (the position whose token is explained); "
                                 f"{text[:60]!r} has {found}.")
        out.append(text)
    return out


def tcav_pieces(lm: LoadedModel, concept: Sequence[str], random_from: str, runs: int, inputs: Sequence[str] | None,
                n_inputs: int, seed: int = 0) -> int:
    """The word pieces ``tcav`` passes through the model: the concept's examples and the ``runs + 1`` random sets
    read once (the sets drawn here as the test draws them), and each input's forward and backward (three passes'
    worth; Brown's inputs, drawn in the job, counted at the random sets' mean length)."""
    def pieces(texts: Sequence[str]) -> list[int]:
        return [len(ids) for ids in lm.tokenizer(list(texts), truncation=True, max_length=lm.max_length,
                                                  verbose=False)["input_ids"]]
    concept = check_examples(concept)
    drawn = pieces(random_pool(random_from, len(concept) * (runs + 1), seed, exclude=concept))
    read = sum(pieces(inputs)) if inputs else n_inputs * int(np.ceil(np.mean(drawn)))
    return sum(pieces(concept)) + sum(drawn) + 3 * read


def _tag_decisions(lm: LoadedModel, tag: str, texts: Sequence[str] | None, n: int, seed: int) -> list[Decision]:
    """A tagger's decision ``tag`` at the first word of each text it tags so (``texts``, by default held-out Brown
    sentences; a text without such a word is passed over)."""
    assert lm.task is not None
    if tag not in lm.task.labels:
        raise BertScopeError(f"{lm.name} has no tag {tag!r}: its tags are {', '.join(lm.task.labels)}.")
    label = list(lm.task.labels).index(tag)
    if texts is None:
        from bertscope.corpora.brown_tasks import brown_split_texts

        texts = brown_split_texts(4 * n, held_out=True, seed=seed)
    out = []
    for text in texts:
        ins = _inspect(lm, text)
        enc = lm.tokenizer(text, truncation=True, max_length=lm.max_length)
        words = enc.word_ids()
        with turn(lm), torch.inference_mode():
            tags = lm.run(feed_of(lm, text)).logits[0].argmax(-1).tolist()  # [token] the tagger's own tags
        first = next((i for i, w in enumerate(words) if w is not None and (i == 0 or words[i - 1] != w)
                      and tags[i] == label), None)
        if first is not None:
            out.append(Decision(ins, Target("tag", first, label=tag)))
        if len(out) == n:
            break
    if not out:
        raise BertScopeError(f"{lm.name} tags no word {tag} in the inputs: give sentences with such a word.")
    return out


def _inspect(lm: LoadedModel, text: str) -> Inspection:
    return inspect(lm, text, None, with_logits=False, with_attentions=False, with_hidden_states=False)


def _brown_with_word(lm: LoadedModel, word: str, n: int, seed: int) -> list[str]:
    """Brown sentences where ``word`` stands as a word, its first place masked."""
    import re

    from bertscope.corpora.brown_tasks import brown_texts

    lower = bool(getattr(lm.tokenizer, "do_lower_case", False))
    pattern = re.compile(rf"(?<![\w-]){re.escape(word)}(?![\w-])", re.IGNORECASE if lower else 0)
    found = []
    for text in brown_texts(20_000, seed):
        m = pattern.search(text)
        if m and len(text) < 400:
            found.append(text[:m.start()] + "[MASK]" + text[m.end():])
            if len(found) == n:
                break
    if len(found) < 2:
        raise BertScopeError(f"Brown has {len(found)} sentences with {word!r}: give inputs with [MASK] (--inputs).")
    return found


def directional_gradients(lm: LoadedModel, items: Sequence[Decision],
                          progress: Callable[[int, int], None] | None = None) -> np.ndarray:
    """[input, state, dim] Σ over every position of ∂f/∂h_t at every hidden state: one forward and one
    backward an input, through the named hook points (a zero vector added at every state)."""
    states = lm.num_layers + 1
    out = np.zeros((len(items), states, lm.hidden_size), np.float32)
    for i, item in enumerate(items):
        f, _ = score_function(lm, item.inspection, item.target)
        x, _ = input_embeddings(lm, item.inspection)
        deltas: dict[int, torch.Tensor] = {}

        def add(state: int):
            def hook(h: torch.Tensor, point) -> torch.Tensor:  # h: [batch, token, dim]
                d = torch.zeros(h.shape[0], 1, h.shape[-1], dtype=h.dtype, device=h.device, requires_grad=True)
                deltas[state] = d
                return h + d  # [batch, 1, dim] broadcast over every position
            return hook

        hooks = {state_hook(lm.model, s): add(s) for s in range(states)}
        with turn(lm), torch.enable_grad(), hooks_on(lm, hooks):
            value = f(x.to(lm.dtype))
            grads = torch.autograd.grad(value.sum(), [deltas[s] for s in range(states)])
        out[i] = torch.stack([g[0, 0].float() for g in grads]).cpu().numpy()  # [state, dim]
        if progress:
            progress(i + 1, len(items))
    return out


def tcav(lm: LoadedModel, concept: Sequence[str], target: str, *, name: str = "concept",
         random_from: str = "brown", runs: int = MIN_RUNS, inputs: Sequence[str] | None = None, n_inputs: int = 50,
         layers: Sequence[Layer] | None = None, alpha: float = ALPHA, seed: int = 0,
         progress: Callable[[int, int], None] | None = None) -> TcavResult:
    """TCAV of ``concept`` (its examples) for ``target`` (a class, or a masked token) at each hidden state
    in ``layers`` (layers from 0, or "embeddings"; by default every state), ``runs`` random sets from
    ``random_from``.

    Args:
        lm: a sequence classifier, a tagger, or a masked LM.
        concept: the concept's examples (at least ``MIN_CONCEPT``).
        target: a class, a tag, or the word a masked LM predicts at [MASK].
        name: the concept's name, for the result.
        random_from: where the random sets come from: brown, ewt, topics, or a text file.
        runs: random sets (at least ``MIN_RUNS``).
        inputs: the inputs whose decision is tested (default: Brown sentences).
        n_inputs: how many.
        layers: hidden states tested (default every one).
        alpha: the test's level before Bonferroni.
        seed: the random sets' and the CAVs' seed.
        progress: called with (done, total).

    Returns:
        ``TcavResult``: a ``LayerVerdict`` a state (scores, random scores, CAV accuracy, p-values, verdict).
    """
    concept = check_examples(concept)
    if not MIN_RUNS <= runs <= MAX_RUNS:
        raise BertScopeError(f"The test takes {MIN_RUNS} to {MAX_RUNS} runs (random sets); {runs} given.")
    if not 0 < alpha < 1:
        raise BertScopeError(f"alpha is a probability between 0 and 1, not {alpha}.")
    chosen = list(range(lm.num_layers + 1)) if layers is None else sorted({hidden_index(x, lm.num_layers)
                                                                           for x in layers})
    items, decision = decisions(lm, target, inputs, n_inputs, seed)
    size = len(concept)
    pool = random_pool(random_from, size * (runs + 1), seed, exclude=concept)
    read = len(items) + len(concept)  # the steps before the random sets': inputs, then the concept's examples
    steps = read + len(pool) + len(chosen)  # ... and a CAV fit a layer
    if progress:
        progress(0, steps)
    grads = directional_gradients(lm, items, (lambda d, t: progress(d, steps)) if progress else None)
    acts = pooled_states(lm, concept, (lambda d, t: progress(len(items) + d, steps)) if progress else None)
    randoms = pooled_states(lm, pool, (lambda d, t: progress(read + d, steps)) if progress else None).reshape(
        runs + 1, size, lm.num_layers + 1, lm.hidden_size)  # [set, example, state, dim]
    corrected = alpha / len(chosen)
    verdicts = []
    for s in chosen:
        g = grads[:, s]  # [input, dim]
        scores, random_scores, accuracy = [], [], []
        for r in range(1, runs + 1):
            v, acc = train_cav(acts[:, s], randoms[r, :, s], seed + r)
            scores.append(float(np.mean(g @ v > 0)))
            accuracy.append(acc)
            w, _ = train_cav(randoms[r - 1, :, s], randoms[r, :, s], seed + r)
            random_scores.append(float(np.mean(g @ w > 0)))
        with warnings.catch_warnings():  # scores all alike (a layer where every input agrees): p is 1 below, said
            warnings.simplefilter("ignore", RuntimeWarning)
            test = stats.ttest_ind(scores, random_scores)
        p = float(test.pvalue) if np.isfinite(test.pvalue) else 1.0  # identical constant scores: no evidence
        held = held_out_size(2 * size) * runs
        right = int(round(float(np.sum(accuracy)) * held_out_size(2 * size)))
        cav_p = float(stats.binomtest(right, held, 0.5, alternative="greater").pvalue)
        verdicts.append(LayerVerdict(s, hidden_label(s), scores, random_scores, float(np.mean(accuracy)), p, cav_p,
                                     p < corrected and cav_p < corrected))
        if progress:
            progress(read + len(pool) + len(verdicts), steps)
    return TcavResult(lm.name, name, decision, runs, len(items), alpha, verdicts)
