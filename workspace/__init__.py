"""The strategy workspace: a run's git repository of strategies (candidates committed, accepted or rolled
back, never deleted; DESIGN: git model of a run), with hooks off on every git call."""
