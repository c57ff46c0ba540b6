"""``armory eval``: task success of a served policy on a fleet of simulated robots."""
