"""The main example: train a linear model with SGD on the embedded default.

    build/tjob run --python /usr/bin/python3 --system-site-packages \
        --func train_model examples/train_linear.py

tjob creates a virtual environment that sees Debian's torch, writes this file
with a call of train_model appended, and runs it under torchrun (the default
runtime is torch-distributed). Pass keyword arguments with --args '{"epochs": 10}'.
"""


def train_model(epochs: int = 5, lr: float = 0.05, seed: int = 0):
    import torch
    from torch import nn

    torch.manual_seed(seed)
    # Synthetic regression data: y = X w + b + noise.
    true_w = torch.randn(10, 1)
    X = torch.randn(256, 10)
    y = X @ true_w + 0.5 + 0.01 * torch.randn(256, 1)

    model = nn.Linear(10, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    loss_fn = nn.MSELoss()
    for epoch in range(1, epochs + 1):
        for i in range(0, len(X), 32):
            optimizer.zero_grad()
            loss = loss_fn(model(X[i:i + 32]), y[i:i + 32])
            loss.backward()
            optimizer.step()
        with torch.no_grad():
            full = loss_fn(model(X), y).item()
        print(f"Epoch {epoch}/{epochs}, Loss: {full:.4f}", flush=True)
    print("Training completed!")
