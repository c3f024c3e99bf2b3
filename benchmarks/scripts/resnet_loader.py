"""A user's script: torchvision ResNet-50 in bf16 fed by an image pipeline (FakeData through
RandomResizedCrop / flip / ToTensor / Normalize in DataLoader workers). Loader-bound on an H200.

    tracekit capture --script benchmarks/scripts/resnet_loader.py -o runs -- --workers 3
    ... -- --on-gpu          # the same model on one batch already on the GPU (no loader)

Needs torchvision (on the GPU machine); plain `python resnet_loader.py` runs it without tracekit.
`steps(batches)` times every fetch: the manifest's `unprofiled_loader_wait_ms` shows the loader stall the
profiled window hides (benchmarks/loader_pairs.sh, docs/results/whatif.md).
"""

import argparse
import itertools

import torch
import torchvision
from torchvision import transforms

from tracekit.capture import steps

p = argparse.ArgumentParser()
p.add_argument("--workers", type=int, default=3)
p.add_argument("--batch", type=int, default=64)
p.add_argument("--prefetch", type=int, default=2)
p.add_argument("--on-gpu", action="store_true", help="one batch kept on the GPU: no input pipeline")
args = p.parse_args()

dev = torch.device("cuda" if torch.cuda.is_available() else "cpu")
model = torchvision.models.resnet50().to(dev).to(memory_format=torch.channels_last)
opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
loss_fn = torch.nn.CrossEntropyLoss()

if args.on_gpu:
    x = torch.randn(args.batch, 3, 224, 224, device=dev).to(memory_format=torch.channels_last)
    y = torch.randint(0, 1000, (args.batch,), device=dev)
    batches = itertools.repeat((x, y))
else:
    tf = transforms.Compose(
        [
            transforms.RandomResizedCrop(224),
            transforms.RandomHorizontalFlip(),
            transforms.ToTensor(),
            transforms.Normalize([0.485, 0.456, 0.406], [0.229, 0.224, 0.225]),
        ]
    )
    data = torchvision.datasets.FakeData(size=args.batch * 200, image_size=(3, 320, 320), transform=tf)
    loader = torch.utils.data.DataLoader(
        data,
        batch_size=args.batch,
        num_workers=args.workers,
        pin_memory=True,
        prefetch_factor=args.prefetch if args.workers else None,
        persistent_workers=args.workers > 0,
        drop_last=True,
    )
    batches = loader

for xb, yb in steps(batches, samples_per_step=args.batch):
    xb = xb.to(dev, non_blocking=True).to(memory_format=torch.channels_last)
    yb = yb.to(dev, non_blocking=True)
    with torch.autocast(dev.type, dtype=torch.bfloat16):
        loss = loss_fn(model(xb), yb)
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
