"""Loading: which heads are real, eager attention, device/dtype, and every load error."""

from __future__ import annotations

import pytest
import torch

from bertscope import BertScopeError, load_model
from bertscope.runtime.devices import resolve_device, resolve_dtype
from bertscope.runtime.hf import max_input_length
from bertscope.sources.resolve import resolve_source


def test_pretraining_checkpoint_gets_both_heads(tiny_bert):
    assert tiny_bert.outputs == {"mlm", "nsp"}
    assert tiny_bert.architecture == "BertForPreTraining"
    assert tiny_bert.model.config._attn_implementation == tiny_bert.kernels.current  # eager or sdpa, per pass
    assert not tiny_bert.model.training
    assert not any(p.requires_grad for p in tiny_bert.model.parameters())
    assert tiny_bert.device.type == resolve_device("auto").type and tiny_bert.dtype == torch.float32  # any machine


def test_mlm_only_checkpoint_gets_no_nsp_head(tiny_mlm_dir):
    lm = load_model(str(tiny_mlm_dir))
    assert lm.outputs == {"mlm"}
    assert lm.architecture == "BertForMaskedLM"


def test_bare_encoder_checkpoint_gets_no_head(tiny_encoder_dir):
    lm = load_model(str(tiny_encoder_dir))
    assert lm.outputs == frozenset()
    assert lm.architecture == "BertModel"
    assert any("no masked-LM head" in n for n in lm.notes)


def test_parameter_count_matches_bert_formula(tiny_bert):
    c = tiny_bert.config
    V, H, I, P, T, L = (c.vocab_size, c.hidden_size, c.intermediate_size,  # noqa: E741  the paper's letters
                        c.max_position_embeddings, c.type_vocab_size, c.num_hidden_layers)
    embeddings = (V + P + T) * H + 2 * H
    layer = 4 * (H * H + H) + 2 * H + (H * I + I) + (I * H + H) + 2 * H
    pooler = H * H + H
    assert tiny_bert.parameter_count(encoder_only=True) == embeddings + L * layer + pooler
    # heads: MLM transform (dense + LayerNorm), decoder bias; decoder weight tied to embeddings
    mlm = (H * H + H) + 2 * H + V
    nsp = 2 * H + 2
    assert tiny_bert.parameter_count() == embeddings + L * layer + pooler + mlm + nsp


def test_roberta_positions_offset(tiny_roberta_dir):
    lm = load_model(str(tiny_roberta_dir))
    assert lm.outputs == {"mlm"}
    assert lm.max_length == 32  # 34 position embeddings minus RoBERTa's offset of 2


def test_max_length_ignores_unset_tokenizer_length(tiny_bert):
    class Unset:
        model_max_length = int(1e30)

    assert max_input_length(tiny_bert.config, Unset()) == 40


@pytest.mark.parametrize(
    "name, message",
    [
        ("", "No model given"),
        ("./no/such/folder", "No model folder"),
        ("not a model id!", "neither a hub id"),
        ("nobody-xyz/no-such-model", "not in the local Hugging Face cache and the hub is unreachable"),
    ],
)
def test_bad_names_give_one_clear_line(name, message):
    with pytest.raises(BertScopeError, match=message) as info:
        load_model(name)
    assert "\n" not in str(info.value)


def test_decoder_model_is_refused(gpt2_dir):
    with pytest.raises(BertScopeError, match="gpt2 model, not a BERT-family encoder"):
        load_model(str(gpt2_dir))


def test_remote_code_is_never_run(remote_code_dir):
    with pytest.raises(BertScopeError, match="trust_remote_code"):
        load_model(str(remote_code_dir))


def test_folder_without_config(tmp_path):
    with pytest.raises(BertScopeError, match="no config.json"):
        resolve_source(str(tmp_path))


def test_device_and_dtype_choices():
    assert resolve_device("auto").type in {"cpu", "cuda", "mps"}
    assert resolve_device("cpu") == torch.device("cpu")
    assert resolve_dtype("auto", torch.device("cpu")) == torch.float32
    with pytest.raises(BertScopeError, match="Unknown device"):
        resolve_device("tpu")
    with pytest.raises(BertScopeError, match="needs a GPU"):
        resolve_dtype("float16", torch.device("cpu"))
    with pytest.raises(BertScopeError, match="Unknown dtype"):
        resolve_dtype("int3", torch.device("cpu"))
    if not torch.cuda.is_available():
        with pytest.raises(BertScopeError, match="not available"):
            resolve_device("cuda")
