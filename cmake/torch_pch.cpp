// Carrier translation unit for the shared <torch/torch.h> precompiled header.
int bitparity_torch_pch_anchor = 0;
