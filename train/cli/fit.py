"""`python -m train fit --config NAME|PATH [section.key=value ...]`."""

from __future__ import annotations

import argparse
import faulthandler
import os

from train.cli.env import command_line
from train.cluster.distenv import resolve
from train.config import CONFIG_OPTION, Config, available_configs, load_config, settings_help
from train.loop.stop_signals import StopSignals


def add_config_arguments(parser) -> None:
    """--config, --config-knob and the overrides; --help lists every setting as declared (train/config/sections.py):
    its type, default, allowed values and doc."""
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.epilog = "settings (section.key=value), as train/config/sections.py declares them:\n" + settings_help(Config)
    parser.add_argument(CONFIG_OPTION, default="synthetic",
                        help=f"a shipped config ({', '.join(available_configs())}) or a YAML path")
    parser.add_argument("--config-knob", default=CONFIG_OPTION, metavar="NAME",
                        help="the setting the user gave the config by, which a refusal names (make passes CONFIG)")
    parser.add_argument("overrides", nargs="*", metavar="section.key=value", help="e.g. trainer.epochs=3")


def config_of(args) -> Config:
    """The config the command line names, with its overrides; a bad name is told as the user gave it."""
    return load_config(args.config, args.overrides, args.config_knob)


add_arguments = add_config_arguments


def main(args) -> int:
    StopSignals.shared().install()  # first: a stop signal while torch loads is kept, not fatal
    faulthandler.enable()  # a crash in native code (SIGSEGV, SIGBUS, SIGABRT) prints the rank's Python stack
    config = config_of(args)  # config errors before any rendezvous
    env = resolve(os.environ, command=command_line())  # before torch: a refusal takes well under a second
    from train.cli.fit_run import checked_run  # torch and PyG load only once the input is known to be good

    return checked_run(config, env, os.environ)
