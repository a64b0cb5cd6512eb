"""Closed-form input recovery from a one-sample gradient or gradient difference of a fully connected
first layer.

For a first layer z = W x + b, grad_W f = (grad_b f) x^T at any parameters and for any label, so a single
gradient (a FedSGD server's view, Phong et al. 2017, Sec. 3) and a difference of two gradients (the
leak of PDMM, Yu 2023, Sec. 5.2: "x = weight part / bias part" for logistic regression) both have
D_W = D_b x^T. With h rows, the least-squares solution x = D_W^T D_b / ||D_b||^2 uses all of them. It
needs no label and no model point, so anchor errors and label ambiguity do not enter; a bias part of
exactly zero (a difference quantised away) leaves x undefined (non-finite).
"""

import torch

from decpriv.models.functional import FunctionalModel


def first_layer_on_input(model: FunctionalModel, input_size: int) -> bool:
    """Whether the first parameters are a fully connected layer on the flattened input, then its bias."""
    names, shapes = model.names, model.shapes
    return (
        len(shapes) >= 2
        and names[0].endswith("weight")
        and names[1].endswith("bias")
        and len(shapes[0]) == 2
        and shapes[0][1] == input_size
        and shapes[1] == (shapes[0][0],)
    )


def analytic_inputs(model: FunctionalModel, gradients: torch.Tensor) -> torch.Tensor:
    """(V, d) inputs of one-sample losses from their (V, p) gradients or gradient differences."""
    h, d = model.shapes[0]
    weight = gradients[:, : h * d].reshape(-1, h, d)
    bias = gradients[:, h * d : h * d + h]
    return torch.einsum("vhd,vh->vd", weight, bias) / (bias * bias).sum(1, keepdim=True)


def input_span(model: FunctionalModel, gradient: torch.Tensor, batch_size: int) -> torch.Tensor:
    """(d, r) orthonormal basis of the span of a batch's inputs, read off the first layer of its (p,)
    gradient or gradient difference: D_W = sum_k c_k x_k^T puts every row of D_W in span{x_1..x_B}, and
    the top-B right singular vectors span it whenever the c_k are independent (rank B; in float, r counts
    the singular values above 1e-10 of the largest, at most B). A batch of B inputs in R^d then has B r
    unknowns, not B d (the rank argument of Zhu & Blaschko 2021, R-GAP, and Kariyappa et al. 2023's
    cocktail-party attack, applied here to Yu 2023's gradient differences)."""
    h, d = model.shapes[0]
    _, s, vh = torch.linalg.svd(gradient[: h * d].reshape(h, d), full_matrices=False)
    rank = min(batch_size, int((s > 1e-10 * s[0]).sum()))
    return vh[:rank].T
