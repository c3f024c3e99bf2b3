"""What the scripts of this folder share: the plain-torch stand-ins used where torchvision is missing
(the CPU smoke runs), the vision model and loader, and the unprofiled truth's timing.

The scripts are written the users' way (their own torch.profiler, no tracekit); this module is theirs,
not tracekit's.
"""

from __future__ import annotations

import argparse
import json
import time
from typing import Any, Callable, List, Optional

import torch


class CpuImages(torch.utils.data.Dataset):
    """Synthetic images whose every sample costs CPU in the worker: an image made from a seeded generator,
    blurred (a 5x5 box filter, as a decode's upsampling), randomly cropped to 50-100 % of its side and
    resized, flipped, normalised."""

    def __init__(self, n: int, size: int, out: int) -> None:
        self.n, self.size, self.out = n, size, out

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int):
        g = torch.Generator().manual_seed(i)
        img = torch.rand(1, 3, self.size, self.size, generator=g)
        img = torch.nn.functional.avg_pool2d(img, 5, stride=1, padding=2)
        side = int(self.size * (0.5 + 0.5 * torch.rand(1, generator=g).item()))
        y0, x0 = (int(v) for v in torch.randint(0, self.size - side + 1, (2,), generator=g))
        img = img[:, :, y0 : y0 + side, x0 : x0 + side]
        img = torch.nn.functional.interpolate(img, size=(self.out, self.out), mode="bilinear")
        if torch.rand(1, generator=g).item() < 0.5:
            img = img.flip(-1)
        img = (img - 0.5) / 0.25
        return img[0], i % 10


def small_cnn(c: int = 8) -> torch.nn.Module:
    def block(cin: int, cout: int) -> torch.nn.Module:
        return torch.nn.Sequential(
            torch.nn.Conv2d(cin, cout, 3, padding=1, bias=False),
            torch.nn.BatchNorm2d(cout),
            torch.nn.ReLU(inplace=True),
            torch.nn.MaxPool2d(2),
        )

    return torch.nn.Sequential(
        block(3, c),
        block(c, 2 * c),
        block(2 * c, 4 * c),
        torch.nn.AdaptiveAvgPool2d(1),
        torch.nn.Flatten(),
        torch.nn.Linear(4 * c, 10),
    )


def time_steps(step: Callable[[], Any], warmup: int, steps: int, device: torch.device) -> dict:
    """`step()` run `warmup` times, then `steps` times on the host clock with one synchronisation at
    each end of the window: the steady-state step (mean) and every step."""
    for _ in range(warmup):
        step()
    if device.type == "cuda":
        torch.cuda.synchronize()
    times: List[float] = []
    t0 = last = time.perf_counter()
    for _ in range(steps):
        step()
        now = time.perf_counter()
        times.append((now - last) * 1e3)
        last = now
    if device.type == "cuda":
        torch.cuda.synchronize()
    total = (time.perf_counter() - t0) * 1e3
    return {
        "steady_step_ms": total / steps,
        "median_step_ms": sorted(times)[len(times) // 2],
        "step_ms": [round(t, 3) for t in times],
        "warmup_steps": warmup,
        "timed_steps": steps,
        "device": str(device),
    }


def write_truth(doc: dict, out: Optional[str]) -> None:
    print(json.dumps({k: v for k, v in doc.items() if k != "step_ms"}), flush=True)
    if out:
        with open(out, "w") as fh:
            json.dump(doc, fh, indent=1)


def vision_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--image", type=int, default=0, help="image side (default 320 with torchvision, else 224)")
    p.add_argument("--pin", action="store_true", help="pin_memory=True")
    p.add_argument(
        "--plain", action="store_true", help="the plain-torch model and data even with torchvision"
    )


def has_torchvision() -> bool:
    try:
        import torchvision  # noqa: F401
    except ImportError:
        return False
    return True


def build(args: argparse.Namespace, device: torch.device):
    """The model and its DataLoader: torchvision's ResNet-18 on FakeData through the usual transforms, or
    (no torchvision, or --plain) the small CNN on `CpuImages`."""
    if has_torchvision() and not args.plain:
        import torchvision
        from torchvision import transforms

        image = args.image or 320
        tf = transforms.Compose(
            [
                transforms.RandomResizedCrop(224),
                transforms.RandomHorizontalFlip(),
                transforms.ToTensor(),
                transforms.Normalize([0.485, 0.456, 0.406], [0.229, 0.224, 0.225]),
            ]
        )
        data = torchvision.datasets.FakeData(
            size=args.batch * 400, image_size=(3, image, image), num_classes=1000, transform=tf
        )
        model = torchvision.models.resnet18()
    else:
        data = CpuImages(args.batch * 400, args.image or 224, 40)
        model = small_cnn()
    loader = torch.utils.data.DataLoader(
        data, batch_size=args.batch, shuffle=True, num_workers=args.workers, pin_memory=args.pin
    )
    return model.to(device), loader
