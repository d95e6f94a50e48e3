"""Port of pytorch/examples ``reinforcement_learning/reinforce.py`` and ``actor_critic.py``: policy
gradients on CartPole-sized states (4 numbers in, 2 actions out).

Written once against ``lib`` and run under PyTorch and corenn from the same weights. There is no gym
here and the frameworks' samplers draw differently, so the episodes are generated with numpy (states,
rewards) and the actions are fixed in advance; where the examples write
``m = Categorical(probs); action = m.sample(); m.log_prob(action)``, the program takes the log of the
chosen action's probability (``probs[:, action].log()``, which is what ``Categorical.log_prob`` computes).
The rest is the examples': ``torch.from_numpy(state).float().unsqueeze(0)``, ``F.softmax(..., dim=1)``
(reinforce) and ``dim=-1`` (actor-critic), the discounted returns built with ``returns.insert(0, R)``,
``torch.tensor(returns)`` normalized by ``(returns - returns.mean()) / (returns.std() + eps)`` with
``eps = np.finfo(np.float32).eps.item()``, ``torch.cat(policy_loss).sum()`` and
``torch.stack(policy_losses).sum() + torch.stack(value_losses).sum()``, ``F.smooth_l1_loss(value,
torch.tensor([R]))``, ``SavedAction`` namedtuples, ``del policy.rewards[:]`` and ``optim.Adam(lr=1e-2)``
(3e-2 for actor-critic). Dropout is 0 in reinforce's policy (different masks per framework).
"""
from __future__ import annotations

from collections import namedtuple

import numpy as np
import pytest

import corenn
from _port import assert_same_run, assert_same_state, numpy_state, same_weights

pytestmark = pytest.mark.torch

GAMMA = 0.99
SavedAction = namedtuple("SavedAction", ["log_prob", "value"])


def build_reinforce_policy(lib, dropout=0.0):
    nn, F = lib.nn, lib.nn.functional

    class Policy(nn.Module):
        def __init__(self):
            super().__init__()
            self.affine1 = nn.Linear(4, 32)
            self.dropout = nn.Dropout(p=dropout)
            self.affine2 = nn.Linear(32, 2)
            self.saved_log_probs = []
            self.rewards = []

        def forward(self, x):
            x = self.affine1(x)
            x = self.dropout(x)
            x = F.relu(x)
            action_scores = self.affine2(x)
            return F.softmax(action_scores, dim=1)

    return Policy()


def build_actor_critic(lib):
    nn, F = lib.nn, lib.nn.functional

    class Policy(nn.Module):
        def __init__(self):
            super().__init__()
            self.affine1 = nn.Linear(4, 32)
            self.action_head = nn.Linear(32, 2)  # actor's layer
            self.value_head = nn.Linear(32, 1)   # critic's layer
            self.saved_actions = []
            self.rewards = []

        def forward(self, x):
            x = F.relu(self.affine1(x))
            action_prob = F.softmax(self.action_head(x), dim=-1)
            state_values = self.value_head(x)
            return action_prob, state_values

    return Policy()


def _episodes(n=4, length=7, seed=0):
    rng = np.random.default_rng(seed)
    return [(rng.standard_normal((length, 4)), rng.integers(0, 2, length), rng.uniform(0, 1, length))
            for _ in range(n)]


def run_reinforce(lib, policy, episodes):
    optimizer = lib.optim.Adam(policy.parameters(), lr=1e-2)
    eps = np.finfo(np.float32).eps.item()

    def select_action(state, action):
        state = lib.from_numpy(state).float().unsqueeze(0)
        probs = policy(state)
        policy.saved_log_probs.append(probs[:, action].log())
        return action

    def finish_episode():
        R = 0
        policy_loss = []
        returns = []
        for r in policy.rewards[::-1]:
            R = r + GAMMA * R
            returns.insert(0, R)
        returns = lib.tensor(returns)
        returns = (returns - returns.mean()) / (returns.std() + eps)
        for log_prob, R in zip(policy.saved_log_probs, returns):
            policy_loss.append(-log_prob * R)
        optimizer.zero_grad()
        policy_loss = lib.cat(policy_loss).sum()
        policy_loss.backward()
        optimizer.step()
        del policy.rewards[:]
        del policy.saved_log_probs[:]
        return policy_loss.item()

    losses = []
    for states, actions, rewards in episodes:
        for state, action, reward in zip(states, actions, rewards):
            select_action(state, int(action))
            policy.rewards.append(float(reward))
        losses.append(finish_episode())
    return losses


def run_actor_critic(lib, model, episodes):
    F = lib.nn.functional
    optimizer = lib.optim.Adam(model.parameters(), lr=3e-2)
    eps = np.finfo(np.float32).eps.item()

    def select_action(state, action):
        state = lib.from_numpy(state).float()
        probs, state_value = model(state)
        model.saved_actions.append(SavedAction(probs[action].log(), state_value))
        return action

    def finish_episode():
        R = 0
        saved_actions = model.saved_actions
        policy_losses = []  # list to save actor (policy) loss
        value_losses = []   # list to save critic (value) loss
        returns = []        # list to save the true values
        for r in model.rewards[::-1]:
            R = r + GAMMA * R
            returns.insert(0, R)
        returns = lib.tensor(returns)
        returns = (returns - returns.mean()) / (returns.std() + eps)
        for (log_prob, value), R in zip(saved_actions, returns):
            advantage = R - value.item()
            policy_losses.append(-log_prob * advantage)
            value_losses.append(F.smooth_l1_loss(value, lib.tensor([R])))
        optimizer.zero_grad()
        loss = lib.stack(policy_losses).sum() + lib.stack(value_losses).sum()
        loss.backward()
        optimizer.step()
        del model.rewards[:]
        del model.saved_actions[:]
        return loss.item()

    losses = []
    for states, actions, rewards in episodes:
        for state, action, reward in zip(states, actions, rewards):
            select_action(state, int(action))
            model.rewards.append(float(reward))
        losses.append(finish_episode())
    return losses


def test_reinforce_trains_the_same_in_both_frameworks(torch):
    episodes = _episodes()
    theirs, ours = same_weights(torch, build_reinforce_policy)
    start = numpy_state(theirs)
    their_losses = run_reinforce(torch, theirs, episodes)
    our_losses = run_reinforce(corenn, ours, episodes)
    assert_same_run(our_losses, their_losses)
    assert_same_state(ours, theirs, moved_from=start)


def test_actor_critic_trains_the_same_in_both_frameworks(torch):
    episodes = _episodes(seed=1)
    theirs, ours = same_weights(torch, build_actor_critic)
    start = numpy_state(theirs)
    their_losses = run_actor_critic(torch, theirs, episodes)
    our_losses = run_actor_critic(corenn, ours, episodes)
    assert_same_run(our_losses, their_losses)
    assert_same_state(ours, theirs, moved_from=start)
