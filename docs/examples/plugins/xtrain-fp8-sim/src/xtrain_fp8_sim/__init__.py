"""Simulated fp8 for xtrain."""
