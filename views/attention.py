from views.shared import planned

planned(
    "Attention", 3,
    "bertviz head and model views, per-head heatmaps, and head statistics over a corpus.",
)
