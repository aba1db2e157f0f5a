"""The simulated world: who is reachable, how fast they are, when a round closes, what it costs."""
