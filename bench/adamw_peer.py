"""PyTorch's CPU AdamW (fused where available) on N parameters: params/s.
The peer that megac's CPU AdamW is measured against (bench/profile.sh)."""
import sys, time
import torch

n = int(sys.argv[1]) if len(sys.argv) > 1 else 1 << 27
threads = torch.get_num_threads()
p = torch.nn.Parameter(torch.full((n,), 0.1))
p.grad = torch.full((n,), 0.01)
for fused in (True, False):
    try:
        opt = torch.optim.AdamW([p], lr=1e-3, weight_decay=0.01, fused=fused)
        best = 0.0
        for i in range(4):
            t0 = time.perf_counter()
            opt.step()
            t = time.perf_counter() - t0
            if i:
                best = max(best, n / t)
        print(f"torch_adamw_{'fused' if fused else 'foreach'}_params_per_s = {best:.4g}  # {threads} threads")
    except Exception as e:  # noqa: BLE001
        print(f"# torch fused={fused} unavailable: {e}")
