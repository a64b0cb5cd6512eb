"""Models usable with torch.func: every node's parameters are one row of a stacked (n, p) tensor."""
