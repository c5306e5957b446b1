"""An example third-party xtrain plugin: the ``toy`` accelerator and the ``toy_single`` strategy."""
