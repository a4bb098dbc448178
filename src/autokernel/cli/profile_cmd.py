"""(placeholder: commands registered by this module are being written)"""
import typer


def register(app: typer.Typer) -> None:
    pass
