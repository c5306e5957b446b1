from __future__ import annotations

import warnings

import pytest

from xtrain.core.deprecation import deprecated, warn_deprecated
from xtrain.core.errors import XtrainDeprecationWarning


@deprecated(since="1.1.0", removal="2.0.0", alternative="new_thing()")
def old_thing() -> int:
    return 1


def test_deprecations_name_since_removal_and_alternative() -> None:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert old_thing() == 1
    assert str(caught[0].message) == ("old_thing() is deprecated since 1.1.0 and will be removed in 2.0.0. "
                                      "Use new_thing() instead.")


def test_the_suite_turns_our_own_deprecations_into_errors() -> None:
    """pyproject's filterwarnings makes XtrainDeprecationWarning an error: our code cannot use deprecated API."""
    with pytest.raises(XtrainDeprecationWarning, match=r"since 1\.1\.0"):
        old_thing()
    with pytest.raises(XtrainDeprecationWarning):
        warn_deprecated("x", since="1.0", removal="2.0")
