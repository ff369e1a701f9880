"""The child's side: a spawned worker's loop (``main``) and its batch policy."""
