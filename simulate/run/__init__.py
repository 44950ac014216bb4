"""How a run is driven, from options to outputs: configuration, preflight, batch loop."""
