from views.shared import planned

planned(
    "Probes", 8,
    "linear probes per layer on hidden states cached on disk, with control tasks.",
)
