"""``xtrain migrate``: rewrites Lightning code and LightningCLI configs to xtrain (see ``rules.py`` for the table)."""
