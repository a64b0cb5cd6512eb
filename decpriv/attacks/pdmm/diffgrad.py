"""``diffgrad``: the differential gradient attack on PDMM (Yu 2023, Sec. 5.2; preprint Sec. IV).

From the transcript alone (:mod:`decpriv.attacks.pdmm.leak`) the adversary knows, for every honest node i,
the points w_i^t, w_i^{t+2} (anchored at the corrupt node's model at t_max) and the difference
D_i^t = grad f_i(w_i^t) - grad f_i(w_i^{t+2}). It then solves

    min_{x', l'} || [grad f(w^t; x', l') - grad f(w^{t+2}; x', l')] - D_i^t ||^2

with the shared inversion engine (:func:`decpriv.attacks.inversion.invert`): labels enumerated (a
difference hides the label sign, Table 5.1), L-BFGS (30 iterations in the thesis, 500 in the paper),
random-normal restarts, the best objective kept. ``labels=auto`` enumerates while the label multisets fit
in ``max_label_candidates`` and otherwise learns soft labels jointly (DLG), as large local sets need.
With n_i = 1 and a fully connected first layer (logistic, softmax, MLP) the difference's first weight
block is its bias block times x^T, so x follows in closed form (``analytic``:
:func:`decpriv.attacks.inversion.analytic.analytic_inputs`). With n_i = B > 1 that block is
sum_k c_k x_k^T, whose row space is the span of the B inputs: ``span`` (default) reads it off the leaked
difference (:func:`~decpriv.attacks.inversion.analytic.input_span`) and optimises each input's B
coordinates in it instead of its d pixels, which is what lets L-BFGS converge (docs/pdmm.md, E2).
Reconstructions are matched to the true batch optimally before scoring.
"""

from dataclasses import dataclass, replace
from functools import partial

import numpy as np
import torch
from torch.func import grad, vmap

from decpriv.adversary.view import AttackContext, View
from decpriv.attacks.base import Attack
from decpriv.attacks.inversion import InversionConfig, invert
from decpriv.attacks.inversion.analytic import analytic_inputs, first_layer_on_input, input_span
from decpriv.attacks.inversion.labels import label_multisets
from decpriv.attacks.inversion.scoring import (
    RECOVERY_HEADLINE,
    Batches,
    fixed_victims,
    image_summary,
    reconstruction_grid,
    score_batches,
    undefined_words,
)
from decpriv.attacks.pdmm.anchor import JointProblem, joint_fit
from decpriv.attacks.pdmm.leak import (
    Assumed,
    check_assumptions,
    check_pdmm,
    check_theorem_form,
    extract,
    links,
)
from decpriv.errors import bad_value
from decpriv.protocols.pdmm_objective import Layout, reduce_first_layer
from decpriv.random import streams as rng
from decpriv.report.findings import Findings
from decpriv.report.headline import Headline
from decpriv.seal.truth import Truth


@dataclass(frozen=True, eq=False)
class Reconstruction:
    victims: np.ndarray
    x: list[torch.Tensor]  # per victim (B, *input_shape)
    y: list[torch.Tensor]  # per victim (B,), -1 where the label is not recovered
    objective: list[float]
    t_max: int
    method: str
    settling: float  # median over victims of ||s^{t_max - 1}|| / ||s^1||: near 0 once the models settled


def true_difference(view: View, victims: np.ndarray, t: int) -> tuple[torch.Tensor, ...]:
    """The oracle of the authors' released attack script: D^t computed from the victims' true data at
    their true models w^t, w^{t+2} (``attack.oracle=true``; needs the ground truth in ``view.oracle``)."""
    truth = view.oracle
    models = truth.extras["models"].to(torch.float64)[:, victims]
    local = truth.local.astype(torch.float64)
    x, y, mask = local.x[victims], local.y[victims], local.mask[victims].to(torch.float64)
    gradient = vmap(grad(view.model.loss))
    start, end = models[t], models[t + 2]
    return gradient(start, x, y, mask) - gradient(end, x, y, mask), start, end


LABELS = ("auto", "enumerate", "optimise")
ANCHORS = ("corrupt", "joint")
JOINT = "joint anchor + inputs in the span"


@dataclass(frozen=True, eq=False)
class DiffGradPlan:
    config: InversionConfig  # the inversion settings, labels optimised when enumerating would cost too much
    victims: np.ndarray  # the honest nodes attacked


class DiffGrad(Attack):
    name = "diffgrad"
    headline = (*RECOVERY_HEADLINE, Headline("attack_l2_error", None, "lower"))

    def __init__(
        self,
        victims: int | None = 4,
        round: int = 2,
        t_max: int | None = None,
        batch_size: int | None = None,
        analytic: bool = True,
        span: bool = True,
        iterations: int = 30,
        restarts: int = 20,
        lr: float = 1.0,
        labels: str = "auto",
        max_label_candidates: int = 1000,
        form: str = "messages",
        update: str | None = None,
        rho: float | None = None,
        theta: float | None = None,
        alpha: float | None = None,
        mu: float | None = None,
        oracle: bool = False,
        anchor: str = "corrupt",
        joint_rounds: int = 4,
        joint_iterations: int = 500,
    ):
        check_assumptions(update, form, theta, "attack")
        if anchor not in ANCHORS:
            raise bad_value("attack.anchor", anchor, "unknown anchor", f"use one of {', '.join(ANCHORS)}")
        if anchor == "joint" and (oracle or not span or min(joint_rounds, joint_iterations) < 1):
            raise bad_value(
                "attack.anchor",
                anchor,
                "the joint fit works in the inputs' span, on the messages' differences of joint_rounds >= 1 rounds",
                "set attack.span=true, attack.oracle=false, attack.joint_rounds and attack.joint_iterations >= 1, "
                "or attack.anchor=corrupt",
            )
        if labels not in LABELS:
            raise bad_value("attack.labels", labels, "unknown label mode", f"use one of {', '.join(LABELS)}")
        if victims is not None and victims < 1:
            raise bad_value(
                "attack.victims", victims, "at least one node must be attacked", "use 1 or more, or null"
            )
        if round < 1:
            raise bad_value(
                "attack.round", round, "Delta z are recorded from round 1 on", "use attack.round >= 1"
            )
        if batch_size is not None and batch_size < 1:
            raise bad_value("attack.batch_size", batch_size, "must be positive or null", "use n_i or null")
        self.victims, self.round, self.t_max, self.batch_size = victims, round, t_max, batch_size
        self.analytic, self.form, self.update, self.labels = analytic, form, update, labels
        self.rho, self.theta, self.alpha, self.mu = rho, theta, alpha, mu
        self.oracle, self.span, self.anchor, self.joint_rounds = oracle, span, anchor, joint_rounds
        self.joint_iterations = joint_iterations
        self.config = InversionConfig(
            cost="l2",
            optimiser="lbfgs",
            iterations=iterations,
            lr=lr,
            restarts=restarts,
            init="randn",
            labels="optimise" if labels == "optimise" else "enumerate",
            max_label_candidates=max_label_candidates,
        )

    def prepare(self, context: AttackContext) -> DiffGradPlan:
        """Plan: the victims (the first ``victims`` honest nodes) and the inversion settings."""
        check_pdmm(context, self.name)
        check_theorem_form(
            self.form, self.theta if self.theta is not None else context.protocol.theta, "attack"
        )
        rounds = context.protocol.rounds
        t_max = rounds if self.t_max is None else self.t_max  # 0 is refused below, not read as null
        if not 4 <= t_max <= rounds:
            raise bad_value(
                "attack.t_max", self.t_max, f"the run has {rounds} rounds", f"use 4..{rounds} or null"
            )
        if self.round > t_max - 3:
            raise bad_value(
                "attack.round",
                self.round,
                f"differences up to round {t_max - 3} are leaked by t_max={t_max}",
                f"use attack.round <= {t_max - 3}",
            )
        if self.anchor == "joint" and not first_layer_on_input(
            context.model, int(np.prod(context.data.input_shape))
        ):
            raise bad_value(
                "attack.anchor",
                self.anchor,
                "the joint fit reduces the model to its inputs' span, which needs a fully connected first layer",
                "use model=mlp, softmax or logistic, or attack.anchor=corrupt",
            )
        if context.data.task != "classification":
            raise bad_value(
                "data", context.data.task, "the attack enumerates class labels", "use a classification set"
            )
        batch = self.batch_size or int(context.own_mask[0].sum())
        candidates = label_multisets(context.data.num_classes, batch)
        if candidates > self.config.max_label_candidates:
            if self.labels == "enumerate":
                raise bad_value(
                    "attack.max_label_candidates",
                    self.config.max_label_candidates,
                    f"enumerating labels of a batch of {batch} needs {candidates} candidates",
                    f"raise it to {candidates} or use attack.labels=optimise",
                )
            config = replace(self.config, labels="optimise")
        else:
            config = self.config
        honest = np.setdiff1d(np.arange(context.network.n), context.adversary.nodes)
        return DiffGradPlan(config, honest if self.victims is None else honest[: self.victims])

    def kept_links(self, context: AttackContext, plan: DiffGradPlan, observed: np.ndarray) -> np.ndarray:
        """The victims' links (and their neighbours' for the theorem form): all the leak reads."""
        needed = links(context.network, plan.victims, self.form)
        return observed[
            np.isin(
                observed[:, 0] * context.network.n + observed[:, 1],
                needed[:, 0] * context.network.n + needed[:, 1],
            )
        ]

    def run(self, view: View) -> Reconstruction:
        a = Assumed.resolve(view.hyper, self.rho, self.theta, self.update, self.alpha, self.mu)
        t_max = self.t_max or len(view.transcript.times)
        victims = view.plan.victims
        leak = extract(view, t_max, a.rho, a.theta, a.update, self.form, a.alpha, a.mu, nodes=victims)
        batch = self.batch_size or int(view.own_mask[0].sum())
        k = self.round - 1
        target, start, end = leak.difference[k], leak.start[k], leak.end[k]
        # the anchor is the corrupt node's model, right only once every model has settled near it: the
        # leaked steps tell the adversary whether they did (PDMM swings forever on some models)
        step = leak.steps.flatten(2).norm(dim=2)
        settling = float((step[-1] / step[0].clamp_min(1e-300)).median())
        if self.oracle:
            target, start, end = true_difference(view, victims, self.round)
        spec = view.data_spec
        if self.analytic and batch == 1 and first_layer_on_input(view.model, int(np.prod(spec.input_shape))):
            x = analytic_inputs(view.model, target).reshape(len(victims), 1, *spec.input_shape)
            unknown = torch.full((1,), -1, dtype=torch.long)
            return Reconstruction(
                victims, list(x), [unknown] * len(victims), [0.0] * len(victims), t_max, "analytic", settling
            )
        generator = view.seeds.torch(f"attack.{self.name}")
        if self.anchor == "joint":
            xs, ys, objectives = self.fit_jointly(view, leak, target, batch, generator)
            return Reconstruction(victims, xs, ys, objectives, t_max, JOINT, settling)
        dense = first_layer_on_input(view.model, int(np.prod(spec.input_shape)))
        xs, ys, objectives = [], [], []
        for v in range(len(victims)):  # one problem per victim; labels and restarts are batched inside
            basis = input_span(view.model, target[v], batch) if self.span and dense else None
            inv = invert(
                view.model,
                torch.stack([start[v], end[v]]),
                target[v],
                spec.input_shape,
                spec.num_classes,
                batch,
                None,
                spec.data_range,
                view.plan.config,
                generator,
                basis=basis,
            )
            xs.append(inv.x.detach().cpu())
            ys.append(inv.y.cpu())
            objectives.append(inv.objective)
        method = "lbfgs in the inputs' span" if self.span and dense else "lbfgs"
        return Reconstruction(victims, xs, ys, objectives, t_max, method, settling)

    def fit_jointly(self, view: View, leak, target: torch.Tensor, batch: int, generator: torch.Generator):
        """Per victim, the anchor (its model at t_max) fitted with its inputs and soft labels to the first
        ``joint_rounds`` leaked differences (:mod:`decpriv.attacks.pdmm.anchor`), from the corrupt node's
        model, ``restarts`` random starts of the inputs' span coordinates, the best objective kept."""
        spec, layout = view.data_spec, Layout.of(view.model)
        rounds = min(self.joint_rounds, len(leak.difference))
        xs, ys, objectives = [], [], []
        for v in range(len(view.plan.victims)):  # one problem per victim
            basis = input_span(view.model, target[v], batch)
            reduce = partial(reduce_first_layer, layout, basis)
            relative = leak.trajectory[:, v] - leak.trajectory[-1, v]
            problem = JointProblem(
                layout.narrowed(basis.shape[1]), reduce(relative), reduce(leak.difference[:rounds, v])
            )
            uniform = torch.full((batch, spec.num_classes), 1 / spec.num_classes, dtype=torch.float64)
            fits = [
                joint_fit(
                    problem,
                    reduce(leak.trajectory[-1, v]),
                    rng.normal((batch, basis.shape[1]), generator, basis.device, torch.float64),
                    uniform,
                    self.joint_iterations,
                )
                for _ in range(view.plan.config.restarts)
            ]
            _, coordinates, labels, objective = min(fits, key=lambda fit: fit[3])
            xs.append((coordinates @ basis.T).reshape(batch, *spec.input_shape))
            ys.append(labels.argmax(-1))
            objectives.append(objective)
        return xs, ys, objectives

    def evaluate(self, findings: Reconstruction, truth: Truth, view: View) -> Findings:
        spec = view.data_spec
        is_image = spec.is_image
        data_range = spec.data_range or (0.0, 1.0)
        honest = np.setdiff1d(np.arange(view.network.n), view.attackers)
        victims = honest if self.victims is None else honest[: self.victims]  # the config's, as prepare's
        whose = f"the first attack.victims={self.victims} honest node(s)"
        found = Batches(findings.victims, findings.x, findings.y, findings.objective)
        batches = fixed_victims(self.name, found, victims, whose, truth)
        scored = score_batches(
            batches.victims, batches.xs, batches.ys, batches.objectives, truth, data_range, is_image
        )
        table = scored.table
        summary = {
            "attack_method": findings.method,
            "attack_oracle": self.oracle,
            "attack_t_max": findings.t_max,
            "attack_round": self.round,
            "attack_labels": {"analytic": "analytic", JOINT: "optimise"}.get(
                findings.method, view.plan.config.labels
            ),
            "attack_anchor": self.anchor,
            "attack_l2_error": float(table["l2_error"].mean()),
            "attack_l2_error_median": float(table["l2_error"].median()),
            "attack_undefined": int((~table["defined"]).sum()),
            "attack_settling": findings.settling,
        }
        if findings.method != "analytic":
            summary["attack_label_accuracy"] = float(table["label_correct"].mean())
        figures = {}
        how = (
            "closed form"
            if findings.method == "analytic"
            else f"{findings.method}, labels {summary['attack_labels']}"
        )
        if self.oracle:
            how += "; ORACLE: target from the true data, not the messages"
        recovered = (
            f"mean L2 error {summary['attack_l2_error']:.3g}{undefined_words(summary['attack_undefined'])}"
        )
        if is_image:
            scores, recovered = image_summary(table)
            summary |= scores
            figures["reconstructions/diffgrad.png"] = partial(
                reconstruction_grid,
                scored,
                data_range,
                "diffgrad",
                f"diffgrad on PDMM: round {self.round}, anchored at t_max={findings.t_max}",
            )
        labels = (
            "labels not recovered (a gradient difference hides them)"
            if findings.method == "analytic"
            else f"labels {summary['attack_label_accuracy']:.0%} right"
        )
        anchor = ""
        if findings.method.startswith("lbfgs") and not self.oracle and findings.settling > 0.01:
            anchor = (
                f" The victims' last leaked step is {findings.settling:.2g} of their first: the models had "
                f"not settled by t_max={findings.t_max}, so the points anchored at the corrupt node's model are off."
            )
        summary["verdict"] = (
            f"diffgrad: {recovered}; {labels} ({how}, on the gradient differences D^{self.round} leaked by the "
            f"Delta z of {len(batches.victims)} honest node(s) with {len(table)} sample(s)).{anchor}"
        )
        return Findings(tables={"attack": table}, summary=summary, figures=figures)
