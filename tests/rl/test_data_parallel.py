"""The data-parallel learner's maths on two gloo processes: each process's share of the groups,
normalised by the whole step's token count, gives summed gradients equal to one process's
full-batch gradient (so every copy of the adapter takes the same step)."""

import os

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from rl.distributed import all_reduce_grads, all_reduce_sum, gather_objects, process_group, shard
from rl.loss import policy_loss


def _batch():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(4, 6, 3, generator=g)  # 4 sequences (one per group here), 6 tokens, 3 features
    old = torch.randn(4, 6, generator=g) * 0.1 - 1.0
    mask = (torch.rand(4, 6, generator=g) > 0.3).float()
    adv = torch.tensor([1.0, -0.5, 0.25, -1.0])
    return x, old, mask, adv


def _loss(weight, rows, normalizer):
    x, old, mask, adv = _batch()
    logp = -torch.nn.functional.softplus(x[rows] @ weight)  # any differentiable per-token log-prob
    loss, _ = policy_loss(logp, old[rows], adv[rows], mask[rows], normalizer=normalizer)
    return loss


def _worker(rank, world, port, out):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    try:
        assert process_group() == (rank, world)
        rows = shard(list(range(4)), rank=rank, world=world)
        _, _, mask, _ = _batch()
        total = all_reduce_sum(float(mask[rows].sum()))
        weight = torch.nn.Parameter(torch.tensor([0.3, -0.2, 0.1]))
        _loss(weight, rows, total).backward()
        all_reduce_grads([weight])
        everyone = gather_objects([rank])
        out[rank] = (weight.grad.clone(), total, everyone)
    finally:
        dist.destroy_process_group()


def test_summed_shard_gradients_equal_the_full_batch_gradient():
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    manager = mp.Manager()
    out = manager.dict()
    mp.spawn(_worker, args=(2, port, out), nprocs=2, join=True)
    weight = torch.nn.Parameter(torch.tensor([0.3, -0.2, 0.1]))
    _loss(weight, list(range(4)), None).backward()
    _, _, mask, _ = _batch()
    for rank in (0, 1):
        grad, total, everyone = out[rank]
        assert total == float(mask.sum())
        assert everyone == [0, 1]
        torch.testing.assert_close(grad, weight.grad)
    assert process_group() == (0, 1) and all_reduce_sum(2.5) == 2.5
