"""FP8-block conversion as the published DeepSeek-V3 / MiniMax-M2 checkpoints store it, and
DeepSeek's weight_dequant, in torch: the reference t_deepseek_fp8.py and t_minimax_fp8.py
make FP8 sources with and decode them against (B = 128)."""
import torch

B = 128


def block_quantize(w):
    """w [N, K] -> (e4m3 [N, K], f32 scale [ceil(N/128), ceil(K/128)]): per block (edge blocks
    partial) scale = amax / 448 (1 for an all-zero block), q = (w / scale) clamped to +-448."""
    N, K = w.shape
    sr, sc = (N + B - 1) // B, (K + B - 1) // B
    wf = w.to(torch.float32)
    q = torch.empty(N, K, dtype=torch.float8_e4m3fn)
    s = torch.empty(sr, sc, dtype=torch.float32)
    for i in range(sr):
        for j in range(sc):
            blk = wf[i * B:(i + 1) * B, j * B:(j + 1) * B]
            amax = blk.abs().max()
            scale = amax / 448.0 if amax > 0 else torch.tensor(1.0)
            s[i, j] = scale
            q[i * B:(i + 1) * B, j * B:(j + 1) * B] = (blk / scale).clamp(-448, 448).to(torch.float8_e4m3fn)
    return q, s


def deepseek_dequant(q, s):
    """DeepSeek's weight_dequant (inference/kernel.py): f32(q) * s[r//128, c//128], stored bf16."""
    N, K = q.shape
    full = s.repeat_interleave(B, 0).repeat_interleave(B, 1)[:N, :K]
    return (q.to(torch.float32) * full).to(torch.bfloat16)
