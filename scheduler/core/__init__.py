"""Pure scheduler core: types, invariants and accounting (no Django)."""
