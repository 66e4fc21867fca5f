"""Llama-architecture decoder, parameterised exactly like HF transformers' LlamaForCausalLM.

Parameter names = HF state-dict names (model.embed_tokens.weight, model.layers.N.self_attn.q_proj.weight,
..., model.norm.weight, lm_head.weight). RoPE is HF's rotate-half form:
    q' = q * cos + rotate_half(q) * sin,  rotate_half(x) = cat(-x[..., d/2:], x[..., :d/2]),
    cos/sin = cos/sin(pos * inv_freq) repeated twice along head_dim, inv_freq = theta^(-2i/d).
(llama.cpp's GGUF converter permutes q_proj/k_proj rows to turn this into interleaved pairs; a
GGUF writer for these weights must do the same permutation.)
GQA: query head h uses KV head h // (n_heads / n_kv_heads), as HF's repeat_kv.

Shapes legend: B batch, T tokens, H query heads, G kv heads, R = H/G, D head_dim, C hidden.
"""
import math
from dataclasses import dataclass, asdict

import torch
import torch.nn as nn
import torch.nn.functional as F


@dataclass
class Config:
    vocab_size: int = 4096
    hidden_size: int = 256
    intermediate_size: int = 768
    num_hidden_layers: int = 4
    num_attention_heads: int = 8
    num_key_value_heads: int = 4
    rms_norm_eps: float = 1e-5
    rope_theta: float = 10000.0
    max_position_embeddings: int = 2048
    tie_word_embeddings: bool = False
    bos_token_id: int = 1
    eos_token_id: int = 2

    @property
    def head_dim(self):
        return self.hidden_size // self.num_attention_heads

    def to_dict(self):
        return asdict(self)


class RMSNorm(nn.Module):
    def __init__(self, n, eps):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(n))
        self.eps = eps

    def forward(self, x):
        x32 = x.float()
        return (x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.eps)).to(x.dtype) * self.weight


def rope_cos_sin(cfg, positions, dtype=torch.float32):
    d = cfg.head_dim
    inv_freq = 1.0 / (cfg.rope_theta ** (torch.arange(0, d, 2, dtype=torch.float32) / d))  # [D/2]
    freqs = positions.float()[:, None] * inv_freq[None, :]                                  # [T, D/2]
    emb = torch.cat([freqs, freqs], dim=-1)                                                 # [T, D]
    return emb.cos().to(dtype), emb.sin().to(dtype)


def rotate_half(x):
    h = x.shape[-1] // 2
    return torch.cat([-x[..., h:], x[..., :h]], dim=-1)


def apply_rope(x, cos, sin):  # x [B, *, T, D], cos/sin [T, D]
    return x * cos + rotate_half(x) * sin


class Attention(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        C, H, G, D = cfg.hidden_size, cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim
        self.q_proj = nn.Linear(C, H * D, bias=False)
        self.k_proj = nn.Linear(C, G * D, bias=False)
        self.v_proj = nn.Linear(C, G * D, bias=False)
        self.o_proj = nn.Linear(H * D, C, bias=False)

    # set by train.py --device cuda (torch >= 2.0): causal attention of a whole sequence through
    # F.scaled_dot_product_attention (flash / memory-efficient kernels) instead of the explicit
    # matmul-softmax-matmul below; same function (checked by speed.py --device cuda before a run)
    use_sdpa = False

    def forward(self, x, cos, sin, past=None, chunk=0):
        B, T, C = x.shape
        H, G, D = self.cfg.num_attention_heads, self.cfg.num_key_value_heads, self.cfg.head_dim
        R = H // G
        q = self.q_proj(x).view(B, T, H, D).transpose(1, 2)   # [B, H, T, D]
        k = self.k_proj(x).view(B, T, G, D).transpose(1, 2)   # [B, G, T, D]
        v = self.v_proj(x).view(B, T, G, D).transpose(1, 2)
        q = apply_rope(q, cos, sin)
        k = apply_rope(k, cos, sin)
        if past is not None:
            if past[0] is not None:
                k = torch.cat([past[0], k], dim=2)
                v = torch.cat([past[1], v], dim=2)
            past[0], past[1] = k, v
        if Attention.use_sdpa and past is None and T > 1:
            kx = k.repeat_interleave(R, dim=1)   # [B, H, T, D]: query head h reads KV head h // R (HF repeat_kv)
            vx = v.repeat_interleave(R, dim=1)
            o = F.scaled_dot_product_attention(q, kx, vx, is_causal=True)  # [B, H, T, D], scale 1/sqrt(D)
            return self.o_proj(o.transpose(1, 2).reshape(B, T, H * D))
        S = k.shape[2]                       # keys incl. cache
        off = S - T                          # absolute position of the first query
        # group queries by their KV head: [B, G, R*T, D] so K/V are never expanded
        qg = q.reshape(B, G, R, T, D).reshape(B, G, R * T, D)
        scale = 1.0 / math.sqrt(D)
        if chunk and T > chunk and off == 0:
            outs = []
            for s0 in range(0, T, chunk):
                s1 = min(T, s0 + chunk)
                qc = q[:, :, s0:s1].reshape(B, G, R, s1 - s0, D).reshape(B, G, R * (s1 - s0), D)
                outs.append(self._attend(qc, k[:, :, :s1], v[:, :, :s1], s0, s1 - s0, R, scale))
            o = torch.cat([oc.view(B, G, R, -1, D) for oc in outs], dim=3)  # [B, G, R, T, D]
        else:
            o = self._attend(qg, k, v, off, T, R, scale).view(B, G, R, T, D)
        o = o.reshape(B, H, T, D).transpose(1, 2).reshape(B, T, H * D)
        return self.o_proj(o)

    @staticmethod
    def _attend(qg, k, v, off, T, R, scale):
        # qg [B, G, R*T, D] (queries at absolute positions off..off+T-1), k/v [B, G, S, D]
        S = k.shape[2]
        att = torch.matmul(qg, k.transpose(-1, -2)) * scale           # [B, G, R*T, S]
        if T > 1:
            qpos = torch.arange(off, off + T, device=qg.device)
            mask = torch.arange(S, device=qg.device)[None, :] > qpos[:, None]           # [T, S] True = masked
            att = att.view(att.shape[0], att.shape[1], R, T, S).masked_fill(mask, float("-inf"))
            att = att.view(att.shape[0], att.shape[1], R * T, S)
        att = torch.softmax(att.float(), dim=-1).to(v.dtype)
        return torch.matmul(att, v)                                      # [B, G, R*T, D]


class MLP(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.gate_proj = nn.Linear(cfg.hidden_size, cfg.intermediate_size, bias=False)
        self.up_proj = nn.Linear(cfg.hidden_size, cfg.intermediate_size, bias=False)
        self.down_proj = nn.Linear(cfg.intermediate_size, cfg.hidden_size, bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class Layer(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.self_attn = Attention(cfg)
        self.mlp = MLP(cfg)
        self.input_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.post_attention_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)

    def forward(self, x, cos, sin, past=None, chunk=0):
        x = x + self.self_attn(self.input_layernorm(x), cos, sin, past, chunk)
        return x + self.mlp(self.post_attention_layernorm(x))


class Inner(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.embed_tokens = nn.Embedding(cfg.vocab_size, cfg.hidden_size)
        self.layers = nn.ModuleList([Layer(cfg) for _ in range(cfg.num_hidden_layers)])
        self.norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)


class LlamaForCausalLM(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        self.model = Inner(cfg)
        self.lm_head = nn.Linear(cfg.hidden_size, cfg.vocab_size, bias=False)
        if cfg.tie_word_embeddings:
            self.lm_head.weight = self.model.embed_tokens.weight

    def init_weights(self, seed):
        g = torch.Generator().manual_seed(seed)
        std = 0.02
        for name, p in self.named_parameters():
            if name.endswith("layernorm.weight") or name == "model.norm.weight":
                nn.init.ones_(p)
            else:
                s = std / math.sqrt(2 * self.cfg.num_hidden_layers) if name.endswith(("o_proj.weight", "down_proj.weight")) else std
                with torch.no_grad():
                    p.copy_(torch.randn(p.shape, generator=g) * s)

    def forward(self, ids, past=None, start_pos=0, chunk=0, last_only=False):
        """ids [B, T] -> logits [B, T, V] (or [B, 1, V] with last_only).
        past: list of [k, v] per layer (filled/extended in place) for incremental decoding."""
        T = ids.shape[1]
        cos, sin = rope_cos_sin(self.cfg, torch.arange(start_pos, start_pos + T))  # computed on the CPU, as always
        cos, sin = cos.to(ids.device), sin.to(ids.device)
        x = self.model.embed_tokens(ids)
        for i, layer in enumerate(self.model.layers):
            x = layer(x, cos, sin, None if past is None else past[i], chunk)
        x = self.model.norm(x)
        if last_only:
            x = x[:, -1:]
        return self.lm_head(x)

    def num_params(self):
        return sum(p.numel() for p in {id(p): p for p in self.parameters()}.values())

    @torch.no_grad()
    def generate(self, ids, max_new, chunk=0):
        """Greedy decoding with a KV cache. ids [B, T] (same length rows) -> new ids [B, max_new]."""
        past = [[None, None] for _ in range(self.cfg.num_hidden_layers)]
        logits = self.forward(ids, past=past, start_pos=0, last_only=True, chunk=chunk)
        out = []
        pos = ids.shape[1]
        for _ in range(max_new):
            nxt = logits[:, -1].argmax(-1)
            out.append(nxt)
            logits = self.forward(nxt[:, None], past=past, start_pos=pos)
            pos += 1
        return torch.stack(out, dim=1)


def load_checkpoint(path):
    """A training checkpoint (train.py's .pt: config + state dict) -> LlamaForCausalLM in eval mode."""
    ck = torch.load(path, map_location="cpu", weights_only=False)
    cfg = Config(**ck["config"])
    m = LlamaForCausalLM(cfg)
    m.load_state_dict(ck["model"])
    m.eval()
    return m
