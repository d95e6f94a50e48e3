"""Optimizers and learning-rate schedulers (mirrors ``torch.optim``).

Example::

    >>> opt = corenn.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    >>> sched = corenn.optim.lr_scheduler.StepLR(opt, step_size=10, gamma=0.5)
    >>> for epoch in range(30):
    ...     train_one_epoch(model, opt)
    ...     sched.step()
"""
from corenn.optim import lr_scheduler
from corenn.optim.adadelta import Adadelta
from corenn.optim.adafactor import Adafactor
from corenn.optim.adagrad import Adagrad
from corenn.optim.adam import Adam, AdamW
from corenn.optim.adamax import Adamax
from corenn.optim.asgd import ASGD
from corenn.optim.lbfgs import LBFGS
from corenn.optim.muon import Muon
from corenn.optim.nadam import NAdam
from corenn.optim.radam import RAdam
from corenn.optim.rprop import Rprop
from corenn.optim.optimizer import Optimizer, OptimizerLoadResult
from corenn.optim.rmsprop import RMSprop
from corenn.optim.sgd import SGD

__all__ = ["Optimizer", "OptimizerLoadResult", "SGD", "Adam", "AdamW", "RMSprop", "Adagrad", "Adadelta", "Adamax",
           "NAdam", "RAdam", "ASGD", "Rprop", "LBFGS", "Adafactor", "Muon", "lr_scheduler"]
