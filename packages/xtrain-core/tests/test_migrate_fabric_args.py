"""``xtrain migrate`` and the arguments of Fabric's methods that the Engine's methods lack: renamed, removed where
that is exact, made keywords where Fabric took them by position, else flagged on their line (never a silent
TypeError in the converted script)."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytest.importorskip("libcst")

from xtrain.core._internal.migrate.source import Result, migrate_python

HEAD = """\
    import torch
    from lightning.fabric import Fabric

    fabric = Fabric(accelerator="cpu", devices=1)
    """


def run(body: str) -> Result:
    return migrate_python(textwrap.dedent(HEAD) + textwrap.dedent(body))


def lines(result: Result) -> list[str]:
    return result.new.splitlines()


def messages(result: Result) -> list[str]:
    return [m for _, m in result.attention]


def flagged(result: Result, code: str) -> str:
    """The ``# xtrain migrate:`` comment just above the line ``code`` of the result."""
    out = lines(result)
    i = out.index(code)
    assert out[i - 1].startswith("# xtrain migrate: "), out[i - 1]
    return out[i - 1]


def test_exact_defaults_are_removed() -> None:
    result = run("""\
        model, opt = fabric.setup(net, sgd, move_to_device=True, scheduler=None)
        model = fabric.setup_module(net, True)
        fabric.clip_gradients(model, opt, max_norm=1.0, norm_type=2.0, error_if_nonfinite=False)
        fabric.clip_gradients(model, opt, clip_val=0.5, norm_type=1)
        fabric.all_gather(x, None, False)
        fabric.all_gather(x, group=None, sync_grads=False)
        fabric.save("a.ckpt", state, filter=None)
        fabric.load("a.ckpt", state, weights_only=True)
        fabric.seed_everything(42, workers=True, verbose=False)
        fabric.backward(loss, model=model)
        """)
    out = lines(result)
    for code in ("model, opt = fabric.setup(net, sgd)", "model = fabric.setup_module(net)",
                 "fabric.clip_gradients(model, opt, max_norm=1.0)", "fabric.clip_gradients(model, opt, clip_val=0.5)",
                 "fabric.all_gather(x)", 'fabric.save("a.ckpt", state)', 'fabric.load("a.ckpt", state)',
                 "fabric.seed_everything(42)", "fabric.backward(loss)"):
        assert code in out, code
    assert out.count("fabric.all_gather(x)") == 2
    assert "# xtrain migrate:" not in result.new
    assert not messages(result)


def test_positional_arguments_become_keywords_and_spellings_are_renamed() -> None:
    result = run("""\
        fabric.clip_gradients(model, opt, None, 1.0)
        fabric.load("a.ckpt", state, False)
        with fabric.rank_zero_first(True):
            pass
        fabric.all_reduce(x, None, "sum")
        fabric.all_reduce(data=x)
        fabric.all_gather(data=x)
        fabric.backward(tensor=loss)
        fabric.launch(function=main)
        """)
    out = lines(result)
    for code in ("fabric.clip_gradients(model, opt, clip_val=None, max_norm=1.0)",
                 'fabric.load("a.ckpt", state, strict=False)', "with fabric.rank_zero_first(local=True):",
                 'fabric.all_reduce(x, reduce_op="sum")', "fabric.all_reduce(tensor=x)", "fabric.all_gather(tensor=x)",
                 "fabric.backward(loss=loss)", "fabric.launch(fn=main)"):
        assert code in out, code
    assert not messages(result)


def test_the_trials_calls_are_flagged_with_what_to_do() -> None:
    result = run("""\
        model, opt = fabric.setup(net, sgd, move_to_device=False)
        fabric.clip_gradients(model, opt, max_norm=1.0, norm_type=1.0)
        fabric.all_gather(x, sync_grads=True)
        fabric.all_reduce(x, group, "sum")
        fabric.save("x.ckpt", state, filter={"model": keep})
        """)
    note = flagged(result, "model, opt = fabric.setup(net, sgd, move_to_device=False)")
    assert "fabric.setup(move_to_device=False): Engine.setup always moves the module to engine.device" in note
    assert "remove the argument" in note
    note = flagged(result, "fabric.clip_gradients(model, opt, max_norm=1.0, norm_type=1.0)")
    assert "fabric.clip_gradients(norm_type=1.0): the Engine clips only the 2-norm" in note
    assert "torch.nn.utils.clip_grad_norm_" in note
    note = flagged(result, "fabric.all_gather(x, sync_grads=True)")
    assert "fabric.all_gather(sync_grads=True): Engine.all_gather carries no gradient back" in note
    assert "torch.distributed.nn.functional.all_gather" in note
    # the positional group stays, as a keyword so that reduce_op can follow it
    note = flagged(result, 'fabric.all_reduce(x, group=group, reduce_op="sum")')
    assert "fabric.all_reduce(group=group): the Engine's collectives run over all ranks" in note
    note = flagged(result, 'fabric.save("x.ckpt", state, filter={"model": keep})')
    assert "fabric.save(filter={\"model\": keep}): Engine.save has no filter" in note
    assert len(messages(result)) == 5


def test_other_arguments_without_an_equivalent_are_flagged() -> None:
    result = run("""\
        model, opt, sched = fabric.setup(net, sgd, scheduler=sched)
        model = fabric.setup_module(net, False, True)
        fabric.clip_gradients(model, opt, max_norm=1.0, error_if_nonfinite=True)
        fabric.load("a.ckpt", state, weights_only=False)
        fabric.seed_everything()
        fabric.seed_everything(1, workers=False, verbose=True)
        fabric.backward(loss, retain_graph=True)
        """)
    assert "Engine.setup takes no scheduler" in flagged(result, "model, opt, sched = fabric.setup(net, sgd, "
                                                               "scheduler=sched)")
    out = lines(result)
    i = out.index("model = fabric.setup_module(net, move_to_device=False, _reapply_compile=True)")
    assert out[i - 2].startswith("# xtrain migrate: fabric.setup_module(move_to_device=False): Engine.setup_module "
                                 "always moves")
    assert out[i - 1].startswith("# xtrain migrate: fabric.setup_module(_reapply_compile=True): a private Fabric "
                                 "argument")
    assert "the Engine does not raise on a non-finite norm" in flagged(
        result, "fabric.clip_gradients(model, opt, max_norm=1.0, error_if_nonfinite=True)")
    assert "fabric.load(weights_only=False): Engine.load reads only tensors" in flagged(
        result, 'fabric.load("a.ckpt", state, weights_only=False)')
    assert "fabric.seed_everything(): Engine.seed_everything needs the seed" in flagged(
        result, "fabric.seed_everything()")
    assert "fabric.seed_everything(verbose=True)" in flagged(result, "fabric.seed_everything(1, workers=False, "
                                                                      "verbose=True)")
    assert "fabric.seed_everything(workers=False): the Engine always seeds the workers; remove it, or call " \
           "xtrain.core.seed_everything(seed, workers=False)" in result.new
    assert "fabric.seed_everything(verbose=True): Engine.seed_everything prints nothing" in result.new
    assert "fabric.backward(retain_graph=True): Engine.backward(loss) passes nothing on" in flagged(
        result, "fabric.backward(loss, retain_graph=True)")


def test_any_name_holding_a_fabric_is_a_receiver() -> None:
    result = migrate_python(textwrap.dedent("""\
        from lightning.fabric import Fabric

        def main(f: Fabric) -> None:
            f.all_gather(x, sync_grads=False)

        class Loop:
            def go(self) -> None:
                self.fabric.save(path, state, filter=None)
        """))
    assert "    f.all_gather(x)\n" in result.new
    assert "        self.fabric.save(path, state)\n" in result.new


def test_converted_calls_run_on_the_engine(tmp_path: Path) -> None:
    """The rewritten calls are accepted by the Engine (no TypeError)."""
    result = run("""\
        fabric.launch()
        fabric.seed_everything(1, workers=True, verbose=False)
        net = torch.nn.Linear(2, 1)
        model, opt = fabric.setup(net, torch.optim.SGD(net.parameters(), lr=0.1), move_to_device=True)
        loss = model(torch.ones(1, 2)).sum()
        fabric.backward(loss, model=model)
        fabric.clip_gradients(model, opt, None, 1.0, 2.0, False)
        fabric.all_gather(torch.ones(1), None, False)
        fabric.all_reduce(torch.ones(1), None, "sum")
        with fabric.rank_zero_first(False):
            pass
        fabric.save("x.ckpt", {"model": model}, filter=None)
        fabric.load("x.ckpt", {"model": model}, True, weights_only=None)
        print("done")
        """)
    assert not messages(result)
    script = tmp_path / "s.py"
    script.write_text(result.new)
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, cwd=tmp_path, timeout=240)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().endswith("done")
