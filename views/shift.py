from views.shared import planned

planned(
    "Embedding shift", 5,
    "the same word in different contexts layer by layer, with Ethayarajh (2019) contextuality.",
)
