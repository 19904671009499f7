"""What an attribution, an ablation or a faithfulness test explains: a ``Target`` (one decision of
the model: a masked-token prediction, NSP/SOP, a probe's class, or a fine-tuned model's class,
token label or answer span) and the command line's way of writing one."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from bertscope.errors import BertScopeError

# a fine-tuned model's decisions (``attribution.task_targets`` scores them)
TASK_TARGETS = ("class", "tag", "start", "end", "span")


@dataclass(frozen=True)
class Target:
    """What is attributed."""

    kind: Literal["token", "nsp", "sop", "probe", "class", "tag", "start", "end", "span"]
    position: int | None = None  # token / tag: the position; probe (word level): a token of the word;
    # start / end / span: the answer's first (start, span) or last (end) token
    token: str | None = None  # token: the vocabulary item whose log-probability is explained
    token_id: int | None = None  # token: its id (found from ``token`` when not given)
    layer: int | str | None = None  # probe: the layer it reads, a block number or "embeddings" (core.layers)
    label: str | None = None  # probe / class / tag: the class (None: the model's own decision)
    probe_dir: str | None = None
    end: int | None = None  # span: the answer's last token

    def to_json(self) -> dict:
        return {k: v for k, v in self.__dict__.items() if v is not None}

    def describe(self) -> str:
        """One phrase for a person: 'the prediction "river" at token 5', 'NSP (IsNext)', …"""
        if self.kind == "token":
            what = f'"{self.token}"' if self.token else "the top prediction"
            return f"the prediction {what} at token {self.position}"
        if self.kind in ("nsp", "sop"):
            return {"nsp": "next-sentence prediction (IsNext)", "sop": "sentence order (in order)"}[self.kind]
        if self.kind == "class":
            return f'the class "{self.label}"' if self.label else "the predicted class"
        if self.kind == "tag":
            return f'the label "{self.label}" of token {self.position}' if self.label else \
                f"the predicted label of token {self.position}"
        if self.kind in ("start", "end"):
            return f"the answer's {self.kind} at token {self.position}"
        if self.kind == "span":
            return f"the answer span, tokens {self.position}-{self.end}"
        where = "" if self.position is None else f" at token {self.position}"
        return f'the probe\'s class "{self.label}" at layer {self.layer}{where}'


def parse_target(spec: str | None, probe_dir: str | None = None, layer: int | str | None = None,
                 label: str | None = None, position: int | None = None) -> Target | None:
    """The CLI's target: ``POSITION:TOKEN``, ``POSITION`` (the model's top prediction), ``nsp``,
    or a probe (run folder, layer, class)."""
    if probe_dir is not None:
        if layer is None or label is None:
            raise BertScopeError("A probe target needs --layer and --class.")
        return Target("probe", position=position, layer=layer, label=label, probe_dir=probe_dir)
    if spec is None:
        return None
    if spec.strip().lower() in ("nsp", "sop"):
        return Target(spec.strip().lower())
    kind, _, rest = spec.strip().partition(":")
    if kind in TASK_TARGETS:
        return parse_task_target(kind, rest, spec)
    where, _, token = spec.partition(":")
    try:
        pos = int(where)
    except ValueError:
        raise BertScopeError(f"--target {spec!r}: use POSITION:TOKEN (e.g. 5:river), POSITION, nsp or sop; for a task "
                             "model class[:LABEL], tag:POSITION[:LABEL], start[:POSITION], end[:POSITION] or span.") from None
    return Target("token", pos, token or None)


def parse_task_target(kind: str, rest: str, spec: str) -> Target:
    """``class[:LABEL]``, ``tag:POSITION[:LABEL]``, ``start[:POSITION]``, ``end[:POSITION]``, ``span``."""
    def position(text: str) -> int:
        try:
            return int(text)
        except ValueError:
            raise BertScopeError(f"--target {spec!r}: {text!r} is not a token position (a number from 0).") from None

    if kind == "class":
        return Target("class", label=rest or None)
    if kind == "tag":
        where, _, label = rest.partition(":")
        if not where:
            raise BertScopeError(f"--target {spec!r}: tag needs a token position, tag:POSITION[:LABEL].")
        return Target("tag", position(where), label=label or None)
    if kind == "span":
        if rest:
            raise BertScopeError(f"--target {spec!r}: span explains the best answer; it takes no position.")
        return Target("span")
    return Target(kind, position(rest) if rest else None)
