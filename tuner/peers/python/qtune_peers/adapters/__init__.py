"""The adapters, one per peer. A module here imports its peer (and torch) only when asked to, so that describing
the peers costs one import each and a missing peer is a result, not an error."""
from qtune_peers.adapters import deepgemm, fake, gptq_marlin, humming, marlin, torch


def adapters(test_peers=False):
    """Every adapter by peer name; the tests' fake peers only when asked for."""
    found = [torch.TorchAdapter(), marlin.MarlinAdapter(), gptq_marlin.GptqMarlinAdapter(), humming.HummingAdapter(),
             deepgemm.DeepGemmAdapter()]
    if test_peers:
        found += [fake.FakeAdapter(), fake.AbsentAdapter()]
    return {adapter.peer: adapter for adapter in found}
