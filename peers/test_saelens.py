"""SAELens 6.54 and BertScope read and write the same SAE files (run in ``.venv-saelens``: sae-lens requires
transformer-lens<4). Every shipped SAE opens in SAELens and encodes and decodes as BertScope does; an SAE trained
by SAELens's own trainer on BertScope's cached activations opens in BertScope and its feature browser."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from sae_lens import SAE, TopKTrainingSAE, TopKTrainingSAEConfig
from sae_lens.config import SAETrainerConfig
from sae_lens.training.sae_trainer import SAETrainer

from bertscope.corpora.tagged import brown_tagged
from bertscope.features.activations import layer_activations, resid_post
from bertscope.features.contexts import feature_contexts
from bertscope.features.sae import load_sae
from bertscope.features.shipped import SHIPPED, layer_folder, sae_layers
from bertscope.features.statistics import feature_statistics
from peers.conftest import SENTENCES
from peers.references import batches

SHIPPED_LAYERS = sae_layers(SHIPPED["bundled-mlm"])


def _states(lm, layer: int) -> torch.Tensor:
    feed = dict(lm.tokenizer(SENTENCES, return_tensors="pt", padding=True))
    _, cache = lm.run_with_cache(feed, names=[resid_post(layer)])
    return cache[resid_post(layer)][feed["attention_mask"].bool()]  # [token, d_model]


@pytest.mark.parametrize("layer", SHIPPED_LAYERS)
def test_every_shipped_sae_opens_in_saelens_and_encodes_as_bertscope_does(mlm, layer):
    folder = layer_folder(SHIPPED["bundled-mlm"], layer)
    theirs = SAE.load_from_disk(str(folder), device="cpu", dtype="float32")
    mine = load_sae(folder)
    assert type(theirs).__name__ == "TopKSAE" and theirs.cfg.d_sae == mine.d_sae and theirs.cfg.k == mine.k
    assert theirs.cfg.metadata.hook_name == resid_post(layer) and theirs.cfg.metadata.model_name == "bundled-mlm"
    x = _states(mlm, layer)
    with torch.no_grad():
        z_theirs, z_mine = theirs.encode(x), mine.encode(x)
        torch.testing.assert_close(z_mine, z_theirs, rtol=0, atol=1e-5)
        torch.testing.assert_close(mine.decode(z_mine), theirs.decode(z_theirs), rtol=0, atol=1e-5)
        torch.testing.assert_close(mine(x), theirs(x), rtol=0, atol=1e-5)
    assert (z_mine > 0).sum(-1).max() <= mine.k


def test_an_sae_trained_by_saelens_on_bertscopes_activations_opens_in_the_feature_browser(mlm, tmp_path):
    layer = 2
    acts = layer_activations(mlm, list(brown_tagged(1500, seed=1).texts), layer, max_tokens=30_000, root=tmp_path / "acts")
    d_in = acts.rows.shape[1]
    sae = TopKTrainingSAE(TopKTrainingSAEConfig(d_in=d_in, d_sae=4 * d_in, k=16, dtype="float32", device="cpu"))
    sae.cfg.metadata.model_name, sae.cfg.metadata.hook_name = "bundled-mlm", resid_post(layer)
    cfg = SAETrainerConfig(total_training_samples=2 * acts.tokens, train_batch_size_samples=1024, lr=1e-3,
                           lr_end=1e-3)  # constant (the runner fills lr_end; the bare trainer wants it given)
    trained = SAETrainer(cfg=cfg, sae=sae, data_provider=batches(acts.rows, 1024)).fit()
    folder = tmp_path / "sae"
    trained.save_inference_model(str(folder))

    mine = load_sae(folder)
    assert mine.architecture == "topk" and mine.k == 16 and mine.info.hook_name == resid_post(layer)
    x = torch.from_numpy(np.asarray(acts.rows[:512], dtype=np.float32))
    with torch.no_grad():
        inference = SAE.load_from_disk(str(folder), device="cpu")
        torch.testing.assert_close(mine(x), inference(x), rtol=0, atol=1e-5)
        explained = 1 - ((mine(x) - x) ** 2).sum() / ((x - x.mean(0)) ** 2).sum()
    assert explained > 0.5  # it learned something, not only opened

    corpus = brown_tagged(200)
    stats = feature_statistics(mlm, {layer: mine}, corpus, root=tmp_path / "stats")[layer]
    feature = int(np.argmax(stats.fires))
    contexts = feature_contexts(mlm, mine, stats, corpus, feature, layer, top=5)
    assert contexts and all(c.text for c in contexts)
