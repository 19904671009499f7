"""Where a model's SAEs are: the ones shipped with BertScope (one folder per model, ``layer_LL/`` in
SAELens's format, as ``train-sae --out`` writes them), or a folder of the user's; and the crosscoders shipped
for a base and a model fine-tuned from it (``layer_LL/`` folders as ``train-crosscoder --out`` writes them).

The only lists of shipped dictionaries are ``SHIPPED``, ``SHIPPED_CROSSCODERS`` and ``SHIPPED_TRANSCODERS``: pages,
commands and tests read them.
"""

from __future__ import annotations

from pathlib import Path

from bertscope.errors import BertScopeError

DATA = Path(__file__).resolve().parents[1] / "data"
SHIPPED = {"bundled-mlm": DATA / "bundled_mlm_saes"}  # model -> its SAEs, one layer_LL folder a layer
SHIPPED_CROSSCODERS = {  # (base, fine-tuned) -> its crosscoders, one layer_LL folder a layer (float16)
    ("bundled", "bundled-sentiment"): DATA / "crosscoders" / "bundled_sentiment",
    ("bundled", "bundled-upos"): DATA / "crosscoders" / "bundled_upos",
}
SHIPPED_TRANSCODERS = {  # model -> its transcoder set (layer_{l}.safetensors, circuit-tracer's format, float16)
    "bundled-mlm": DATA / "bundled_mlm_transcoders",
    "bundled-sentiment": DATA / "bundled_sentiment_transcoders",
}
CFG_FILE = "cfg.json"


def layer_folder(out: Path, layer: int) -> Path:
    return Path(out) / f"layer_{layer:02d}"


def shipped_saes(model_name: str) -> Path | None:
    """The folder of the SAEs shipped for a model (one ``layer_LL`` folder a layer), if any.

    Args:
        model_name: the model's name as ``load_model`` takes it ("bundled-mlm").

    Returns:
        The folder (``SHIPPED``), or None when none is shipped for the model or the folder holds none.
    """
    folder = SHIPPED.get(model_name)
    return folder if folder is not None and sae_layers(folder) else None


def sae_layers(folder: Path | str) -> list[int]:
    """The layers with an SAE in ``folder``: its ``layer_LL`` subfolders, or the folder itself when it
    is one SAE (its layer read from its hook name)."""
    folder = Path(folder)
    if (folder / CFG_FILE).is_file():
        from bertscope.features.sae import load_sae_info

        layer = load_sae_info(folder).layer
        return [layer] if layer is not None else []
    if not folder.is_dir():
        return []
    return sorted(int(p.name[6:]) for p in folder.glob("layer_[0-9][0-9]") if (p / CFG_FILE).is_file())


def sae_folder(folder: Path | str, layer: int) -> Path:
    """The SAE of ``layer`` in ``folder`` (a ``train-sae --out`` folder or one SAE's folder); one line
    naming the layers it has when it has not this one."""
    folder = Path(folder)
    if (layer_folder(folder, layer) / CFG_FILE).is_file():
        return layer_folder(folder, layer)
    if (folder / CFG_FILE).is_file():
        return folder
    layers = sae_layers(folder)
    if not layers:
        raise BertScopeError(f"{folder} holds no SAE (SAELens's cfg.json + sae_weights.safetensors, or layer_LL "
                             "folders of them).")
    raise BertScopeError(f"{folder} has no SAE for layer {layer}: it has layers {', '.join(map(str, layers))}.")


def shipped_crosscoders(base: str, tuned: str) -> Path | None:
    """The folder of the crosscoders shipped for ``base`` and ``tuned`` (their ``layer_LL`` folders), if any.

    Args:
        base: the base model's name ("bundled").
        tuned: the fine-tuned model's name ("bundled-sentiment", "bundled-upos").

    Returns:
        The folder (``SHIPPED_CROSSCODERS``), or None when none is shipped for the pair or the folder holds none.
    """
    folder = SHIPPED_CROSSCODERS.get((base, tuned))
    return folder if folder is not None and sae_layers(folder) else None


def transcoder_set(lm, folder: Path | str | None = None, device=None) -> dict:
    """{layer: Transcoder} for every layer of ``lm``: from ``folder``, else the set shipped for it; one line naming
    the command that trains them when there is none.

    Args:
        lm: the model the transcoders replace the feed-forwards of.
        folder: a ``train-transcoders --out`` folder (default: the shipped set).
        device: where the weights go (default the model's).

    Returns:
        {layer: ``features.transcoder.Transcoder``}.
    """
    from bertscope.features.transcoder import load_transcoder

    chosen = Path(folder) if folder is not None else SHIPPED_TRANSCODERS.get(lm.name)
    if chosen is None or not chosen.is_dir():
        where = f"{folder} is not a folder" if folder is not None else f"No transcoders are shipped for {lm.name}"
        raise BertScopeError(f"{where}: train them with `bertscope train-transcoders {lm.name} --out FOLDER` and "
                             "give --transcoders FOLDER.")
    out = {layer: load_transcoder(chosen, layer, device or lm.device).eval() for layer in range(lm.num_layers)}
    for tc in out.values():
        tc.check_for(lm)
    return out


def held_out_seed(transcoders) -> int | None:
    """The seed a transcoder set's held-out side was drawn with (``train-transcoders --seed``, recorded in each layer):
    the side it was trained apart from, which scoring, refitting and tuning it must keep whatever seed moves their
    masking (another seed draws another side, part of it text the set was trained on).

    Args:
        transcoders: {layer: ``features.transcoder.Transcoder``}, as ``transcoder_set`` gives them.

    Returns:
        the recorded seed, or None for a set that records none.

    Raises:
        BertScopeError: one line when the layers were trained apart from different sides, or some record a seed and
            others none (which side those were trained apart from is unknown).
    """
    recorded = {layer: tc.info.extra.get("seed") for layer, tc in sorted(transcoders.items())}
    seeds = sorted({seed for seed in recorded.values() if seed is not None})
    if len(seeds) > 1:
        raise BertScopeError(f"The set's layers were trained with the seeds {', '.join(map(str, seeds))}, apart from "
                             "different held-out texts: train them with one --seed to score, refit or tune the set.")
    unknown = [str(layer) for layer, seed in recorded.items() if seed is None]
    if seeds and unknown:
        many = len(unknown) > 1
        raise BertScopeError(f"Layer{'s' if many else ''} {', '.join(unknown)} of the set record{'' if many else 's'} no "
                             f"seed where the others record {seeds[0]}: which texts {'they were' if many else 'it was'} "
                             f"trained apart from is unknown; train {'them' if many else 'it'} again with --seed "
                             f"{seeds[0]} to score, refit or tune the set.")
    return seeds[0] if seeds else None
