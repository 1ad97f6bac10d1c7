"""``bbb reproduce mnist|uci|lora|fashion|which``: the paper's MNIST results (section 5.1), the UCI
regression benchmark, few-shot Bayesian LoRA, Fashion-MNIST LeNet-5 beside IVON, or which method wins
where (from the results' files), each with its own options
(``bbb reproduce mnist --help``, ``bbb reproduce uci --help``, ...)."""

from __future__ import annotations

import argparse

from ..cli.common import Parser

__all__ = ["EXAMPLE", "add_arguments", "main"]

EXAMPLE = (
    "bbb reproduce mnist --budget quick --out runs/mnist --threads 2\n"
    "  bbb reproduce uci --out runs/uci --workers 2\n"
    "  bbb reproduce lora --out runs/lora --workers 2\n"
    "  bbb reproduce fashion --out runs/fashion --workers 2\n"
    "  bbb reproduce which --out docs/which_method.md   # which method wins where, from results/\n"
    "  bbb reproduce mnist --help    # the options of one experiment"
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """One subcommand per experiment, each with its module's options."""
    from . import which
    from .fashion import command as fashion
    from .lora import command as lora
    from .mnist import command as mnist
    from .uci import command as uci

    sub = parser.add_subparsers(dest="experiment", required=True, metavar="{mnist,uci,lora,fashion,which}",
                                parser_class=Parser)
    for name, mod, help in (
            ("mnist", mnist, "Table 1, Figures 2-4 and Table 2 of the paper (MNIST)"),
            ("uci", uci, "the UCI regression benchmark (9 datasets, standard splits) beside published methods"),
            ("lora", lora, "few-shot LoRA on pretrained backbones: MLE, MAP, MC dropout, ensembles, BBB on "
                           "the adapters"),
            ("fashion", fashion, "Fashion-MNIST LeNet-5 in the IVON paper's protocol: AdamW, IVON, BBB, MC dropout, "
                                 "a deep ensemble"),
            ("which", which, "docs/which_method.md: which method wins where, at what cost, from the results' files")):
        p = sub.add_parser(name, help=help, epilog=f"Example:\n  {mod.EXAMPLE}",
                           formatter_class=argparse.RawDescriptionHelpFormatter)
        mod.add_arguments(p)


def main(args: argparse.Namespace) -> int:
    """Run the chosen experiment; returns the exit code."""
    if args.experiment == "lora":
        from .lora import command as lora

        return lora.main(args)
    if args.experiment == "which":
        from . import which

        return which.main(args)
    if args.experiment == "fashion":
        from .fashion import command as fashion

        return fashion.main(args)
    if args.experiment == "uci":
        from .uci import command as uci

        return uci.main(args)
    from .mnist import command as mnist

    return mnist.main(args)
