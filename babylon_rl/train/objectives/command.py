"""`cli.py train`'s options and help, made from the objectives: the options every objective takes, then each family's,
then a section per objective with its one-line help, its recipe and its own options. The defaults shown are GENERAL's
and the recipes', never written by hand."""

from __future__ import annotations

from typing import Any

import click

from babylon_rl.train import objectives
from babylon_rl.train.objectives import COMMON, FAMILY_OPTIONS, FAMILY_TITLES, REGISTRY, Objective, Option


def params() -> list[click.Option]:
    """Every option of `train` as a click option (COMMON first, the order `--help` lists them in)."""
    made = []
    for option in objectives.options():
        kind = click.Choice(objectives.OBJECTIVES) if option.name == "objective" else option.type
        # no default: click's own "not given", which the context drops; an on/off pair needs None, or click gives it off
        unset = {"default": option.default} if option.default is not None or "/" in option.flags[0] else {}
        made.append(click.Option([*option.flags, option.name], type=kind, show_default=option.show_default, is_flag=option.is_flag or None,
                                 multiple=option.multiple, metavar=option.metavar, help=option.help, required=option.required, **unset))
    return made


def _shown(value: Any) -> str:
    if isinstance(value, bool):
        return "on" if value else "off"
    return f"{value:g}" if isinstance(value, float) else str(value)


def _recipe_note(option: Option, among: list[Objective]) -> str:
    """A recipe option's defaults: GENERAL's (or what unset means), and each recipe's of `among` where it differs."""
    general = objectives.recipe_default(option.name)
    by_value: dict[str, list[str]] = {}
    for objective in among:
        value = objective.recipe.get(option.name)
        if value is not None and value != general:
            by_value.setdefault(_shown(value), []).append(objective.name)
    parts = [_shown(general) if general is not None else option.unset or "none"]
    parts += [f"{value} for {objectives.join_and(names)}" for value, names in by_value.items()]
    return "; ".join(parts) + (" (their recipes, on torch without --on-policy)" if by_value else "")


def _in_recipes(name: str) -> bool:
    return name in objectives.GENERAL or any(name in o.recipe for o in REGISTRY.values())


def _recipe_line(objective: Objective) -> str:
    def flag(name: str, value: Any) -> str:
        option = "--" + name.replace("_", "-")
        if isinstance(value, bool):
            return option if value else "--no-" + option[2:]
        return f"{option} {_shown(value)}"

    return " ".join(flag(name, value) for name, value in objective.recipe.items())


class TrainCommand(click.Command):
    """`train`: its options grouped by who takes them (module docstring)."""

    def format_options(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        by_name = {p.name: p for p in self.get_params(ctx)}

        def record(option: Option, among: list[Objective]) -> tuple[str, str]:
            """The option's flags and help, with its default for the objectives `among` (one: that one's)."""
            name, text = by_name[option.name].get_help_record(ctx)[0], option.help
            if option.name == "objective":
                default = f"{objectives.default_objective('torch', False)} on the torch back-end, " \
                          f"{objectives.default_objective('art', False)} on art and serverless and with --on-policy"
            elif option.default is None and _in_recipes(option.name):
                if len(among) == 1:
                    value = objectives.recipe_default(option.name, among[0])
                    default = _shown(value) if value is not None else option.unset or ""
                else:
                    default = _recipe_note(option, among)
            elif option.show_default:
                default = _shown(option.default)
            else:
                default = option.unset or ""
            return name, f"{text}  [default: {default}]" if default else text

        everyone = list(REGISTRY.values())
        with formatter.section("Options of every objective"):
            formatter.write_dl([record(o, everyone) for o in COMMON] + [self.get_help_option(ctx).get_help_record(ctx)])
        for family, title in FAMILY_TITLES.items():
            members = [o for o in everyone if o.family == family]
            with formatter.section(f"{title} ({objectives.join_and([o.name for o in members])})"):
                formatter.write_dl([record(o, members) for o in FAMILY_OPTIONS[family]])
        for objective in REGISTRY.values():
            with formatter.section(f"--objective {objective.name}"):
                formatter.write_text(objective.help)
                if objective.recipe:
                    formatter.write_text(f"Recipe: {_recipe_line(objective)}")
                if objective.options:
                    formatter.write_dl([record(o, [objective]) for o in objective.options])
