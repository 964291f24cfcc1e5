"""The learner on the tiny model: re-scoring matches sampling, one step changes the adapter and
lowers the loss on a fixed batch."""

import dataclasses

import pytest
import torch

from rl.train import TrainConfig, learn, load_trainable_policy, make_optimizer, turn_logprobs
from rl.trajectory import TurnSample, build_batch

TOOLS = [
    {"type": "function", "function": {"name": "read_file", "description": "Read a file.", "parameters": {
        "type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"], "additionalProperties": False}}},
    {"type": "function", "function": {"name": "finish", "description": "Stop.", "parameters": {
        "type": "object", "properties": {"message": {"type": "string"}}, "required": ["message"], "additionalProperties": False}}},
]
SPECS = {t["function"]["name"]: t for t in TOOLS}


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    cfg = TrainConfig(sessions_dir=str(tmp_path_factory.mktemp("s")), model="tiny", constrain=True,
                      temperature=0.8, learning_rate=5e-3, micro_batch_turns=2, lora_rank=4, max_new_tokens=24)
    policy = load_trainable_policy(cfg)
    turns = []
    for seed, kind in ((1, "action"), (2, "action"), (3, "summary"), (4, "action")):
        policy.reseed(seed)
        policy.reset_cache()
        messages = [{"role": "system", "content": "You fix bugs."}, {"role": "user", "content": f"task {seed}"}]
        out = policy.generate(messages, TOOLS, max_new_tokens=cfg.max_new_tokens, kind=kind)
        assert out.constrained == (kind == "action")
        turns.append(TurnSample(
            prompt_ids=out.prompt_ids, completion_ids=out.completion_ids, old_logprobs=out.logprobs, kind=kind,
            segment=0, turn=0, constrained=out.constrained, offered_tools=("read_file", "finish") if out.constrained else (),
        ))
    return cfg, policy, turns


def test_rescoring_reproduces_the_sampling_logprobs(setup):
    cfg, policy, turns = setup
    batch = build_batch(turns, [0.0] * len(turns), pad_id=policy.tokenizer.eos_token_id)
    with torch.no_grad():
        logp = turn_logprobs(policy, batch, tool_specs=[SPECS] * len(turns), temperature=cfg.temperature).logprobs
    mask = batch.loss_mask.bool()
    # same weights, same temperature, same grammar masks: the PPO ratio starts at exactly 1
    assert torch.allclose(logp[mask], batch.old_logprobs[mask], atol=1e-4)
    # and the grammar matters: without the masks the constrained rows score differently
    with torch.no_grad():
        free = turn_logprobs(policy, dataclasses.replace(batch, turns=tuple(
            dataclasses.replace(t, constrained=False) for t in batch.turns)), tool_specs=[SPECS] * 4, temperature=cfg.temperature).logprobs
    assert not torch.allclose(free[0][mask[0]], batch.old_logprobs[0][mask[0]], atol=1e-3)


def test_entropy_is_that_of_the_distribution_each_token_was_sampled_from(setup):
    cfg, policy, turns = setup
    batch = build_batch(turns, [0.0] * len(turns), pad_id=policy.tokenizer.eos_token_id)
    with torch.no_grad():
        scored = turn_logprobs(policy, batch, tool_specs=[SPECS] * len(turns), temperature=cfg.temperature, with_entropy=True)
        free = turn_logprobs(policy, dataclasses.replace(batch, turns=tuple(
            dataclasses.replace(t, constrained=False) for t in batch.turns)), tool_specs=[SPECS] * 4,
            temperature=cfg.temperature, with_entropy=True)
    mask = batch.loss_mask.bool()
    vocab = policy.model.config.vocab_size
    assert (scored.entropy[mask] <= torch.log(torch.tensor(float(vocab))) + 1e-4).all()
    # the grammar narrows the choice: a constrained row's entropy is below the free one's
    row = 0
    assert turns[row].constrained
    assert scored.entropy[row][mask[row]].mean() < free.entropy[row][mask[row]].mean()
    # unconstrained rows (the summary) are the same either way
    summary = next(i for i, t in enumerate(turns) if not t.constrained)
    torch.testing.assert_close(scored.entropy[summary], free.entropy[summary])


def test_one_step_changes_the_adapter_and_lowers_the_loss(setup):
    cfg, policy, turns = setup
    from rl.loss import policy_loss

    advantages = [1.0, -1.0, 1.0, -0.5]
    batch = build_batch(turns, advantages, pad_id=policy.tokenizer.eos_token_id)

    def fixed_batch_loss() -> float:
        with torch.no_grad():
            logp = turn_logprobs(policy, batch, tool_specs=[SPECS] * 4, temperature=cfg.temperature).logprobs
            # unclipped surrogate so that the value keeps moving past the trust region
            loss, _ = policy_loss(logp, batch.old_logprobs, batch.advantages, batch.loss_mask, clip_eps_low=0.99, clip_eps_high=1e9)
        return float(loss)

    lora = {n: p.detach().clone() for n, p in policy.model.named_parameters() if p.requires_grad}
    frozen = {n: p.detach().clone() for n, p in policy.model.named_parameters() if not p.requires_grad and "embed" in n}
    assert lora and all("lora_" in n for n in lora)
    optimizer, scheduler = make_optimizer(policy.model, cfg)
    before = fixed_batch_loss()
    with torch.no_grad():
        entropy = turn_logprobs(policy, batch, tool_specs=[SPECS] * 4, temperature=cfg.temperature, with_entropy=True).entropy
    metrics = learn(policy, optimizer, scheduler, turns, advantages, [SPECS] * 4, cfg)
    after = fixed_batch_loss()
    assert metrics["loss/tokens"] == sum(len(t.completion_ids) for t in turns)
    # the logged entropy is the token mean over exactly the sampled tokens, before the step
    mask = batch.loss_mask.bool()
    assert metrics["loss/entropy"] == pytest.approx(float(entropy[mask].mean()), rel=1e-5)
    assert (entropy[~mask] == 0).all() and (entropy[mask] >= 0).all()
    assert metrics["loss/grad_norm"] > 0
    assert after < before
    changed = [n for n, p in policy.model.named_parameters() if p.requires_grad and not torch.equal(p, lora[n])]
    assert changed
    assert all(torch.equal(p, frozen[n]) for n, p in policy.model.named_parameters() if n in frozen)
