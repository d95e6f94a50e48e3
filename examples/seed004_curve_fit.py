"""Seed 004, section 1 ("PyTorch basics"): autograd on a composite function, then fitting a curve with Adam.

The program of the seed document, ported by renaming ``torch`` to ``corenn``. The
samples follow y = 5 x^2 + 3; the model y = w0 x^2 + w1 x + w2 is fitted with
``Adam([w], 0.1)`` for 1000 steps and ends close to ``[5, 0, 3]`` (the document
prints ``[4.9924135, 0.00040895029, 3.4504161]``: the constant term converges last).

Run: ``python examples/seed004_curve_fit.py [--seed N] [--steps N]``
"""
from __future__ import annotations

import argparse

import corenn


def derivative_example():
    """dg/dx of g(u(x)) = -x*x at x = 1: the document prints tensor(-2.)."""
    x = corenn.tensor(1.0, requires_grad=True)

    def u(x):
        return x * x

    def g(u):
        return -u

    dgdx = corenn.autograd.grad(g(u(x)), x)[0]
    print(dgdx)  # tensor(-2.)
    return dgdx


def fit_curve(steps: int = 1000):
    # Assuming we know that the desired function is a polynomial of 2nd degree, we
    # allocate a vector of size 3 to hold the coefficients and initialize it with
    # random noise.
    # (The document's own line; like PyTorch, corenn warns that copy-constructing from a tensor is
    # better spelled ``randn(...).clone().detach().requires_grad_(True)``.)
    w = corenn.tensor(corenn.randn([3, 1]), requires_grad=True)
    # We use the Adam optimizer with learning rate set to 0.1 to minimize the loss.
    opt = corenn.optim.Adam([w], 0.1)

    def model(x):
        # We define yhat to be our estimate of y.
        f = corenn.stack([x * x, x, corenn.ones_like(x)], 1)
        yhat = corenn.squeeze(f @ w, 1)
        return yhat

    def compute_loss(y, yhat):
        # The loss is defined to be the mean squared error distance between our
        # estimate of y and its true value.
        loss = corenn.nn.functional.mse_loss(yhat, y)
        return loss

    def generate_data():
        # Generate some training data based on the true function
        x = corenn.rand(100) * 20 - 10
        y = 5 * x * x + 3
        return x, y

    def train_step():
        x, y = generate_data()
        yhat = model(x)
        loss = compute_loss(y, yhat)
        opt.zero_grad()
        loss.backward()
        opt.step()

    for _ in range(steps):
        train_step()
    print(w.detach().numpy())
    return w.detach().numpy().ravel()


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    parser.add_argument("--steps", type=int, default=1000, help="Adam steps (default 1000, as in the document)")
    args = parser.parse_args(argv)
    corenn.manual_seed(args.seed)
    derivative_example()
    return fit_curve(args.steps)


if __name__ == "__main__":
    main()
