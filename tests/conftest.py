"""Fixtures: tiny random encoders written to disk and loaded back through our loader.

Nothing here touches the network: HF_HUB_OFFLINE is set before any Hugging Face import, and
every model is built from a config and a small vocabulary in a temporary folder.
"""

from __future__ import annotations

import os

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ.pop("BERTSCOPE_MODEL", None)
os.environ["BERTSCOPE_WARM_UMAP"] = "0"  # no background numba compile racing the tests


def _temporary_user_cache() -> None:
    """Tests write converted models and hidden states to a temporary cache, never the user's
    (~/.cache/bertscope); only the installed corpora (`make brown`) are read from the real one,
    through a link. Removed when the test process ends."""
    import atexit
    import shutil
    import tempfile

    from bertscope.runtime.user_cache import user_cache_dir

    real = user_cache_dir()
    temporary = tempfile.mkdtemp(prefix="bertscope-test-cache-")
    if (real / "corpora").is_dir():
        os.symlink(real / "corpora", os.path.join(temporary, "corpora"))
    os.environ["BERTSCOPE_CACHE"] = temporary
    atexit.register(shutil.rmtree, temporary, ignore_errors=True)


_temporary_user_cache()

import json  # noqa: E402
from pathlib import Path  # noqa: E402

import pytest  # noqa: E402
import torch  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
ARTIFACTS = ROOT / "test-output"

SPECIAL = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
WORDS = (
    ". , ! ? ' the a an of to in on and or is was are were be has had it he she they we you "
    "bank banks river money water fish boat walked sat deposited cash loan muddy steep grass "
    "man woman child dog cat ate food bread horse rode riding eating piece sentence word "
    "second first one two three this that there here hello world very good bad big small "
    "un ##bel ##ie ##va ##bly ##s ##ing ##ed ##er ##ly play ##ful river ##side"
).split()
VOCAB = SPECIAL + WORDS

BPE_CORPUS = [
    "The bank of the river was muddy and steep.",
    "She deposited the money in the bank, unbelievably fast.",
    "He walked along the riverside with his dog.",
    "A man is eating food. A man is riding a horse.",
    "Un café près de la rivière, très calme.",
] * 20


def tiny_bert_config(**overrides):
    from transformers import BertConfig

    settings = dict(
        vocab_size=len(VOCAB), hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
        intermediate_size=48, max_position_embeddings=40, type_vocab_size=2,
    )
    settings.update(overrides)
    return BertConfig(**settings)


def bert_tokenizer():
    from transformers import BertTokenizer

    return BertTokenizer(vocab={t: i for i, t in enumerate(VOCAB)})


def save_model(model, tokenizer, folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


@pytest.fixture(scope="session")
def tiny_bert_dir(tmp_path_factory) -> Path:
    """A random BertForPreTraining: encoder + MLM head + NSP head."""
    from transformers import BertForPreTraining

    torch.manual_seed(0)
    model = BertForPreTraining(tiny_bert_config())
    return save_model(model, bert_tokenizer(), tmp_path_factory.mktemp("tiny-bert-pretraining"))


@pytest.fixture(scope="session")
def tiny_mlm_dir(tmp_path_factory) -> Path:
    """A random BertForMaskedLM: MLM head, no NSP head."""
    from transformers import BertForMaskedLM

    torch.manual_seed(1)
    model = BertForMaskedLM(tiny_bert_config())
    return save_model(model, bert_tokenizer(), tmp_path_factory.mktemp("tiny-bert-mlm"))


@pytest.fixture(scope="session")
def tiny_saes_dir(tiny_mlm_dir, tmp_path_factory) -> Path:
    """Random TopK SAEs for layers 0 and 1 of the tiny masked LM, as ``train-sae --out`` lays them out."""
    from bertscope import load_model
    from bertscope.features.sae import SaeInfo, TopKSAE, save_sae

    name = load_model(str(tiny_mlm_dir)).name
    out = tmp_path_factory.mktemp("tiny-saes")
    for layer in (0, 1):
        sae = TopKSAE(32, 64, 4, info=SaeInfo(name, f"blocks.{layer}.hook_resid_post"), seed=layer)
        with torch.no_grad():
            sae.b_enc.normal_(0, 0.5, generator=torch.Generator().manual_seed(layer))
        save_sae(sae, out / f"layer_{layer:02d}")
    return out


@pytest.fixture(scope="session")
def tiny_encoder_dir(tmp_path_factory) -> Path:
    """A random bare BertModel: no heads at all."""
    from transformers import BertModel

    torch.manual_seed(2)
    model = BertModel(tiny_bert_config())
    return save_model(model, bert_tokenizer(), tmp_path_factory.mktemp("tiny-bert-encoder"))


@pytest.fixture(scope="session")
def tiny_roberta_dir(tmp_path_factory) -> Path:
    """A random RobertaForMaskedLM with a byte-level BPE tokenizer trained here."""
    from tokenizers import ByteLevelBPETokenizer
    from transformers import RobertaConfig, RobertaForMaskedLM, RobertaTokenizerFast

    specials = ["<s>", "<pad>", "</s>", "<unk>", "<mask>"]
    bpe = ByteLevelBPETokenizer()
    bpe.train_from_iterator(BPE_CORPUS, vocab_size=400, min_frequency=1, special_tokens=specials)
    tokenizer = RobertaTokenizerFast(
        tokenizer_object=bpe._tokenizer, bos_token="<s>", eos_token="</s>", cls_token="<s>",
        sep_token="</s>", pad_token="<pad>", unk_token="<unk>", mask_token="<mask>",
        model_max_length=32,
    )
    torch.manual_seed(3)
    config = RobertaConfig(
        vocab_size=bpe.get_vocab_size(), hidden_size=32, num_hidden_layers=2,
        num_attention_heads=4, intermediate_size=48, max_position_embeddings=34,
        pad_token_id=1, bos_token_id=0, eos_token_id=2, type_vocab_size=1,
    )
    return save_model(RobertaForMaskedLM(config), tokenizer, tmp_path_factory.mktemp("tiny-roberta"))


@pytest.fixture(scope="session")
def tiny_xlmr_dir(tmp_path_factory) -> Path:
    """A random XLMRobertaForMaskedLM with a SentencePiece (Unigram, "▁") tokenizer."""
    from tokenizers import SentencePieceUnigramTokenizer
    from transformers import XLMRobertaConfig, XLMRobertaForMaskedLM, XLMRobertaTokenizerFast

    specials = ["<s>", "<pad>", "</s>", "<unk>", "<mask>"]
    sp = SentencePieceUnigramTokenizer()
    sp.train_from_iterator(BPE_CORPUS, vocab_size=150, special_tokens=specials, unk_token="<unk>")
    tokenizer = XLMRobertaTokenizerFast(
        tokenizer_object=sp._tokenizer, bos_token="<s>", eos_token="</s>", cls_token="<s>",
        sep_token="</s>", pad_token="<pad>", unk_token="<unk>", mask_token="<mask>",
    )
    torch.manual_seed(4)
    config = XLMRobertaConfig(
        vocab_size=sp.get_vocab_size(), hidden_size=32, num_hidden_layers=2,
        num_attention_heads=4, intermediate_size=48, max_position_embeddings=34,
        pad_token_id=1, bos_token_id=0, eos_token_id=2, type_vocab_size=1,
    )
    return save_model(XLMRobertaForMaskedLM(config), tokenizer, tmp_path_factory.mktemp("tiny-xlmr"))


def _tiny_albert(model_class, seed: int, folder: Path) -> Path:
    """A random ALBERT: one layer's weights shared by all three layers, a factorised embedding
    (16 -> 32), BERT's WordPiece vocabulary."""
    from transformers import AlbertConfig

    torch.manual_seed(seed)
    config = AlbertConfig(vocab_size=len(VOCAB), embedding_size=16, hidden_size=32, num_hidden_layers=3,
                          num_attention_heads=4, intermediate_size=48, max_position_embeddings=40,
                          pad_token_id=0, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    return save_model(model_class(config), bert_tokenizer(), folder)


@pytest.fixture(scope="session")
def tiny_albert_dir(tmp_path_factory) -> Path:
    """A random AlbertForMaskedLM."""
    from transformers import AlbertForMaskedLM

    return _tiny_albert(AlbertForMaskedLM, 6, tmp_path_factory.mktemp("tiny-albert"))


@pytest.fixture(scope="session")
def tiny_albert_pretraining_dir(tmp_path_factory) -> Path:
    """A random AlbertForPreTraining: masked-LM head and sentence-order head."""
    from transformers import AlbertForPreTraining

    return _tiny_albert(AlbertForPreTraining, 8, tmp_path_factory.mktemp("tiny-albert-pretraining"))


@pytest.fixture(scope="session")
def tiny_distilbert_dir(tmp_path_factory) -> Path:
    """A random DistilBertForMaskedLM (no segments, q_lin/v_lin/out_lin, sa_layer_norm)."""
    from transformers import DistilBertConfig, DistilBertForMaskedLM

    torch.manual_seed(7)
    config = DistilBertConfig(vocab_size=len(VOCAB), dim=32, n_layers=2, n_heads=4, hidden_dim=48,
                              max_position_embeddings=40)
    return save_model(DistilBertForMaskedLM(config), bert_tokenizer(), tmp_path_factory.mktemp("tiny-distilbert"))


@pytest.fixture(scope="session")
def tiny_electra_dir(tmp_path_factory) -> Path:
    """A random ElectraForMaskedLM (a generator) whose 16-wide embeddings are projected to 32."""
    from transformers import ElectraConfig, ElectraForMaskedLM

    torch.manual_seed(9)
    config = ElectraConfig(vocab_size=len(VOCAB), embedding_size=16, hidden_size=32, num_hidden_layers=2,
                           num_attention_heads=4, intermediate_size=48, max_position_embeddings=40)
    return save_model(ElectraForMaskedLM(config), bert_tokenizer(), tmp_path_factory.mktemp("tiny-electra"))


@pytest.fixture(scope="session")
def tiny_deberta_dir(tmp_path_factory) -> Path:
    """A random DebertaV2ForMaskedLM (disentangled attention: query_proj/key_proj/value_proj)."""
    from transformers import DebertaV2Config, DebertaV2ForMaskedLM

    torch.manual_seed(10)
    config = DebertaV2Config(vocab_size=len(VOCAB), hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                             intermediate_size=48, max_position_embeddings=40, relative_attention=True,
                             pos_att_type=["p2c", "c2p"], max_relative_positions=16, type_vocab_size=0)
    return save_model(DebertaV2ForMaskedLM(config), bert_tokenizer(), tmp_path_factory.mktemp("tiny-deberta"))


@pytest.fixture(scope="session")
def tiny_modernbert_dir(tmp_path_factory) -> Path:
    """A random ModernBertForMaskedLM of three layers (global, then two with a window of 4 tokens each
    side), built from the shipped ModernBERT-base config as ``save_random_model(size="tiny")`` builds it."""
    from bertscope.core.random_models import save_random_model

    return Path(save_random_model("answerdotai/ModernBERT-base", tmp_path_factory.mktemp("tiny-modernbert"),
                                  heads="mlm", seed=11, size="tiny"))


def multilingual_vocab() -> list[str]:
    """Every character of the shipped parallel data and carrier sentences, whole and as a "##"
    continuation: a vocabulary that covers all nine languages' scripts."""
    from bertscope.corpora.parallel import CARRIERS, shipped_parallel

    chars: set[str] = set("".join(CARRIERS.values()))
    for kind in ("sentences", "words"):
        data = shipped_parallel(kind)
        for language in data.languages:
            for text in data.texts(language):
                chars.update(text)
    chars = {c for c in chars if not c.isspace() and c not in "{}"}
    return SPECIAL + sorted(chars) + sorted("##" + c for c in chars)


@pytest.fixture(scope="session")
def tiny_multilingual_dir(tmp_path_factory) -> Path:
    """A random cased BertModel whose character-level WordPiece vocabulary covers Latin,
    Cyrillic, Han, kana, Arabic and Devanagari (nothing is [UNK] in the shipped data)."""
    from transformers import BertModel, BertTokenizer

    vocab = multilingual_vocab()
    tokenizer = BertTokenizer(vocab={t: i for i, t in enumerate(vocab)}, do_lower_case=False,
                              strip_accents=False)
    torch.manual_seed(5)
    model = BertModel(tiny_bert_config(vocab_size=len(vocab), max_position_embeddings=128))
    return save_model(model, tokenizer, tmp_path_factory.mktemp("tiny-multilingual"))


@pytest.fixture(scope="session")
def gpt2_dir(tmp_path_factory) -> Path:
    """A decoder-only config: must be refused before any weights are read."""
    from transformers import GPT2Config

    folder = tmp_path_factory.mktemp("tiny-gpt2")
    GPT2Config(n_layer=1, n_head=2, n_embd=16, vocab_size=50).save_pretrained(folder)
    return folder


@pytest.fixture(scope="session")
def remote_code_dir(tmp_path_factory) -> Path:
    """A config that asks for custom code (auto_map), which must never run."""
    folder = tmp_path_factory.mktemp("remote-code")
    config = tiny_bert_config().to_dict()
    config["auto_map"] = {"AutoModel": "modeling_evil.EvilModel"}
    (folder / "config.json").write_text(json.dumps(config))
    return folder


@pytest.fixture(scope="session")
def tiny_bert(tiny_bert_dir):
    from bertscope import load_model

    return load_model(str(tiny_bert_dir))


@pytest.fixture(scope="session")
def artifacts() -> Path:
    ARTIFACTS.mkdir(exist_ok=True)
    return ARTIFACTS


@pytest.fixture(scope="session")
def random_base_dir(tmp_path_factory) -> Path:
    """A random BERT-base-sized BertForPreTraining with the bundled vocabulary (full-size tests)."""
    from bertscope.core.random_models import save_random_model

    return Path(save_random_model("bert-base-uncased", tmp_path_factory.mktemp("bert-base-random")))


LONG_TEXT = " ".join(["the bank of the river was muddy after the storm , and the boats stayed in ."] * 40)


def task_checkpoint(base: Path, folder: Path, auto: str, seed: int, **config) -> Path:
    """``base``'s encoder under a new task head (seeded), saved as a fine-tuned checkpoint is."""
    import transformers
    from transformers import AutoConfig, AutoTokenizer

    torch.manual_seed(seed)
    cfg = AutoConfig.from_pretrained(base, **config)
    model = getattr(transformers, auto).from_pretrained(base, config=cfg).eval()
    for name, p in model.named_parameters():  # a decisive head: larger weights than the init's
        if not name.startswith(model.base_model_prefix):
            p.data.normal_(0, 2.0)
    model.save_pretrained(folder)
    AutoTokenizer.from_pretrained(base).save_pretrained(folder)
    return folder


def labels(names: list[str]) -> dict:
    return {"id2label": dict(enumerate(names)), "label2id": {n: i for i, n in enumerate(names)}}
