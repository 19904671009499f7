"""``bundled-mlm``: the bundled all-MiniLM-L6-v2 with a masked-LM head, trained by BertScope.

all-MiniLM-L6-v2 ships without a masked-LM head, so offline no masked-token view had anything
to show. ``bundled-mlm`` is that encoder after BERT's own recipe (``bertscope.training``): 16 epochs
of dynamic 80/10/10 masked-LM on the Brown corpus (1961 American English; 90% of each
genre's documents, the rest held out), LoRA r=16 on the attention and feed-forward
projections, with the head's transform, every LayerNorm and the output bias trained in full
(852,666 weights). The shipped delta (``data/bundled_mlm/``: adapter + extras, 3.4 MB, with
the run's metrics.json and curves.png and a README giving the exact command) is merged onto
the bundled package's weights on first use and saved as a standard transformers folder in
``<user cache>/models/`` (a few seconds, once). Held-out top-1 0.36, top-5 0.53 on the masked
positions of held-out Brown documents: a demonstration of the recipe, not Google's BERT.
"""

from __future__ import annotations

import hashlib
import threading
from pathlib import Path

from bertscope.runtime.user_cache import user_cache_dir
from bertscope.sources.delta import apply_delta
from bertscope.sources.minilm import BUNDLED_ORIGIN, bundled_model_dir
from bertscope.sources.presets import BUNDLED_MLM

DELTA = Path(__file__).resolve().parents[1] / "data" / "bundled_mlm"
ORIGIN = f"{BUNDLED_ORIGIN} + BertScope's masked-LM delta (Brown corpus)"
CARD_NOTE = ("bundled-mlm is all-MiniLM-L6-v2 adapted to masked-LM on 1961 American English (the Brown "
             "corpus) by BertScope (LoRA r=16 + head, 16 epochs): held-out top-1 0.36 / top-5 0.53 on masked "
             "positions. A demonstration of BERT's recipe, not Google's BERT.")
DELTA_FILES = ("adapter_config.json", "adapter_model.safetensors", "extras.safetensors")
_BUILDING = threading.Lock()


def delta_digest() -> str:
    h = hashlib.sha256()
    for name in DELTA_FILES:
        h.update((DELTA / name).read_bytes())
    return h.hexdigest()[:12]


def bundled_mlm_dir() -> Path:
    """The merged model folder, built from the bundled package and the delta once."""
    folder = user_cache_dir() / "models" / f"{BUNDLED_MLM}-{delta_digest()}"
    if (folder / "config.json").is_file() and (folder / "model.safetensors").is_file():
        return folder
    with _BUILDING:  # sessions of one process build it once; the folder appears by a rename
        if not (folder / "model.safetensors").is_file():
            apply_delta(str(bundled_model_dir()), DELTA, folder)
    return folder
