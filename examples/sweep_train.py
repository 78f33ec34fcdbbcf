"""A small training run to sweep over (README, Sweeps): gradient descent on (w - 2)^2 from w = 0,
`--epochs` steps of `--lr`. Each epoch prints `epoch=E loss=L`, Katib's metrics format, which
`tjob optimize` reads from a trial's output; stdlib only."""
import argparse

parser = argparse.ArgumentParser()
parser.add_argument("--lr", type=float, required=True)
parser.add_argument("--epochs", type=int, default=5)
args = parser.parse_args()
w = 0.0
for epoch in range(1, args.epochs + 1):
    w -= args.lr * 2 * (w - 2.0)
    print(f"epoch={epoch} loss={(w - 2.0) ** 2:.6f}")
