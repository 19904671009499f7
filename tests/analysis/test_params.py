"""Parameter counts: published figures, real instantiations, formulas equal to counts."""

from __future__ import annotations

import json
import re

import pytest

from bertscope import BertScopeError
from bertscope.analysis.params import count_parameters, flops_per_token, inspect_activation_bytes, weight_bytes
from bertscope.cli import main
from bertscope.sources.configs import model_config as load_config
from bertscope.sources.configs import shipped_config_path
from bertscope.sources.presets import PRESETS

# Published totals of the bare encoders (Hugging Face model cards / papers' code).
PUBLISHED = {
    "bert-base-uncased": 109_482_240,
    "roberta-base": 124_645_632,
    "distilbert-base-uncased": 66_362_880,
    "albert-base-v2": 11_683_584,
    "bert-base-multilingual-cased": 177_853_440,
    "xlm-roberta-base": 278_043_648,
}


def test_bert_base_matches_published_breakdown():
    b = count_parameters("bert-base-uncased")
    assert b.total == 109_482_240
    assert b.group_totals() == {"embeddings": 23_837_184, "encoder": 85_054_464, "pooler": 590_592}
    token = next(c for c in b.components if c.name == "token")
    assert token.formula == "V×H = 30522×768" and token.count == 23_440_896


@pytest.mark.parametrize("name, total", PUBLISHED.items())
def test_presets_match_published_totals(name, total):
    assert count_parameters(name).total == total


@pytest.mark.parametrize("name", [n for n in PRESETS if not n.startswith("bundled")])  # bundled: from the files
def test_every_preset_config_ships(name):
    assert shipped_config_path(name).is_file()


def shrink(config):
    """The same architecture, small enough to instantiate for real: the family tests' tiny size, with a
    vocabulary of 101 pieces (special ids inside it)."""
    from bertscope.core.random_models import tiny_config

    config = tiny_config(config)
    config.vocab_size = 101
    for key in ("pad_token_id", "bos_token_id", "eos_token_id", "cls_token_id", "sep_token_id"):
        if getattr(config, key, None) is not None:
            setattr(config, key, 0)
    if config.model_type == "deberta-v2":
        config.position_buckets = 8
    return config


@pytest.mark.parametrize("name", [n for n in PRESETS if not n.startswith("bundled")])  # bundled: from the files
@pytest.mark.parametrize("head", ["none", "mlm"])
def test_counts_equal_a_real_instantiation(name, head, tmp_path, monkeypatch):
    from transformers import AutoModel, AutoModelForMaskedLM

    config = shrink(load_config(name))
    folder = tmp_path / "m"
    config.save_pretrained(folder)
    real_class = AutoModel if head == "none" else AutoModelForMaskedLM
    real = real_class.from_config(config)
    expected = sum(p.numel() for p in real.parameters())  # shared tensors once
    b = count_parameters(str(folder), head)
    assert b.total == expected
    assert sum(b.group_totals().values()) == expected


@pytest.mark.parametrize("name", list(PRESETS))
def test_every_formula_equals_its_count(name):
    for head in ("none", "mlm") if name != "bundled" else ("none",):
        b = count_parameters(name, head)
        for c in b.components:
            numeric = c.formula.split(" = ")[-1]
            value = sum(
                eval_product(term) for term in numeric.split(" + ")
            )
            assert value == c.count, (name, c)


def eval_product(term: str) -> int:
    assert re.fullmatch(r"\d+(×\d+)*", term), term
    out = 1
    for factor in term.split("×"):
        out *= int(factor)
    return out


def test_tied_and_shared_weights_are_counted_once():
    b = count_parameters("bert-base-uncased", "pretraining")
    assert ("cls.predictions.decoder.weight", "bert.embeddings.word_embeddings.weight") in b.tied
    assert b.group_totals()["nsp_head"] == 768 * 2 + 2
    assert not any(c.name == "decoder weight" for c in b.components)  # tied: under embeddings
    albert = count_parameters("albert-base-v2")
    assert set(albert.layer_totals()) == {0}  # one shared layer, run 12 times
    assert any("shares its layer weights" in n for n in albert.notes)


def test_memory_and_flops():
    b = count_parameters("bert-base-uncased")
    assert weight_bytes(b.total) == {"fp32": 4 * b.total, "fp16": 2 * b.total, "int8": b.total}
    act = inspect_activation_bytes(b, length=128, batch=2)
    assert act["attentions"] == 2 * 12 * 12 * 128 * 128 * 4
    assert act["hidden_states"] == 2 * 13 * 128 * 768 * 4
    f = flops_per_token(b, 128)
    assert f["linear"] == 2 * 12 * (4 * (768 * 768 + 768) + 2 * 768 * 3072 + 3072 + 768)
    assert f["attention"] == 4 * 128 * 768 * 12
    albert = count_parameters("albert-base-v2")
    assert flops_per_token(albert, 128)["linear"] == f["linear"]  # shared weights still run 12x


def test_meta_device_never_allocates():
    b = count_parameters("xlm-roberta-base", "mlm")  # 278M parameters, instant
    assert b.total > 278_000_000


def test_bad_inputs():
    with pytest.raises(BertScopeError, match="Unknown head"):
        count_parameters("bert-base-uncased", "qa")
    with pytest.raises(BertScopeError, match="hub is unreachable"):
        count_parameters("nobody-xyz/unknown-model")


def test_cli_params_json(capsys):
    assert main(["params", "bert-base-uncased", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["total"] == 109_482_240
    assert out["groups"]["embeddings"]["total"] == 23_837_184
    assert out["groups"]["encoder"]["total"] == 85_054_464
    assert out["groups"]["pooler"]["total"] == 590_592
    assert main(["params", "bert-base-uncased", "--head", "pretraining", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert set(out["groups"]) == {"embeddings", "encoder", "pooler", "mlm_head", "nsp_head"}


def test_electra_discriminator_head_is_its_own_group():
    """ELECTRA's pretraining head detects replaced tokens (one logit a token): not a masked-LM head."""
    b = count_parameters("google/electra-base-discriminator", "pretraining")
    totals = b.group_totals()
    assert "mlm_head" not in totals and totals["rtd_head"] == (768 * 768 + 768) + (768 + 1)
    assert {c.name for c in b.components if c.group == "rtd_head"} == {"dense", "classifier"}
