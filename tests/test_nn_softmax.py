"""The softmax mixer is multi-head attention as PyTorch builds it: with the same weights, the
outputs of ``torch.nn.MultiheadAttention`` (self-attention, batch first) in float64."""
import pytest
import torch

from ddlearn.nn.softmax import SoftmaxMixer


@pytest.mark.parametrize("channels, heads", [(12, 3), (16, 1), (8, 8)])
def test_equal_outputs_to_torch_multihead_attention(channels, heads):
    torch.manual_seed(0)
    ours = SoftmaxMixer(channels, heads).double()
    ref = torch.nn.MultiheadAttention(channels, heads, batch_first=True).double()
    with torch.no_grad():
        ref.in_proj_weight.copy_(ours.qkv.weight)
        ref.in_proj_bias.copy_(ours.qkv.bias)
        ref.out_proj.weight.copy_(ours.out.weight)
        ref.out_proj.bias.copy_(ours.out.bias)
    x = torch.randn(3, 37, channels, dtype=torch.float64)
    want = ref(x, x, x, need_weights=False)[0].detach()
    got = ours(x).detach()
    torch.testing.assert_close(got, want, rtol=0, atol=1e-12 * float(want.abs().max()))
    # the token count does not enter the parameters: the same mixer on another mesh
    y = torch.randn(1, 11, channels, dtype=torch.float64)
    torch.testing.assert_close(ours(y).detach(), ref(y, y, y, need_weights=False)[0].detach(),
                               rtol=0, atol=1e-12 * float(want.abs().max()))
