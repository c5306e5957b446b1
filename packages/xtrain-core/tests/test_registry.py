from __future__ import annotations

from typing import Any

import pytest

from xtrain.core._internal.hints import first_party_names
from xtrain.core.errors import ConfigError
from xtrain.core.registry import ACCELERATORS, CHECKPOINT_IO, ENVIRONMENTS, PRECISIONS, STRATEGIES

TOY = '''
from xtrain.core.defaults.cpu import CPUAccelerator

class ToyAccelerator(CPUAccelerator):
    """A toy accelerator."""
    name = "toy"
'''


def test_core_registers_its_defaults_through_entry_points() -> None:
    assert "cpu" in ACCELERATORS.names()
    assert "single_device" in STRATEGIES.names()
    assert "32-true" in PRECISIONS.names()
    assert "torch" in CHECKPOINT_IO.names()
    assert "local" in ENVIRONMENTS.names()
    assert ACCELERATORS.distribution_of("cpu") == "xtrain-core"


def test_names_are_case_insensitive_and_described() -> None:
    assert "CPU" in ACCELERATORS
    assert ACCELERATORS.describe("cpu").startswith("The CPU")


def test_unknown_name_lists_choices_and_suggests_a_close_one() -> None:
    with pytest.raises(ConfigError) as info:
        ACCELERATORS.load("cpx")
    message = str(info.value)
    assert message.startswith("accelerator='cpx':")
    assert "'cpu'" in message and "did you mean 'cpu'?" in message


def test_missing_first_party_name_gives_the_install_line() -> None:
    """The error used when a first-party name is not registered (here: asked directly, whatever is installed)."""
    message = str(STRATEGIES.unknown("ddp"))
    assert message.startswith("strategy='ddp':") and "Fix: pip install xtrain-strategies" in message
    assert "Fix: pip install 'xtrain-accelerators[xla]'" in str(ACCELERATORS.unknown("tpu"))
    assert "Fix: pip install xtrain-precision" in str(PRECISIONS.unknown("bf16-mixed"))
    assert first_party_names("xtrain.precision")["bf16-mixed"] == "xtrain-precision"


def test_a_third_party_distribution_adds_a_name(installed_distribution: Any) -> None:
    installed_distribution("toy-plugin", {"xtrain.accelerators": {"toy": "toy_plugin_mod:ToyAccelerator"}},
                           {"toy_plugin_mod": TOY})
    assert "toy" in ACCELERATORS.names()
    assert ACCELERATORS.distribution_of("toy") == "toy-plugin"
    assert ACCELERATORS.create("toy").name == "toy"


def test_two_distributions_claiming_one_name_is_an_error_naming_both(installed_distribution: Any) -> None:
    installed_distribution("first-plugin", {"xtrain.accelerators": {"twin": "twin_a:ToyAccelerator"}},
                           {"twin_a": TOY})
    installed_distribution("second-plugin", {"xtrain.accelerators": {"twin": "twin_b:ToyAccelerator"}},
                           {"twin_b": TOY})
    with pytest.raises(ConfigError) as info:
        ACCELERATORS.load("twin")
    assert "first-plugin" in str(info.value) and "second-plugin" in str(info.value)


def test_listing_names_imports_nothing(installed_distribution: Any) -> None:
    installed_distribution("boom-plugin", {"xtrain.strategies": {"boom": "boom_mod:Boom"}},
                           {"boom_mod": "raise RuntimeError('imported too early')\n"})
    assert "boom" in STRATEGIES.names()
    with pytest.raises(ConfigError, match="could not be imported: RuntimeError: imported too early") as info:
        STRATEGIES.load("boom")
    assert isinstance(info.value.__cause__, RuntimeError)


def test_a_plugin_that_failed_to_import_is_not_imported_again(installed_distribution: Any) -> None:
    """Every Trainer() asking for it (or scanning for 'auto') would re-run the broken module: seconds of imports and
    its side effects each time. The failure is kept and reported again, with the same cause, until refresh()."""
    import builtins

    installed_distribution("flaky-plugin", {"xtrain.strategies": {"flaky": "flaky_mod:Flaky"}},
                           {"flaky_mod": "import builtins\nbuiltins._xtrain_flaky_runs = "
                                         "getattr(builtins, '_xtrain_flaky_runs', 0) + 1\n"
                                         "raise RuntimeError('broken at import')\n"})
    causes = []
    for _ in range(3):
        with pytest.raises(ConfigError, match="could not be imported: RuntimeError: broken at import") as info:
            STRATEGIES.load("flaky")
        causes.append(info.value.__cause__)
    assert builtins._xtrain_flaky_runs == 1  # type: ignore[attr-defined]
    assert all(isinstance(c, RuntimeError) for c in causes)
    STRATEGIES.refresh()  # e.g. after installing a fixed version in a running notebook
    with pytest.raises(ConfigError):
        STRATEGIES.load("flaky")
    assert builtins._xtrain_flaky_runs == 2  # type: ignore[attr-defined]
    del builtins._xtrain_flaky_runs  # type: ignore[attr-defined]


def test_a_typo_as_near_to_two_names_suggests_both() -> None:
    """``"dpp"`` suggested only ``'dp'`` (outside trial X): the user meant ``ddp``."""
    from xtrain.core.registry import STRATEGIES

    with pytest.raises(ConfigError, match=r"did you mean 'dp' or 'ddp'\?"):
        STRATEGIES.load("dpp")
