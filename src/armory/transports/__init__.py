"""Front doors: thin adapters between a wire protocol and the engine."""
