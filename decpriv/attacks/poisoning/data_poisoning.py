"""Data poisoning: label flipping and a backdoor trigger (:mod:`decpriv.attacks.poisoning.data_poisons`),
each Byzantine node training on its own poisoned data (:class:`~decpriv.attacks.poisoning.forgers.PoisonedTrainer`)."""

from abc import abstractmethod
from typing import Annotated

from decpriv.adversary.view import AttackContext, DataSpec
from decpriv.attacks.poisoning.attack import ACCURACY, Poisoning
from decpriv.attacks.poisoning.data_poisons import Backdoor, LabelFlip, Trigger
from decpriv.attacks.poisoning.forgers import PoisonedTrainer
from decpriv.config.types import Range, checked
from decpriv.errors import bad_value
from decpriv.report.headline import Headline

Fraction = Annotated[float, Range(gt=0, le=1, what="the share of samples poisoned", eg=1.0)]


class DataPoisoning(Poisoning):
    @abstractmethod
    def poison(self, context: AttackContext):
        """The data poison its nodes train on (a label flip, a backdoor's trigger)."""

    def prepare(self, context: AttackContext):
        plan = super().prepare(context)
        for key in ("momentum", "weight_decay"):
            if context.protocol.hyper.get(key):
                raise bad_value(
                    f"protocol.{key}",
                    context.protocol.hyper[key],
                    f"attack={self.name}'s Byzantine nodes train by plain SGD",
                    f"use protocol.{key}=0",
                )
        return plan

    def behaviour(self, context: AttackContext, plan) -> PoisonedTrainer:
        heard = context.adversary.observed_senders(context.network)
        data = (context.own_x, context.own_y, context.own_mask)
        generator = context.seeds.torch(f"attack.{self.name}")
        return PoisonedTrainer(
            context.network,
            context.adversary.nodes,
            heard,
            context.model,
            data,
            context.protocol.hyper,
            self.poison(context),
            generator,
        )


@checked("attack")
class LabelFlipping(DataPoisoning):
    name = "label_flip"

    def __init__(self, fraction: Fraction = 1.0):
        self.fraction = fraction

    def poison(self, context: AttackContext) -> LabelFlip:
        return LabelFlip(context.data.num_classes, self.fraction)

    def settings(self) -> dict:
        return {"poisoning_fraction": self.fraction}


@checked("attack")
class BackdoorTrigger(DataPoisoning):
    name = "backdoor"
    headline = (
        Headline(
            "poisoned_backdoor_success",
            "clean_backdoor_success",
            "higher",
            "the clean model on triggered inputs",
        ),
        ACCURACY,
    )

    def __init__(
        self,
        target: Annotated[int, Range(ge=0, what="the backdoor's target label", eg=0)] = 0,
        patch: Annotated[int, Range(ge=1, what="the trigger's side in pixels", eg=2)] = 2,
        fraction: Fraction = 0.5,
    ):
        self.target, self.patch, self.fraction = target, patch, fraction

    def plan(self, context: AttackContext) -> None:
        spec = context.data
        if not spec.is_image:
            raise bad_value(
                "data", spec.name, "a trigger patch needs images", "use data=digits, mnist or cifar10"
            )
        if self.target >= spec.num_classes:
            raise bad_value(
                "attack.target",
                self.target,
                f"the data has {spec.num_classes} classes",
                f"use 0..{spec.num_classes - 1}",
            )
        if self.patch >= min(spec.input_shape[-2:]):
            raise bad_value(
                "attack.patch",
                self.patch,
                f"the images are {spec.input_shape[-2]}x{spec.input_shape[-1]}",
                "use a smaller patch",
            )
        return None

    def trigger(self, spec: DataSpec) -> Trigger:
        """The patch at the data's maximum value (a white square on decpriv's images)."""
        return Trigger(self.patch, spec.data_range[1] if spec.data_range else 1.0, self.target)

    def poison(self, context: AttackContext) -> Backdoor:
        return Backdoor(self.trigger(context.data), self.fraction)

    def settings(self) -> dict:
        return {
            "backdoor_target": self.target,
            "backdoor_patch": self.patch,
            "poisoning_fraction": self.fraction,
        }
