"""Optimizers and learning-rate schedulers (mirrors ``torch.optim``).

Example::

    >>> opt = corenn.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    >>> sched = corenn.optim.lr_scheduler.StepLR(opt, step_size=10, gamma=0.5)
    >>> for epoch in range(30):
    ...     train_one_epoch(model, opt)
    ...     sched.step()
"""
from corenn.optim import lr_scheduler
from corenn.optim.adagrad import Adagrad
from corenn.optim.adam import Adam, AdamW
from corenn.optim.optimizer import Optimizer, OptimizerLoadResult
from corenn.optim.rmsprop import RMSprop
from corenn.optim.sgd import SGD

__all__ = ["Optimizer", "OptimizerLoadResult", "SGD", "Adam", "AdamW", "RMSprop", "Adagrad", "lr_scheduler"]
