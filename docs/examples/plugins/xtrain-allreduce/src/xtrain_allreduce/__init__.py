"""A hand-written data-parallel strategy for xtrain."""
