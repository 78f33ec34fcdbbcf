"""The main example: train a linear model with SGD on the embedded default.

    build/tjob run --python /usr/bin/python3 --system-site-packages \
        --func train_model examples/train_linear.py

tjob creates a virtual environment that sees Debian's torch, writes this file
with a call of train_model appended, and runs it under torchrun (the default
runtime is torch-distributed). Pass keyword arguments with --args '{"epochs": 10}'.

Each epoch it reports its progress and loss with tjob.report (Kubeflow's progress protocol; tjob
puts the helper on the job's PYTHONPATH): `tjob get` shows them, and `tjob run` on a terminal draws
them in a line below the log. Where there is no tjob (a Kubeflow cluster), the same call goes to
the Kubeflow SDK's update_trainjob_status when that is installed, and otherwise does nothing.
"""


def progress_reporter():
    """tjob.report, else Kubeflow's update_trainjob_status, else nothing."""
    try:
        from tjob import report

        return report
    except ImportError:
        pass
    try:
        from kubeflow.trainer import update_trainjob_status

        return lambda progress=None, eta=None, **metrics: update_trainjob_status(progress, eta, metrics)
    except ImportError:
        return lambda progress=None, eta=None, **metrics: False


def train_model(epochs: int = 5, lr: float = 0.05, seed: int = 0, seconds_per_epoch: float = 0.0):
    """seconds_per_epoch: at least this long per epoch (a demo's pace: the model itself trains in
    milliseconds)."""
    import os
    import time

    import torch
    from torch import nn

    # One worker reports for the job (torchrun's rank 0).
    report = progress_reporter() if os.environ.get("RANK", "0") == "0" else (lambda *a, **k: False)
    began = time.monotonic()

    torch.manual_seed(seed)
    # Synthetic regression data: y = X w + b + noise.
    true_w = torch.randn(10, 1)
    X = torch.randn(256, 10)
    y = X @ true_w + 0.5 + 0.01 * torch.randn(256, 1)

    model = nn.Linear(10, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    loss_fn = nn.MSELoss()
    for epoch in range(1, epochs + 1):
        epoch_began = time.monotonic()
        for i in range(0, len(X), 32):
            optimizer.zero_grad()
            loss = loss_fn(model(X[i:i + 32]), y[i:i + 32])
            loss.backward()
            optimizer.step()
        with torch.no_grad():
            full = loss_fn(model(X), y).item()
        print(f"Epoch {epoch}/{epochs}, Loss: {full:.4f}", flush=True)
        if seconds_per_epoch > 0:
            time.sleep(max(0.0, seconds_per_epoch - (time.monotonic() - epoch_began)))
        per_epoch = (time.monotonic() - began) / epoch
        report(progress=100 * epoch // epochs, eta=round(per_epoch * (epochs - epoch)), loss=round(full, 4),
               epoch=epoch)
    print("Training completed!")
