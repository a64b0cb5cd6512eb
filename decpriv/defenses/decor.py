"""DECOR: D-SGD with pairwise-cancelling correlated noise (Allouah et al., ICML 2024, Alg. 1).

Every round, node i sends x_i - eta (Clip(g_i; C) + vbar_i + sum_{j in N_i} v_ij) with private noise
vbar_i ~ N(0, sigma_cdp^2 I) and, for each edge {i, j} (i < j), u_ij ~ N(0, sigma_cor^2 I) drawn from the
pair's shared stream: v_ij = +u_ij at i and v_ji = -u_ij at j. In matrix form the correlated part is
U B^T (B the oriented incidence matrix), so it sums to zero over nodes and never reaches the average model.
The noise is FRESH every round (the authors' PyTorch code reuses one draw; not copied).

The pairs' shared seeds are simulated by one stream (``defense.decor_pairs``) whose row e of each round's
(|E|, p) draw is edge e's secret: both endpoints read the same row, which is what a shared seed provides,
and one draw per round keeps it vectorised. sigma_cdp and sigma_cor are absolute noise stds (the paper's
units, with C the clipping norm).

``level`` is the privacy unit, as for the LDP and CDP baselines (:mod:`decpriv.defenses.dp`): ``user``
clips the node's batch gradient (the paper's convex experiments, Sec. 6 (a)-(b)); ``example`` clips each
example's gradient, adds both noises to the sum and divides by the expected batch (the paper's MNIST
network, Sec. 6 (c), accounted with amplification by subsampling, App. D.1). The example level is the
default because user-level noise, of std sigma_cdp on every coordinate against a whole gradient of norm C,
leaves a network trained by a few users at chance (measured in docs/privacy.md, Calibration).

The network is needed for the edge list: :meth:`bind` takes it from the built setup. The SecLDP accountant
(the default for this defense) binds it in its ``check``.
"""

from typing import Annotated, Any

import torch

from decpriv.config.types import Range, checked
from decpriv.defenses.base import Built, Defense, Mechanism
from decpriv.defenses.dp import BatchSampler, Clip, Level, PrivacyUnit, Target, batch_sampler
from decpriv.errors import bad_value
from decpriv.models.functional import FunctionalModel
from decpriv.random import streams as rng

NoiseStd = Annotated[float, Range(ge=0, what="a noise std", eg=10)] | None
# sigma_cdp = cdp_excess * sigma_ldp / sqrt(n): at the CDP level itself infinite sigma_cor would be needed
CdpExcess = Annotated[
    float, Range(gt=1, what="sigma_cdp's factor over the CDP level sigma_ldp/sqrt(n)", eg=1.2)
]


@checked("defense")
class Decor(PrivacyUnit, Defense):
    """User-level clipping + private noise sigma_cdp + pairwise-cancelling correlated noise sigma_cor."""

    name = "decor"
    accountant = "secldp"

    def __init__(
        self,
        clip: Clip = 1.0,
        sigma_cdp: NoiseStd = None,
        sigma_cor: NoiseStd = None,
        epsilon: Target = 10.0,
        cdp_excess: CdpExcess = 2.0,
        level: Level = "example",
        sampler: BatchSampler | None = None,
    ):
        if epsilon is None and (sigma_cdp is None or sigma_cor is None):
            missing = "defense.sigma_cdp" if sigma_cdp is None else "defense.sigma_cor"
            raise bad_value(
                missing,
                None,
                "without a privacy target (defense.epsilon=null) both noise levels must be given",
                f"set {missing}, or a target defense.epsilon",
            )
        if epsilon is not None and sigma_cor is not None:
            raise bad_value(
                "defense.sigma_cor",
                sigma_cor,
                f"with a privacy target (defense.epsilon={epsilon:g}) the accountant calibrates sigma_cor to "
                "meet it, so this value would be replaced",
                "drop defense.sigma_cor, or set defense.epsilon=null to run with both sigmas given "
                "(defense.sigma_cdp too)",
            )
        self.clip, self.sigma_cdp, self.sigma_cor = clip, sigma_cdp, sigma_cor
        self.epsilon, self.cdp_excess = epsilon, cdp_excess
        self.level, self.batch_sampler = level, batch_sampler(level, sampler)
        self._edges: torch.Tensor | None = None
        self._pairs: torch.Generator | None = None

    @staticmethod
    def unread(node: Any) -> dict[str, str]:
        """``cdp_excess`` sets sigma_cdp only when the accountant calibrates it (a target, no sigma_cdp)."""
        if node.get("epsilon") is None:
            return {"cdp_excess": "while defense.epsilon=null: nothing is calibrated"}
        if node.get("sigma_cdp") is not None:
            return {"cdp_excess": f"beside defense.sigma_cdp={node.sigma_cdp}, which it would have set"}
        return {}

    def bind(self, setup: Built) -> None:
        """Take the edge list and the pairs' stream from the built setup (before the simulation)."""
        super().bind(setup)
        self._edges = torch.as_tensor(setup.network.edges, device=setup.device)
        self._pairs = setup.seeds.torch("defense.decor_pairs")

    def calibrate(self, sigma_cdp: float, sigma_cor: float) -> None:
        self.sigma_cdp, self.sigma_cor = float(sigma_cdp), float(sigma_cor)

    def correlated(self, n: int, p: int, dtype: torch.dtype) -> torch.Tensor:
        """(n, p) correlated noise of one round: +u_e at edge e's first node, -u_e at its second."""
        if self._edges is None or self._pairs is None:
            raise RuntimeError("defense=decor was not bound to the network: call bind(setup) before the run")
        u = self.sigma_cor * rng.normal((len(self._edges), p), self._pairs, self._edges.device, dtype)
        out = torch.zeros((n, p), device=u.device, dtype=dtype)
        return out.index_add_(0, self._edges[:, 0], u).index_add_(0, self._edges[:, 1], -u)

    def gradients(
        self,
        model: FunctionalModel,
        theta: torch.Tensor,
        x: torch.Tensor,
        y: torch.Tensor,
        weight: torch.Tensor,
        round_: int,
        generator: torch.Generator,
    ) -> torch.Tensor:
        g = self.unit_gradients(model, theta, x, y, weight)
        private = rng.normal(g.shape, generator, g.device, g.dtype)
        noisy = g + self.sigma_cdp * private + self.correlated(g.shape[0], g.shape[1], g.dtype)
        return self.per_unit(noisy, weight)

    def mechanism(self) -> Mechanism:
        sigma = None if self.sigma_cdp is None else self.sigma_cdp / self.clip
        return Mechanism(
            "gradients",
            self.clip,
            sigma,
            self.level,
            correlated=True,
            target=self.epsilon,
            sampler=self.batch_sampler,
        )

    def summary(self) -> dict[str, Any]:
        return {
            "clip": self.clip,
            "sigma_cdp": self.sigma_cdp,
            "sigma_cor": self.sigma_cor,
            "privacy_level": self.level,
        }
