"""Dictionary features: sparse autoencoders on an encoder layer's output.

``sae`` (a TopK sparse autoencoder, Gao et al. 2024, saved and loaded in SAELens's on-disk format),
``shipped`` (where a model's SAEs are: the only list of shipped ones), ``activations`` (a layer's
token activations over a corpus, kept on disk, several layers in one pass), ``trainer`` (the TopK trainer with
AuxK against dead latents), ``checkpoints`` (a trainer's run on disk after every epoch: a killed run resumes to
the uninterrupted run's weights), ``quality`` (what SAEBench reports: variance explained, L0, dead and dense
latents, the masked-LM loss with the reconstruction spliced in; on each source's held-out text), ``active`` (the features that fire on each word
piece of a text), ``directions`` (a feature from the weights alone: logit weights, nearest features,
the features that promote a word), ``statistics`` (one streamed pass over a tagged corpus: top
contexts, histograms, gold-tag labels with precision and recall), ``contexts`` (a feature's top
sentences as a reader sees them), ``edits`` (switch a feature off or steer with it), ``causal`` (does
a tag-labelled feature carry its tag: a probe and masked-token accuracy with it off, beside controls),
``crosscoder`` (a BatchTopK crosscoder over a base and a fine-tuned model's activations at one layer),
``crosscoder_trainer`` (its trainer, the reference's loss), ``model_diff`` (what fine-tuning added, latent by
latent: decoder norms in both models, shared / base-only / fine-tuned-only, Latent Scaling), ``diff_causal``
(does the fine-tuned task model use its fine-tuned-only latents: its accuracy with them off, beside controls),
``diff_reading`` (a crosscoder found, checked and read: the one pass of ``diff-features`` and the Latents tab),
``transcoder`` (TopK and skip transcoders replacing a feed-forward, in circuit-tracer's layout),
``transcoder_training`` (trained layer by layer; the replacement model scored), ``transcoder_tuning`` (the set
tuned end to end on the real model's masked-token predictions), ``transcoder_refit`` (each layer's writes solved by
least squares on its own features, every encoder as trained).
Every pass goes through the model's hook points (``blocks.{l}.hook_resid_post``: layer l's output, as
everywhere).
May import: ``errors``, ``runtime``, ``sources``, ``corpora``, ``core``, ``mlm``, ``analysis``, ``attribution``,
``training``, ``interventions`` (BERT's seeded masking for the spliced-in loss).
"""

from typing import TYPE_CHECKING

from bertscope.runtime.exports import lazy_exports

_EXPORTS = {
    "TopKSAE": "features.sae",
    "load_sae": "features.sae",
    "save_sae": "features.sae",
    "layer_activations": "features.activations",
    "layers_activations": "features.activations",
    "train_sae": "features.trainer",
    "BatchTopKCrosscoder": "features.crosscoder",
    "load_crosscoder": "features.crosscoder",
    "save_crosscoder": "features.crosscoder",
    "train_crosscoder": "features.crosscoder_trainer",
    "diff_models": "features.model_diff",
    "diff_effect": "features.diff_causal",
    "read_diff": "features.diff_reading",
    "shipped_crosscoders": "features.shipped",
    "sae_quality": "features.quality",
    "domain_qualities": "features.quality",
    "active_features": "features.active",
    "shipped_saes": "features.shipped",
    "logit_weights": "features.directions",
    "nearest_features": "features.directions",
    "features_promoting": "features.directions",
    "feature_statistics": "features.statistics",
    "feature_contexts": "features.contexts",
    "FeatureEdit": "features.edits",
    "edit_features": "features.edits",
    "tag_effect": "features.causal",
    "points_activations": "features.activations",
    "Transcoder": "features.transcoder",
    "load_transcoder": "features.transcoder",
    "save_transcoder": "features.transcoder",
    "train_transcoder": "features.transcoder_training",
    "replacement_quality": "features.transcoder_training",
    "TuneConfig": "features.transcoder_tuning",
    "tune_end_to_end": "features.transcoder_tuning",
    "refit_writes": "features.transcoder_refit",
    "transcoder_set": "features.shipped",
}
__all__ = list(_EXPORTS)
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)

if TYPE_CHECKING:  # the same names for a reader's tools (IDEs, type checkers): tools/front_doors.py
    from bertscope.features.activations import layer_activations as layer_activations
    from bertscope.features.activations import layers_activations as layers_activations
    from bertscope.features.activations import points_activations as points_activations
    from bertscope.features.active import active_features as active_features
    from bertscope.features.causal import tag_effect as tag_effect
    from bertscope.features.contexts import feature_contexts as feature_contexts
    from bertscope.features.crosscoder import BatchTopKCrosscoder as BatchTopKCrosscoder
    from bertscope.features.crosscoder import load_crosscoder as load_crosscoder
    from bertscope.features.crosscoder import save_crosscoder as save_crosscoder
    from bertscope.features.crosscoder_trainer import train_crosscoder as train_crosscoder
    from bertscope.features.diff_causal import diff_effect as diff_effect
    from bertscope.features.diff_reading import read_diff as read_diff
    from bertscope.features.directions import features_promoting as features_promoting
    from bertscope.features.directions import logit_weights as logit_weights
    from bertscope.features.directions import nearest_features as nearest_features
    from bertscope.features.edits import FeatureEdit as FeatureEdit
    from bertscope.features.edits import edit_features as edit_features
    from bertscope.features.model_diff import diff_models as diff_models
    from bertscope.features.quality import domain_qualities as domain_qualities
    from bertscope.features.quality import sae_quality as sae_quality
    from bertscope.features.sae import TopKSAE as TopKSAE
    from bertscope.features.sae import load_sae as load_sae
    from bertscope.features.sae import save_sae as save_sae
    from bertscope.features.shipped import shipped_crosscoders as shipped_crosscoders
    from bertscope.features.shipped import shipped_saes as shipped_saes
    from bertscope.features.shipped import transcoder_set as transcoder_set
    from bertscope.features.statistics import feature_statistics as feature_statistics
    from bertscope.features.trainer import train_sae as train_sae
    from bertscope.features.transcoder import Transcoder as Transcoder
    from bertscope.features.transcoder import load_transcoder as load_transcoder
    from bertscope.features.transcoder import save_transcoder as save_transcoder
    from bertscope.features.transcoder_refit import refit_writes as refit_writes
    from bertscope.features.transcoder_training import replacement_quality as replacement_quality
    from bertscope.features.transcoder_training import train_transcoder as train_transcoder
    from bertscope.features.transcoder_tuning import TuneConfig as TuneConfig
    from bertscope.features.transcoder_tuning import tune_end_to_end as tune_end_to_end
