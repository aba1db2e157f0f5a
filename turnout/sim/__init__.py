"""The round loop of one variant on one seed, and the composition that builds it from a resolved config."""
