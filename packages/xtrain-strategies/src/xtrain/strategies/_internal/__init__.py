"""Private helpers of xtrain-strategies; no stability promise."""
