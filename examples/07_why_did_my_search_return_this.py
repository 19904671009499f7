# %% [markdown]
# # Why did my search return this?
#
# `bundled` is the genuine sentence-transformers/all-MiniLM-L6-v2, one of the most used embedding models. BertScope
# embeds text exactly as sentence-transformers does (its pooling, normalisation and length, read from the model's
# folder), searches a corpus with it, and says **why** a passage ranked where it did: every (query word, passage
# word) pair's share of the score, by integrated Jacobians (Moeller, Nikolaev & Padó 2023). Runs offline.

# %%
from bertscope import load_model
from bertscope.retrieval import embed, explain_pair, settings_of
from bertscope.retrieval.search import Corpus, build_index, search

lm = load_model("bundled", device="cpu")
print(settings_of(lm).note)

# %% [markdown]
# ## A small corpus, searched
# The passages are embedded once; a query is then one matrix product against all of them.

# %%
passages = [
    "To open a checking account, bring an ID and a first deposit to any branch of your bank.",
    "The river bank was muddy after the storm, and the path along it was closed.",
    "Our savings accounts pay interest monthly; you can open one online in minutes.",
    "The goalkeeper saved a penalty in the last minute of the match.",
    "Banks lend money to businesses and households and charge interest on the loans.",
]
corpus = Corpus("mine", tuple(map(str, range(len(passages)))), tuple(passages))
index = build_index(lm, corpus, cache=False)
query = "How do I open a bank account?"
hits = search(lm, index, query, top_k=3)
for hit in hits:
    print(f"{hit.rank}. {hit.score:.3f}  {hit.text}")

# %% [markdown]
# ## Why the first hit ranked first
# The pairs sum to the score less what the texts' references (their special tokens, padding elsewhere) account
# for, to the integration error shown.

# %%
first = explain_pair(lm, query, hits[0].text, steps=20)
print(f"score {first.score:.3f} = references' share {first.baseline_score:.3f} + pairs {first.pairs.sum():.3f} "
      f"(error {first.error:.1e})")
for a, b, share in first.strongest(6, words=True):
    print(f"  {a:>8} ~ {b:<10} {share:+.3f}")

# %% [markdown]
# ## Why the first hit ranked above the second
# The difference of the two explanations, word by word of the query: what the first passage gives each query word
# that the second does not.

# %%
second = explain_pair(lm, query, hits[1].text, steps=20)
words, _, _, first_totals, _ = first.by_words()
_, _, _, second_totals, _ = second.by_words()
print(f"score difference {first.score - second.score:+.3f}")
for word, gap in sorted(zip(words, first_totals - second_totals), key=lambda x: -abs(x[1])):
    print(f"  {word:>8} {gap:+.3f}")

# %% [markdown]
# ## The embedding is sentence-transformers'
# The same vector `SentenceTransformer.encode` gives (the tests hold them within 1e-5).

# %%
vector = embed(lm, [query]).vectors[0]
print(vector.shape, round(float((vector ** 2).sum()), 4))  # 384 dimensions, normalised
