"""Code the FrozenLake and math examples share: launching a tuner run and writing files safely."""
