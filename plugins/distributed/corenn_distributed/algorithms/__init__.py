"""``torch.distributed.algorithms`` for corenn: DDP communication hooks (:mod:`.ddp_comm_hooks`)."""
