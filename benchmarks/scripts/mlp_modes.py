"""A user's script: a host-bound MLP training step (24 layers of 512, batch 64, SGD), eager, as one CUDA
graph, or through torch.compile.

    tracekit capture --script benchmarks/scripts/mlp_modes.py -o runs -- --mode eager|graph|compile
    ... -- --hidden 4096 --layers 8 --batch 256 --in 1024 --out 512   # the seed's GPU-bound MLP

graph: the whole step (forward, backward, SGD with capturable=... not needed for SGD) is captured once after
warm-up on a side stream and replayed with static inputs. compile: torch.compile(model, mode=--compile-mode).
"""

import argparse

import torch

from tracekit.capture import session

p = argparse.ArgumentParser()
p.add_argument("--mode", choices=("eager", "graph", "compile"), default="eager")
p.add_argument("--compile-mode", default="default")
p.add_argument("--hidden", type=int, default=512)
p.add_argument("--layers", type=int, default=24)
p.add_argument("--batch", type=int, default=64)
p.add_argument("--in", dest="inp", type=int, default=512)
p.add_argument("--out", type=int, default=512)
args = p.parse_args()

dev = torch.device("cuda")
nn = torch.nn
mods = [nn.Linear(args.inp, args.hidden), nn.ReLU()]
for _ in range(args.layers):
    mods += [nn.Linear(args.hidden, args.hidden), nn.ReLU()]
mods.append(nn.Linear(args.hidden, args.out))
model = nn.Sequential(*mods).to(dev)
opt = torch.optim.SGD(model.parameters(), lr=1e-4)
x = torch.randn(args.batch, args.inp, device=dev)

fwd = torch.compile(model, mode=args.compile_mode) if args.mode == "compile" else model


def train_step():
    loss = fwd(x).sum()
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=False)


if args.mode == "graph":
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            train_step()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        train_step()
    run = graph.replay
else:
    run = train_step

with session(samples_per_step=args.batch) as s:
    while not s.done:
        run()
        s.step()
        if not s.active:
            break
