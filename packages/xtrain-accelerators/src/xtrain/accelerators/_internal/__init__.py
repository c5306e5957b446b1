"""Private helpers of xtrain-accelerators; nothing here is public API."""
