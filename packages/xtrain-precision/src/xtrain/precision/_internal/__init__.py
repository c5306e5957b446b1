"""Private helpers of xtrain-precision; not part of its public API."""
