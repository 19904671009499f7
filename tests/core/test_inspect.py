"""One forward pass -> one result: parity with a plain Hugging Face forward, padding, limits."""

from __future__ import annotations

import threading

import numpy as np
import pytest
import torch
from torch.testing import assert_close

from bertscope import BertScopeError, inspect, inspect_batch, load_model


def hf_forward(model_class, folder, tokenizer, text, pair=None):
    model = model_class.from_pretrained(folder, attn_implementation="eager").eval()
    enc = tokenizer(text, pair, return_tensors="pt")
    with torch.no_grad():
        return model(**enc, output_attentions=True, output_hidden_states=True)


def test_parity_with_hugging_face_pretraining(tiny_bert, tiny_bert_dir):
    from transformers import BertForPreTraining

    text, pair = "the bank of the river is muddy .", "she deposited money ."
    ours = inspect(tiny_bert, text, pair)
    ref = hf_forward(BertForPreTraining, tiny_bert_dir, tiny_bert.tokenizer, text, pair)
    assert_close(torch.from_numpy(ours.attentions), torch.stack(ref.attentions)[:, 0])
    assert_close(torch.from_numpy(ours.hidden_states), torch.stack(ref.hidden_states)[:, 0])
    assert_close(torch.from_numpy(ours.mlm_logits), ref.prediction_logits[0])
    assert_close(torch.from_numpy(ours.nsp_logits), ref.seq_relationship_logits[0])
    n, L, A = ours.n_tokens, tiny_bert.num_layers, tiny_bert.num_heads
    assert ours.attentions.shape == (L, A, n, n)
    assert ours.hidden_states.shape == (L + 1, n, tiny_bert.hidden_size)
    assert ours.mlm_logits.shape == (n, tiny_bert.vocab_size)
    assert ours.attentions.dtype == np.float32


def test_parity_with_hugging_face_roberta(tiny_roberta_dir):
    from transformers import RobertaForMaskedLM

    lm = load_model(str(tiny_roberta_dir))
    text = "The bank of the river was muddy."
    ours = inspect(lm, text)
    ref = hf_forward(RobertaForMaskedLM, tiny_roberta_dir, lm.tokenizer, text)
    assert_close(torch.from_numpy(ours.attentions), torch.stack(ref.attentions)[:, 0])
    assert_close(torch.from_numpy(ours.mlm_logits), ref.logits[0])
    assert ours.nsp_logits is None


def test_segments_word_ids_and_special_tokens(tiny_bert):
    r = inspect(tiny_bert, "the bank", "a river")
    assert r.tokens == ["[CLS]", "the", "bank", "[SEP]", "a", "river", "[SEP]"]
    assert r.token_type_ids.tolist() == [0, 0, 0, 0, 1, 1, 1]
    assert r.sequence_ids == [None, 0, 0, None, 1, 1, None]
    assert r.word_ids == [None, 0, 1, None, 0, 1, None]
    assert r.special_mask.tolist() == [True, False, False, True, False, False, True]


def test_attention_rows_sum_to_one(tiny_bert):
    r = inspect(tiny_bert, "the man walked along the river with his dog .")
    assert_close(r.attentions.sum(-1), np.ones(r.attentions.shape[:-1], np.float32))


def test_batch_padding_excluded_and_items_match_single_runs(tiny_bert):
    texts = ["the bank .", "the man walked along the river bank with the dog ."]
    batches = list(inspect_batch(tiny_bert, texts, batch_size=2))
    assert len(batches) == 1
    b = batches[0]
    assert sorted(b.indices) == [0, 1]
    short = b.indices.index(0)
    pad = ~b.attention_mask[short]  # [token]
    assert pad.any(), "the short sentence must be padded in this batch"
    # pad keys get no attention; real keys of every real query row sum to one
    assert np.abs(b.attentions[short][..., pad]).max() < 1e-6
    real = b.attention_mask[short]
    rows = b.attentions[short][:, :, real][:, :, :, real].sum(-1)
    assert_close(rows, np.ones_like(rows))
    for row, original in enumerate(b.indices):
        alone = inspect(tiny_bert, texts[original], with_logits=False)
        item = b.item(row)
        assert item.tokens == alone.tokens
        assert_close(item.attentions, alone.attentions, atol=1e-5, rtol=1e-4)
        assert_close(item.hidden_states, alone.hidden_states, atol=1e-5, rtol=1e-4)


def test_batches_stream_in_length_order_and_cover_everything(tiny_bert):
    texts = ["the bank of the river is muddy and steep .", "a dog .", "the cat sat .", "hello"]
    batches = list(inspect_batch(tiny_bert, texts, batch_size=3))
    assert [len(b) for b in batches] == [3, 1]
    assert sorted(i for b in batches for i in b.indices) == [0, 1, 2, 3]
    assert batches[-1].indices == [0]  # the longest comes last


def test_truncation_warns(tiny_bert):
    text = " ".join(["the river bank"] * 30)  # 90 words, the model takes 40 tokens
    r = inspect(tiny_bert, text)
    assert r.truncated and r.n_tokens == tiny_bert.max_length == 40
    assert r.original_length == 92
    assert r.warnings and "92 tokens" in r.warnings[0] and "first 40" in r.warnings[0]
    assert r.tokens[-1] == "[SEP]"


def test_no_logits_without_heads(tiny_encoder_dir):
    r = inspect(load_model(str(tiny_encoder_dir)), "the bank")
    assert r.mlm_logits is None and r.nsp_logits is None


@pytest.mark.parametrize("text", ["", "   ", "\n\t", None])
def test_empty_text_is_an_error(tiny_bert, text):
    with pytest.raises(BertScopeError, match="empty"):
        inspect(tiny_bert, text)


def test_bad_batch_inputs(tiny_bert):
    with pytest.raises(BertScopeError, match="empty"):
        inspect(tiny_bert, "the bank", "  ")
    with pytest.raises(BertScopeError, match="characters"):
        inspect(tiny_bert, "a" * 100_001)
    with pytest.raises(BertScopeError, match="sentence 2 is empty"):
        list(inspect_batch(tiny_bert, ["the bank", ""]))
    with pytest.raises(BertScopeError, match="second texts"):
        list(inspect_batch(tiny_bert, ["the bank"], ["a", "b"]))
    with pytest.raises(BertScopeError, match="for every sentence"):
        list(inspect_batch(tiny_bert, ["the bank", "a dog"], ["a river", None]))


def test_batches_without_attentions_keep_hidden_states(tiny_bert):
    texts = ["the bank .", "the man walked along the river ."]
    (with_att,) = inspect_batch(tiny_bert, texts, batch_size=2)
    (without,) = inspect_batch(tiny_bert, texts, batch_size=2, with_attentions=False)
    assert without.attentions is None and without.item(0).attentions is None
    assert_close(without.hidden_states, with_att.hidden_states)
    assert without.item(1).n_layers == tiny_bert.num_layers
    with pytest.raises(BertScopeError, match="without attentions"):
        _ = without.item(0).n_heads


def test_batches_without_hidden_states_keep_attentions(tiny_bert):
    texts = ["the bank .", "the man walked along the river ."]
    (full,) = inspect_batch(tiny_bert, texts, batch_size=2)
    (lean,) = inspect_batch(tiny_bert, texts, batch_size=2, with_hidden_states=False)
    assert lean.hidden_states is None and lean.item(0).hidden_states is None
    assert_close(lean.attentions, full.attentions)
    assert lean.item(1).n_layers == tiny_bert.num_layers


def test_concurrent_forwards_on_a_shared_model_are_serialised_and_correct(tiny_bert):
    import threading

    texts = [f"the bank of the river {'and the dog ' * k}." for k in range(8)]
    expected = {t: inspect(tiny_bert, t).hidden_states for t in texts}
    active, peak, results, lock = [0], [0], {}, threading.Lock()
    original = tiny_bert.model.forward

    def watched(*args, **kwargs):
        with lock:
            active[0] += 1
            peak[0] = max(peak[0], active[0])
        try:
            return original(*args, **kwargs)
        finally:
            with lock:
                active[0] -= 1

    tiny_bert.model.forward = watched
    try:
        threads = [threading.Thread(target=lambda t=t: results.__setitem__(t, inspect(tiny_bert, t)))
                   for t in texts for _ in range(3)]
        for th in threads:
            th.start()
        for th in threads:
            th.join()
    finally:
        del tiny_bert.model.forward
    assert peak[0] == 1  # BERTSCOPE_CONCURRENT_FORWARDS defaults to one pass at a time
    for t in texts:
        assert_close(results[t].hidden_states, expected[t])


def test_fast_kernel_when_weights_are_not_needed(tiny_bert, tiny_roberta_dir):
    """Hidden states from the fast kernel (SDPA) equal the eager pass's; weights still come eager."""
    for lm in (tiny_bert, load_model(str(tiny_roberta_dir))):
        assert lm.fast_attention == "sdpa"
        texts = ["the bank of the river", "a dog"]
        (eager,) = inspect_batch(lm, texts, batch_size=2)  # attentions asked: eager
        (fast,) = inspect_batch(lm, texts, batch_size=2, with_attentions=False)
        assert lm.kernels.current == "sdpa" and fast.attentions is None
        mask = eager.attention_mask  # padded positions may differ between kernels; real ones may not
        np.testing.assert_allclose(fast.hidden_states.transpose(0, 2, 1, 3)[mask],
                                   eager.hidden_states.transpose(0, 2, 1, 3)[mask], atol=1e-5)
        again = inspect(lm, texts[0])
        assert lm.kernels.current == "eager" and again.attentions is not None
        np.testing.assert_allclose(again.attentions.sum(-1), 1, rtol=1e-5)


def test_kernel_switch_never_overlaps_passes_of_the_other_kind(tiny_bert):
    errors = []

    def run(with_attentions: bool) -> None:
        try:
            for _ in range(5):
                r = inspect(tiny_bert, "the bank of the river", with_attentions=with_attentions)
                assert (r.attentions is not None) == with_attentions
        except Exception as err:  # noqa: BLE001 - reported below
            errors.append(err)

    threads = [threading.Thread(target=run, args=(i % 2 == 0,)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
