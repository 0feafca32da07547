"""CleanRL (vwxyzjn/cleanrl, cleanrl/ppo.py at 020cf0e): PPO's generalized advantage estimation,
a reversed loop writing ``advantages[t]`` into ``torch.zeros_like(rewards)`` while carrying
``lastgaelam`` (a chained assignment).

Re-created from the training script's GAE block, trimmed into a function of the rollout tensors
(upstream it runs inline under ``torch.no_grad()`` with ``args.gamma`` and ``args.gae_lambda``;
the gradient here is what a differentiable critic or a per-critic vmap would need); the in-place
lines are upstream's as written.
"""

from __future__ import annotations

import torch

from funcbwd_lab.studies.yourcode.case import Case, rand, randn

GAMMA, GAE_LAMBDA, NUM_STEPS = 0.99, 0.95, 6
device = torch.device("cpu")


# vwxyzjn/cleanrl cleanrl/ppo.py (020cf0e), the "bootstrap value if not done" block of the
# training loop: args.num_steps, args.gamma, args.gae_lambda as module constants
def compute_advantages(rewards, values, dones, next_value, next_done):
    advantages = torch.zeros_like(rewards).to(device)
    lastgaelam = 0
    for t in reversed(range(NUM_STEPS)):
        if t == NUM_STEPS - 1:
            nextnonterminal = 1.0 - next_done
            nextvalues = next_value
        else:
            nextnonterminal = 1.0 - dones[t + 1]
            nextvalues = values[t + 1]
        delta = rewards[t] + GAMMA * nextvalues * nextnonterminal - values[t]
        advantages[t] = lastgaelam = delta + GAMMA * GAE_LAMBDA * nextnonterminal * lastgaelam
    returns = advantages + values
    return returns


def compute_advantages_rewrite(rewards, values, dones, next_value, next_done):
    nextnonterminal = torch.cat([1.0 - dones[1:], (1.0 - next_done)[None]])
    nextvalues = torch.cat([values[1:], next_value.reshape(1, -1)])
    deltas = rewards + GAMMA * nextvalues * nextnonterminal - values
    out, last = [], torch.zeros_like(deltas[0])
    for t in reversed(range(NUM_STEPS)):
        last = deltas[t] + GAMMA * GAE_LAMBDA * nextnonterminal[t] * last
        out.append(last)
    return torch.stack(out[::-1]) + values


def _args(gen):
    num_envs = 2
    rewards = randn(gen, NUM_STEPS, num_envs)
    values = randn(gen, NUM_STEPS, num_envs)
    dones = (rand(gen, NUM_STEPS, num_envs) < 0.3).float()
    next_value = randn(gen, 1, num_envs)  # agent.get_value(next_obs).reshape(1, -1)
    next_done = (rand(gen, num_envs) < 0.3).float()
    return (rewards, values, dones, next_value, next_done)


CASES = [
    Case("cleanrl:ppo-gae", "cleanrl",
         "vwxyzjn/cleanrl cleanrl/ppo.py: the GAE block of the training loop (020cf0e)",
         "advantages = torch.zeros_like(rewards); reversed loop advantages[t] = lastgaelam = ...; "
         "whole rollouts batched (rewards, values, dones, bootstrap)",
         ("like", "readback"), lambda decorate: decorate(compute_advantages),
         compute_advantages_rewrite, _args, batched=(0, 1, 2, 3, 4), diff=1),
    Case("cleanrl:ppo-gae-critics", "cleanrl",
         "vwxyzjn/cleanrl cleanrl/ppo.py: the GAE block of the training loop (020cf0e)",
         "the same GAE with one rollout and a batch of critics' values: zeros_like(rewards) is "
         "unbatched and advantages[t] = (batched) is the write vmap refuses",
         ("like", "readback"), lambda decorate: decorate(compute_advantages),
         compute_advantages_rewrite, _args, batched=(1, 3), diff=1),
]
