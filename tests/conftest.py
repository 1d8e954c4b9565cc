"""Suite-wide checks: every test must leave torch as it found it."""

import pytest
import torch

from flopsight._compat import active_dispatch_modes, active_function_modes, global_module_hooks

torch.set_num_threads(max(1, min(2, torch.get_num_threads())))


@pytest.fixture(autouse=True)
def torch_left_clean():
    """No dispatch/function modes and no global module hooks may outlive a test."""
    before = global_module_hooks()
    yield
    assert active_dispatch_modes() == [], "a TorchDispatchMode was left active"
    assert active_function_modes() == [], "a TorchFunctionMode was left active"
    assert global_module_hooks() == before, "global module hooks were left installed"
