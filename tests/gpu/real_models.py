"""Real models no one here wrote, built from configs with random weights (nothing is downloaded), and the fixes
applied to them: what `calibrate_whatif.py` runs under a collection to check the class and the what-if savings.

Each entry of `build_models()` is a body (a closure over its model and inputs); a name with a `+` is a fixed
variant of the name before it, and `APPLIED` says which what-if predicts that fix. Where a package is
missing its models are left out; `smoke` builds tiny sizes that run on a CPU (a check of the code, not of
the numbers).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any

Body = Callable[[], Any]

#: Applied fixes: (model, its fixed body, the what-if that predicts it).
APPLIED = [
    ("vit_b16_b32_bf16", "vit_b16_b32_bf16+cuda_graph", "a CUDA graph"),
    ("resnet50_b128_fp16", "resnet50_b128_fp16+cuda_graph", "a CUDA graph"),
    ("gpt2_forward_16x512", "gpt2_forward_16x512+bf16", "GPU work 2x faster"),
    ("bert_base_b1_s128", "bert_base_b1_s128+cuda_graph", "a CUDA graph"),
    ("mobilenet_v3_b1", "mobilenet_v3_b1+cuda_graph", "a CUDA graph"),
    ("convnext_tiny_b64_fp32", "convnext_tiny_b64_fp32+bf16", "GPU work 2x faster"),
    ("resnet18_b64_pageable_upload", "resnet18_b64_pageable_upload+pinned", "copies pinned"),
    ("stand_in_encoder", "stand_in_encoder+cuda_graph", "a CUDA graph"),
]


def build_models(device: Any, smoke: bool, only: set[str] | None = None) -> dict[str, Body]:
    """name -> a body; `only`: the model names to build (their fixed variants come with them), None: all."""
    bodies: dict[str, Body] = {}
    for build in (_gpt2, _vit, _resnet50, _bert, _mobilenet, _convnext, _pageable_upload, _faster_rcnn):
        with contextlib.suppress(ImportError):
            bodies.update(build(device, smoke))
    if smoke and not bodies:  # none of the packages here: a stand-in, so the code path still runs
        bodies.update(_stand_in(device))
    if only is not None:
        bodies = {n: b for n, b in bodies.items() if n.split("+")[0] in only}
    return bodies


def autocast_body(model: Any, x: Any, device: Any, dtype: Any) -> Body:
    import torch

    def body() -> Any:
        # No autocast weight cache: the forward may be captured in a CUDA graph (graphed()).
        amp = torch.autocast(device.type, dtype=dtype, enabled=dtype != torch.float32, cache_enabled=False)
        with torch.no_grad(), amp:
            return model(x)

    return body


def graphed(model: Any, x: Any, device: Any, dtype: Any) -> Body:
    """The forward captured once in a CUDA graph and replayed (on a CPU: the plain forward)."""
    import torch

    plain = autocast_body(model, x, device, dtype)
    if device.type != "cuda":
        return plain
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            plain()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = plain()

    def body() -> Any:
        graph.replay()
        return out

    return body


def _half(device: Any) -> Any:
    import torch

    return torch.bfloat16 if device.type == "cuda" else torch.float32


def _gpt2(device: Any, smoke: bool) -> dict[str, Body]:
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel

    cfg = GPT2Config(n_layer=2, n_embd=64, n_head=2) if smoke else GPT2Config()
    gpt2 = GPT2LMHeadModel(cfg).to(device).eval()
    prompt = torch.randint(0, cfg.vocab_size, (1, 8), device=device)
    batch = torch.randint(0, cfg.vocab_size, (2, 16) if smoke else (16, 512), device=device)
    new = 4 if smoke else 32
    half = _half(device)

    def generate() -> Any:
        with torch.no_grad():
            return gpt2.generate(prompt, max_new_tokens=new, min_new_tokens=new, do_sample=False, pad_token_id=0)

    def forward() -> Any:
        with torch.no_grad():
            return gpt2(batch).logits

    def forward_bf16() -> Any:
        with torch.no_grad(), torch.autocast(device.type, dtype=half):
            return gpt2(batch).logits

    return {"gpt2_generate_b1": generate, "gpt2_forward_16x512": forward, "gpt2_forward_16x512+bf16": forward_bf16}


def _vit(device: Any, smoke: bool) -> dict[str, Body]:
    import timm
    import torch

    vit = timm.create_model("vit_tiny_patch16_224" if smoke else "vit_base_patch16_224", pretrained=False)
    vit = vit.to(device).eval()
    x = torch.randn(2 if smoke else 32, 3, 224, 224, device=device)
    half = _half(device)
    return {"vit_b16_b32_bf16": autocast_body(vit, x, device, half),
            "vit_b16_b32_bf16+cuda_graph": graphed(vit, x, device, half)}  # fmt: skip


def _resnet50(device: Any, smoke: bool) -> dict[str, Body]:
    import torch
    import torchvision

    rn = torchvision.models.resnet50(weights=None).to(device).eval()
    x = torch.randn(2 if smoke else 128, 3, 224, 224, device=device)
    fp16 = torch.float16 if device.type == "cuda" else torch.float32
    return {"resnet50_b128_fp16": autocast_body(rn, x, device, fp16),
            "resnet50_b128_fp16+cuda_graph": graphed(rn, x, device, fp16)}  # fmt: skip


def _bert(device: Any, smoke: bool) -> dict[str, Body]:
    """BERT-base encoding one 128-token request in fp32: many small kernels, each launched from Python."""
    import torch
    from transformers import BertConfig, BertModel

    cfg = BertConfig(num_hidden_layers=2, hidden_size=64, num_attention_heads=2, intermediate_size=128) if smoke \
        else BertConfig()  # fmt: skip
    bert = BertModel(cfg).to(device).eval()
    ids = torch.randint(0, cfg.vocab_size, (1, 16 if smoke else 128), device=device)
    return {"bert_base_b1_s128": autocast_body(bert, ids, device, torch.float32),
            "bert_base_b1_s128+cuda_graph": graphed(bert, ids, device, torch.float32)}  # fmt: skip


def _mobilenet(device: Any, smoke: bool) -> dict[str, Body]:
    """MobileNetV3-Large on one image in fp32: a small convolutional net, launch-heavy at batch 1."""
    import torch
    import torchvision

    net = torchvision.models.mobilenet_v3_large(weights=None).to(device).eval()
    x = torch.randn(1, 3, 64 if smoke else 224, 64 if smoke else 224, device=device)
    return {"mobilenet_v3_b1": autocast_body(net, x, device, torch.float32),
            "mobilenet_v3_b1+cuda_graph": graphed(net, x, device, torch.float32)}  # fmt: skip


def _convnext(device: Any, smoke: bool) -> dict[str, Body]:
    """ConvNeXt-Tiny at batch 64 in fp32 (GPU-bound), and the same under bf16 autocast (the fix)."""
    import torch
    import torchvision

    net = torchvision.models.convnext_tiny(weights=None).to(device).eval()
    x = torch.randn(2 if smoke else 64, 3, 224 if not smoke else 64, 224 if not smoke else 64, device=device)
    return {"convnext_tiny_b64_fp32": autocast_body(net, x, device, torch.float32),
            "convnext_tiny_b64_fp32+bf16": autocast_body(net, x, device, _half(device))}  # fmt: skip


def _pageable_upload(device: Any, smoke: bool) -> dict[str, Body]:
    """ResNet-18 fp16 on a batch uploaded each call from pageable host memory, and from pinned memory
    asynchronously (the fix): the input pipeline a serving loop often has."""
    import torch
    import torchvision

    net = torchvision.models.resnet18(weights=None).to(device).eval()
    shape = (2, 3, 64, 64) if smoke else (64, 3, 224, 224)
    pageable = torch.randn(*shape)
    pinned = pageable.pin_memory() if device.type == "cuda" else pageable
    fp16 = torch.float16 if device.type == "cuda" else torch.float32

    def upload(src: Any, non_blocking: bool) -> Body:
        def body() -> Any:
            x = src.to(device, non_blocking=non_blocking)
            with torch.no_grad(), torch.autocast(device.type, dtype=fp16, enabled=fp16 != torch.float32):
                return net(x)

        return body

    return {"resnet18_b64_pageable_upload": upload(pageable, False),
            "resnet18_b64_pageable_upload+pinned": upload(pinned, True)}  # fmt: skip


def _faster_rcnn(device: Any, smoke: bool) -> dict[str, Body]:
    """Faster R-CNN (ResNet-50 FPN) on two images: data-dependent shapes (proposals, NMS) that make the host
    wait for the GPU; no fix applied, the class and the what-ifs only."""
    import torch
    import torchvision

    if smoke:  # too slow on a CPU for a smoke check
        return {}
    det = torchvision.models.detection.fasterrcnn_resnet50_fpn(weights=None, weights_backbone=None)
    det = det.to(device).eval()
    images = [torch.rand(3, 480, 640, device=device) for _ in range(2)]

    def body() -> Any:
        with torch.no_grad():
            return det(images)

    return {"faster_rcnn_b2": body}


def _stand_in(device: Any) -> dict[str, Body]:
    import torch

    enc = torch.nn.TransformerEncoder(torch.nn.TransformerEncoderLayer(64, 2, 128, batch_first=True), 2)
    enc = enc.to(device).eval()
    x = torch.randn(2, 16, 64, device=device)
    half = _half(device)
    return {"stand_in_encoder": autocast_body(enc, x, device, half),
            "stand_in_encoder+cuda_graph": graphed(enc, x, device, half)}  # fmt: skip
