"""Private implementation of xtrain-core. Nothing here is public API; it may change in any release."""
