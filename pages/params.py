from pages.shared import planned

planned(
    "Parameters", 7,
    "exact parameter counts by component for any config, memory and FLOPs, without weights.",
)
