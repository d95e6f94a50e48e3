"""Port of the PyTorch tutorial "Reinforcement Learning (DQN) Tutorial" (``intermediate/reinforcement_q_learning``):
a policy network and a target network, a replay memory of ``Transition`` namedtuples, the masked
Bellman target and a soft update of the target network through state dicts.

Written once against ``lib`` and run under PyTorch and corenn from the same weights. There is no gym
here: the transitions come from numpy (CartPole-sized states, some terminal), and the replay memory
samples with a seeded ``random.Random`` (the same batches in both runs). It keeps the tutorial's
``ReplayMemory`` (``deque(maxlen=...)``, ``random.sample``), the ``DQN`` MLP, ``target_net.load_state_dict
(policy_net.state_dict())``, ``optim.AdamW(lr=LR, amsgrad=True)``, ``optimize_model`` (``Transition(*zip(*
transitions))``, ``torch.tensor(tuple(map(lambda s: s is not None, ...)), dtype=torch.bool)``,
``torch.cat`` of the non-final next states, ``policy_net(state_batch).gather(1, action_batch)``,
``target_net(non_final_next_states).max(1).values`` under ``torch.no_grad()`` written into a
``torch.zeros`` by mask, ``nn.SmoothL1Loss``, ``unsqueeze(1)``, ``torch.nn.utils.clip_grad_value_(...,
100)``), the greedy ``policy_net(state).max(1).indices.view(1, 1)`` action, and the soft update
``target_net_state_dict[key] = policy_net_state_dict[key]*TAU + target_net_state_dict[key]*(1-TAU)``.
"""
from __future__ import annotations

import random
from collections import deque, namedtuple

import numpy as np
import pytest

import corenn
from _port import assert_same_run, assert_same_state, numpy_state, same_weights

pytestmark = pytest.mark.torch

BATCH_SIZE, GAMMA, TAU, LR = 8, 0.99, 0.005, 1e-3
N_OBSERVATIONS, N_ACTIONS = 4, 2
Transition = namedtuple("Transition", ("state", "action", "next_state", "reward"))


class ReplayMemory:
    def __init__(self, capacity, seed):
        self.memory = deque([], maxlen=capacity)
        self.random = random.Random(seed)

    def push(self, *args):
        """Save a transition."""
        self.memory.append(Transition(*args))

    def sample(self, batch_size):
        return self.random.sample(self.memory, batch_size)

    def __len__(self):
        return len(self.memory)


def build(lib):
    nn, F = lib.nn, lib.nn.functional

    class DQN(nn.Module):
        def __init__(self, n_observations, n_actions):
            super().__init__()
            self.layer1 = nn.Linear(n_observations, 32)
            self.layer2 = nn.Linear(32, 32)
            self.layer3 = nn.Linear(32, n_actions)

        def forward(self, x):
            x = F.relu(self.layer1(x))
            x = F.relu(self.layer2(x))
            return self.layer3(x)

    class Agent(nn.Module):
        """The two networks in one module, so that one state dict carries both."""

        def __init__(self):
            super().__init__()
            self.policy_net = DQN(N_OBSERVATIONS, N_ACTIONS)
            self.target_net = DQN(N_OBSERVATIONS, N_ACTIONS)
            self.target_net.load_state_dict(self.policy_net.state_dict())

    return Agent()


def run(lib, agent, episodes, steps=6):
    policy_net, target_net = agent.policy_net, agent.target_net
    optimizer = lib.optim.AdamW(policy_net.parameters(), lr=LR, amsgrad=True)
    memory = ReplayMemory(1000, seed=0)

    def optimize_model():
        if len(memory) < BATCH_SIZE:
            return None
        transitions = memory.sample(BATCH_SIZE)
        batch = Transition(*zip(*transitions))
        non_final_mask = lib.tensor(tuple(map(lambda s: s is not None, batch.next_state)), dtype=lib.bool)
        non_final_next_states = lib.cat([s for s in batch.next_state if s is not None])
        state_batch = lib.cat(batch.state)
        action_batch = lib.cat(batch.action)
        reward_batch = lib.cat(batch.reward)
        state_action_values = policy_net(state_batch).gather(1, action_batch)
        next_state_values = lib.zeros(BATCH_SIZE)
        with lib.no_grad():
            next_state_values[non_final_mask] = target_net(non_final_next_states).max(1).values
        expected_state_action_values = (next_state_values * GAMMA) + reward_batch
        criterion = lib.nn.SmoothL1Loss()
        loss = criterion(state_action_values, expected_state_action_values.unsqueeze(1))
        optimizer.zero_grad()
        loss.backward()
        lib.nn.utils.clip_grad_value_(policy_net.parameters(), 100)
        optimizer.step()
        return loss.item()

    losses, actions = [], []
    for states, rewards, done in episodes:
        state = lib.tensor(states[0], dtype=lib.float32).unsqueeze(0)
        for t in range(1, len(states)):
            with lib.no_grad():
                action = policy_net(state).max(1).indices.view(1, 1)
            actions.append(action.item())
            reward = lib.tensor([rewards[t]])
            terminated = done and t == len(states) - 1
            next_state = None if terminated else lib.tensor(states[t], dtype=lib.float32).unsqueeze(0)
            memory.push(state, action, next_state, reward)
            state = next_state
            loss = optimize_model()
            if loss is not None:
                losses.append(loss)
            target_net_state_dict = target_net.state_dict()
            policy_net_state_dict = policy_net.state_dict()
            for key in policy_net_state_dict:
                target_net_state_dict[key] = policy_net_state_dict[key] * TAU + target_net_state_dict[key] * (1 - TAU)
            target_net.load_state_dict(target_net_state_dict)
            if state is None:
                break
    return losses, actions


def test_dqn_trains_the_same_in_both_frameworks(torch):
    rng = np.random.default_rng(0)
    episodes = [(rng.standard_normal((6, N_OBSERVATIONS)), rng.uniform(0, 1, 6).astype(np.float32), i % 2 == 0)
                for i in range(4)]
    theirs, ours = same_weights(torch, build)
    start = numpy_state(theirs)
    their_losses, their_actions = run(torch, theirs, episodes)
    our_losses, our_actions = run(corenn, ours, episodes)
    assert len(our_losses) == 20 - 7
    assert_same_run(our_losses, their_losses)
    assert our_actions == their_actions
    assert_same_state(ours, theirs, moved_from=start)
    assert not np.array_equal(numpy_state(ours)["target_net.layer1.weight"], start["target_net.layer1.weight"])
