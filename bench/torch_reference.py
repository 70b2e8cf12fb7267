#!/usr/bin/env python3
"""The PyTorch anchor of docs/perf.md: one training step of GPT or nGPT, timed.

The model is the reference math (../shared/golden/README.md) written the way the
authors' nanoGPT-based code is: nn.Linear layers without bias, rotate-half RoPE,
causal softmax attention in PyTorch ops (Debian's torch 1.13 has no fused
scaled_dot_product_attention), SwiGLU with an 8d-wide c_fc, torch.optim.AdamW,
global-norm clipping, and for nGPT the per-step renormalisation of the weights.
It exists only to time the anchor; normlab's numbers are checked against the
authors' own files (tests/test_golden.cpp), not against this.

    python3 bench/torch_reference.py --variant gpt --threads 2 --steps 12
prints one JSON line: the median, min and max ms of the timed steps and tokens/s.
Run it with OMP_WAIT_POLICY=PASSIVE (the fair setting on a shared 2-core machine:
OpenMP threads that spin fight OpenBLAS's for the cores) and, on a host that sets
OPENBLAS_CORETYPE, with that unset in the same command so OpenBLAS uses its best
kernels. scripts/bench-anchors.sh does both, interleaved with normlab's steps.
"""
import argparse
import json
import math
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


def rope(x, cos, sin):
    # x: [B, H, T, dk]; rotate-half convention
    half = x.shape[-1] // 2
    a, b = x[..., :half], x[..., half:]
    return torch.cat([a * cos - b * sin, b * cos + a * sin], dim=-1)


def unit(x, dim=-1):
    return x / x.norm(dim=dim, keepdim=True)


def rmsnorm(x, w):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * w


class Block(nn.Module):
    def __init__(self, d, heads, layers, ngpt, bs):
        super().__init__()
        self.d, self.h, self.ngpt, self.bs = d, heads, ngpt, bs
        self.query = nn.Linear(d, d, bias=False)
        self.key = nn.Linear(d, d, bias=False)
        self.value = nn.Linear(d, d, bias=False)
        self.att_c_proj = nn.Linear(d, d, bias=False)
        self.c_fc = nn.Linear(d, 8 * d, bias=False)
        self.mlp_c_proj = nn.Linear(4 * d, d, bias=False)
        for lin in (self.query, self.key, self.value, self.c_fc):
            nn.init.normal_(lin.weight, std=bs)
        for lin in (self.att_c_proj, self.mlp_c_proj):
            nn.init.normal_(lin.weight, std=bs / math.sqrt(2 * layers))
        if ngpt:
            self.attn_alpha = nn.Parameter(torch.full((d,), bs))
            self.mlp_alpha = nn.Parameter(torch.full((d,), bs))
            self.sqk = nn.Parameter(torch.full((d,), bs))
            self.suv = nn.Parameter(torch.ones(8 * d))
        else:
            self.rmsnorm_att = nn.Parameter(torch.ones(d))
            self.rmsnorm_mlp = nn.Parameter(torch.ones(d))

    def residual(self, h, f, alpha):
        """GPT: h + f. nGPT: the LERP toward N(f) with |α·0.05/bs|, retracted to the sphere."""
        if not self.ngpt:
            return h + f
        a = torch.abs(alpha * (0.05 / self.bs))
        A = unit(h)
        return unit(A + a * (unit(f) - A))

    def forward(self, h, cos, sin, mask):
        B, T, d = h.shape
        dk = d // self.h
        x = h if self.ngpt else rmsnorm(h, self.rmsnorm_att)
        q = self.query(x).view(B, T, self.h, dk).transpose(1, 2)
        k = self.key(x).view(B, T, self.h, dk).transpose(1, 2)
        v = self.value(x).view(B, T, self.h, dk).transpose(1, 2)
        q, k = rope(q, cos, sin), rope(k, cos, sin)
        if self.ngpt:
            s = (self.sqk / self.bs).view(1, self.h, 1, dk)
            q, k = s * unit(q), s * unit(k)
            scale = math.sqrt(dk)
        else:
            scale = 1.0 / math.sqrt(dk)
        att = (q @ k.transpose(-2, -1)) * scale
        att = att.masked_fill(mask[:, :, :T, :T] == 0, float("-inf")).softmax(-1)
        y = (att @ v).transpose(1, 2).contiguous().view(B, T, d)
        h = self.residual(h, self.att_c_proj(y), self.attn_alpha if self.ngpt else None)
        x = h if self.ngpt else rmsnorm(h, self.rmsnorm_mlp)
        uv = self.c_fc(x)
        if self.ngpt:
            uv = uv * (self.suv * math.sqrt(d))
        u, g = uv[..., : 4 * d], uv[..., 4 * d:]
        return self.residual(h, self.mlp_c_proj(u * F.silu(g)), self.mlp_alpha if self.ngpt else None)


class Model(nn.Module):
    def __init__(self, V, d, heads, layers, T, ngpt):
        super().__init__()
        self.ngpt = ngpt
        bs = 1.0 / math.sqrt(d) if ngpt else 0.02
        self.bs = bs
        self.wte = nn.Embedding(V, d)
        nn.init.normal_(self.wte.weight, std=bs)
        self.blocks = nn.ModuleList([Block(d, heads, layers, ngpt, bs) for _ in range(layers)])
        self.lm_head = nn.Linear(d, V, bias=False)
        nn.init.normal_(self.lm_head.weight, std=bs)
        if ngpt:
            self.sz = nn.Parameter(torch.full((V,), bs))
        else:
            self.rmsnorm_f = nn.Parameter(torch.ones(d))
        dk = d // heads
        inv = 10000.0 ** (-torch.arange(0, dk // 2, dtype=torch.float32) * 2.0 / dk)
        ang = torch.arange(T, dtype=torch.float32)[:, None] * inv[None, :]
        self.register_buffer("cos", ang.cos()[None, None])
        self.register_buffer("sin", ang.sin()[None, None])
        self.register_buffer("mask", torch.tril(torch.ones(T, T)).view(1, 1, T, T))

    def forward(self, idx, targets):
        h = self.wte(idx)
        for b in self.blocks:
            h = b(h, self.cos, self.sin, self.mask)
        if not self.ngpt:
            h = rmsnorm(h, self.rmsnorm_f)
        logits = self.lm_head(h)
        if self.ngpt:
            logits = logits * (self.sz / self.bs)
        return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))

    @torch.no_grad()
    def normalize(self):
        self.wte.weight.copy_(unit(self.wte.weight, 1))
        self.lm_head.weight.copy_(unit(self.lm_head.weight, 1))
        for b in self.blocks:
            for lin in (b.query, b.key, b.value, b.c_fc):
                lin.weight.copy_(unit(lin.weight, 1))
            for lin in (b.att_c_proj, b.mlp_c_proj):
                lin.weight.copy_(unit(lin.weight, 0))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--variant", choices=["gpt", "ngpt"], default="gpt")
    p.add_argument("--d", type=int, default=256)
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--T", type=int, default=256)
    p.add_argument("--B", type=int, default=8)
    p.add_argument("--V", type=int, default=256)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--steps", type=int, default=12, help="timed steps (after 3 untimed)")
    p.add_argument("--autocast", choices=["off", "bf16"], default="off",
                   help="bf16: forward and loss under torch.autocast('cpu', dtype=torch.bfloat16) (PyTorch's CPU "
                        "mixed precision: bf16 matmuls through oneDNN, float32 master weights and optimizer)")
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(1)
    ngpt = a.variant == "ngpt"
    model = Model(a.V, a.d, a.heads, a.layers, a.T, ngpt)
    if ngpt:
        model.normalize()
    decay = [q for q in model.parameters() if q.dim() >= 2]
    rest = [q for q in model.parameters() if q.dim() < 2]
    opt = torch.optim.AdamW(
        [{"params": decay, "weight_decay": 0.0 if ngpt else 0.1}, {"params": rest, "weight_decay": 0.0}],
        lr=1e-3, betas=(0.9, 0.95), eps=1e-8)
    g = torch.Generator().manual_seed(2)
    idx = torch.randint(0, a.V, (a.B, a.T), generator=g)
    tgt = torch.randint(0, a.V, (a.B, a.T), generator=g)
    times = []
    for s in range(3 + a.steps):
        t0 = time.perf_counter()
        if a.autocast == "bf16":
            with torch.autocast("cpu", dtype=torch.bfloat16):
                loss = model(idx, tgt)
        else:
            loss = model(idx, tgt)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        if ngpt:
            model.normalize()
        if s >= 3:
            times.append((time.perf_counter() - t0) * 1e3)
    times.sort()
    med = times[len(times) // 2]
    print(json.dumps({"anchor": "pytorch", "variant": a.variant, "torch": torch.__version__, "threads": a.threads,
                      "autocast": a.autocast, "d": a.d, "layers": a.layers, "T": a.T, "B": a.B,
                      "median_ms": round(med, 2), "min_ms": round(times[0], 2), "max_ms": round(times[-1], 2),
                      "tokens_per_second": round(a.B * a.T / (med * 1e-3), 1), "loss": float(loss)}))


if __name__ == "__main__":
    main()
