"""numpy's functions composed of table ops (no derivative rules of their own: the chain
rule through the ops they use gives them), by topic."""
