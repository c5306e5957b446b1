"""The Acme cluster for xtrain."""
