"""Checksummed checkpoints for xtrain."""
