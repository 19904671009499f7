"""The peers' side of each comparison, written from their documentation on the Hugging Face model alone (the
lane's tests and ``benchmarks/peers.py`` share them): captum's integrated gradients set up as its BERT tutorial
does, nnsight's patching grids (one trace per row, one invoke per cell), SAELens's data provider, pyvene's interchange interventions."""

from __future__ import annotations

import itertools

import numpy as np
import torch

MASKED = "The capital of France is [MASK], a city on the Seine."
ANSWER = "paris"
CLEAN = "The keys to the old cabinet [MASK] on the table."
CORRUPT = "The key to the old cabinet [MASK] on the table."
CANDIDATES = ("are", "is")


def captum_setup(lm, text=MASKED, answer=ANSWER, head_at_position: bool = False):
    """(f on input embeddings, f on ids, ids, the baseline's ids, the answer's position) as captum's BERT
    tutorial builds them: the baseline keeps [CLS], [SEP] and [MASK] and puts [PAD] everywhere else.
    ``head_at_position``: f runs the encoder and BERT's masked-LM head at [MASK] alone (as BertScope does)."""
    tok, model = lm.tokenizer, lm.model
    enc = {k: v.to(lm.device) for k, v in tok(text, return_tensors="pt").items()}
    ids = enc["input_ids"]
    keep = torch.tensor(tok.get_special_tokens_mask(ids[0].tolist(), already_has_special_tokens=True)).bool().to(ids.device)
    keep |= ids[0] == tok.mask_token_id
    base_ids = torch.where(keep, ids[0], torch.full_like(ids[0], tok.pad_token_id))[None]
    pos = int((ids[0] == tok.mask_token_id).nonzero()[0])
    item = tok.convert_tokens_to_ids(answer)
    extra = {k: v for k, v in enc.items() if k != "input_ids"}

    def logits(**inputs):  # [b, vocab] at [MASK]
        if head_at_position:
            return model.cls(model.bert(**inputs).last_hidden_state[:, pos])
        return model(**inputs).logits[:, pos]

    def on_embeddings(e):
        rows = {k: v.expand(e.shape[0], -1) for k, v in extra.items()}
        return torch.log_softmax(logits(inputs_embeds=e, **rows), -1)[:, item]

    def on_ids(i):
        rows = {k: v.expand(i.shape[0], -1) for k, v in extra.items()}
        return torch.log_softmax(logits(input_ids=i, **rows), -1)[:, item]

    return on_embeddings, on_ids, ids, base_ids, pos


def wrapped(lm):
    from nnsight import TransformersModel

    return TransformersModel(lm.model, tokenizer=lm.tokenizer, task="fill-mask")


def _setup(lm):
    tok = lm.tokenizer
    clean, corrupt = ({k: v.to(lm.device) for k, v in tok(t, return_tensors="pt").items()} for t in (CLEAN, CORRUPT))
    pos = int((corrupt["input_ids"][0] == tok.mask_token_id).nonzero()[0])
    a, b = tok.convert_tokens_to_ids(list(CANDIDATES))
    return clean, corrupt, pos, a, b


def nnsight_metrics(lm, model=None) -> tuple[float, float]:
    """(m_clean, m_corrupt): the logit difference at [MASK] of each run, through nnsight."""
    model = model or wrapped(lm)
    clean, corrupt, pos, a, b = _setup(lm)
    found = []
    with torch.no_grad():
        for feed in (clean, corrupt):
            with model.trace(**feed):
                logits = model.output.logits
                found.append((logits[0, pos, a] - logits[0, pos, b]).save())
    return float(found[0]), float(found[1])


def nnsight_hidden_grid(lm, model=None) -> np.ndarray:
    """[state, position] logit differences: hidden state s ("embeddings", then each layer's output) at one
    position taken from the clean run."""
    model = model or wrapped(lm)
    clean, corrupt, pos, a, b = _setup(lm)
    base = model.bert if hasattr(model, "bert") else model.base_model
    sources = [base.embeddings, *base.encoder.layer]
    states: list = []
    with torch.no_grad():
        with model.trace(**clean):
            for module in sources:
                states.append(module.output.save())
        states = [s[0] if isinstance(s, tuple) else s for s in states]
        grid = np.zeros((len(sources), clean["input_ids"].shape[1]))
        for s, module in enumerate(sources):
            cells: list = []
            with model.trace() as tracer:
                for p in range(grid.shape[1]):
                    with tracer.invoke(**corrupt):
                        out = module.output
                        (out[0] if isinstance(out, tuple) else out)[:, p, :] = states[s][:, p, :]
                        logits = model.output.logits
                        cells.append((logits[0, pos, a] - logits[0, pos, b]).save())
            grid[s] = [float(c) for c in cells]
    return grid


def nnsight_head_grid(lm, model=None) -> np.ndarray:
    """[layer, head] logit differences: one head's context (the input of W_O) at every position from the clean run.
    (nnsight serves every module's ``.output``: BERT's submodules called ``output`` are ``.E_output``.)"""
    model = model or wrapped(lm)
    clean, corrupt, pos, a, b = _setup(lm)
    base = model.bert if hasattr(model, "bert") else model.base_model
    layers, heads = base.encoder.layer, lm.num_heads
    d = lm.model.config.hidden_size // heads
    contexts: list = []
    with torch.no_grad():
        with model.trace(**clean):
            for layer in layers:
                contexts.append(layer.attention.E_output.dense.input.save())
        grid = np.zeros((len(layers), heads))
        for i, layer in enumerate(layers):
            cells: list = []
            with model.trace() as tracer:
                for h in range(heads):
                    with tracer.invoke(**corrupt):
                        layer.attention.E_output.dense.input[:, :, h * d:(h + 1) * d] = contexts[i][:, :, h * d:(h + 1) * d]
                        logits = model.output.logits
                        cells.append((logits[0, pos, a] - logits[0, pos, b]).save())
            grid[i] = [float(c) for c in cells]
    return grid


def batches(rows: np.ndarray, batch: int):
    """SAELens's data provider: an endless iterator of [batch, d_in] float32 tensors, from BertScope's cache."""
    generator = np.random.default_rng(0)
    for _ in itertools.count():
        order = generator.permutation(len(rows))
        for start in range(0, len(order) - batch + 1, batch):
            yield torch.from_numpy(np.asarray(rows[np.sort(order[start:start + batch])], dtype=np.float32))


def pyvene_model(pv, lm, layer: int, intervention, units: int = 1):
    """pyvene's ``IntervenableModel`` with ``intervention`` on block ``layer``'s output, reached by its module
    path as pyvene's docs do for a model it has no mapping for."""
    config = pv.IntervenableConfig(representations=[{
        "layer": layer, "component": f"bert.encoder.layer[{layer}].output", "unit": "pos",
        "max_number_of_units": units, "intervention": intervention}])
    return pv.IntervenableModel(config, lm.model)


def pyvene_batch_margins(model, prepared, rows):
    """[rows] logit(answer) − logit(foil) at each base's [MASK] from pyvene's intervenable ``model``, one source
    a base, at the pairs' aligned positions."""
    chosen = [prepared.rows[i] for i in rows]
    base = {k: torch.cat([r.clean_feed[k] for r in chosen]) for k in chosen[0].clean_feed}
    source = {k: torch.cat([r.corrupted_feed[k] for r in chosen]) for k in chosen[0].corrupted_feed}
    at = [[list(prepared.positions[i]) for i in rows]]
    _, out = model(base, [source], unit_locations={"sources->base": (at, at)})
    every = torch.arange(len(rows))
    mask = torch.tensor([r.position for r in chosen])
    answer, foil = torch.tensor([r.ids[0] for r in chosen]), torch.tensor([r.ids[1] for r in chosen])
    return out.logits[every, mask, answer] - out.logits[every, mask, foil]


def pyvene_margins(pv, lm, prepared, rows, layer: int, weight=None, intervention=None):
    """``pyvene_batch_margins`` with pyvene's ``LowRankRotatedSpaceIntervention`` of rotation ``weight``
    [d_model, k] (or the given ``intervention``) on block ``layer``'s output, as pyvene's DAS tutorials set it
    up: the model at its module path, one source."""
    if intervention is None:
        intervention = pv.LowRankRotatedSpaceIntervention(embed_dim=lm.hidden_size, low_rank_dimension=weight.shape[1])
        intervention.rotate_layer.weight = weight.clone()
    model = pyvene_model(pv, lm, layer, intervention, len(prepared.positions[rows[0]]))
    return pyvene_batch_margins(model, prepared, rows)
