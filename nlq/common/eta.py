"""How long is left, as a console line says it."""


def format_eta(seconds: float) -> str:
    """HH:MM:SS, or '4d 03:12' past a day (a clock time would wrap every 24 h)."""
    minutes, s = divmod(int(seconds), 60)
    hours, m = divmod(minutes, 60)
    days, h = divmod(hours, 24)
    return f"{days}d {h:02d}:{m:02d}" if days else f"{h:02d}:{m:02d}:{s:02d}"
