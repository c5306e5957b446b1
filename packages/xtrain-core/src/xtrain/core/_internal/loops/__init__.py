"""The loops: fit, evaluation (validate, test, sanity check) and predict."""
