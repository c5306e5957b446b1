"""The Acme NPU for xtrain."""
