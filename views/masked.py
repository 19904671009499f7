from views.shared import planned

planned(
    "Masked tokens", 4,
    "fill-mask with several masks, BERT's 80/10/10 masking recipe, layer-wise predictions "
    "and the next-sentence head.",
)
