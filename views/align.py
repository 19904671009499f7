from views.shared import planned

planned(
    "Cross-lingual alignment", 6,
    "translations in UMAP/PCA plots and retrieval accuracy per layer, with mean-centring.",
)
