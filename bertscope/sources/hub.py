"""Is the Hugging Face hub reachable, is a model cached, and which model is the default.

A plain ``from_pretrained("bert-base-uncased")`` on a machine without network retries for
about 50 s. BertScope decides reachability once per process with one bounded request
(``HUB_TIMEOUT_S``) and from then on loads with ``local_files_only`` when the hub is out of
reach, so nothing ever hangs on the network.
"""

from __future__ import annotations

import functools
import os
import threading
import urllib.error
import urllib.request

from bertscope.sources.presets import BUNDLED_MLM, PREFERRED_DEFAULT

HUB_TIMEOUT_S = 3.0
_TRUTHY = {"1", "true", "yes", "on"}


def hub_endpoint() -> str:
    return os.environ.get("HF_ENDPOINT", "https://huggingface.co").rstrip("/")


def offline_forced() -> bool:
    """True when the user told the Hugging Face libraries to stay offline."""
    return any(
        os.environ.get(var, "").strip().lower() in _TRUTHY
        for var in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")
    )


def probe_endpoint(url: str, timeout_s: float = HUB_TIMEOUT_S) -> bool:
    """True if ``url`` gives any HTTP answer within ``timeout_s`` (DNS included)."""
    answered = threading.Event()

    def ask() -> None:
        try:
            urllib.request.urlopen(urllib.request.Request(url, method="HEAD"), timeout=timeout_s)
            answered.set()
        except urllib.error.HTTPError:  # a 4xx/5xx is still an answer from the server
            answered.set()
        except Exception:  # noqa: BLE001 - refused, DNS failure, timeout: all mean "no"
            pass

    # urlopen's timeout does not bound the DNS lookup, so the wait is bounded here instead.
    worker = threading.Thread(target=ask, daemon=True)
    worker.start()
    worker.join(timeout_s + 0.5)
    return answered.is_set()


@functools.lru_cache(maxsize=1)
def hub_reachable() -> bool:
    """Decided once per process: later loads never wait on the network again."""
    if offline_forced():
        return False
    return probe_endpoint(hub_endpoint())


def is_cached(repo_id: str) -> bool:
    """True if the local Hugging Face cache holds the config and weights of ``repo_id``."""
    from huggingface_hub import try_to_load_from_cache

    def has(filename: str) -> bool:
        return isinstance(try_to_load_from_cache(repo_id, filename), str)

    try:
        return has("config.json") and (has("model.safetensors") or has("pytorch_model.bin"))
    except Exception:  # noqa: BLE001 - a malformed id is simply "not cached"
        return False


def default_model() -> tuple[str, str | None]:
    """The model to open with, and a notice to show when we fell back to the bundled one.

    ``BERTSCOPE_MODEL`` wins; then bert-base-uncased if cached or the hub answers; else
    ``bundled-mlm``: the bundled encoder with the masked-LM head BertScope trained, so that every
    page (fill-mask, the recipe, the logit lens, why-this-prediction) works offline.

    Args: none; the environment variable ``BERTSCOPE_MODEL``, when set, names the model.

    Returns:
        (the model's name, the notice to show when BertScope fell back to the bundled one, or None).
    """
    chosen = os.environ.get("BERTSCOPE_MODEL", "").strip()
    if chosen:
        return chosen, None
    if is_cached(PREFERRED_DEFAULT) or hub_reachable():
        return PREFERRED_DEFAULT, None
    return BUNDLED_MLM, (
        f"{PREFERRED_DEFAULT} is not in the local Hugging Face cache and the hub is unreachable: "
        "using bundled-mlm, the bundled all-MiniLM-L6-v2 (6 layers, 384 wide) with a masked-LM head that "
        "BertScope trained on the Brown corpus, so every page works offline. It is a small demonstration "
        "model, not Google's BERT."
    )
