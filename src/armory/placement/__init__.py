"""Which robots share which GPU: placement policies across replicas (docs/scale-out.md)."""
