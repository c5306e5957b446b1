"""xtrain-precision: the precision plugins beyond core's ``32-true``, registered by name through entry points.

``Trainer(precision="bf16-mixed")`` finds its plugin in the ``xtrain.precision`` entry-point group; nothing here is
imported by core. Import the classes to pass options (``Trainer(precision=Float16MixedPrecision(init_scale=1024))``).
"""

from xtrain.core.compat import require_core
from xtrain.precision.__about__ import __version__

require_core("xtrain-precision", __version__, minimum="1.0", below="2")

from xtrain.precision._internal.hardware import SlowPrecisionWarning  # noqa: E402
from xtrain.precision.mixed import BFloat16MixedPrecision, Float16MixedPrecision, MixedPrecision  # noqa: E402
from xtrain.precision.true import (  # noqa: E402
    BFloat16TruePrecision,
    DoublePrecision,
    Float16TruePrecision,
    TruePrecision,
)

__all__ = [
    "BFloat16MixedPrecision", "BFloat16TruePrecision", "DoublePrecision", "Float16MixedPrecision",
    "Float16TruePrecision", "MixedPrecision", "SlowPrecisionWarning", "TruePrecision", "__version__",
]
