"""Dictionary features: sparse autoencoders on an encoder layer's output.

``sae`` (a TopK sparse autoencoder, Gao et al. 2024, saved and loaded in SAELens's on-disk format),
``activations`` (a layer's token activations over a corpus, kept on disk), ``training`` (the TopK
trainer with AuxK against dead latents), ``quality`` (what SAEBench reports: variance explained, L0,
dead and dense latents, the masked-LM loss with the reconstruction spliced in), ``active`` (the
features that fire on each word piece of a text). Every pass goes through the model's hook points
(``blocks.{l}.hook_resid_post``: layer l's output, as everywhere).
May import: ``errors``, ``runtime``, ``sources``, ``corpora``, ``core``, ``outputs``, ``analysis``,
``training``, ``interventions`` (BERT's seeded masking for the spliced-in loss).
"""

from bertscope.runtime.exports import lazy_exports

_EXPORTS = {
    "TopKSAE": "features.sae",
    "load_sae": "features.sae",
    "save_sae": "features.sae",
    "layer_activations": "features.activations",
    "train_sae": "features.training",
    "sae_quality": "features.quality",
    "active_features": "features.active",
}
__all__ = list(_EXPORTS)
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
