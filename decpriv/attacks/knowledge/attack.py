"""The ``knowledge_matrix`` attack (El Mrini, Cyffers & Bellet, ICML 2024): on ``protocol=gossip`` it solves
the knowledge system for the private values (Sec. 3, :mod:`.gossip`); on ``protocol=dsgd`` run as D-GD it
recovers the targets' gradients, then their inputs (Sec. 4, :mod:`.dgd`)."""

from dataclasses import dataclass
from functools import partial

import numpy as np
import pandas as pd
import torch
from torch.func import grad, vmap

from decpriv.adversary.view import AttackContext, View
from decpriv.attacks.base import Attack
from decpriv.attacks.inversion.engine import InversionConfig, invert
from decpriv.attacks.knowledge import dgd, gossip
from decpriv.attacks.knowledge.matrix import Knowledge, check_decidable, rational_matrix
from decpriv.attacks.knowledge.plots import outcome_graph, reconstruction_grid
from decpriv.attacks.knowledge.sweeps import fig2_horizon
from decpriv.errors import bad_value
from decpriv.metrics import images
from decpriv.metrics.images import PSNR_CAP, RECOVERY_MARGIN_DB, psnr, ssim
from decpriv.report.findings import Findings
from decpriv.report.headline import Headline
from decpriv.seal.truth import Truth


@dataclass(eq=False)
class Recovery:
    """Per node (0..n-1): recovered or not, the recovered private value (gossip) or input (D-GD)."""

    protocol: str
    knowledge: Knowledge
    exact: Knowledge | None
    nodes: np.ndarray  # the unknowns, in the order of knowledge's columns
    values: np.ndarray  # (len(nodes), ...) recovered private values or inputs
    gradients: np.ndarray | None  # D-GD: (len(nodes), p) recovered gradients of the local loss


@dataclass(frozen=True)
class Plan:
    """What prepare decided: which system to build (gossip or D-GD) over how many recorded steps T."""

    protocol: str
    steps: int


class KnowledgeMatrix(Attack):
    name = "knowledge_matrix"
    headline = (
        Headline(
            "fraction_reconstructed_honest",
            "fraction_honest_neighbours",
            "higher",
            "the honest nodes the attackers neighbour",
        ),
        Headline("success_rate", 0.0, "higher", "none recovered by the mean image (no attack)"),
        Headline("median_psnr", "median_mean_image_psnr", "higher", "the mean image's PSNR (no attack)"),
    )

    def __init__(
        self,
        exact: bool = False,
        rcond: float | None = None,
        tol: float = 1e-6,
        solver: str = "ls",
        image_metrics: bool | None = None,
        success_psnr: float = 10.0,
        steps: int | str | None = None,
        iterations: int = 400,
        restarts: int = 2,
        tv: float = 1e-4,
    ):
        if solver not in ("ls", "gls"):
            raise bad_value("attack.solver", solver, "unknown solver", "use ls or gls")
        if not 0 < tol < 1:
            raise bad_value(
                "attack.tol", tol, "the row-space distance tolerance lies in (0, 1)", "use e.g. 1e-6"
            )
        if rcond is not None and not 0 < rcond < 1:
            raise bad_value(
                "attack.rcond", rcond, "the relative rank cutoff lies in (0, 1)", "use null or e.g. 1e-12"
            )
        self.exact, self.rcond, self.tol, self.solver = exact, rcond, tol, solver
        self.image_metrics, self.success_psnr = image_metrics, success_psnr
        if steps is not None and steps != "fig2" and not (isinstance(steps, int) and steps >= 1):
            raise bad_value(
                "attack.steps",
                steps,
                "T must be a positive number of gossip steps",
                "use null (all), an int >= 1 or fig2",
            )
        self.steps_rule = steps
        # D-GD on a model with no dense first layer: inverting gradients (Geiping et al. 2020), as the paper
        self.inversion = InversionConfig(
            cost="sim",
            optimiser="adam",
            iterations=iterations,
            lr=0.1,
            restarts=restarts,
            tv=tv,
            box=True,
            signed=True,
            labels="infer",
        )

    def prepare(self, context: AttackContext) -> Plan:
        protocol = context.protocol
        if not context.adversary.nodes.size:
            raise bad_value(
                "adversary.nodes",
                [],
                "the attack needs corrupt nodes",
                "set adversary.nodes or adversary.count",
            )
        if protocol.name not in ("gossip", "dsgd"):
            raise bad_value(
                "protocol",
                protocol.name,
                "the knowledge-matrix attack reads gossip or D-GD",
                "use protocol=gossip or dsgd",
            )
        if len(context.adversary.nodes) == context.network.n:
            raise bad_value(
                "adversary.count",
                context.network.n,
                "every node is an attacker, nothing is left to reconstruct",
                "corrupt fewer nodes",
            )
        if protocol.name == "gossip" and protocol.accelerated:
            raise bad_value(
                "protocol.accelerated",
                True,
                "K_T is built for plain gossip x^{t+1} = W x^t",
                "use protocol.accelerated=false",
            )
        steps = self.horizon(context)
        if self.exact:
            if protocol.name != "gossip":
                raise bad_value(
                    "attack.exact",
                    True,
                    "exact mode decides the gossip system only",
                    "use attack.exact=false with protocol=dsgd",
                )
            rational_matrix(context.network.W)
        if self.image_metrics and not context.data.is_image:
            raise bad_value(
                "attack.image_metrics",
                True,
                f"data={context.data.name} is not image data",
                "set attack.image_metrics=false or use image data",
            )
        if protocol.name == "dsgd":
            self.check_dgd(context)
        else:  # a network too large to decide is refused now, not after simulating it
            check_decidable(context.network.W, context.adversary.nodes, steps)
        return Plan(protocol.name, steps)

    def horizon(self, context: AttackContext) -> int:
        """T: ``attack.steps`` recorded steps (``fig2``: El Mrini et al.'s int(min(n p_20 / |A|, n / 2)))."""
        rounds = context.protocol.rounds
        if self.steps_rule is None:
            return rounds
        if self.steps_rule == "fig2":
            mean_degree = context.network.graph.graph.get("mean_degree")
            if mean_degree is None:
                raise bad_value(
                    "attack.steps",
                    "fig2",
                    "the fig2 horizon needs topology=erdos_renyi_mean_degree",
                    "use attack.steps=null or an int",
                )
            steps = fig2_horizon(context.network.n, mean_degree, len(context.adversary.nodes))
        else:
            steps = self.steps_rule
        if steps > rounds:
            raise bad_value(
                "attack.steps",
                self.steps_rule,
                f"the protocol runs only {rounds} steps, T={steps} needs more",
                f"set protocol.rounds >= {steps}",
            )
        return steps

    def check_dgd(self, context: AttackContext) -> None:
        p = context.protocol
        for key, value, need, fix in (
            ("batch_size", p.batch_size, None, "null (full batch, D-GD)"),
            ("gossip_steps", p.gossip_steps, 1, "1"),
            ("local_steps", p.local_steps, 1, "1"),
            ("momentum", p.momentum, 0.0, "0"),
            ("weight_decay", p.weight_decay, 0.0, "0"),
            ("same_init", p.same_init, True, "true (the common initial model is public)"),
        ):
            if value != need:
                raise bad_value(
                    f"protocol.{key}",
                    value,
                    "the D-GD attack (El Mrini et al., Sec. 4) assumes D-GD",
                    f"use protocol.{key}={fix}",
                )
        if int(context.data.local_sizes.max()) != 1:
            raise bad_value(
                "partition",
                context.choices.get("partition", "?"),
                "the D-GD attack assumes one sample per node",
                "use partition=one_per_node",
            )
        if context.model.loss_name != "cross_entropy" and dgd.first_layer(context.model) is None:
            raise bad_value(
                "model",
                context.choices.get("model", "?"),
                "inverting gradients reads the label off a cross-entropy gradient",
                "use a classifier (softmax, mlp, cnn)",
            )

    def run(self, view: View) -> Recovery:
        if view.plan.protocol == "dsgd":
            return self.run_dgd(view)
        floating, rational = gossip.reconstruct(view, view.plan.steps, self.rcond, self.tol, self.exact)
        return Recovery("gossip", floating, rational, np.arange(view.network.n), floating.estimate, None)

    def run_dgd(self, view: View) -> Recovery:
        tr = view.transcript
        initial = view.public["initial_model"].double().numpy()
        system = dgd.gradient_system(
            view.network.W, view.attackers, tr.senders, tr.values.double().numpy(), initial
        )
        knowledge = dgd.solve_gradients(system, self.solver, self.rcond, self.tol)
        gradients = -knowledge.estimate / float(view.hyper["lr"])
        if dgd.first_layer(view.model) is not None:
            inputs = dgd.invert_linear(view.model, torch.as_tensor(gradients)).numpy()
        else:
            inputs = self.invert_optimised(view, initial, gradients, knowledge.reconstructible)
        return Recovery("dsgd", knowledge, None, system.targets, inputs, gradients)

    def invert_optimised(
        self, view: View, initial: np.ndarray, gradients: np.ndarray, determined: np.ndarray
    ) -> np.ndarray:
        """Inputs of the determined targets by inverting gradients (cosine cost, TV prior, signed Adam, box;
        label read off the gradient), one target at a time; undetermined targets stay at zero."""
        spec = view.data_spec
        model = view.model
        params = torch.as_tensor(initial, dtype=torch.float64)
        module_dtype = next(model.module.parameters()).dtype
        model.module.double()
        inputs = np.zeros((len(gradients), int(np.prod(spec.input_shape))))
        generator = view.seeds.torch("attack.inversion")
        try:
            for i in np.flatnonzero(determined):
                found = invert(
                    model,
                    params,
                    torch.as_tensor(gradients[i]),
                    spec.input_shape,
                    spec.num_classes,
                    data_range=spec.data_range,
                    config=self.inversion,
                    generator=generator,
                )
                inputs[i] = found.x.reshape(-1).numpy()
        finally:
            model.module.to(module_dtype)
        return inputs

    def evaluate(self, findings: Recovery, truth: Truth, view: View) -> Findings:
        """Score in four steps: who is who (attackers, distances, the row-space decision), how far each
        recovered value is from the truth, the structural summary, and for images their quality beside
        the mean image (the no-attack baseline)."""
        table = node_table(findings, view)
        recovered, true, err = value_errors(findings, truth, view, table, self.true_gradients)
        summary = structure_summary(findings, view, table, err)
        figures = {
            "plots/knowledge_graph.png": partial(
                outcome_graph, view.network, table, self.title(summary, view)
            )
        }
        spec = view.data_spec
        if self.image_metrics is not False and spec.data_range is not None and spec.is_image:
            figures.update(
                image_scores(findings, truth, view, table, summary, recovered, true, self.success_psnr)
            )
        summary["verdict"] = self.verdict(summary)
        return Findings(tables={"attack": table}, summary=summary, figures=figures)

    @staticmethod
    def verdict(summary: dict) -> str:
        """One line: the honest values recovered, and for images their PSNR beside the mean image's."""
        honest = summary["fraction_reconstructed_honest"]
        found = (
            "undecided (float64 rank too close to call, no exact certificate)"
            if honest != honest
            else f"{summary['reconstructed_honest']} honest node(s) ({honest:.0%}) {_how(summary)}"
        )
        text = (
            f"knowledge matrix: {summary['attackers']} attacker(s), rank {summary['knowledge_rank']} over "
            f"{summary['unknowns']} unknowns after {summary['knowledge_steps']} step(s): {found}"
        )
        if "median_psnr" in summary:
            text = (
                f"{summary['recovered_images']} of {summary['honest_images']} honest input(s) recovered "
                f"(determined, and PSNR at least {RECOVERY_MARGIN_DB:g} dB above the mean image's); median "
                f"PSNR {summary['median_psnr']:.1f} dB, mean {summary['mean_psnr']:.1f} dB (each capped at "
                f"{PSNR_CAP:.0f}; the mean image, no attack: {summary['median_mean_image_psnr']:.1f} dB); "
                f"the paper's PSNR >= {summary['success_psnr']:g} dB on standardised images (the authors' "
                f"scale): {summary['fraction_standardised_psnr_success']:.0%} (the mean image "
                f"{summary['mean_image_standardised_psnr_success']:.0%}). {text}"
            )
        if summary.get("nonfinite_values"):
            text += (
                f"; {summary['nonfinite_values']} recovered value(s) held NaN or inf: counted as not "
                "reconstructed (scored as the mean held-out value), a failure of the attack"
            )
        return text + "."

    def true_gradients(self, truth: Truth, view: View, nodes: np.ndarray) -> torch.Tensor:
        """Gradient of each target's loss at the common initial model: the constant the attack estimates."""
        theta = view.public["initial_model"].double().expand(len(nodes), -1)
        idx = torch.as_tensor(nodes)
        model = view.model
        x, y = truth.local.x[idx].double(), truth.local.y[idx]
        mask = truth.local.mask[idx].double()
        with torch.no_grad():
            module_dtype = next(model.module.parameters()).dtype
            model.module.double()
            try:
                return vmap(grad(model.loss))(theta, x, y, mask)
            finally:
                model.module.to(module_dtype)

    def title(self, summary: dict, view: View) -> str:
        steps = view.plan.steps
        return (
            f"{summary['attackers']} attacker(s), T={steps}: {summary['reconstructed_honest']} others reconstructed, "
            f"rank K_T = {summary['knowledge_rank']}"
        )


def node_table(findings: Recovery, view: View) -> pd.DataFrame:
    """One row per node: attacker or not, hop distance to the attackers, and the row-space decision
    (reconstructed, the distance of e_j to the row space, the group of indistinguishable columns)."""
    n, k = view.network.n, findings.knowledge
    attacker = np.isin(np.arange(n), view.attackers)
    table = pd.DataFrame(
        {
            "node": np.arange(n),
            "name": view.network.names,
            "attacker": attacker,
            "distance_to_attacker": view.network.distances_from(view.attackers),
        }
    )
    reconstructed = attacker.copy()
    reconstructed[findings.nodes] = k.reconstructible
    table["reconstructed"] = reconstructed
    table["row_space_distance"] = np.nan
    table.loc[findings.nodes, "row_space_distance"] = k.distance
    table["group"] = -1
    table.loc[findings.nodes, "group"] = k.groups
    return table


def value_errors(
    findings: Recovery, truth: Truth, view: View, table: pd.DataFrame, true_gradients
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The recovered and true values of the unknowns, and the relative error of each (written into
    ``table`` as ``error``, and for D-GD ``gradient_error`` against the gradient at the common init).
    A value (or D-GD gradient) holding NaN or inf is a failure of the attack, whatever the row space
    says: ``finite_value`` False, not ``reconstructed``, and the value scored as the mean held-out one."""
    recovered = torch.as_tensor(findings.values).double()
    finite = torch.isfinite(recovered.reshape(len(recovered), -1)).all(1)
    if findings.gradients is not None:
        finite &= torch.isfinite(torch.as_tensor(findings.gradients)).all(1)
    if findings.protocol == "gossip":
        true = truth.extras["private_values"].double().cpu()
    else:
        true = truth.local.x[torch.as_tensor(findings.nodes), 0].double().reshape(len(findings.nodes), -1)
        true_grads = true_gradients(truth, view, findings.nodes)
        est = torch.as_tensor(findings.gradients).double()
        gerr = (est - true_grads).norm(dim=1) / true_grads.norm(dim=1).clamp_min(1e-300)
        table["gradient_error"] = np.nan
        table.loc[findings.nodes, "gradient_error"] = gerr.numpy()
    if not finite.all():
        held_out = truth.dataset.x_test.double().reshape(len(truth.dataset.x_test), -1)
        guess = held_out.mean(0) if findings.protocol != "gossip" else true.reshape(len(true), -1).mean(0)
        flat = torch.where(finite[:, None], recovered.reshape(len(recovered), -1), guess)
        recovered = flat.reshape(recovered.shape)
    err = (recovered - true).norm(dim=1) / true.norm(dim=1).clamp_min(1e-300)
    table["error"] = np.nan
    table.loc[findings.nodes, "error"] = err.numpy()
    table["finite_value"] = True
    table.loc[findings.nodes, "finite_value"] = finite.numpy()
    table.loc[findings.nodes[~finite.numpy()], "reconstructed"] = False
    return recovered, true, err


def structure_summary(findings: Recovery, view: View, table: pd.DataFrame, err: torch.Tensor) -> dict:
    """What the knowledge matrix decides: its size and rank, the fraction of nodes reconstructed (all
    nodes as the paper counts, and the honest ones), beside the neighbours an attacker reads anyway;
    refused (NaN) when float64 cannot call the rank; the exact mode's decision when it ran."""
    k = findings.knowledge
    attacker, reconstructed = table.attacker.to_numpy(), table.reconstructed.to_numpy()
    finite = table.finite_value.to_numpy()[findings.nodes]
    determined = k.reconstructible & finite
    distance = table.distance_to_attacker.to_numpy()
    summary = {
        "attackers": int(attacker.sum()),
        "knowledge_steps": view.plan.steps,
        "knowledge_rows": k.rows,
        "knowledge_rank": k.rank,
        "unknowns": len(findings.nodes),
        "fraction_reconstructed": float(reconstructed.mean()),
        "fraction_reconstructed_honest": float(reconstructed[~attacker].mean()),
        "reconstructed_honest": int(reconstructed[~attacker].sum()),
        # the baseline: an attacker reads each neighbour's first message, whatever the algebra
        "fraction_honest_neighbours": float((distance[~attacker] == 1).mean()),
        "indistinguishable_groups": int((np.bincount(k.groups) > 1).sum()),
        "max_error_reconstructed": float(err[torch.as_tensor(determined)].max())
        if determined.any()
        else float("nan"),
        "nonfinite_values": int((~finite).sum()),
        "attack_mode": "exact" if findings.exact is not None else "float64",
        **{f"knowledge_{key}": value for key, value in k.numerics.items()},
    }
    if k.numerics["decided_by"] == "undecided":
        # no certificate and float64 too close to call: a number here would enter averages unflagged
        for key in ("fraction_reconstructed", "fraction_reconstructed_honest", "reconstructed_honest"):
            summary[key] = float("nan")
    if findings.exact is not None:
        e, n = findings.exact, len(table)
        summary["knowledge_rank_exact"] = e.rank
        summary["float_exact_disagreements"] = int((e.reconstructible != k.reconstructible).sum())
        exact = attacker | np.isin(np.arange(n), findings.nodes[e.reconstructible & finite])
        summary["fraction_reconstructed"] = float(exact.mean())
        table["reconstructed_exact"] = exact
    return summary


def standardised_psnr(recovered: torch.Tensor, true: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """(k,) PSNR with peak 1 of images standardised per channel by the data's ``scale`` (C,) and not
    clipped: what El Mrini et al.'s released Fig. 5 script thresholds at 10 dB (CIFAR-10 normalised by
    its channel means and standard deviations, the inverting-gradients library's ``psnr`` with factor 1).
    10 dB there is an error of 0.32 standard deviations per pixel, about 22 dB on CIFAR's [0, 1] pixels."""
    z = (recovered.double() - true.double()) / scale.double()[:, None, None]
    return -10 * torch.log10((z**2).flatten(1).mean(1))


def image_scores(
    findings: Recovery,
    truth: Truth,
    view: View,
    table: pd.DataFrame,
    summary: dict,
    recovered: torch.Tensor,
    true: torch.Tensor,
    threshold: float,
) -> dict:
    """Per target PSNR, SSIM, the mean image's PSNR and ``success`` (determined AND at least
    RECOVERY_MARGIN_DB above the mean image); summary medians, success fractions (ours and the paper's PSNR >= ``threshold``, on pixels
    and on standardised images as the authors score) each beside what the mean image scores. Returns
    the reconstruction figure."""
    spec = view.data_spec
    shape = (len(findings.nodes), *spec.input_shape)
    imgs, truth_imgs = recovered.reshape(shape), true.reshape(shape)
    p = psnr(imgs, truth_imgs, spec.data_range).clamp(max=PSNR_CAP)  # as the captions cap it
    s = ssim(imgs, truth_imgs, spec.data_range)
    # the no-attack baseline: one constant guess, the mean held-out image of the public data set
    held_out = truth.dataset.x_test.double().reshape(-1, *spec.input_shape)
    prior = held_out.mean(0, keepdim=True).expand(shape)
    base = psnr(prior, truth_imgs, spec.data_range)
    scale = held_out.transpose(0, 1).flatten(1).std(1)
    z, z_base = standardised_psnr(imgs, truth_imgs, scale), standardised_psnr(prior, truth_imgs, scale)
    determined = torch.as_tensor(table.reconstructed.to_numpy()[findings.nodes])  # finite values only
    success = determined & images.recovered(p, base)
    columns = {"psnr": p, "ssim": s, "mean_image_psnr": base, "psnr_standardised": z.clamp(max=PSNR_CAP)}
    columns.update(mean_image_psnr_standardised=z_base, success=success)
    for column, value in columns.items():
        table[column] = np.nan if column != "success" else False
        table.loc[findings.nodes, column] = value.numpy()
    honest = torch.as_tensor(~table.attacker.to_numpy()[findings.nodes])
    summary.update(
        {
            # exact recoveries have infinite PSNR: a median, not a mean, summarises them
            "median_psnr": float(p[honest].median()),
            "mean_psnr": float(p[honest].mean()),
            "recovered_images": int(success[honest].sum()),
            "honest_images": int(honest.sum()),
            "mean_ssim": float(s[honest].mean()),
            "success_rate": float(success[honest].double().mean()),
            "fraction_above_mean_image": float((p[honest] > base[honest]).double().mean()),
            "median_mean_image_psnr": float(base[honest].median()),
            "fraction_psnr_success": float((p[honest] >= threshold).double().mean()),
            "mean_image_psnr_success": float((base[honest] >= threshold).double().mean()),
            "fraction_standardised_psnr_success": float((z[honest] >= threshold).double().mean()),
            "mean_image_standardised_psnr_success": float((z_base[honest] >= threshold).double().mean()),
            "success_psnr": threshold,
        }
    )
    low, high = spec.data_range
    unit = lambda x: ((x.clamp(low, high) - low) / (high - low)).numpy()  # noqa: E731
    distance = table.distance_to_attacker.to_numpy()[findings.nodes]
    return {
        "reconstructions/knowledge_inputs.png": partial(
            reconstruction_grid,
            unit(truth_imgs[honest]),
            unit(imgs[honest]),
            distance[honest.numpy()],
            p.numpy()[honest.numpy()],
            "true vs recovered, by distance to the attackers",
        )
    }


EXACT = 1e-6  # relative error: below it a recovered value is the true one up to float64 rounding


def _how(summary: dict) -> str:
    """``recovered exactly``, or the worst relative error when the float64 solve is only close: a
    value in the knowledge matrix's row space can still come out 2% off on an ill-conditioned system."""
    worst = summary["max_error_reconstructed"]
    if worst != worst or worst <= EXACT:
        return "recovered exactly"
    return f"in the row space, recovered with relative error up to {worst:.2g}"
