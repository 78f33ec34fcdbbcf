"""A small but real training job: fit y = w*x + b by stochastic gradient descent.

Standard library only, so it runs on any Python 3. Hyperparameters come from
the environment (as a scheduler would pass them): LR, EPOCHS, SEED.
Exits 0 when the fit converged, 1 otherwise.
"""
import os
import random
import sys

lr = float(os.environ.get("LR", "0.02"))
epochs = int(os.environ.get("EPOCHS", "40"))
rng = random.Random(int(os.environ.get("SEED", "7")))

true_w, true_b = 3.0, 2.0
data = [(x, true_w * x + true_b + rng.gauss(0, 0.1)) for x in (rng.uniform(-1, 1) for _ in range(512))]

w, b = 0.0, 0.0
for epoch in range(1, epochs + 1):
    rng.shuffle(data)
    total = 0.0
    for x, y in data:
        err = (w * x + b) - y
        total += err * err
        w -= lr * 2 * err * x
        b -= lr * 2 * err
    loss = total / len(data)
    if epoch == 1 or epoch % 5 == 0 or epoch == epochs:
        print(f"epoch {epoch:3d}  loss {loss:.5f}  w {w:.4f}  b {b:.4f}", flush=True)

converged = abs(w - true_w) < 0.05 and abs(b - true_b) < 0.05
print(f"final w={w:.4f} b={b:.4f} ({'converged' if converged else 'did not converge'})")
sys.exit(0 if converged else 1)
