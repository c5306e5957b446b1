"""``class_only``: a classmethod that refuses to be called on an instance.

``model.load_from_checkpoint(path)`` on an instance builds and returns a new module and leaves ``model`` as it was;
a caller who drops the return value goes on with untrained weights and no sign of it. Lightning refuses that call
with a ``TypeError``; so does this. Only the call is refused: reading the attribute (``hasattr``, ``dir``,
``inspect``) works as for any method.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any

__all__ = ["class_only"]

if TYPE_CHECKING:
    class_only = classmethod
else:
    class class_only(classmethod):
        def __get__(self, instance: Any, owner: type | None = None) -> Any:
            bound = super().__get__(instance, owner)
            if instance is None:
                return bound
            cls = owner or type(instance)
            name = self.__func__.__name__

            @functools.wraps(self.__func__)
            def refuse(*args: Any, **kwargs: Any) -> Any:
                raise TypeError(f"{cls.__name__}.{name} is a classmethod and returns a new object; called on an "
                                f"instance it would leave that instance unchanged. Call it on the class and use what "
                                f"it returns: model = {cls.__name__}.{name}(...).")

            return refuse
